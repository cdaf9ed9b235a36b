"""Differential checks of passes against the reference interpreter."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from neuroncc.ir import DType, Function, interpret, verify
from neuroncc.passes.manager import Pass, PassContext, Pipeline, run_pipeline


def random_inputs(fn: Function, seed: int = 0) -> list[np.ndarray]:
    """Inputs for ``fn`` in the interpreter's storage form: floats ~ N(0, 1), small ints, random bools."""
    rng = np.random.default_rng(seed)
    arrays = []
    for param in fn.params:
        t = param.type
        if t.dtype.is_float:
            array = rng.standard_normal(t.shape)
        elif t.dtype.is_bool:
            array = rng.random(t.shape) < 0.5
        elif t.dtype is DType.u8:
            array = rng.integers(0, 8, t.shape)
        else:
            array = rng.integers(-8, 8, t.shape)
        arrays.append(np.asarray(array).astype(t.dtype.numpy))
    return arrays


def assert_same_results(expected: Sequence[np.ndarray], actual: Sequence[np.ndarray], *, rtol: float = 0.0,
                        atol: float = 0.0, context: str = "") -> None:
    """Equal shapes, dtypes and values (NaN where the other has NaN); exact unless tolerances are given."""
    assert len(expected) == len(actual), f"{context}{len(expected)} results before, {len(actual)} after"
    for index, (want, got) in enumerate(zip(expected, actual)):
        where = f"{context}result #{index}"
        assert want.shape == got.shape, f"{where}: shape {got.shape}, expected {want.shape}"
        assert want.dtype == got.dtype, f"{where}: dtype {got.dtype}, expected {want.dtype}"
        if rtol or atol:
            np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, equal_nan=True, err_msg=where)
        else:
            equal_nan = want.dtype.kind in "fc"
            assert np.array_equal(want, got, equal_nan=equal_nan), f"{where} differs:\n{want}\nvs\n{got}"


def assert_pass_preserves_semantics(pipeline: str | Pass | Pipeline | Sequence[Pass], fn: Function,
                                    inputs: Sequence[np.ndarray] | None = None, *, seeds: Sequence[int] = (0,),
                                    rtol: float = 0.0, atol: float = 0.0) -> Function:
    """Run ``pipeline`` on ``fn`` (verifying after every pass) and check that the reference interpreter gives
    the same results before and after, bit for bit unless tolerances are given. Returns the new function."""
    verify(fn)
    after = run_pipeline(pipeline, fn, PassContext(verify_each=True))
    verify(after)
    assert after.input_types == fn.input_types or [t.shape for t in after.input_types] == \
        [t.shape for t in fn.input_types], "the pass changed the function's parameters"
    input_sets = [inputs] if inputs is not None else [random_inputs(fn, seed) for seed in seeds]
    for arrays in input_sets:
        expected = interpret(fn, arrays)
        actual = interpret(after, arrays)
        assert_same_results(expected, actual, rtol=rtol, atol=atol, context=f"after '{pipeline}': ")
    return after
