"""EXTERN (library) ops in the launchers: unfused top-level steps between fused kernels, saved and reloaded
with the cpu artifact, and run as host steps on nki-sim; all against the reference interpreter."""

from __future__ import annotations

import numpy as np
import pytest

from neuroncc.ir import Builder, DType, TensorType, interpret
from neuroncc.passes.manager import PassContext
from neuroncc.passes.pipeline import run_pipeline
from neuroncc.passes.pipeline import default_pipeline
from neuroncc.executors.executable import build_executable
from neuroncc.executors.cpu.launcher import load_cpu_executable


def _graph():
    """exp -> sort (two results) -> add -> svd (singular values only used) -> mul: externs between kernels."""
    b = Builder("library")
    x = b.param(TensorType((3, 5), DType.f32), "x")
    values, indices = b.op("sort", b.op("exp", x), dim=1, descending=True)
    _, s, _ = b.op("linalg_svd", b.op("add", values, x))
    return b.build([values, indices, b.op("mul", s, s)])


@pytest.mark.parametrize("target", ["cpu", "nki-sim"])
def test_extern_ops_run_as_steps_between_kernels(target, tmp_path):
    fn = _graph()
    lowered = run_pipeline(default_pipeline(target), fn, PassContext())
    assert [op.name for op in lowered.ops if op.name in ("sort", "linalg_svd")] == ["sort", "linalg_svd"]
    exe = build_executable(lowered, target)
    x = np.random.default_rng(0).standard_normal((3, 5)).astype(np.float32)
    want = interpret(fn, [x])
    for got, expected in zip(exe(x), want):
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
    if target == "cpu":
        assert exe.stats["extern_calls"] == 2
        exe.save(tmp_path)
        for got, expected in zip(load_cpu_executable(tmp_path, lowered)(x), want):
            np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
