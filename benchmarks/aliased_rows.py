"""``bench_cross_entropy.py --memory``: the row's logits on memory that holds only some of their rows, so that the same
loops run with x resident in the L2 or the L3 instead of streamed from DRAM (session 35 xent35).

``aliased(x, rows)`` maps the physical pages of ``x``'s first ``rows`` rows again after them, over and over, into
one contiguous range of virtual memory of ``x``'s size (a ``memfd`` mapped at fixed places): the kernel reads the
same addresses, strides and pages per row as on a plain array (its prefetches and TLB walks alike), but its data
is ``rows`` rows: 4 rows of 32000 float32 (512 KB) stay in the 1 MiB L2, 128 rows (16 MB) in the L3. The values
repeat every ``rows`` rows. Linux only; the rows must fill whole 4 KiB pages (4 x 128000 bytes = 125 pages)."""

from __future__ import annotations

import ctypes
import mmap
import os

import numpy as np

#: ``--memory``'s names -> rows of physical memory (0: the plain array itself)
MEMORIES = {"dram": 0, "l3": 128, "l2": 4}
_MAP_FIXED = 0x10
_PROT_NONE = 0
_LIBC = ctypes.CDLL(None, use_errno=True)
_LIBC.mmap.restype = ctypes.c_void_p
_LIBC.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
_KEPT: list[int] = []  # (the mappings live as long as the process)


def aliased(x: np.ndarray, rows: int) -> np.ndarray:
    """An array equal in shape and dtype to ``x`` whose rows k, k + ``rows``, k + 2 ``rows``, ... are one physical
    row, holding ``x``'s row k (``x``'s rows must be a whole multiple of ``rows``)."""
    if not rows:
        return x
    size, total = rows * x[0].nbytes, x.nbytes
    if size % mmap.PAGESIZE or total % size:
        raise ValueError(f"{rows} rows of {x[0].nbytes} bytes are not whole pages or do not divide the array")
    fd = os.memfd_create("aliased-rows")
    os.ftruncate(fd, size)
    base = _LIBC.mmap(None, total, _PROT_NONE, mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, -1, 0)
    for k in range(total // size):
        where = base + k * size
        if _LIBC.mmap(where, size, mmap.PROT_READ | mmap.PROT_WRITE, mmap.MAP_SHARED | _MAP_FIXED, fd, 0) != where:
            raise OSError(ctypes.get_errno(), "mmap of the aliased rows failed")
    os.close(fd)
    _KEPT.append(base)
    buffer = (ctypes.c_char * total).from_address(base)
    array = np.frombuffer(buffer, dtype=x.dtype).reshape(x.shape)
    array[:rows] = x[:rows]
    return array
