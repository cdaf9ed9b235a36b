"""The OpenMP team's schedule of a phase's rows (``executors/cpu/threads.py``' ``OpenMPTeam.split``, the team entry
``codegen/llvm/team_entry.py``): every row run exactly once whatever the count of rows and threads, chunks of one
length (``guided_chunks`` 0) or a guided schedule whose chunks shrink toward the end (``CpuTarget.team_guided_chunks``,
Zen 4: the threads end within a small chunk of each other)."""

from __future__ import annotations

import ctypes

import pytest

from neuroncc.codegen.llvm import jit
from neuroncc.executors.cpu.steps import PHASE_FN
from neuroncc.executors.cpu.threads import CHUNKS_PER_THREAD, GUIDED_SPREAD, TEAM_MIN_WORK, get_team
from neuroncc.hardware.host import CpuTarget

#: a phase that counts each row it runs (``hits``) and logs each chunk it is called on (``chunks``: lo, hi)
MARK_IR = """define void @"mark_rows"(ptr %args, i64 %start, i64 %end) {
entry:
  %hits = load ptr, ptr %args
  %log.field = getelementptr ptr, ptr %args, i64 1
  %log = load ptr, ptr %log.field
  %count.field = getelementptr i64, ptr %args, i64 2
  %taken = atomicrmw add ptr %count.field, i64 1 monotonic
  %at = mul i64 %taken, 2
  %lo.slot = getelementptr i64, ptr %log, i64 %at
  store i64 %start, ptr %lo.slot
  %hi.slot = getelementptr i64, ptr %lo.slot, i64 1
  store i64 %end, ptr %hi.slot
  br label %loop
loop:
  %i = phi i64 [%start, %entry], [%next, %body]
  %more = icmp slt i64 %i, %end
  br i1 %more, label %body, label %done
body:
  %slot = getelementptr i64, ptr %hits, i64 %i
  %old = atomicrmw add ptr %slot, i64 1 monotonic
  %next = add i64 %i, 1
  br label %loop
done:
  ret void
}
"""

#: Zen 4's and Sapphire Rapids' features as the code generator reads them (tests/codegen/test_bf16_rounding.py)
ZEN4 = "+avx,+avx2,+fma,+f16c,+bmi,+bmi2,+popcnt,+sse4.2,+avx512f,+avx512vl,+avx512bw,+avx512dq,+avx512bf16"
SAPPHIRE_RAPIDS = ZEN4 + ",+avx512fp16,+amx-bf16,+amx-tile,+amx-int8"
START = 3  # the range starts past 0, as a row block's phases do (steps.py)


@pytest.fixture(scope="module")
def mark():
    module = jit.compile_ir([MARK_IR])
    address = module.address("mark_rows")
    return module, PHASE_FN(address), address


def _run(mark, threads: int, n: int, guided: int, work: int = TEAM_MIN_WORK) -> tuple[list[int], list[tuple]]:
    """Each row's count and the chunks (lo, hi) of ``n`` rows from :data:`START` run on a team of ``threads``."""
    team = get_team(threads)
    if team is None:
        pytest.skip("libgomp (bundled with torch) not found")
    _, fn, address = mark
    hits = (ctypes.c_int64 * (START + n + 2))()
    log = (ctypes.c_int64 * (2 * (n + 1)))()
    args = (ctypes.c_int64 * 3)(ctypes.addressof(hits), ctypes.addressof(log), 0)
    team.run(fn, address, ctypes.addressof(args), START, START + n, work, guided)
    chunks = sorted((log[2 * i], log[2 * i + 1]) for i in range(args[2]))
    return list(hits), chunks


@pytest.mark.parametrize("guided", [0, 1, 2, 32])
@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("n", [1, 2, 3, 5, 7, 33, 97, 1001])
def test_every_row_runs_exactly_once(mark, guided, threads, n):
    hits, chunks = _run(mark, threads, n, guided)
    assert hits == [0] * START + [1] * n + [0, 0]
    assert chunks[0][0] == START and chunks[-1][1] == START + n
    assert all(a[1] == b[0] for a, b in zip(chunks, chunks[1:]))  # contiguous, none twice
    if threads == 1 or n == 1:
        assert chunks == [(START, START + n)]  # inline, one call
    else:
        assert len(chunks) > 1


def test_tiny_loops_run_inline_in_one_call(mark):
    for guided in (0, 32):
        hits, chunks = _run(mark, 2, 5, guided, work=1)  # below TEAM_MIN_WORK: the calling thread, one call
        assert chunks == [(START, START + 5)] and hits[START:START + 5] == [1] * 5


def test_guided_chunks_shrink_toward_the_end(mark):
    n = 4096
    _, fixed = _run(mark, 2, n, 0)
    assert [hi - lo for lo, hi in fixed] == [n // (2 * CHUNKS_PER_THREAD)] * (2 * CHUNKS_PER_THREAD)
    _, guided = _run(mark, 2, n, 32)
    lengths = [hi - lo for lo, hi in guided]
    assert lengths[0] == n // (2 * GUIDED_SPREAD)  # the rows left over twice the team's size
    assert lengths == sorted(lengths, reverse=True)
    assert lengths[-1] <= n // 64 and min(lengths[:-1]) == n // 64  # down to 1/32 of a thread's share
    assert len(lengths) < 2 * 32  # fewer calls than chunks of that length all through


def test_split_keeps_equal_chunks_unless_guided():
    team = get_team(2)
    if team is None:
        pytest.skip("libgomp (bundled with torch) not found")
    assert team.split(4096, TEAM_MIN_WORK) == (4096 // 8, 2, 0)  # the team entry's spread 0: chunks of one length
    assert team.split(4096, TEAM_MIN_WORK, 32) == (4096 // 64, 2, 2 * GUIDED_SPREAD)
    assert team.split(3, TEAM_MIN_WORK, 32) == (1, 2, 2 * GUIDED_SPREAD)


def test_zen4_and_avx2_take_the_guided_schedule():
    assert CpuTarget("znver4", ZEN4).team_guided_chunks == 32
    assert CpuTarget("sapphirerapids", SAPPHIRE_RAPIDS).team_guided_chunks == 0
    assert CpuTarget("znver3", "+avx,+avx2,+fma,-avx512f").team_guided_chunks == 32  # (session 39, Zen 3)
    assert CpuTarget("x86-64", "+sse2,-avx,-avx2,-avx512f").team_guided_chunks == 0
