"""Helpers for the NKI emission tests (imported as a plain module; pytest puts this folder on sys.path)."""

from __future__ import annotations

import numpy as np

from neuroncc.ir import Builder, Function, TensorType, interpret, verify
from neuroncc.ir.dtypes import DType, to_storage
from neuroncc.passes.manager import PassContext
from neuroncc.passes.pipeline import run_pipeline
from neuroncc.passes.pipeline import default_pipeline
from neuroncc.executors.nki_sim.executable import NkiExecutable, build_nki_executable

TOLERANCE = {DType.f32: dict(rtol=1e-4, atol=1e-5), DType.bf16: dict(rtol=1e-2, atol=1e-2),
             DType.f16: dict(rtol=1e-3, atol=1e-3)}


def lower(fn: Function, pipeline: str | None = None) -> Function:
    """``fn`` after the nki pipeline (or ``pipeline``)."""
    verify(fn)
    return run_pipeline(pipeline or default_pipeline("nki"), fn, PassContext(verify_each=True))


def compile_nki(fn: Function, pipeline: str | None = None, **options) -> NkiExecutable:
    return build_nki_executable(lower(fn, pipeline), options)


def random_inputs(fn: Function, rng: np.random.Generator, positive: bool = False,
                  integers: tuple[int, int] = (-5, 6)) -> list[np.ndarray]:
    arrays = []
    for param in fn.params:
        t = param.type
        if t.dtype.is_float:
            values = rng.standard_normal(t.shape).astype(np.float32)
            if positive:
                values = np.abs(values) + 0.5
        elif t.dtype.is_bool:
            values = rng.random(t.shape) < 0.5
        else:
            values = rng.integers(*integers, size=t.shape)
        arrays.append(to_storage(np.asarray(values), t.dtype))
    return arrays


def check_against_interpreter(fn: Function, rng: np.random.Generator, inputs: list[np.ndarray] | None = None,
                              pipeline: str | None = None, atol: float | None = None, **kwargs) -> NkiExecutable:
    """Compile ``fn`` for nki-sim and compare every output with the reference interpreter.

    ``atol`` widens the float tolerance (long fp32 contractions: the simulator accumulates in fp32, the
    reference in fp64)."""
    exe = compile_nki(fn, pipeline)
    inputs = inputs if inputs is not None else random_inputs(fn, rng, **kwargs)
    expected = interpret(fn, inputs)
    got = exe(*inputs)
    assert len(got) == len(expected)
    for index, (want, have, value) in enumerate(zip(expected, got, fn.outputs)):
        assert have.shape == want.shape, f"output #{index}: shape {have.shape} != {want.shape}"
        assert have.dtype == want.dtype, f"output #{index}: dtype {have.dtype} != {want.dtype}"
        tolerance = dict(TOLERANCE.get(value.type.dtype, dict(rtol=0, atol=0)))
        if atol is not None and value.type.dtype.is_float:
            tolerance["atol"] = atol
        np.testing.assert_allclose(have, want, **tolerance, err_msg=f"output #{index}\n{exe.source}")
    return exe


def graph(name: str, *types: tuple[tuple[int, ...], DType]) -> tuple[Builder, list]:
    b = Builder(name)
    return b, [b.param(TensorType(tuple(shape), dtype), f"x{i}") for i, (shape, dtype) in enumerate(types)]


F32, BF16, I64, BOOL, I32 = DType.f32, DType.bf16, DType.i64, DType.bool, DType.i32
