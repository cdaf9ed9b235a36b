"""Shared by the cache tests and by ``cache_child.py`` and ``remote_child.py`` (the separate processes some tests
start)."""

from __future__ import annotations

import importlib.util
import os
import time
from pathlib import Path

import numpy as np

from neuroncc.ir import Builder, DenseAttr, DType, Function, TensorType, collect_resources, parse, print_function
from neuroncc.driver.artifact import ARTIFACT_CODECS

#: Modules a target needs before its artifacts can be tested (the cpu target is built on another branch).
_TARGET_MODULES = {"cpu": "neuroncc.executors.cpu.launcher"}


def _target_is_built(target: str) -> bool:
    module = _TARGET_MODULES.get(target)
    return module is None or importlib.util.find_spec(module) is not None


#: Every target with an artifact codec whose code is present: each cache test runs for each of them.
ARTIFACT_TARGETS = [target for target in ARTIFACT_CODECS if _target_is_built(target)]


def sample_function(*, name: str = "mlp", hints: bool = True, activation: str = "relu", constant_seed: int = 0,
                    batch: int = 4, x_strides: tuple[int, ...] | None = None, dtype: DType = DType.f32) -> Function:
    """relu(x @ W + b) and its row sums; W is a 32x8 constant, large enough to be saved as a resource."""
    b = Builder(name)
    x = b.param(TensorType((batch, 32), dtype, x_strides), "x" if hints else None)
    bias = b.param(TensorType((8,), dtype), "bias" if hints else None)
    weight = np.random.default_rng(constant_seed).standard_normal((32, 8)).astype(np.float32)
    w = b.op("constant", value=DenseAttr(weight, dtype), hint="weight" if hints else None)
    y = b.op(activation, b.op("add", b.op("mm", x, w), bias), hint="act" if hints else None)
    return b.build([y, b.op("sum", y, dims=(1,))])


def sample_inputs(fn: Function) -> list[np.ndarray]:
    rng = np.random.default_rng(42)
    return [rng.standard_normal(t.shape).astype(t.dtype.numpy) for t in fn.input_types]


def write_nir(fn: Function, path: Path) -> Path:
    """``path`` (.nir) and, for its large constants, ``path`` with suffix .npz."""
    path.write_text(print_function(fn))
    resources = collect_resources(fn)
    if resources:
        np.savez(path.with_suffix(".npz"), **resources)
    return path


def read_nir(path: Path) -> Function:
    npz = path.with_suffix(".npz")
    resources = {}
    if npz.exists():
        with np.load(npz, allow_pickle=False) as archive:
            resources = {name: archive[name] for name in archive.files}
    return parse(path.read_text(), resources=resources)


def wait_at_barrier(barrier: str, timeout: float = 60) -> None:
    """``DIR:COUNT`` (a child's ``--barrier``): mark this process ready in DIR, then wait until COUNT processes
    are (at most ``timeout`` seconds), so that their compiles start together."""
    directory, _, count = barrier.partition(":")
    Path(directory, f"ready.{os.getpid()}").touch()
    deadline = time.monotonic() + timeout
    while len(list(Path(directory).glob("ready.*"))) < int(count) and time.monotonic() < deadline:
        time.sleep(0.005)
