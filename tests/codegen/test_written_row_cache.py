"""Written values read again in their row phase come from the row cache (``refine.cache_written_rows``).

GELU's gradient is an output, and its column sum (the bias gradient) joins the row phase: the sum used to
compute erf and exp a second time per element. The map stage now also stores the value into the phase's
row cache and the sum loads it. Each case runs against the reference interpreter; the plan says which
values are cached, the emitted IR how often the transcendental functions are generated.
"""

from __future__ import annotations

import math

import pytest
from codegen_helpers import run_both

from neuroncc.codegen.llvm.views import Layout
from neuroncc.codegen.llvm.in_place import writes_in_place
from neuroncc.codegen.llvm.kernel_plan import ChunkedRows, RowLoop
from neuroncc.codegen.llvm.regions import fuse_whole_function
from neuroncc.codegen.llvm.schedule import plan_kernel
from neuroncc.ir import Builder, DType, TensorType


def _plan(fn):
    (op,) = [op for op in fn.ops if op.name == "kernel"]
    region = op.regions[0]
    layouts = [Layout.of(slot, v.type) for slot, v in enumerate(list(region.params) + list(region.outputs))]
    return plan_kernel(region, layouts[: len(region.params)], layouts[len(region.params):])


def _cached(fn) -> list[str]:
    """The ops of the values each row phase caches (a chunked phase: its row loop's)."""
    names = []
    plan = _plan(fn)
    for phase in plan.phases:
        rows = phase.rows if isinstance(phase, ChunkedRows) else phase
        if isinstance(rows, RowLoop):
            names += sorted(plan.access[v].op.name for v in rows.row_cache)
    return names


def _calls(exe, function: str) -> int:
    """Calls of the math library's ``function`` in the kernels' LLVM IR (before inlining: one per use)."""
    return sum(text.count(f'call float @"ncc.math.{function}"') for text in exe.module.llvm_ir)


def _inputs(rng, fn):
    return [rng.standard_normal(p.type.shape).astype("float32") for p in fn.params]


def gelu_backward(rows: int, cols: int, batch: int = 1):
    """The backward graph's decomposed GELU gradient [batch, rows, cols] and its column sum over all rows
    (``fused_2_mul_erf_add``)."""
    b = Builder("gelu_backward")
    shape = (batch, rows, cols)
    x = b.param(TensorType((batch * rows, cols), DType.f32), "x")
    g = b.param(TensorType((batch * rows, cols), DType.f32), "g")

    def c(value: float):
        return b.op("full", dtype=DType.f32, shape=(), value=value)

    x3 = b.op("reshape", x, shape=shape)
    cdf = b.op("mul", b.op("add", b.op("erf", b.op("mul", x3, c(math.sqrt(0.5)))), c(1.0)), c(0.5))
    pdf = b.op("mul", b.op("exp", b.op("mul", b.op("mul", x3, x3), c(-0.5))), c(1 / math.sqrt(2 * math.pi)))
    grad = b.op("mul", b.op("reshape", g, shape=shape), b.op("add", cdf, b.op("mul", x3, pdf)))
    total = b.op("sum", b.op("reshape", grad, shape=(batch * rows, cols)), dims=(0,), keepdim=True)
    return fuse_whole_function(b.build([grad, total]))


@pytest.mark.parametrize("threads", [1, 2])
def test_gelu_gradient_column_sum_loads_the_written_rows(threads, rng):
    fn = gelu_backward(rows=16, cols=40, batch=6)
    exe, _ = run_both(fn, _inputs(rng, fn), threads=threads)
    assert _cached(fn) == ["mul"]  # the gradient (its last op: a mul)
    assert _calls(exe, "erf") == 1 and _calls(exe, "exp") == 1  # the column sum generates neither again


def test_row_sum_of_a_written_row_loads_it(rng):
    # exp(x) written, then summed per row in the same row phase
    b = Builder("exp_rows")
    x = b.param(TensorType((12, 33), DType.f32), "x")
    e = b.op("exp", x)
    fn = fuse_whole_function(b.build([e, b.op("sum", e, dims=(1,))]))
    exe, _ = run_both(fn, _inputs(rng, fn))
    assert _cached(fn) == ["exp"] and _calls(exe, "exp") == 1


def test_a_stage_reading_another_row_recomputes(rng):
    # the sum reads exp(x) transposed: at other rows than the one just written, so nothing is cached
    b = Builder("exp_transposed")
    x = b.param(TensorType((9, 9), DType.f32), "x")
    e = b.op("exp", x)
    fn = fuse_whole_function(b.build([e, b.op("sum", b.op("permute", e, dims=(1, 0)), dims=(1,))]))
    exe, _ = run_both(fn, _inputs(rng, fn))
    assert _cached(fn) == []


def test_cheap_written_values_are_recomputed(rng):
    # no transcendental function, and built from broadcast rows and columns: recomputing it costs less than
    # storing and loading it, and reads no buffer the output could be computed over
    b = Builder("cheap")
    col, row = b.param(TensorType((12, 1), DType.f32), "col"), b.param(TensorType((1, 33), DType.f32), "row")
    y = b.op("mul", col, row)
    fn = fuse_whole_function(b.build([y, b.op("sum", y, dims=(1,))]))
    run_both(fn, _inputs(rng, fn))
    assert _cached(fn) == []


def test_a_cheap_value_recomputed_from_a_parameter_of_its_size_is_cached(rng):
    # x * 2 and its row sum: recomputed, the sum would read x again, so x's buffer could not take the output
    # (the plan-memory pass's in-place reuse: in_place.writes_in_place); cached, the sum reads the row cache
    b = Builder("over_x")
    x = b.param(TensorType((12, 33), DType.f32), "x")
    y = b.op("mul", x, b.op("full", dtype=DType.f32, shape=(), value=2.0))
    fn = fuse_whole_function(b.build([y, b.op("sum", y, dims=(1,))]))
    run_both(fn, _inputs(rng, fn))
    assert _cached(fn) == ["mul"]
    assert writes_in_place(_plan(fn), 0, 0)
