"""Fused kernel regions (softmax, LayerNorm, matmul epilogues, multi-phase) vs the interpreter and eager torch."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from codegen_helpers import run_both

from neuroncc.codegen.llvm.views import Layout
from neuroncc.codegen.llvm.schedule import plan_kernel
from neuroncc.codegen.llvm.kernel_plan import RowLoop
from neuroncc.codegen.llvm.regions import fuse_whole_function, make_kernel
from neuroncc.hardware.host import host_cpu
from neuroncc.ir import Builder, DType, Op, TensorType, round_to_bf16, verify
from neuroncc.executors.cpu.launcher import build_cpu_executable
from neuroncc.passes.tile import tile_kernel
from neuroncc.testing.choices import choose


def softmax_graph(shape, dtype=DType.f32):
    b = Builder("softmax")
    x = b.param(TensorType(shape, dtype), "x")
    m = b.op("amax", x, dims=(len(shape) - 1,), keepdim=True)
    e = b.op("exp", b.op("sub", x, m))
    return fuse_whole_function(b.build([b.op("div", e, b.op("sum", e, dims=(len(shape) - 1,), keepdim=True))]))


def layernorm_graph(rows, cols, dtype=DType.f32):
    b = Builder("layernorm")
    x = b.param(TensorType((rows, cols), dtype), "x")
    w = b.param(TensorType((cols,), dtype), "w")
    bias = b.param(TensorType((cols,), dtype), "b")
    mean = b.op("mean", x, dims=(1,), keepdim=True)
    centered = b.op("sub", x, mean)
    var = b.op("mean", b.op("mul", centered, centered), dims=(1,), keepdim=True)
    eps = b.op("full", shape=(), dtype=dtype, value=1e-5)
    rstd = b.op("rsqrt", b.op("add", var, eps))
    y = b.op("add", b.op("mul", b.op("mul", centered, rstd), w), bias)
    return fuse_whole_function(b.build([y, mean, rstd]))


def test_softmax_is_one_phase_over_rows_and_matches_eager(rng):
    fn = softmax_graph((64, 300))
    region = fn.ops[0].regions[0]
    plan = plan_kernel(region, [Layout.of(0, p.type) for p in region.params],
                       [Layout.of(1, v.type) for v in region.outputs])
    assert len(plan.phases) == 1 and isinstance(plan.phases[0], RowLoop) and plan.phases[0].outer == (64,)
    assert [s.kind for s in plan.phases[0].stages] == ["reduce", "reduce", "map"]
    x = rng.standard_normal((64, 300)).astype(np.float32) * 5
    x[3, 4] = np.nan
    _, (got,) = run_both(fn, [x])
    torch.testing.assert_close(torch.from_numpy(got), torch.softmax(torch.from_numpy(x), -1), equal_nan=True)


@pytest.mark.parametrize("dtype", [DType.f32, DType.bf16])
def test_layernorm_matches_interpreter_and_eager(dtype, rng):
    fn = layernorm_graph(48, 200, dtype)
    x, w, bias = (rng.standard_normal(s).astype(np.float32) for s in [(48, 200), (200,), (200,)])
    if dtype is DType.bf16:
        x, w, bias = round_to_bf16(x), round_to_bf16(w), round_to_bf16(bias)
    _, (y, mean, rstd) = run_both(fn, [x, w, bias])
    if dtype is DType.f32:
        want = torch.nn.functional.layer_norm(torch.from_numpy(x), (200,), torch.from_numpy(w), torch.from_numpy(bias))
        torch.testing.assert_close(torch.from_numpy(y), want)


def test_full_reduction_feeding_broadcast_needs_two_phases(rng):
    b = Builder("normalize")
    x = b.param(TensorType((40, 50), DType.f32), "x")
    total = b.op("sum", b.op("abs", x), dims=(0, 1))
    y = b.op("div", x, total)
    fn = fuse_whole_function(b.build([y, b.op("amax", y, dims=(0,))]))
    region = fn.ops[0].regions[0]
    plan = plan_kernel(region, [Layout.of(0, x.type)], [Layout.of(1 + i, v.type) for i, v in enumerate(region.outputs)])
    assert len(plan.phases) >= 2
    run_both(fn, [rng.standard_normal((40, 50)).astype(np.float32)])


def test_matmul_with_fused_epilogue(rng):
    b = Builder("linear_gelu")
    x = b.param(TensorType((32, 64), DType.f32), "x")
    w = b.param(TensorType((48, 64), DType.f32), "w")
    bias = b.param(TensorType((48,), DType.f32), "bias")
    wt = b.op("permute", w, dims=(1, 0))
    h = b.op("mm", x, wt)
    y = b.op("gelu", b.op("add", h, bias))
    kernel = make_kernel(b.ops, [x, w, bias], [y, b.op("sum", y, dims=(1,))], "linear_gelu")
    b.ops = [kernel]
    fn = b.build(list(kernel.results))
    verify(fn)
    inputs = [rng.standard_normal(s).astype(np.float32) for s in [(32, 64), (48, 64), (48,)]]
    exe, (got, _) = run_both(fn, inputs)
    # the product: an extern call, or the kernel's first phase (CpuTarget.small_mm_max_macs)
    generated = [p for step in exe.plan.steps for p in step.phases if p.symbol.endswith("_mm")]
    assert exe.stats["extern_calls"] + len(generated) == 1
    want = torch.nn.functional.gelu(torch.nn.functional.linear(*(torch.from_numpy(a) for a in inputs)))
    torch.testing.assert_close(torch.from_numpy(got), want)


@pytest.mark.parametrize("op", ["bmm", "addmm", "convolution", "convolution_backward"])
def test_top_level_extern_ops(op, rng):
    b = Builder(op)
    if op == "bmm":  # past CpuTarget.small_bmm_max_macs per item (smaller ones are generated code)
        shapes = [(2, 72, 72), (2, 72, 72)]
        args = [b.param(TensorType(s, DType.f32)) for s in shapes]
        outs = [b.op("bmm", *args)]
    elif op == "addmm":
        shapes = [(6,), (5, 7), (7, 6)]
        args = [b.param(TensorType(s, DType.f32)) for s in shapes]
        outs = [b.op("addmm", *args, beta=0.5, alpha=2.0)]
    elif op == "convolution":
        shapes = [(2, 4, 9, 9), (6, 2, 3, 3), (6,)]
        args = [b.param(TensorType(s, DType.f32)) for s in shapes]
        outs = [b.op("convolution", *args, stride=(2,), padding=(1,), dilation=(1,), groups=2)]
    else:
        shapes = [(2, 6, 5, 5), (2, 4, 7, 7), (6, 4, 3, 3)]
        args = [b.param(TensorType(s, DType.f32)) for s in shapes]
        outs = list(b.op("convolution_backward", *args, stride=(1,), padding=(0,), dilation=(1,)))
    outs = [b.op("relu", o) for o in outs]
    inputs = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    exe, _ = run_both(b.build(outs), inputs)
    assert exe.stats["extern_calls"] == 1


@pytest.mark.parametrize("threading", ["openmp", "python"])
def test_multithreaded_kernels_match_single_threaded(threading, rng):
    b = Builder("big")
    x = b.param(TensorType((512, 700), DType.f32), "x")
    v = b.param(TensorType((300_001,), DType.f32), "v")
    y = b.op("mul", b.op("gelu", x), b.op("sigmoid", x))
    fn = b.build([y, b.op("sum", y, dims=(1,)), b.op("tanh", v), b.op("sum", x, dims=(0,))])
    inputs = [rng.standard_normal((512, 700)).astype(np.float32), rng.standard_normal(300_001).astype(np.float32)]
    one = build_cpu_executable(fn, {"threads": 1})(*inputs)
    exe = build_cpu_executable(fn, {"threads": 2, "threading": threading})
    assert (exe.team is not None) == (threading == "openmp")  # torch's libgomp is installed here
    for a, c in zip(one, exe(*inputs)):
        np.testing.assert_array_equal(a, c)
    assert build_cpu_executable(fn, {"threads": 2}).team is not None  # ATen's OpenMP team is the default


def test_unsupported_region_falls_back_to_interpreter(rng):
    b = Builder("fallback")
    x = b.param(TensorType((4, 5), DType.f32), "x")
    w = b.param(TensorType((5, 3), DType.f32), "w")
    y = b.op("mm", b.op("exp", x), w)  # a matmul that is not the region's first compute op
    kernel = make_kernel(b.ops, [x, w], [y], "late_mm")
    b.ops = [kernel]
    fn = b.build([kernel.result])
    exe, _ = run_both(fn, [rng.standard_normal((4, 5)).astype(np.float32), rng.standard_normal((5, 3)).astype(np.float32)],
                      native=False)
    assert exe.stats["interpreted_kernels"] == 1
    assert exe.stats["interpreted_ops"] == {"exp": 1, "mm": 1}
    assert "first compute op" in exe.stats["interpreted_reasons"][0]


def test_softmax_computes_exp_once_per_element(rng):
    fn = softmax_graph((8, 50))
    region = fn.ops[0].regions[0]
    plan = plan_kernel(region, [Layout.of(0, region.params[0].type)], [Layout.of(1, region.outputs[0].type)])
    (phase,) = plan.phases
    assert len(phase.row_cache) == 1  # exp(x - max) is stored by the sum pass, loaded by the write pass
    run_both(fn, [rng.standard_normal((8, 50)).astype(np.float32)])


def _with_matmul_rows(kernel, rows: int):
    """``kernel`` tiled for the cpu, with its matmul and epilogue run in blocks of ``rows`` output rows."""
    tiled = tile_kernel(kernel, "cpu")
    attrs = tiled.attrs.replace(matmul_tile=(rows, *tiled.attrs["matmul_tile"][1:]))
    return Op(tiled.name, tiled.operands, tiled.results, attrs, tiled.regions)


@pytest.mark.parametrize(("op", "rows", "blocks"), [("mm", 8, 8), ("addmm", 8, 8), ("addmm", 16, 16),
                                                    ("mm", 50, 0)])
def test_matmul_epilogue_runs_row_block_by_row_block(op, rows, blocks, rng, monkeypatch):
    """The kernel's matmul_tile decision (rows per block) is what the launcher runs: blocks of it, or one block
    when it covers every row."""
    # the extern path: products on MKL (small ones are generated code, CpuTarget.small_mm_max_macs)
    choose(monkeypatch, small_mm_max_macs=0)
    b = Builder(op)
    x = b.param(TensorType((50, 8), DType.f32), "x")
    w = b.param(TensorType((8, 64), DType.f32), "w")
    bias = b.param(TensorType((64,), DType.f32), "bias")
    h = b.op("mm", x, w) if op == "mm" else b.op("addmm", bias, x, w, beta=0.5)
    y = b.op("sigmoid", h)
    outs = [y, b.op("sum", b.op("mul", y, h), dims=(1,), keepdim=True)]
    kernel = _with_matmul_rows(make_kernel(b.ops, [x, w, bias], outs, "epilogue"), rows)
    b.ops = [kernel]
    fn = b.build(list(kernel.results))
    exe, _ = run_both(fn, [rng.standard_normal(s).astype(np.float32) for s in [(50, 8), (8, 64), (64,)]])
    (step,) = exe.plan.steps
    assert step.row_block == blocks and exe._runners[0].row_block == blocks


@pytest.mark.parametrize("dtype", [DType.f32, DType.bf16])
@pytest.mark.parametrize("op", ["mm", "addmm"])
def test_a_transposed_first_operand_is_row_blocked_by_its_columns(op, dtype, rng, monkeypatch):
    """The product's rows are the stored first operand's columns where the layout pass stores it transposed (a
    Linear's weight gradient, x^T @ grad: a bf16 transformer's backward raised 'Trying to resize storage')."""
    choose(monkeypatch, small_mm_max_macs=0)
    b = Builder(op)
    xt = b.param(TensorType((8, 50), dtype), "xt")  # x [50, 8] stored transposed
    w = b.param(TensorType((8, 64), dtype), "w")
    bias = b.param(TensorType((64,), dtype), "bias")
    h = b.op("mm", xt, w, transpose_a=True) if op == "mm" else b.op("addmm", bias, xt, w, beta=0.5,
                                                                     transpose_a=True)
    kernel = _with_matmul_rows(make_kernel(b.ops, [xt, w, bias], [b.op("relu", h)], "epilogue"), 8)
    b.ops = [kernel]
    inputs = [rng.standard_normal(s).astype(np.float32) for s in [(8, 50), (8, 64), (64,)]]
    inputs = inputs if dtype is DType.f32 else [round_to_bf16(a) for a in inputs]
    exe, _ = run_both(b.build(list(kernel.results)), inputs)
    assert exe.plan.steps[0].row_block == 8


def test_column_reduction_epilogue_is_not_row_blocked(rng):
    """A column sum needs every row before it is complete: even a kernel tiled in row blocks runs one block."""
    b = Builder("colsum")
    x = b.param(TensorType((40, 16), DType.f32), "x")
    w = b.param(TensorType((16, 24), DType.f32), "w")
    h = b.op("mm", x, w)
    kernel = _with_matmul_rows(make_kernel(b.ops, [x, w], [b.op("sum", b.op("exp", h), dims=(0,))], "colsum"), 8)
    b.ops = [kernel]
    exe, _ = run_both(b.build(list(kernel.results)), [rng.standard_normal((40, 16)).astype(np.float32),
                                                     rng.standard_normal((16, 24)).astype(np.float32)])
    assert exe.plan.steps[0].row_block == 0


@pytest.fixture
def small_last_level_cache(monkeypatch):
    """The host as one whose last-level cache (1 MB) the tests' kernels outgrow, so their large outputs stream."""
    import dataclasses

    from neuroncc.hardware import host

    monkeypatch.setattr(host, "_HOST", [dataclasses.replace(host.host_cpu(), last_level_cache_bytes=1 << 20)])


@pytest.mark.usefixtures("small_last_level_cache")
def test_large_outputs_are_streamed_with_nontemporal_stores(rng):
    b = Builder("stream")
    x = b.param(TensorType((1024, 1024), DType.f32), "x")
    v = b.param(TensorType((1 << 21,), DType.f32), "v")
    s = b.op("amax", x, dims=(1,), keepdim=True)
    fn = b.build([b.op("div", b.op("exp", x), s), b.op("tanh", v), b.op("cast", x, dtype=DType.f16)])
    exe, _ = run_both(fn, [rng.standard_normal((1024, 1024)).astype(np.float32),
                           rng.standard_normal(1 << 21).astype(np.float32)])
    assert "".join(exe.module.llvm_ir).count("!nontemporal") >= 3
    from neuroncc.codegen.llvm import jit

    assert "movnt" in jit.assembly(exe.module.llvm_ir)


@pytest.mark.usefixtures("small_last_level_cache")
def test_long_streamed_rows_go_out_a_cache_line_at_a_time(rng):
    # cross-entropy's gradient rows (32000 classes): each was computed into a 128 KB stack buffer (L2) before
    # its non-temporal copy, then in pieces of 16 KiB; now a cache line at a time
    import re

    b = Builder("long_rows")
    x = b.param(TensorType((48, 32000), DType.f32), "x")
    fn = b.build([b.op("exp", b.op("sub", x, b.op("amax", x, dims=(1,), keepdim=True)))])
    exe, _ = run_both(fn, [rng.standard_normal((48, 32000)).astype(np.float32)])
    ir_text = "".join(exe.module.llvm_ir)
    buffers = [int(n) for n in re.findall(r"alloca \[(\d+) x float\]", ir_text)]
    assert buffers and max(buffers) * 4 <= 16384, buffers  # (the row cache of exp, 32000 floats, is not here)
    assert ir_text.count("!nontemporal") >= 1


def _blocks_with(assembly: str, instruction: str) -> list[str]:
    """The basic blocks (between labels) of ``assembly`` that contain ``instruction``."""
    import re

    return [block for block in re.split(r"\n\S+:", assembly) if instruction in block]


@pytest.mark.usefixtures("small_last_level_cache")
def test_streamed_lines_are_stored_from_the_registers_that_computed_them(rng):
    # LayerNorm's write pass computed a whole row into a stack buffer, then copied it out with one burst of
    # non-temporal stores (the core stalled on its write-combining buffers while the memory bus idled); each
    # vector now goes out of the compute loop itself: a one-vector buffer, which LLVM keeps in registers
    import re

    from neuroncc.codegen.llvm import jit

    fn = layernorm_graph(1024, 1024)  # a 4 MB output: streamed
    inputs = [rng.standard_normal(s).astype(np.float32) for s in ((1024, 1024), (1024,), (1024,))]
    exe, _ = run_both(fn, inputs)
    buffers = re.findall(r"alloca \[(\d+) x float\]", "".join(exe.module.llvm_ir))
    assert buffers == [str(jit.host_target().f32_lanes)]
    stores = _blocks_with(jit.assembly(exe.module.llvm_ir), "vmovntps")
    assert stores
    for block in stores:
        assert re.search(r"v(sub|mul|add|fmadd\w*)ps", block), block  # the loop that computes the values
        assert not re.search(r"vmovaps\s+-?\d*\(%rsp", block), block  # no reload from a stack buffer


def _exp_pass_locality() -> int:
    """LLVM's locality of a float32 exp pass's prefetches of the next row on this host: 1 (prefetcht2, into the L2)
    where ``CpuTarget.prefetches_the_next_row_into_l2_in_the_exp_pass`` (Zen 4), else 3 (prefetcht0)."""
    return 1 if host_cpu().prefetches_the_next_row_into_l2_in_the_exp_pass else 3


@pytest.mark.parametrize(("cols", "kind", "prefetched"), [(1024, "layernorm", True), (8192, "layernorm", False),
                                                          (1024, "softmax", True), (1024, "one pass", False)])
def test_row_loops_prefetch_the_next_row_of_their_input(cols, kind, prefetched, rng, monkeypatch):
    # LayerNorm's later passes over a row run from L1 and miss nothing, so no hardware prefetcher fetches the next
    # row meanwhile: each row prefetches the next one's lines (rows up to 16 KiB; a one-pass loop streams alone).
    # LayerNorm's passes are cheap: the row's lines in bursts, one before each pass (a loop of prefetches each: all
    # of a row's lines at once are more than the core's miss buffers, ``prefetch.row_bursts``). Softmax's exp pass
    # is compute-bound: there the prefetches are spread through it, a burst of lines per group of elements, after
    # the max pass (which then reads the row from L1), not at the row's start
    from neuroncc.codegen.llvm import jit
    from neuroncc.hardware.loop_choices import MEMORY_BURST_LINES

    b = Builder("prefetch")
    x = b.param(TensorType((64, cols), DType.f32), "x")
    if kind == "layernorm":
        centered = b.op("sub", x, b.op("mean", x, dims=(1,), keepdim=True))
        variance = b.op("mean", b.op("mul", centered, centered), dims=(1,), keepdim=True)
        y = b.op("mul", centered, b.op("rsqrt", b.op("add", variance, b.op("full", shape=(), dtype=DType.f32,
                                                                              value=1e-5))))
    elif kind == "softmax":
        e = b.op("exp", b.op("sub", x, b.op("amax", x, dims=(1,), keepdim=True)))
        y = b.op("div", e, b.op("sum", e, dims=(1,), keepdim=True))
    else:
        y = b.op("exp", x)
    from neuroncc.codegen.llvm.regions import fuse_whole_function

    # (test_touch_pages_ahead)
    choose(monkeypatch, touches_input_pages_rows_ahead=0, touches_streamed_output_rows_ahead=0)
    exe, _ = run_both(fuse_whole_function(b.build([y])), [rng.standard_normal((64, cols)).astype(np.float32)])
    ir_text = "".join(exe.module.llvm_ir)
    assert ("llvm.prefetch" in ir_text) == prefetched
    if prefetched:  # (a float32 exp pass's next row into the L2 on Zen 4: prefetcht2)
        assert ("prefetcht2" if kind == "softmax" and _exp_pass_locality() == 1 else "prefetcht0") in \
            jit.assembly(exe.module.llvm_ir)
    calls = ir_text.count("call void @\"llvm.prefetch.p0\"")
    if kind == "softmax":
        # one group's lines of the next row, written out, in the exp pass's group loop; as many of this row's
        # output, for writing (see test_a_compute_bound_pass_prefetches_the_lines_its_write_pass_stores)
        assert ir_text.count(f", i32 0, i32 {_exp_pass_locality()}, i32 1)") == MEMORY_BURST_LINES
        assert ir_text.count(", i32 1, i32 3, i32 1)") == MEMORY_BURST_LINES
        assert ir_text.index("@\"llvm.maxnum.f32\"(") < ir_text.index("@\"llvm.prefetch.p0\"(") < \
            ir_text.index("@\"ncc.math.exp_nonpositive\"(")  # (exp of x - max(x): ir/signs.py)
    elif prefetched:
        assert calls == 3  # a loop over a third of the row's lines before each of its passes (mean, variance, write)


@pytest.mark.parametrize(("cols", "lines"), [(16, 1), (40, 3), (256, 16), (1000, 16)])
def test_a_short_rows_exp_pass_prefetches_only_the_lines_of_its_row(rng, cols, lines):
    # the exp pass prefetches a group's lines (MEMORY_BURST_LINES) of the next row and of this row's output; a row
    # shorter than a group (the classifier's attention softmax: 16 float32, one line) prefetches only its own
    # lines, not the next 15 rows' lines again on every row (same results: prefetches move no data)
    b = Builder("short_rows")
    x = b.param(TensorType((64, cols), DType.f32), "x")
    e = b.op("exp", b.op("sub", x, b.op("amax", x, dims=(1,), keepdim=True)))
    y = b.op("div", e, b.op("sum", e, dims=(1,), keepdim=True))
    exe, _ = run_both(fuse_whole_function(b.build([y])), [rng.standard_normal((64, cols)).astype(np.float32)])
    ir_text = "".join(exe.module.llvm_ir)
    assert ir_text.count(f", i32 0, i32 {_exp_pass_locality()}, i32 1)") == lines  # the next row's, for reading
    assert ir_text.count(", i32 1, i32 3, i32 1)") == lines  # this row's output, for writing


@pytest.mark.parametrize(("lines", "passes", "bursts"), [
    (32, 2, [(0, 16), (16, 32)]),  # bf16 LayerNorm [*, 1024]: two passes (mean and variance, write)
    (64, 3, [(0, 22), (22, 44), (44, 64)]),  # float32 LayerNorm's three passes (mean, mean of squares, write)
    (64, 2, [(0, 32), (32, 64)]), (8, 3, [(0, 8), (8, 8), (8, 8)]), (20, 1, [(0, 20)])])
def test_a_cheap_row_loop_prefetches_the_next_row_in_bursts_one_before_each_pass(lines, passes, bursts):
    from neuroncc.codegen.llvm.prefetch import row_bursts

    got = row_bursts(lines, passes)
    assert [(burst.start, burst.stop) for burst in got] == bursts
    assert [line for burst in got for line in burst] == list(range(lines))  # every line once, in order


@pytest.mark.usefixtures("small_last_level_cache")
@pytest.mark.parametrize(("exp", "rows"), [(True, True), (False, True), (True, False), (False, False)])
def test_streamed_rows_of_a_compute_bound_stage_go_out_a_burst_at_a_time(rng, exp, rows):
    # cross-entropy's gradient computes an exp per element: its rows are streamed through
    # CpuTarget.streamed_map_piece_lines lines of stack buffer at a time (AVX2: 128 bytes, AVX-512: 1 KiB), a loop
    # of several vectors that the math's interleave count can interleave; other stages go out a vector at a time
    # (a one-vector buffer: registers). A map alone over
    # [64, 20384] runs in blocks of 16384 columns, the last block of a row 4000: it needs fewer pieces than a whole
    # block (it ran pieces past the row's end, into memory it does not own)
    import re

    from neuroncc.codegen.llvm import jit
    from neuroncc.codegen.llvm.regions import fuse_whole_function
    from neuroncc.hardware.host import CACHE_LINE_BYTES

    shape = (48, 32000) if rows else (64, 20384)
    b = Builder("burst")
    x = b.param(TensorType(shape, DType.f32), "x")
    shifted = b.op("sub", x, b.op("amax", x, dims=(1,), keepdim=True)) if rows else x
    fn = fuse_whole_function(b.build([b.op("exp", shifted) if exp else b.op("add", shifted, shifted)]))
    exe, _ = run_both(fn, [rng.standard_normal(shape).astype(np.float32)])
    ir_text = "".join(exe.module.llvm_ir)
    streamed = [m for m in ir_text.split("; ModuleID") if "!nontemporal" in m]
    buffers = [int(n) for m in streamed for n in re.findall(r"alloca \[(\d+) x float\]", m)]
    host = jit.host_target()
    assert buffers == [host.streamed_map_piece_lines * CACHE_LINE_BYTES // 4 if exp else host.f32_lanes], buffers


@pytest.mark.usefixtures("small_last_level_cache")
@pytest.mark.parametrize("heavy", [True, False])
def test_compute_bound_outputs_are_not_streamed(rng, heavy):
    # two transcendentals per element: the stage is compute-bound, plain stores beat the stack-buffer round trip
    from neuroncc.codegen.llvm.regions import fuse_whole_function

    b = Builder("stage")
    x = b.param(TensorType((1024, 1024), DType.f32), "x")
    y = b.op("mul", b.op("gelu", x), b.op("sigmoid", x)) if heavy else b.op("exp", b.op("add", x, x))
    fn = fuse_whole_function(b.build([y]))
    exe, _ = run_both(fn, [rng.standard_normal((1024, 1024)).astype(np.float32)])
    assert "".join(exe.module.llvm_ir).count("!nontemporal") == (0 if heavy else 1)


@pytest.mark.parametrize("llc_mb", [1, 64])
def test_outputs_stay_in_the_last_level_cache_when_the_kernels_data_fits_there(rng, monkeypatch, llc_mb):
    # x - amax(x) over [1024, 1024]: 8 MB in and out; plain stores keep the result in a 64 MB cache for its reader
    # (softmax's write pass stores plainly whatever the cache: see the test below)
    import dataclasses

    from neuroncc.hardware import host

    monkeypatch.setattr(host, "_HOST", [dataclasses.replace(host.host_cpu(), last_level_cache_bytes=llc_mb << 20)])
    b = Builder("centered")
    x = b.param(TensorType((1024, 1024), DType.f32), "x")
    fn = fuse_whole_function(b.build([b.op("sub", x, b.op("amax", x, dims=(1,), keepdim=True))]))
    exe, _ = run_both(fn, [rng.standard_normal((1024, 1024)).astype(np.float32)])
    assert ("!nontemporal" in "".join(exe.module.llvm_ir)) == (llc_mb == 1)


@pytest.mark.usefixtures("small_last_level_cache")
@pytest.mark.parametrize(("rows", "cols", "threads"), [(1000, 1024, 2), (37, 1000, 2), (5, 3000, 1), (1, 256, 1)])
def test_a_compute_bound_pass_prefetches_the_lines_its_write_pass_stores(rng, rows, cols, threads):
    # softmax's write pass was a burst of non-temporal stores at each row's end, waiting for the write-combining
    # buffers with nothing left to compute; now the exp pass prefetches the row's output lines for writing, a
    # group's lines with each group of its elements (as it prefetches the next row's input), and the write pass
    # stores plainly into them, where the output is below the streaming threshold (4 MiB; 1000 x 1024 floats is
    # just below; a larger one is written one row late with non-temporal stores: test_delayed_writes.py)
    from neuroncc.codegen.llvm import jit
    from neuroncc.hardware.loop_choices import MEMORY_BURST_LINES

    b = Builder("softmax")
    x = b.param(TensorType((rows, cols), DType.f32), "x")
    e = b.op("exp", b.op("sub", x, b.op("amax", x, dims=(1,), keepdim=True)))
    fn = fuse_whole_function(b.build([b.op("div", e, b.op("sum", e, dims=(1,), keepdim=True))]))
    values = (rng.standard_normal((rows, cols)) * 4).astype(np.float32)
    exe, (got,) = run_both(fn, [values], threads)
    ir_text = "".join(exe.module.llvm_ir)
    assert "!nontemporal" not in ir_text
    assert ir_text.count(", i32 1, i32 3, i32 1)") == MEMORY_BURST_LINES
    exp_call = ir_text.index('@"ncc.math.exp_nonpositive"(')
    assert ir_text.index("@\"llvm.maxnum.f32\"(") < ir_text.index(", i32 1, i32 3, i32 1)") < exp_call
    assert "prefetchw" in jit.assembly(exe.module.llvm_ir)
    shifted = np.exp(values.astype(np.float64) - values.max(axis=1, keepdims=True))
    np.testing.assert_allclose(got, shifted / shifted.sum(axis=1, keepdims=True), rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("dtype", [DType.bf16, DType.f16, DType.i64])
def test_matmul_epilogue_in_other_dtypes(dtype, rng):
    b = Builder("mm_dtype")
    x = b.param(TensorType((20, 12), dtype), "x")
    w = b.param(TensorType((12, 9), dtype), "w")
    h = b.op("mm", x, w)
    y = b.op("relu", h) if dtype is DType.i64 else b.op("tanh", h)
    kernel = make_kernel(b.ops, [x, w], [y, h], "epilogue")
    b.ops = [kernel]
    fn = b.build(list(kernel.results))
    if dtype is DType.i64:
        inputs = [rng.integers(-5, 5, (20, 12)), rng.integers(-5, 5, (12, 9))]
    else:
        inputs = [(rng.standard_normal(s) * 0.3).astype(np.float32) for s in [(20, 12), (12, 9)]]
        inputs = [round_to_bf16(a) if dtype is DType.bf16 else a.astype(np.float16) for a in inputs]
    run_both(fn, inputs)
