"""Column sums that join a row-parallel phase as per-chunk float64 partials (``refine.accumulate_column_partials``).

A sum or mean over the leading dims of a value computed row by row (bias gradients, LayerNorm weight gradients)
accumulates, in the row phase itself, the column sums of each chunk of rows; a small serial phase merges the
chunks. Each case runs against the reference interpreter and checks which path its plan took.
"""

from __future__ import annotations

import re

import numpy as np
from codegen_helpers import run_both

from neuroncc.codegen.llvm.views import Layout
from neuroncc.codegen.llvm.schedule import plan_kernel
from neuroncc.codegen.llvm.kernel_plan import ChunkedRows, CombineColumns
from neuroncc.codegen.llvm.regions import fuse_whole_function
from neuroncc.ir import Builder, DType, TensorType
from neuroncc.ir.dtypes import round_to_bf16
from neuroncc.testing.choices import choose


def _phases(fn):
    """The codegen plan's phases of the one kernel of ``fn``."""
    (op,) = [op for op in fn.ops if op.name == "kernel"]
    region = op.regions[0]
    layouts = [Layout.of(slot, v.type) for slot, v in enumerate(list(region.params) + list(region.outputs))]
    return plan_kernel(region, layouts[: len(region.params)], layouts[len(region.params):]).phases


def _chunked(fn) -> list[tuple[int, int]]:
    """(chunks, column sums joined) of each chunked phase, checking each is followed by its combining phase."""
    phases = _phases(fn)
    found = []
    for position, phase in enumerate(phases):
        if isinstance(phase, ChunkedRows):
            combine = phases[position + 1]
            assert isinstance(combine, CombineColumns) and combine.serial
            assert combine.chunks == phase.chunks and combine.sums == phase.sums
            found.append((phase.chunks, len(phase.sums)))
    return found


def _bias_gradient(shape: tuple[int, ...], dtype: DType, keepdim: bool = True):
    """where(mask, 0, g) per row, and its column sum over all rows (a ReLU backward and its bias gradient)."""
    rows = int(np.prod(shape[:-1]))
    b = Builder("bias_gradient")
    mask = b.param(TensorType(shape, DType.bool), "mask")
    g = b.param(TensorType((rows, shape[-1]), dtype), "g")
    zero = b.op("full", shape=(), dtype=dtype, value=0.0)
    x = b.op("where", mask, zero, b.op("reshape", g, shape=shape))
    total = b.op("sum", b.op("reshape", x, shape=(rows, shape[-1])), dims=(0,), keepdim=keepdim)
    return fuse_whole_function(b.build([x, total]))


def _bias_inputs(rng, shape, dtype):
    rows = int(np.prod(shape[:-1]))
    g = rng.standard_normal((rows, shape[-1])).astype(np.float32)
    return [rng.random(shape) < 0.5, round_to_bf16(g) if dtype is DType.bf16 else g]


def test_bias_gradient_accumulates_in_the_row_phase(rng):
    fn = _bias_gradient((4, 6, 40), DType.f32)
    exe, _ = run_both(fn, _bias_inputs(rng, (4, 6, 40), DType.f32))
    assert _chunked(fn) == [(12, 1)]  # 24 rows in 12 chunks of 2
    assert len(_phases(fn)) == 2


def test_bias_gradient_uneven_chunks(rng):
    # 51 rows: no chunk count in [8, 16] divides them, so 13 chunks of 4, the last of 3
    fn = _bias_gradient((17, 3, 24), DType.f32, keepdim=False)
    exe, _ = run_both(fn, _bias_inputs(rng, (17, 3, 24), DType.f32))
    assert _chunked(fn) == [(13, 1)]


def test_bias_gradient_bf16(rng):
    fn = _bias_gradient((2, 8, 48), DType.bf16)
    exe, _ = run_both(fn, _bias_inputs(rng, (2, 8, 48), DType.bf16))
    assert _chunked(fn) == [(16, 1)]


def test_column_partials_loop_is_vectorized(rng):
    from neuroncc.codegen.llvm import jit

    fn = _bias_gradient((4, 8, 256), DType.f32)
    exe, _ = run_both(fn, _bias_inputs(rng, (4, 8, 256), DType.f32))
    assert _chunked(fn) == [(16, 1)]
    chunked = next(t for t in exe.module.llvm_ir if "_p0" in t.split("\n", 1)[0])
    asm = jit.assembly([chunked])
    assert re.search(r"addpd\s[^\n]*%[yz]mm", asm)  # the float64 partials update 4 or 8 columns at a time


def _layer_norm_backward(batch: int, seq: int, dim: int):
    """The shape of a LayerNorm backward: two row sums, a row-parallel map, and three column sums (of an
    input product, of an input, and of the map's result through a reshape)."""
    b = Builder("layer_norm_backward")
    t3 = TensorType((batch, seq, dim), DType.f32)
    g = b.param(t3, "g")
    w = b.param(TensorType((dim,), DType.f32), "w")
    xhat = b.param(t3, "xhat")
    rstd = b.param(TensorType((batch, seq, 1), DType.f32), "rstd")
    gw = b.op("mul", g, w)
    scaled = b.op("mul", gw, b.op("full", shape=(), dtype=DType.f32, value=float(dim)))
    s1 = b.op("sum", gw, dims=(2,), keepdim=True)
    s2 = b.op("sum", b.op("mul", gw, xhat), dims=(2,), keepdim=True)
    dx = b.op("mul", rstd, b.op("sub", b.op("sub", scaled, s1), b.op("mul", xhat, s2)))
    dw = b.op("sum", b.op("mul", g, xhat), dims=(0, 1))
    db = b.op("sum", g, dims=(0, 1))
    dx_sum = b.op("sum", b.op("reshape", dx, shape=(batch * seq, dim)), dims=(0,), keepdim=True)
    return fuse_whole_function(b.build([dx, dw, db, dx_sum]))


def test_layer_norm_backward_column_sums_join_the_row_phase(rng):
    fn = _layer_norm_backward(2, 5, 24)
    inputs = [rng.standard_normal(p.type.shape).astype(np.float32) for p in fn.params]
    exe, _ = run_both(fn, inputs)
    # row sums, the map and all three column sums: one chunked phase (10 rows, 10 chunks), one combine
    assert _chunked(fn) == [(10, 3)]
    assert len(_phases(fn)) == 2




def _loops(texts: list[str]) -> int:
    return len(re.findall(r"^loop(?:\.\d+)?:", "\n".join(texts), flags=re.MULTILINE))


def _sharing(monkeypatch, shared: bool) -> None:
    choose(monkeypatch, column_sums_share_a_loop=shared)


def test_column_sums_over_the_same_columns_share_one_loop(rng, monkeypatch):
    """The three column sums of one row add to their partials in one loop over the columns, not three, where the
    target says so (``CpuTarget.column_sums_share_a_loop``: LLVM optimizes one loop; the transformer step's
    LayerNorm-backward modules compiled 11-29% faster on Zen 3, session 20 cold20), and each partial takes the
    rows in the same order: the same bits as with a loop per sum."""
    from neuroncc.executors.cpu.launcher import build_cpu_executable

    fn = _layer_norm_backward(2, 5, 24)
    inputs = [rng.standard_normal(p.type.shape).astype(np.float32) for p in fn.params]
    with monkeypatch.context() as m:
        _sharing(m, True)
        shared, got = run_both(fn, inputs)
    assert [sums for _, sums in _chunked(fn)] == [3]
    _sharing(monkeypatch, False)
    separate = build_cpu_executable(fn, {"threads": 2})
    assert _loops(shared.module.llvm_ir) == _loops(separate.module.llvm_ir) - 2
    for shared_out, separate_out in zip(got, separate(*inputs)):
        assert np.array_equal(shared_out, separate_out)


def test_avx512_keeps_a_loop_per_column_sum():
    """Zen 4's code is left as it was (not measured there); AVX2 shares the loop."""
    from test_bf16_rounding import ZEN4
    from test_pairs import AVX2

    from neuroncc.codegen.llvm.emit import emit_kernel
    from neuroncc.hardware.host import CpuTarget

    fn = _layer_norm_backward(2, 5, 24)
    (op,) = [op for op in fn.ops if op.name == "kernel"]
    region = op.regions[0]
    layouts = [Layout.of(slot, v.type) for slot, v in enumerate(list(region.params) + list(region.outputs))]
    plan = plan_kernel(region, layouts[: len(region.params)], layouts[len(region.params):])
    zen4 = emit_kernel(plan, "k", CpuTarget("znver4", ZEN4))[0]
    avx2 = emit_kernel(plan, "k", CpuTarget("znver3", AVX2))[0]
    assert not CpuTarget("znver4", ZEN4).column_sums_share_a_loop and CpuTarget("znver3", AVX2).column_sums_share_a_loop
    assert _loops(avx2) == _loops(zen4) - 2

def test_mean_over_rows(rng):
    b = Builder("mean")
    x = b.param(TensorType((3, 7, 16), DType.f32), "x")
    y = b.param(TensorType((3, 7, 16), DType.f32), "y")
    scaled = b.op("mul", x, b.op("full", shape=(), dtype=DType.f32, value=2.0))
    mean = b.op("mean", b.op("mul", x, y), dims=(0, 1), keepdim=True)
    fn = fuse_whole_function(b.build([scaled, mean]))
    exe, _ = run_both(fn, [rng.standard_normal((3, 7, 16)).astype(np.float32) for _ in range(2)])
    assert _chunked(fn) == [(11, 1)]  # 21 rows: no divisor in [8, 16], so 11 chunks of 2 (the last of 1)


def test_column_sum_before_the_row_phase_joins_it(rng):
    # the column sum is an earlier output than the copy (as the QKV bias gradient is emitted)
    b = Builder("before")
    x = b.param(TensorType((6, 4, 32), DType.f32), "x")
    total = b.op("sum", b.op("exp", x), dims=(0, 1), keepdim=True)
    fn = fuse_whole_function(b.build([total, b.op("mul", x, x)]))
    exe, _ = run_both(fn, [rng.standard_normal((6, 4, 32)).astype(np.float32)])
    assert _chunked(fn) == [(12, 1)]


def test_column_sum_reading_another_row_keeps_its_own_phase(rng):
    # the column sum reads the row sums (written by the row phase) at the flipped row: it cannot run in the
    # row phase, whose other chunks may not have written that row yet
    b = Builder("other_row")
    x = b.param(TensorType((12, 32), DType.f32), "x")
    s = b.op("sum", x, dims=(1,), keepdim=True)
    centered = b.op("sub", x, s)
    total = b.op("sum", b.op("mul", x, b.op("flip", s, dims=(0,))), dims=(0,))
    fn = fuse_whole_function(b.build([centered, total]))
    exe, _ = run_both(fn, [rng.standard_normal((12, 32)).astype(np.float32)])
    assert _chunked(fn) == []
    assert len(_phases(fn)) == 2


def test_other_reductions_keep_their_own_phase(rng):
    b = Builder("amax")
    x = b.param(TensorType((8, 4, 32), DType.f32), "x")
    fn = fuse_whole_function(b.build([b.op("exp", x), b.op("amax", b.op("exp", x), dims=(0, 1))]))
    exe, _ = run_both(fn, [rng.standard_normal((8, 4, 32)).astype(np.float32)])
    assert _chunked(fn) == []
