"""Transparent huge pages for a large output that has never been touched.

glibc maps every allocation of 32 MiB or more fresh (its dynamic mmap threshold stops rising there), so under its
default settings a compiled call's float32 [8192, 1024] output is new memory each call, and the kernel writing it
faults its 8192 small pages in one by one, each zeroed by the kernel (RMSNorm's row through ``torch.compile`` on
Zen 3: 8193 faults and 16 ms a call against 1.9 ms with the memory reused; docs/performance-history.md, session 28
rowgap28). Asked for huge pages before its first touch, the same memory faults in 2 MiB at a time: 529 faults, 4.4
ms at 2 threads and 6.3 against 21.5 ms at 1. Memory already touched (a heap block reused, as under the benchmarks'
``MALLOC_MMAP_THRESHOLD_``) is left alone: advice there would only split the heap's mapping and let the kernel's
background collapse move its pages later. Memory that is kept and written every call (a training step's gradient
in its output ring) is the exception: :func:`renew_in_huge_pages` gives its small pages back and faults it in
huge pages once, ~8 ms for 65 MB, where cross-entropy's backward wrote it in 0.82-0.84 of the time at 1 thread on
Zen 4 (session 42 xent42: each 4 KiB page of its non-temporal stores a TLB miss, a nested walk in a KVM guest).
"""

from __future__ import annotations

import ctypes
import sys

#: The huge page size of x86-64 and arm64 Linux (transparent huge pages of anonymous memory).
HUGE_PAGE_BYTES = 2 << 20
#: Outputs of at least this many bytes are asked for huge pages when fresh: two whole huge pages at least after the
#: unaligned ends are left out.
HUGE_OUTPUT_MIN_BYTES = 3 * HUGE_PAGE_BYTES
_MADV_HUGEPAGE = 14
_MADV_DONTNEED = 4
_SMALL_PAGE_BYTES = 4096


def _libc() -> object | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.PyDLL(None, use_errno=True)  # the GIL held through the two short system calls (_RESIDENT)
        libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]
        libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    except (OSError, AttributeError):
        return None
    return libc


_LIBC = _libc()
_RESIDENT = ctypes.create_string_buffer(1)  # mincore's answer for one page (PyDLL calls keep the GIL: one buffer)


def advise_fresh_huge_pages(address: int, nbytes: int) -> bool:
    """Ask for transparent huge pages on the whole 2 MiB pages inside ``[address, address + nbytes)`` when the first
    of them is not resident yet (memory just mapped, never touched); True when advised. Nothing on other systems, on
    memory already touched, or where the kernel refuses (no transparent huge pages): a hint, never an error."""
    low = -(-address // HUGE_PAGE_BYTES) * HUGE_PAGE_BYTES
    high = (address + nbytes) // HUGE_PAGE_BYTES * HUGE_PAGE_BYTES
    if _LIBC is None or high - low < HUGE_PAGE_BYTES:
        return False
    if _LIBC.mincore(low, _SMALL_PAGE_BYTES, _RESIDENT) != 0 or _RESIDENT.raw[0] & 1:
        return False
    return _LIBC.madvise(low, high - low, _MADV_HUGEPAGE) == 0


_HUGE_ON_ADVICE: list[bool] = []


def _huge_pages_on_advice() -> bool:
    """Whether the system gives transparent huge pages to memory advised so (its setting ``always`` or ``madvise``,
    not ``never``): else the renewed memory would fault back in small pages, each zeroed (read once)."""
    if not _HUGE_ON_ADVICE:
        try:
            with open("/sys/kernel/mm/transparent_hugepage/enabled") as setting:
                _HUGE_ON_ADVICE.append("[never]" not in setting.read())
        except OSError:
            _HUGE_ON_ADVICE.append(False)
    return _HUGE_ON_ADVICE[0]


def renew_in_huge_pages(address: int, nbytes: int) -> bool:
    """Give the whole 2 MiB pages inside ``[address, address + nbytes)`` back to the system and ask for transparent
    huge pages there, so that the next writes fault them in as huge pages (zeroed): for a large output's memory
    that will be written again and again (an output ring's storage, ``direct_call``) where it came back from the
    heap already touched in small pages, which :func:`advise_fresh_huge_pages` leaves alone. Its contents are
    lost: only for memory about to be written whole. True when advised; False where nothing was done (no whole
    huge page, other systems, transparent huge pages off, or the kernel refused)."""
    low = -(-address // HUGE_PAGE_BYTES) * HUGE_PAGE_BYTES
    high = (address + nbytes) // HUGE_PAGE_BYTES * HUGE_PAGE_BYTES
    if _LIBC is None or high - low < HUGE_PAGE_BYTES or not _huge_pages_on_advice():
        return False
    if _LIBC.madvise(low, high - low, _MADV_HUGEPAGE) != 0:
        return False
    return _LIBC.madvise(low, high - low, _MADV_DONTNEED) == 0


__all__ = ["HUGE_OUTPUT_MIN_BYTES", "HUGE_PAGE_BYTES", "advise_fresh_huge_pages", "renew_in_huge_pages"]
