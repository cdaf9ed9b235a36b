"""Softmax's row loop: its write pass one row late, inside the next row's exponentials, with non-temporal stores
(``delayed_writes.py``), and its sum over the row cache in a loop of its own where the CPU has 16 vector
registers (``stages.SUM_ROW_CACHE_APART``).
The delayed writes give the same bits as the write pass in place, for any range of rows a thread is given."""

from __future__ import annotations

import ctypes
import dataclasses
import re

import numpy as np
import pytest

from neuroncc.codegen.llvm import delayed_writes, jit, stages
from neuroncc.codegen.llvm.emit import emit_kernel
from neuroncc.codegen.llvm.schedule import plan_kernel
from neuroncc.codegen.llvm.views import Layout
from neuroncc.hardware.host import CpuTarget, host_cpu
from neuroncc.ir import Builder, DType, TensorType
from neuroncc.testing.choices import choose

#: rows x 1024 float32: an output of at least the emitter's 4 MiB streaming threshold
ROWS, COLUMNS = 1030, 1024


def _softmax(rows: int = ROWS, columns: int = COLUMNS):
    b = Builder("softmax")
    x = b.param(TensorType((rows, columns), DType.f32), "x")
    e = b.op("exp", b.op("sub", x, b.op("amax", x, dims=(1,), keepdim=True)))
    return b.build([b.op("div", e, b.op("sum", e, dims=(1,), keepdim=True))])


def _texts(fn, delay: bool, monkeypatch, target: CpuTarget | None = None) -> list[str]:
    monkeypatch.setattr(delayed_writes, "DELAY_WRITES", delay)
    plan = plan_kernel(fn, [Layout.of(k, p.type) for k, p in enumerate(fn.params)],
                       [Layout.of(len(fn.params) + k, v.type) for k, v in enumerate(fn.outputs)])
    plan = dataclasses.replace(plan, aligned_args=frozenset(range(plan.n_args)))  # (as the launch plan's buffers)
    # (a last-level cache of unknown size: large outputs stream on any host)
    texts, symbols = emit_kernel(plan, "k", dataclasses.replace(target or host_cpu(), last_level_cache_bytes=0))
    assert symbols == ["k_p0"]
    return texts


class _Kernel:
    """The compiled phase function, called on [start, end) of the rows, on buffers of its own."""

    def __init__(self, texts: list[str], x: np.ndarray):
        self.module = jit.compile_ir(texts)
        self.phase = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64)(
            self.module.address("k_p0"))
        rows = x.shape[0]
        self.x = x
        self.out = _aligned(x.size)
        self.maxima, self.sums = np.zeros(rows, np.float32), np.zeros(rows, np.float32)
        self.args = (ctypes.c_void_p * 4)(*[a.ctypes.data for a in (self.x, self.out, self.maxima, self.sums)])

    def run(self, ranges: list[tuple[int, int]]) -> np.ndarray:
        self.out[:] = np.nan
        for start, end in ranges:
            self.phase(self.args, start, end)
        return self.out.reshape(self.x.shape).copy()


def _aligned(count: int) -> np.ndarray:
    raw = np.empty(count + 64, np.float32)
    start = (-raw.ctypes.data % 256) // 4
    return raw[start:start + count]


def test_the_write_pass_is_delayed_and_streamed_where_the_sum_carries_the_prefetches(monkeypatch):
    fn = _softmax()
    delayed, in_place = _texts(fn, True, monkeypatch), _texts(fn, False, monkeypatch)
    assert "!nontemporal" in "".join(delayed) and "!nontemporal" not in "".join(in_place)
    prefetches_for_writing = re.compile(r"llvm\.prefetch\.p0\"\(ptr %\S+, i32 1,")
    assert not prefetches_for_writing.search("".join(delayed))  # (no read for ownership of the output)
    assert prefetches_for_writing.search("".join(in_place))


@pytest.mark.parametrize("ranges", [
    [(0, ROWS)],
    [(0, 515), (515, ROWS)],  # two threads' halves
    [(0, 1), (1, 2), (2, 514), (514, 515), (515, ROWS - 1), (ROWS - 1, ROWS)],  # ranges of one row
], ids=["whole", "halves", "single-rows"])
def test_delayed_writes_give_the_write_pass_bits_on_any_range_of_rows(ranges, rng, monkeypatch):
    fn = _softmax()
    # (the sum's lanes through the row's groups add in another order: tests/codegen/test_row_sum_lanes.py)
    choose(monkeypatch, carries_the_row_sum_in_lanes_through_the_groups=False)
    x = (rng.standard_normal((ROWS, COLUMNS)) * 4).astype(np.float32)
    x[3, :] = -np.inf  # an all -inf row: NaN
    x[7, 5] = np.nan
    expected = _Kernel(_texts(fn, False, monkeypatch), x).run([(0, ROWS)])
    got = _Kernel(_texts(fn, True, monkeypatch), x).run(ranges)
    np.testing.assert_array_equal(got.view(np.uint32), expected.view(np.uint32))
    e = np.exp(x[8:] - x[8:].max(1, keepdims=True))
    np.testing.assert_allclose(got[8:], e / e.sum(1, keepdims=True), rtol=1.3e-6, atol=1e-7)


def _block_of(text: str, needle: str) -> str:
    """The basic block of LLVM IR ``text`` that contains ``needle``."""
    at = text.index(needle)
    start = text.rfind("\n\n", 0, at)
    start = max(start, text.rfind(":\n", 0, at))
    end = text.find(":\n", at)
    return text[start:end]


#: CPUs with 16 vector registers (AVX2) and with 32 (AVX-512)
AVX2 = CpuTarget("znver3", "+avx,+avx2,+fma,+f16c,+bmi,+bmi2,+popcnt,+sse4.2,-avx512f,-avx512vl,-avx512bw,-avx512dq")
AVX512 = CpuTarget("znver4", "+avx,+avx2,+fma,+f16c,+bmi,+bmi2,+popcnt,+sse4.2,+avx512f,+avx512vl,+avx512bw,+avx512dq")


@pytest.mark.parametrize("apart", [True, False])
@pytest.mark.parametrize("target", [AVX2, AVX512], ids=["avx2", "avx512"])
def test_the_sum_of_row_cached_exponentials_is_a_loop_of_its_own_with_16_registers(apart, target, rng, monkeypatch):
    # (with 32 registers the partial sums fit beside the polynomial's constants and chains: the exp loop adds them)
    monkeypatch.setattr(stages, "SUM_ROW_CACHE_APART", apart)
    fn = _softmax(16, 1024)
    text = "".join(_texts(fn, True, monkeypatch, target))
    exponentials = _block_of(text, 'call float @"ncc.math.exp_nonpositive"')
    assert ("fadd reassoc" in exponentials) is not (apart and target is AVX2)


@pytest.mark.parametrize("dtype", [DType.f32, DType.bf16])
def test_a_streamed_softmax_through_the_launcher_at_two_threads(dtype, rng, monkeypatch):
    # the launcher's row ranges, its aligned buffers and its OpenMP team; a host whose last-level cache the kernel
    # outgrows (1 MB), so that the output streams; bf16 reads and writes its rows in element pairs (pairs.py)
    from neuroncc.codegen.llvm.regions import fuse_whole_function
    from neuroncc.hardware import host
    from neuroncc.ir import round_to_bf16

    from codegen_helpers import run_both

    monkeypatch.setattr(host, "_HOST", [dataclasses.replace(host.host_cpu(), last_level_cache_bytes=1 << 20)])
    rows = ROWS if dtype is DType.f32 else 2 * ROWS  # (an output of at least 4 MiB)
    b = Builder("softmax")
    x = b.param(TensorType((rows, COLUMNS), dtype), "x")
    wide = x if dtype is DType.f32 else b.op("cast", x, dtype=DType.f32)
    e = b.op("exp", b.op("sub", wide, b.op("amax", wide, dims=(1,), keepdim=True)))
    y = b.op("div", e, b.op("sum", e, dims=(1,), keepdim=True))
    fn = fuse_whole_function(b.build([y if dtype is DType.f32 else b.op("cast", y, dtype=DType.bf16)]))
    values = (rng.standard_normal((rows, COLUMNS)) * 4).astype(np.float32)
    values = values if dtype is DType.f32 else round_to_bf16(values)
    exe, (got,) = run_both(fn, [values], 2)  # (and the interpreter's result)
    ir_text = "".join(exe.module.llvm_ir)
    assert "!nontemporal" in ir_text and "prefetchw" not in jit.assembly(exe.module.llvm_ir)
    shifted = np.exp(values.astype(np.float64) - values.max(axis=1, keepdims=True))
    rtol = 1e-5 if dtype is DType.f32 else 1.6e-2
    np.testing.assert_allclose(np.asarray(got, np.float32), shifted / shifted.sum(axis=1, keepdims=True),
                               rtol=rtol, atol=1e-7)


def test_the_row_caches_are_page_aligned_and_their_two_rows_half_a_page_apart(monkeypatch):
    # (two copies of a row of 1024 floats exactly 4 KiB apart alias in the low 12 bits of their addresses)
    delayed, in_place = "".join(_texts(_softmax(), True, monkeypatch)), "".join(_texts(_softmax(), False, monkeypatch))
    assert "alloca [2560 x float], align 4096" in delayed  # 1024 + 512 of padding + 1024
    assert "alloca [1024 x float], align 4096" in in_place
