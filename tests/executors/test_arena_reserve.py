"""The arena reserve (neuroncc/executors/cpu/arena_reserve.py): memory whose pages a background thread faults in
while AOTAutograd traces, handed whole to the first executable whose arena fits it (at least half of it), never to
two, never waited for; one nothing took is let go when a first call binds its code."""

from __future__ import annotations

import ctypes
import mmap

import numpy as np
import pytest

from neuroncc.codegen.llvm.launch_plan import ALIGN
from neuroncc.codegen.llvm.regions import fuse_whole_function
from neuroncc.executors.cpu import arena_reserve
from neuroncc.executors.cpu.launcher import build_cpu_executable
from neuroncc.testing.models import layer_norm_graph


@pytest.fixture(autouse=True)
def _no_reserve(monkeypatch):
    monkeypatch.setattr(arena_reserve, "_reserve", None)
    monkeypatch.setattr(arena_reserve, "_largest_arena", 0)


def test_one_reserve_at_a_time_taken_whole_by_one_arena_that_fits(monkeypatch):
    monkeypatch.setattr(arena_reserve, "DEFAULT_RESERVE_BYTES", 1 << 20)
    fill = arena_reserve.reserve()
    assert arena_reserve.reserve() is None  # one pending already
    assert arena_reserve.take(600_000) is None  # not faulted in yet: never waited for
    fill()
    assert arena_reserve.take((1 << 20) + 1) is None and arena_reserve.take((1 << 19) - 1) is None
    buffer = arena_reserve.take(600_000)
    assert buffer.nbytes == 1 << 20 and buffer.ctypes.data % ALIGN == 0
    assert arena_reserve.take(600_000) is None  # one taker only
    assert arena_reserve.reserve() is not None  # taken: the next compile may make another


def test_memory_refused_leaves_no_reserve_and_the_next_compile_may_register_one(monkeypatch):
    def refuse(*args, **kwargs):
        raise OSError(12, "Cannot allocate memory")

    monkeypatch.setattr(arena_reserve, "DEFAULT_RESERVE_BYTES", 1 << 20)
    fill = arena_reserve.reserve()
    with monkeypatch.context() as refusing:
        refusing.setattr(arena_reserve.mmap, "mmap", refuse)
        fill()  # no exception on the background thread
    assert arena_reserve.take(1 << 20) is None
    fill = arena_reserve.reserve()  # not left "pending" forever
    assert fill is not None
    fill()
    assert arena_reserve.take(1 << 20).nbytes == 1 << 20


def _resident_pages(address: int, nbytes: int) -> int:
    """How many of the pages of [address, address + nbytes) are in memory now (``mincore``)."""
    pages = -(-nbytes // mmap.PAGESIZE)
    states = (ctypes.c_ubyte * pages)()
    libc = ctypes.CDLL(None, use_errno=True)
    assert libc.mincore(ctypes.c_void_p(address), ctypes.c_size_t(nbytes), states) == 0, ctypes.get_errno()
    return sum(state & 1 for state in states)


def test_the_reserve_pages_are_in_when_it_is_taken(monkeypatch):
    """Every page of the taken buffer is in memory (fresh memory of its size, a mapping of its own, has none). Asked
    of the kernel (``mincore``), not counted as this thread's page faults while writing it: after the forks other
    tests make, the interpreter's own heap faulted 1-6 times during such a write."""
    monkeypatch.setattr(arena_reserve, "DEFAULT_RESERVE_BYTES", 2 << 20)
    arena_reserve.reserve()()
    buffer = arena_reserve.take(2 << 20)
    assert _resident_pages(buffer.ctypes.data, buffer.nbytes) == buffer.nbytes // mmap.PAGESIZE
    memory = mmap.mmap(-1, 2 << 20)
    fresh = np.frombuffer(memory, dtype=np.uint8)
    assert _resident_pages(fresh.ctypes.data, fresh.nbytes) == 0
    fresh[::arena_reserve.PAGE_BYTES] = 1
    assert _resident_pages(fresh.ctypes.data, fresh.nbytes) == fresh.nbytes // mmap.PAGESIZE


def test_a_build_takes_a_reserve_that_fits_as_its_arena_and_computes_the_same(monkeypatch):
    fn = fuse_whole_function(layer_norm_graph(256, 1024))
    fresh = build_cpu_executable(fn, {})
    assert fresh.plan.arena_bytes > 0
    monkeypatch.setattr(arena_reserve, "DEFAULT_RESERVE_BYTES", 0)  # sized by the largest arena seen: fresh's
    monkeypatch.setattr(arena_reserve, "PAGE_BYTES", 64)  # (its 1 KiB: less than a page, a reserve's least size)
    arena_reserve.reserve()()
    built = build_cpu_executable(fn, {})
    assert built._arena_buffer.nbytes == fresh.plan.arena_bytes and arena_reserve._reserve is None
    rng = np.random.default_rng(0)
    inputs = [rng.standard_normal(shape).astype(np.float32) for shape in ((256, 1024), (1024,), (1024,))]
    for got, want in zip(built(*inputs), fresh(*inputs), strict=True):
        np.testing.assert_array_equal(got, want)


def test_a_reserve_nothing_took_is_let_go_when_code_is_bound(monkeypatch):
    fn = fuse_whole_function(layer_norm_graph(256, 1024))
    arena = build_cpu_executable(fn, {}).plan.arena_bytes
    monkeypatch.setattr(arena_reserve, "DEFAULT_RESERVE_BYTES", 4 * arena)  # more than twice the arena: not taken
    arena_reserve.reserve()()
    built = build_cpu_executable(fn, {"quick_first": "modules"})
    assert built.code_pending is not None and arena_reserve._reserve is not None
    built.bind_code()
    assert arena_reserve._reserve is None


def test_the_miss_path_starts_a_reserve_beside_the_helpers(monkeypatch):
    """``load_helpers_soon`` (the front end's miss path, before AOTAutograd traces) makes one, faulted in on its
    background thread; a second call while it is untaken makes none."""
    from neuroncc.executors.cpu.deferred_code import wait_for_pending
    from neuroncc.executors.cpu.helper_start import load_helpers_soon

    monkeypatch.setattr(arena_reserve, "DEFAULT_RESERVE_BYTES", 1 << 20)
    load_helpers_soon()
    wait_for_pending()
    reserve = arena_reserve._reserve
    assert reserve is not None and reserve.buffer is not None and reserve.buffer.nbytes == 1 << 20
    load_helpers_soon()
    wait_for_pending()
    assert arena_reserve._reserve is reserve
