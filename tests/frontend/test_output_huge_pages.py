"""Large outputs of the direct call asked for transparent huge pages while fresh (``neuroncc/hardware/pages.py``):
glibc maps an allocation of 32 MiB or more anew each call, and its 4 KiB pages faulted in one by one cost RMSNorm
[8192, 1024]'s call 3-4x its time (session 28 rowgap28). The advice is a hint for memory never touched; memory in use
is left alone."""

from __future__ import annotations

import mmap
import sys
from pathlib import Path

import pytest
import torch

from neuroncc.hardware import pages

linux_thp = pytest.mark.skipif(not sys.platform.startswith("linux") or
                               not Path("/sys/kernel/mm/transparent_hugepage/enabled").exists(),
                               reason="transparent huge pages are a Linux feature")


def _vm_flags(address: int) -> list[str]:
    """The VmFlags of the mapping of this process that holds ``address`` (/proc/self/smaps)."""
    inside = False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        first = line.split()[0]
        if "-" in first and ":" not in first:
            low, high = (int(x, 16) for x in first.split("-"))
            inside = low <= address < high
        elif inside and first == "VmFlags:":
            return line.split()[1:]
    raise AssertionError(f"no mapping holds {address:#x}")


def _address(memory: mmap.mmap) -> int:
    import ctypes

    return ctypes.addressof(ctypes.c_char.from_buffer(memory))


@linux_thp
def test_fresh_memory_is_advised_and_touched_memory_is_not():
    nbytes = 4 * pages.HUGE_PAGE_BYTES
    fresh, touched = mmap.mmap(-1, nbytes), mmap.mmap(-1, nbytes)
    touched.write(b"\1" * nbytes)  # every page resident
    assert pages.advise_fresh_huge_pages(_address(fresh), nbytes)
    assert "hg" in _vm_flags(_address(fresh) + 2 * pages.HUGE_PAGE_BYTES)
    assert not pages.advise_fresh_huge_pages(_address(touched), nbytes)
    assert "hg" not in _vm_flags(_address(touched) + 2 * pages.HUGE_PAGE_BYTES)
    # A range one huge page long that starts just past a huge-page boundary holds no whole huge page. (Not simply
    # the mapping's start: kernels since 6.7 align large anonymous mappings on huge-page boundaries.)
    past_boundary = -(-_address(fresh) // pages.HUGE_PAGE_BYTES) * pages.HUGE_PAGE_BYTES + mmap.PAGESIZE
    assert not pages.advise_fresh_huge_pages(past_boundary, pages.HUGE_PAGE_BYTES)


@pytest.fixture
def advised(monkeypatch):
    """(address, bytes) of every output the direct calls made since ask huge pages for (the advice still runs)."""
    calls = []
    advise = pages.advise_fresh_huge_pages

    def recording(address, nbytes):
        calls.append((address, nbytes))
        return advise(address, nbytes)

    monkeypatch.setattr(pages, "advise_fresh_huge_pages", recording)
    return calls


def test_the_one_frame_call_asks_for_its_large_output(advised, compiled_graphs):
    torch._dynamo.reset()
    f = lambda x, w: torch.nn.functional.rms_norm(x, (x.shape[-1],), w, 1e-6)  # noqa: E731
    x, w = torch.randn(2048, 1024), torch.randn(1024)  # an 8 MiB output
    compiled = torch.compile(f, backend="neuron", dynamic=False)
    compiled(x, w)
    import neuroncc.executors.cpu.tiers as tiers

    tiers.OPTIMIZER.wait()
    kept = [compiled(x, w), compiled(x, w)]  # held: the call's output is fresh memory (output_reuse.py)
    assert compiled_graphs["inference"]._fast is not None  # settled: the one-frame call
    advised.clear()
    out = compiled(x, w)
    assert all(out.data_ptr() != k.data_ptr() for k in kept)
    torch.testing.assert_close(out, f(x, w), rtol=1e-5, atol=1e-5)
    assert advised and advised[-1] == (out.data_ptr(), out.numel() * 4)
    small = torch.compile(lambda a: a * 2.0, backend="neuron", dynamic=False)
    advised.clear()
    small(torch.randn(512, 1024))  # 2 MiB: below HUGE_OUTPUT_MIN_BYTES
    assert not advised


def test_launch_asks_for_each_large_output(advised, compiled_graphs):
    torch._dynamo.reset()
    f = lambda a: (a + 1.0, a * 2.0)  # noqa: E731  (two outputs: DirectCall.launch)
    a = torch.randn(2048, 1024)
    compiled = torch.compile(f, backend="neuron", dynamic=False)
    advised.clear()
    first, second = compiled(a)
    torch.testing.assert_close(first, a + 1.0)
    torch.testing.assert_close(second, a * 2.0)
    for out in (first, second):  # (each in kept memory one alias period longer: direct_call._kept_placed)
        assert any(address <= out.data_ptr() and out.data_ptr() + out.numel() * 4 <= address + nbytes
                   for address, nbytes in advised)


@linux_thp
def test_touched_memory_renewed_in_huge_pages_faults_them_in():
    nbytes = 4 * pages.HUGE_PAGE_BYTES
    touched = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)  # (private, as the heap)
    touched.write(b"\1" * nbytes)  # every small page resident
    middle = _address(touched) + 2 * pages.HUGE_PAGE_BYTES
    assert "hg" not in _vm_flags(middle)
    assert pages.renew_in_huge_pages(_address(touched), nbytes)
    assert "hg" in _vm_flags(middle)
    assert touched[2 * pages.HUGE_PAGE_BYTES] == 0  # its contents given back: zeroes when touched again
    past_boundary = -(-_address(touched) // pages.HUGE_PAGE_BYTES) * pages.HUGE_PAGE_BYTES + mmap.PAGESIZE
    assert not pages.renew_in_huge_pages(past_boundary, pages.HUGE_PAGE_BYTES)  # no whole huge page


def _two_outputs_renewing(monkeypatch) -> tuple[list[tuple[int, int]], object, torch.Tensor]:
    """A compiled graph of two large outputs (``DirectCall.launch``) whose fresh memory reads as touched already, so
    that it is renewed, each renewal recorded (address, bytes) instead of made; the list, the graph and its input."""
    renewed = []
    monkeypatch.setattr(pages, "advise_fresh_huge_pages", lambda address, nbytes: False)  # (as if touched)
    monkeypatch.setattr(pages, "renew_in_huge_pages", lambda address, nbytes: renewed.append((address, nbytes)))
    torch._dynamo.reset()
    f = lambda a: (a + 1.0, a * 2.0)  # noqa: E731
    return renewed, torch.compile(f, backend="neuron", dynamic=False), torch.randn(2048, 1024)


def test_launch_renews_a_large_output_the_heap_gave_back_touched(monkeypatch, compiled_graphs):
    """A multi-output graph's large output kept for later calls (a training step's gradient, written every step)
    whose memory came back from the heap in small pages already touched, which advice cannot change, is renewed
    in huge pages (``pages.renew_in_huge_pages``); memory advised while fresh is not."""
    renewed, compiled, a = _two_outputs_renewing(monkeypatch)
    first, second = compiled(a)
    for out in (first, second):
        assert any(address <= out.data_ptr() and out.data_ptr() + out.numel() * 4 <= address + nbytes
                   for address, nbytes in renewed)
    torch.testing.assert_close(first, a + 1.0)
    torch.testing.assert_close(second, a * 2.0)
    del first, second
    for _ in range(3):  # (the compiling call's outputs may stay held a while: fresh memory for the next)
        compiled(a)
    renewed.clear()
    for _ in range(3):
        compiled(a)  # the kept memory again: nothing renewed
    assert not renewed


def test_launch_renews_a_rings_memory_at_most_twice_when_the_caller_holds_every_output(monkeypatch, compiled_graphs):
    """A caller that holds its outputs past the ring's two makes fresh memory every call: renewing each would zero
    huge pages every call (more than the small pages cost), so a ring renews its first ``KEPT_OUTPUTS`` only."""
    from neuroncc.frontend.output_reuse import KEPT_OUTPUTS

    renewed, compiled, a = _two_outputs_renewing(monkeypatch)
    held = [compiled(a) for _ in range(6)]  # every output still held: fresh memory each call
    assert len(renewed) == 2 * KEPT_OUTPUTS  # (two outputs, each its own ring)
    for first, second in held:
        torch.testing.assert_close(first, a + 1.0)
        torch.testing.assert_close(second, a * 2.0)


def _one_output_renewing(monkeypatch) -> tuple[list[tuple[int, int]], object, torch.Tensor]:
    """As :func:`_two_outputs_renewing`, a graph of one large output (``DirectCall.outputs_call``, the one-frame call
    a roofline row and a served program take)."""
    renewed = []
    monkeypatch.setattr(pages, "advise_fresh_huge_pages", lambda address, nbytes: False)  # (as if touched)
    monkeypatch.setattr(pages, "renew_in_huge_pages", lambda address, nbytes: renewed.append((address, nbytes)))
    torch._dynamo.reset()
    f = lambda a: a * 2.0 + 1.0  # noqa: E731
    return renewed, torch.compile(f, backend="neuron", dynamic=False), torch.randn(2048, 1024)


def test_the_one_frame_call_renews_its_rings_memory_the_heap_gave_back_touched(monkeypatch, compiled_graphs):
    """Session 44 (serve44): the one-output call's ring renews a fresh output's touched heap memory in huge pages as
    ``launch`` does (the kernel alone's held output had huge pages, the call's ring small ones: RMSNorm's served call
    1.04x its time at 1 thread); memory kept and used again is not renewed, and a ring renews at most
    ``KEPT_OUTPUTS`` times when the caller holds every output."""
    from neuroncc.frontend.output_reuse import KEPT_OUTPUTS

    import neuroncc.executors.cpu.tiers as tiers

    renewed, compiled, a = _one_output_renewing(monkeypatch)
    compiled(a)
    tiers.OPTIMIZER.wait()  # (the one-frame call is the optimized build's)
    compiled(a)  # (the call that takes the optimized build runs it through ``launch``)
    renewed.clear()
    out = compiled(a)
    assert compiled_graphs["inference"]._fast is not None  # settled: the one-frame call
    assert len(renewed) == 1 and renewed[0][0] == out.data_ptr() and renewed[0][1] >= out.numel() * 4  # its ring's
    # first output: touched memory renewed
    torch.testing.assert_close(out, a * 2.0 + 1.0)
    del out
    for _ in range(3):
        torch.testing.assert_close(compiled(a), a * 2.0 + 1.0)
    count = len(renewed)
    assert count <= KEPT_OUTPUTS
    for _ in range(3):
        compiled(a)  # the kept memory again: nothing renewed
    assert len(renewed) == count
    held = [compiled(a) for _ in range(6)]  # every output held: fresh memory each call, renewed at most twice a ring
    assert len(renewed) == KEPT_OUTPUTS
    for out in held:
        torch.testing.assert_close(out, a * 2.0 + 1.0)
