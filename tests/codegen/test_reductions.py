"""Reductions through the LLVM path: every op, dims/keepdim combinations, empty dims, NaN, long rows."""

from __future__ import annotations

import re

import numpy as np
import pytest
from codegen_helpers import run_both, special_floats

from neuroncc.codegen.llvm import jit, stages
from neuroncc.codegen.llvm.views import Layout
from neuroncc.codegen.llvm.emit import emit_kernel
from neuroncc.codegen.llvm.schedule import plan_kernel
from neuroncc.executors.cpu.launcher import build_cpu_executable
from neuroncc.ir import Builder, DType, TensorType, round_to_bf16
from neuroncc.testing.choices import choose

DIMS = [(), (0,), (1,), (2,), (0, 2), (1, 2), (0, 1, 2)]


def _reduce_all(b, x, dims_list, names, keepdims=(False, True)):
    outs = []
    for dims in dims_list:
        for keepdim in keepdims:
            for name in names:
                outs.append(b.op(name, x, dims=dims, keepdim=keepdim, hint=f"{name}_{'_'.join(map(str, dims))}"))
    return outs


@pytest.mark.parametrize("dtype", [DType.f32, DType.bf16, DType.f16])
def test_float_reductions(dtype, rng):
    b = Builder("reduce")
    x = b.param(TensorType((3, 5, 7), dtype), "x")
    names = ["sum", "mean", "prod", "amax", "amin", "any", "all"] if dtype is DType.f32 else ["sum", "mean", "amax"]
    outs = _reduce_all(b, x, DIMS if dtype is DType.f32 else [(1,), (0, 2), (0, 1, 2)], names, keepdims=(False,))
    outs += _reduce_all(b, x, [(1,), (0, 2)], ["sum", "amax"], keepdims=(True,))
    outs += [b.op("var", x, dims=d, correction=c) for d in [(2,), (0,), (0, 1, 2)] for c in (0.0, 1.0)]
    outs += [b.op(n, x, dim=d, keepdim=k) for n in ("argmax", "argmin") for d in (None, 0, 1, 2) for k in (False, True)]
    xs = (rng.standard_normal((3, 5, 7)) * 2).astype(np.float32)
    xs = round_to_bf16(xs) if dtype is DType.bf16 else xs.astype(dtype.numpy)
    run_both(b.build(outs), [xs])


@pytest.mark.parametrize("dtype", [DType.i64, DType.i32, DType.u8, DType.bool])
def test_integer_and_bool_reductions(dtype, rng):
    b = Builder("ireduce")
    x = b.param(TensorType((4, 6, 5), dtype), "x")
    names = ["amax", "amin", "any", "all"] + ([] if dtype.is_bool else ["sum", "prod"])
    outs = _reduce_all(b, x, [(0,), (2,), (0, 2)], names, keepdims=(False,))
    if not dtype.is_bool:
        outs += [b.op(n, x, dim=d) for n in ("argmax", "argmin") for d in (None, 0, 2)]
    xs = rng.random((4, 6, 5)) < 0.3 if dtype.is_bool else rng.integers(0, 5, (4, 6, 5)).astype(dtype.numpy)
    run_both(b.build(outs), [xs])


def test_nan_propagation_and_empty_dims(rng):
    b = Builder("nan")
    x = b.param(TensorType((6, 40), DType.f32), "x")
    e = b.param(TensorType((3, 0), DType.f32), "e")
    outs = [b.op(n, x, dims=(1,)) for n in ("sum", "amax", "amin", "mean")]
    outs += [b.op(n, x, dims=(0,)) for n in ("sum", "amax", "amin")]
    outs += [b.op("argmax", x, dim=1), b.op("argmin", x, dim=1), b.op("argmax", x, dim=0)]
    outs += [b.op(n, e, dims=(1,)) for n in ("sum", "prod", "mean", "any", "all")]
    outs += [b.op("var", e, dims=(1,)), b.op("sum", e, dims=(0,)), b.op("sum", e, dims=(0, 1))]
    xs = special_floats(rng, (6, 40))
    xs[2, 7] = np.nan
    xs[3, :] = -np.inf
    xs[4, 30] = np.nan
    xs[4, 3] = np.nan
    run_both(b.build(outs), [xs, np.zeros((3, 0), np.float32)])


def test_long_rows_and_wide_columns_stay_accurate(rng):
    b = Builder("long")
    x = b.param(TensorType((2, 300_000), DType.f32), "x")
    c = b.param(TensorType((3000, 9000), DType.f32), "c")
    outs = [b.op("sum", x, dims=(1,)), b.op("mean", x, dims=(0, 1)), b.op("var", x, dims=(1,)),
            b.op("sum", c, dims=(0,)), b.op("var", c, dims=(0,)), b.op("amax", c, dims=(0,)),
            b.op("argmax", c, dim=0)]
    xs = (rng.standard_normal((2, 300_000)) + 3).astype(np.float32)
    cs = rng.standard_normal((3000, 9000)).astype(np.float32)
    run_both(b.build(outs), [xs, cs])


def test_reduction_of_computed_and_strided_input(rng):
    b = Builder("computed")
    x = b.param(TensorType((8, 16, 4), DType.f32, strides=(1, 32, 8)), "x")
    y = b.op("exp", b.op("permute", x, dims=(2, 0, 1)))
    outs = [b.op("sum", y, dims=(2,)), b.op("amax", y, dims=(0, 1), keepdim=True), b.op("sum", y, dims=(1,))]
    base = rng.standard_normal((4, 16, 8)).astype(np.float32)
    run_both(b.build(outs), [np.transpose(base, (2, 1, 0))])


def test_column_reductions_are_split_across_threads(rng):
    from neuroncc.executors.cpu.launcher import build_cpu_executable

    b = Builder("bias_grad")
    g = b.param(TensorType((300, 1000), DType.f32), "g")
    h = b.param(TensorType((7, 5, 3000), DType.f32), "h")
    fn = b.build([b.op("sum", g, dims=(0,)), b.op("mean", h, dims=(0, 1)), b.op("amax", g, dims=(0,), keepdim=True)])
    exe, _ = run_both(fn, [rng.standard_normal((300, 1000)).astype(np.float32),
                           rng.standard_normal((7, 5, 3000)).astype(np.float32)])
    assert all(step.phases[0].n_outer > 1 for step in exe.plan.steps)
    one = build_cpu_executable(fn, {"threads": 1})
    assert one.stats["native_kernels"] == 3


@pytest.mark.parametrize("dtype", [DType.f32, DType.i64, DType.bool])
def test_full_reductions_are_split_into_parallel_partials(dtype, rng):
    b = Builder("full")
    x = b.param(TensorType((300, 700), dtype), "x")
    v = b.param(TensorType((100_003,), dtype), "v")
    names = ["any", "all"] if dtype.is_bool else ["sum", "amax", "amin"] + (["mean"] if dtype.is_float else [])
    outs = [b.op(n, t, dims=tuple(range(t.type.rank)), keepdim=k) for n in names for t in (x, v) for k in (False, True)]
    if dtype.is_bool:
        inputs = [rng.random((300, 700)) < 0.999, rng.random(100_003) < 0.001]
    elif dtype.is_float:
        inputs = [rng.standard_normal((300, 700)).astype(np.float32), rng.standard_normal(100_003).astype(np.float32)]
        inputs[1][77_777] = np.nan
    else:
        inputs = [rng.integers(-9, 9, (300, 700)), rng.integers(-9, 9, 100_003)]
    exe, _ = run_both(b.build(outs), inputs)
    assert all(len(step.phases) == 2 and step.phases[0].n_outer > 1 for step in exe.plan.steps)


def test_batchnorm_statistics_iterate_channels_in_parallel(rng):
    b = Builder("bn_stats")
    x = b.param(TensorType((8, 16, 10, 12), DType.f32), "x")
    fn = b.build([b.op("mean", x, dims=(0, 2, 3), keepdim=True), b.op("var", x, dims=(0, 2, 3), correction=0.0),
                  b.op("amax", x, dims=(0, 3))])
    exe, _ = run_both(fn, [rng.standard_normal((8, 16, 10, 12)).astype(np.float32)])
    assert [step.phases[0].n_outer for step in exe.plan.steps] == [16, 16, 160]


@pytest.mark.normal_build  # (its loop count: the checking build's fills are loops too)
@pytest.mark.parametrize("mean_first", [False, True])
def test_a_variance_shares_the_mean_of_the_same_rows(mean_first, rng):
    # var_mean (LayerNorm's statistics) is a var and a mean of the same rows: the variance's first pass is that
    # mean, so the row is read twice, not three times, and both results are bit for bit the separate kernels'.
    def graph(outputs):
        b = Builder("stats")
        x = b.param(TensorType((6, 300), DType.f32), "x")
        y = b.op("exp", x)
        made = {"var": lambda: b.op("var", y, dims=(1,), correction=0.0, keepdim=True),
                "mean": lambda: b.op("mean", y, dims=(1,)),
                "var1": lambda: b.op("var", y, dims=(1,), correction=1.0)}
        return b.build([made[name]() for name in outputs])

    xs = special_floats(rng, (6, 300), scale=1.0)
    xs[3] = np.linspace(-2, 2, 300)  # a row without specials
    order = ["mean", "var", "var1"] if mean_first else ["var", "var1", "mean"]
    fn = graph(order)
    exe, got = run_both(fn, [xs])
    for name, value in zip(order, got):
        (alone,) = build_cpu_executable(graph([name]), {"threads": 2})(xs)
        np.testing.assert_array_equal(value, alone)
    # one pass for the mean (the first variance stores it, the second reads it), one per variance: 3 loops, not 5
    # (and, with AVX2's 16 vector registers, the first pass's sum of its row-cached exp(x), a loop of its own over
    # the cache: stages.SUM_ROW_CACHE_APART)
    plan = plan_kernel(fn, [Layout.of(0, fn.params[0].type)],
                       [Layout.of(1 + k, v.type) for k, v in enumerate(fn.outputs)])
    target = jit.host_target()
    module, _ = jit.optimize(emit_kernel(plan, "k", target)[0])
    apart = target.vector_registers < stages.SUM_IN_LOOP_MIN_REGISTERS
    assert len(re.findall(r"^vector\.body\d*:", str(module), re.M)) == 3 + apart


@pytest.mark.parametrize("offset", [0, 1, 4, 7, 12, 15])
def test_row_sums_of_an_unaligned_input_start_at_a_vector_boundary(offset, rng):
    # mean, var and sum over rows that start anywhere in a 64-byte line (numpy's buffers are 16-byte aligned, and
    # rows of 300 floats start at every multiple of 16 bytes): the vector loop starts at the row's first vector
    # boundary, found at run time, and the elements before it are added by a loop of their own
    b = Builder("stats")
    x = b.param(TensorType((7, 300), DType.f32), "x")
    fn = b.build([b.op("mean", x, dims=(1,), keepdim=True), b.op("var", x, dims=(1,), correction=0.0),
                  b.op("sum", x, dims=(1,))])
    buffer = np.empty(7 * 300 + 32, np.float32)
    start = (-buffer.ctypes.data % 64) // 4 + offset
    xs = buffer[start:start + 7 * 300].reshape(7, 300)
    assert xs.ctypes.data % 64 == 4 * offset
    xs[...] = rng.standard_normal((7, 300)) + 100.0  # far from 0: the variance's two passes are what keep it exact
    xs[2] = special_floats(rng, (300,))
    run_both(fn, [xs])
    plan = plan_kernel(fn, [Layout.of(0, fn.params[0].type)],
                       [Layout.of(1 + k, v.type) for k, v in enumerate(fn.outputs)])
    text = "".join(emit_kernel(plan, "k", jit.host_target())[0])
    assert "ptrtoint" in text  # the row's start address, where the aligned vector loop begins


def _log_sum_exp_graph(rows: int, cols: int, softmax: bool = False):
    """log_softmax (cross-entropy's forward) over [rows, cols]; with ``softmax``, softmax (its exp row-cached)."""
    b = Builder("lse")
    x = b.param(TensorType((rows, cols), DType.f32), "x")
    m = b.op("amax", x, dims=(1,), keepdim=True)
    e = b.op("exp", b.op("sub", x, m))
    s = b.op("sum", e, dims=(1,), keepdim=True)
    if softmax:
        return b.build([b.op("div", e, s)])
    return b.build([b.op("sub", b.op("sub", x, m), b.op("log", s)), m])


def log_sum_exp_assembly(target, rows: int = 16, cols: int = 32000) -> str:
    """The assembly ``target`` gets for :func:`_log_sum_exp_graph`'s fused kernel (cross-entropy's forward)."""
    from neuroncc.codegen.llvm.regions import fuse_whole_function

    fn = fuse_whole_function(_log_sum_exp_graph(rows, cols))
    plan = plan_kernel(fn.ops[0].regions[0], [Layout.of(0, fn.params[0].type)],
                       [Layout.of(1 + k, v.type) for k, v in enumerate(fn.outputs)])
    return jit.assembly(emit_kernel(plan, "k", target)[0], target)


def test_log_sum_exp_takes_the_max_online_in_one_pass(rng):
    # the sum of exp(x - max) computes the max block by block (online.py): the max stage is not emitted, the
    # row is read once for both; rows with specials (NaN, +-inf, all -inf, -inf before finite values, a max
    # growing from block to block, a partial last block) give what the two passes give
    from neuroncc.codegen.llvm.online import online_maxima
    from neuroncc.codegen.llvm.regions import fuse_whole_function
    from neuroncc.hardware.host import host_cpu

    BLOCK = host_cpu().online_block_elements

    cols = 2 * BLOCK + 300
    xs = (rng.standard_normal((8, cols)) * 4).astype(np.float32)
    xs[0, 17] = np.nan
    xs[1, 5] = np.inf
    xs[2] = -np.inf
    xs[3, : BLOCK + 10] = -np.inf
    xs[4] = np.linspace(-30, 60, cols)
    xs[5, -1] = 80.0
    fn = fuse_whole_function(_log_sum_exp_graph(8, cols))
    run_both(fn, [xs])
    plan = plan_kernel(fn.ops[0].regions[0], [Layout.of(0, fn.params[0].type)],
                       [Layout.of(1 + k, v.type) for k, v in enumerate(fn.outputs)])
    (phase,) = plan.phases
    assert list(online_maxima(plan, phase)) == [1]  # the sum (stage 1) takes the max of stage 0
    softmax = _log_sum_exp_graph(8, cols, softmax=True)
    plan = plan_kernel(softmax, [Layout.of(0, softmax.params[0].type)], [Layout.of(1, softmax.outputs[0].type)])
    assert not online_maxima(plan, plan.phases[0])  # its exp is row-cached for the write pass: two passes


@pytest.mark.parametrize("cols", [1000, 2 * 1024 + 300])
def test_online_log_sum_exp_prefetches_the_next_block_while_it_computes_exp(rng, monkeypatch, cols):
    # each block's max loop reads it from memory, its exponentials from L1: those are spread with prefetches of
    # the block after it (the next row's first block after a row's last), one burst of lines per group of
    # elements, after the block's max loop and before its exponentials, so that the next max loop reads from L1
    # (chunks of CpuTarget.online_exp_chunk_lines lines; groups of MEMORY_BURST_LINES lines where that is 0)
    from neuroncc.codegen.llvm import jit
    from neuroncc.codegen.llvm.regions import fuse_whole_function
    from neuroncc.hardware.host import host_cpu
    from neuroncc.hardware.loop_choices import MEMORY_BURST_LINES

    # (each block's max in its own block, as before session 28: the chunk loop emitted once)
    choose(monkeypatch, online_block_max_ahead=0)
    fn = fuse_whole_function(_log_sum_exp_graph(16, cols))
    exe, _ = run_both(fn, [(rng.standard_normal((16, cols)) * 4).astype(np.float32)])
    ir_text = "".join(exe.module.llvm_ir)
    host = host_cpu()
    lines = host.online_exp_chunk_lines and host.online_exp_prefetch_piece_lines or host.online_exp_chunk_lines \
        or MEMORY_BURST_LINES  # (a chunk's burst, or its pieces' prefetches in its loop, emitted once)
    streams = 2 if host.online_l2_prefetch_blocks_ahead else 1  # (Zen 4: also into L2, further ahead)
    assert ir_text.count('call void @"llvm.prefetch.p0"') == lines * streams
    assert ir_text.index('@"llvm.maxnum.f32"(') < ir_text.index('@"llvm.prefetch.p0"(') < \
        ir_text.rindex('@"ncc.math.exp"(')  # (the first exp scales the total when the max grows)
    assert "prefetcht0" in jit.assembly(exe.module.llvm_ir)


def test_online_log_sum_exp_takes_its_exponentials_in_chunks_of_constant_length(monkeypatch):
    # CpuTarget.online_exp_chunk_lines: each chunk of lines after its prefetches of the next block's same lines is
    # a loop of constant length, vectorized whole: no remainder loop per group as the spread groups of
    # MEMORY_BURST_LINES lines have (their end is min(start + 256, hi)). AVX-512: chunks of 8 lines (128 float32,
    # session 18), on Zen 4 16 lines (session 35, with its 4096-element blocks), each also after the prefetches
    # of its lines 4 blocks ahead into L2 (prefetcht2); AVX2: chunks of 32 lines (512 float32, two per
    # 1024-element block; session 20, Zen 3)
    from neuroncc.codegen.llvm import jit
    from neuroncc.codegen.llvm.regions import fuse_whole_function
    from neuroncc.hardware.host import CpuTarget
    from test_bf16_rounding import SAPPHIRE_RAPIDS, ZEN4
    from test_pairs import AVX2

    # (each block's max in its own block, as before session 28: the chunk loop emitted once; on Zen 4 not in the
    # previous block's exp loop, as before session 36: test_next_block_max.py)
    choose(monkeypatch, online_block_max_ahead=0, takes_the_next_block_max_in_the_exp_loop=False)
    fn = fuse_whole_function(_log_sum_exp_graph(16, 32000))
    counts = {}
    # (AVX2's bursts: its prefetches spread through the chunk's loop since session 26, the next test)
    choose(monkeypatch, online_exp_prefetch_piece_lines=0)
    targets = {"zen4": CpuTarget("znver4", ZEN4), "intel": CpuTarget("sapphirerapids", SAPPHIRE_RAPIDS),
               "avx2": CpuTarget("znver3", AVX2)}
    for name, target in targets.items():
        plan = plan_kernel(fn.ops[0].regions[0], [Layout.of(0, fn.params[0].type)],
                           [Layout.of(1 + k, v.type) for k, v in enumerate(fn.outputs)])
        texts, _ = emit_kernel(plan, "k", target)
        asm = jit.assembly(texts, target)
        counts[name] = (asm.count("prefetcht0"), asm.count("prefetcht2"))  # one burst each, in one chunk loop
        assert "".join(texts).count('call void @"llvm.prefetch.p0"') == sum(counts[name])
        if name == "zen4":  # the L2's lines 4 blocks (of 4096 elements) ahead, the L1's 1 block ahead
            assert set(re.findall(r"prefetcht2\s+(-?\d+)\(", asm)) == {str(4 * 4096 * 4 + 64 * k) for k in range(16)}
            assert set(re.findall(r"prefetcht0\s+(-?\d+)\(", asm)) == {str(4096 * 4 + 64 * k) for k in range(16)}
    assert [t.online_exp_chunk_lines for t in targets.values()] == [16, 8, 32]
    assert [t.online_block_elements for t in targets.values()] == [4096, 1024, 1024]
    assert counts == {"zen4": (16, 16), "intel": (8, 0), "avx2": (32, 0)}  # (the groups: MEMORY_BURST_LINES, 16)


def _prefetch_offsets(asm: str) -> list[int]:
    """The displacements of the ``prefetcht0`` instructions of an assembly text, in order."""
    return [int(m) for m in re.findall(r"prefetcht0\s+(-?\d+)\(", asm)]


def test_online_log_sum_exp_spreads_its_prefetches_two_blocks_ahead_on_avx2(rng, monkeypatch):
    # CpuTarget.online_exp_prefetch_piece_lines and online_prefetch_blocks_ahead (AVX2: 2 and 2): a chunk's
    # prefetches go through its exp loop, 2 lines per vector iteration of 32 exponentials, for the block 2 blocks
    # (8 KiB) ahead, not in a burst of 32 before the loop for the next block, which outran the core's miss buffers
    # (session 26 xent26: cross-entropy's forward [512, 32000] 0.90-0.94 of its time at 2 threads, 0.92-0.96 at 1,
    # Zen 3). The same bits; AVX-512's code is as before.
    from neuroncc.codegen.llvm.regions import fuse_whole_function
    from neuroncc.hardware.host import CpuTarget
    from test_bf16_rounding import ZEN4
    from test_pairs import AVX2

    # (each block's max in its own block, as before session 28: the chunk loop emitted once)
    choose(monkeypatch, online_block_max_ahead=0)
    zen3, zen4 = CpuTarget("znver3", AVX2), CpuTarget("znver4", ZEN4)
    assert (zen3.online_exp_prefetch_piece_lines, zen3.online_prefetch_blocks_ahead) == (2, 2)
    assert (zen4.online_exp_prefetch_piece_lines, zen4.online_prefetch_blocks_ahead) == (0, 1)
    spread, zen4_code = log_sum_exp_assembly(zen3), log_sum_exp_assembly(zen4)
    fn = fuse_whole_function(_log_sum_exp_graph(16, 2 * 1024 + 300))
    x = special_floats(rng, (16, 2 * 1024 + 300), scale=4.0)
    x[3], x[5, ::7] = -np.inf, np.nan  # an all -inf row; a row with NaNs
    got = build_cpu_executable(fn, {"threads": 2})(x)
    choose(monkeypatch, online_exp_prefetch_piece_lines=0, online_prefetch_blocks_ahead=1)
    burst = log_sum_exp_assembly(zen3)
    assert _prefetch_offsets(spread) == [8192, 8256]  # two lines, 2 blocks of 4 KiB ahead, in the exp loop
    assert re.search(r"prefetcht0\s+8256\([^\n]*\n(?:[^\n]*\n){0,80}?\s+vfmadd", spread)
    assert _prefetch_offsets(burst) == [4096 + 64 * k for k in range(32)]  # before: a burst for the next block
    assert log_sum_exp_assembly(zen4) == zen4_code
    want = build_cpu_executable(fn, {"threads": 2})(x)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g, w)


def _summed_from_the_stack(asm: str) -> int:
    """The vector adds that take their operand from the stack (a sum loop over a buffer there)."""
    return len(re.findall(r"vaddps\s+-?\d*\(%rsp(,%r\w+)?(,\d)?\),\s*%ymm", asm))


def test_online_log_sum_exp_sums_each_chunk_apart_on_avx2(monkeypatch):
    # CpuTarget.sums_online_exponentials_apart (AVX2): each whole chunk's exponentials go to a buffer on the
    # stack and are summed in a loop of their own over it, four partial sums of 8 lanes as in the exp loop; the
    # exp loop no longer keeps them beside its four chains and constants in 16 registers (session 23 softmax23:
    # cross-entropy's forward [512, 32000] 2-4% faster at 1 and 2 threads on Zen 3). AVX-512's code is as before.
    from neuroncc.codegen.llvm import online
    from neuroncc.hardware.host import CpuTarget
    from test_bf16_rounding import ZEN4
    from test_pairs import AVX2

    # (each block's max in its own block, as before session 28: the chunk loop emitted once)
    choose(monkeypatch, online_block_max_ahead=0)
    assembly = log_sum_exp_assembly
    zen3, zen4 = CpuTarget("znver3", AVX2), CpuTarget("znver4", ZEN4)
    assert zen3.sums_online_exponentials_apart and not zen4.sums_online_exponentials_apart
    apart, zen4_code = assembly(zen3), assembly(zen4)
    monkeypatch.setattr(online, "SUM_CHUNK_APART", False)
    assert _summed_from_the_stack(apart) == 4 and _summed_from_the_stack(assembly(zen3)) == 0
    assert assembly(zen4) == zen4_code


@pytest.mark.parametrize("cols", [32000, 2 * 1024 + 300])
def test_online_log_sum_exp_summed_apart_gives_the_same_bits(rng, monkeypatch, cols):
    # the sum loop over a chunk's buffer adds the same terms in the same lanes and order as the exp loop did
    from neuroncc.codegen.llvm import online
    from neuroncc.codegen.llvm.regions import fuse_whole_function

    fn = fuse_whole_function(_log_sum_exp_graph(16, cols))
    x = special_floats(rng, (16, cols), scale=4.0)
    x[3], x[5, ::7] = -np.inf, np.nan  # an all -inf row; a row with NaNs
    got = build_cpu_executable(fn, {"threads": 2})(x)
    monkeypatch.setattr(online, "SUM_CHUNK_APART", False)
    want = build_cpu_executable(fn, {"threads": 2})(x)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g, w)


def test_log_sum_exp_of_a_row_computed_in_the_kernel_matches_eager():
    """The fuzzer's program (seed 0, #61): a fused randn -> log_softmax -> a strided slice. Its rows are
    computed in the kernel, which the online max must leave to the two-pass form (it gave NaN rows)."""
    from neuroncc.testing.fuzz import check_program, generate_program

    findings = check_program(generate_program(0, 61), ("cpu",))
    assert not [f for f in findings if f.is_bug], [(f.status, f.detail) for f in findings]
