"""A large output's memory used again once its caller has dropped every reference to it.

Under glibc's default settings an allocation of 32 MiB or more is mapped anew each call, and the kernel writing
it faults its pages in and the system zeroes each (session 28 rowgap28): LayerNorm [8192, 1024]'s call through
``torch.compile`` took 8.2 ms against its kernel's 2.8 at 2 threads on session 32's Intel Xeon VM (eager 8.8,
Inductor 10.1: they pay it too). A compiled graph that gets its memory back when the caller drops an output writes
the same pages every call, as a caller would with ``out=``: 3.2 ms (docs/performance-history.md, session 32 call32).
Smaller outputs come from glibc's heap, already faulted in: there it changed nothing measurable.

What the caller sees is unchanged: each call returns a new tensor (its own ``TensorImpl``, no ``_base``, resizable
storage allocated by torch's CPU allocator, an inference tensor exactly under ``torch.inference_mode``; made in one
call over the kept storage, it shares that storage's version counter with the graph's own tensor over it, so its
``_version`` counts the in-place writes to earlier outputs in that memory), and memory is used again only when
nothing holds its storage: no
tensor or view (``_storage_Use_Count`` counts each ``TensorImpl``, autograd's saved tensors, numpy arrays and DLPack
exports through the tensor they keep), no Python storage object (once made, torch keeps it with the storage and
it counts too: such a storage is never used again), and its data pointer unchanged (``resize_`` to a larger size
and ``share_memory_`` move it). What a caller can tell apart is only a ``StorageWeakRef`` to a dropped output's
storage, which stays alive while the graph keeps it: as memory an allocator caches.

A graph keeps at most :data:`KEPT_OUTPUTS` of its outputs' storages: a loop ``y = f(x)`` still holds the previous
output while the next call runs, so two are needed for every call to find one free. And the process keeps at most
:data:`KEPT_BYTES_LIMIT` bytes of them over all its graphs, the storages kept longest ago given up first: a server
compiling a graph per input shape would otherwise hold two dropped outputs of every shape it ever saw.
"""

from __future__ import annotations

import threading
from collections import OrderedDict, deque

import torch

#: storages a graph keeps: the one its caller still holds during the call, and the one it dropped before
KEPT_OUTPUTS = 2
#: bytes of output storages the process keeps over all its graphs (an output larger than this is never kept)
KEPT_BYTES_LIMIT = 1 << 30
_USE_COUNT = torch._C._storage_Use_Count
_STORAGE = torch._C._storage_address  # the StorageImpl's address: no Python storage object made
_EMPTY = torch.empty
_INFERENCE = torch.is_inference_mode_enabled
#: a new plain tensor over another's storage, sizes and strides in one ATen call (its own ``TensorImpl``, no
#: ``_base``, resizable, sharing the version counter; a torch function or dispatch mode sees it, as it sees a fresh
#: output's ``empty_strided``)
_DETACH = torch.Tensor.detach


class _Kept:
    __slots__ = ("keeper", "dtype", "inference", "storage", "address", "nbytes", "given_up")

    def __init__(self, tensor: torch.Tensor):
        #: our own tensor over the output's storage (never handed out): it alone holds the storage once the
        #: caller has dropped every reference
        self.keeper = torch.empty(0, dtype=tensor.dtype).set_(tensor)
        self.dtype = tensor.dtype
        self.inference = self.keeper.is_inference()  # (kept under ``torch.inference_mode``)
        self.storage = _STORAGE(self.keeper)
        self.address = self.keeper.data_ptr()
        # (not untyped_storage().nbytes(): a Python storage object, once made, counts as a holder for good)
        self.nbytes = (tensor.storage_offset() + tensor.numel()) * tensor.element_size()
        self.given_up = False  # set once the process's limit dropped it: never used again


class _KeptBytes:
    """Every ring's entries in the order they were kept, and their bytes: :meth:`add` gives up the oldest while the
    total is over :data:`KEPT_BYTES_LIMIT`."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: OrderedDict[int, tuple[_Kept, deque[_Kept]]] = OrderedDict()
        self.total = 0

    def add(self, entry: _Kept, ring: deque[_Kept]) -> None:
        with self._lock:
            self._entries[id(entry)] = (entry, ring)
            self.total += entry.nbytes
            while self.total > KEPT_BYTES_LIMIT and self._entries:
                self._drop(*self._entries.popitem(last=False)[1])

    def discard(self, entry: _Kept) -> None:
        """``entry`` left its ring (pushed out by a newer one, or moved by its caller)."""
        with self._lock:
            if self._entries.pop(id(entry), None) is not None:
                self.total -= entry.nbytes

    def _drop(self, entry: _Kept, ring: deque[_Kept]) -> None:
        self.total -= entry.nbytes
        entry.given_up = True  # (a call that popped it meanwhile sees this and neither uses nor returns it)
        try:
            ring.remove(entry)
        except ValueError:  # popped by a call on another thread at this moment
            pass


_KEPT_BYTES = _KeptBytes()


class OutputRing:
    """The storages of a graph's last outputs of one shape, strides and dtype: :meth:`take` gives a new tensor over
    one nobody else holds (or None), :meth:`keep` records a fresh output. Safe against calls on several threads:
    an entry is popped (one atomic deque operation) before it is checked, so two calls never take the same one."""

    def __init__(self) -> None:
        self._kept: deque[_Kept] = deque(maxlen=KEPT_OUTPUTS)
        #: fresh storages of this ring whose memory its user renewed (``direct_call._kept_placed``: huge pages)
        self.renewals = 0

    def take(self) -> torch.Tensor | None:
        """A new tensor over a kept storage that only this ring holds (the entry goes back as the newest), or None
        when every kept storage is still in use."""
        kept = self._kept
        for _ in range(len(kept)):
            try:
                entry = kept.popleft()
            except IndexError:  # another thread's call took the rest
                return None
            if entry.given_up:
                continue  # (the process's limit dropped it while it was popped here)
            if _USE_COUNT(entry.storage) != 1 or entry.keeper.data_ptr() != entry.address:
                if entry.keeper.data_ptr() == entry.address:
                    kept.append(entry)  # still the caller's: back at the end, the oldest tried first next time
                else:
                    _KEPT_BYTES.discard(entry)  # moved (resized larger, shared): dropped, never written again
                continue
            if entry.inference or _INFERENCE():
                # an inference tensor exactly when a fresh output would be one: made and set_ in this mode
                out = _EMPTY(0, dtype=entry.dtype).set_(entry.keeper)
            else:
                # one ATen call instead of two from Python (empty, set_): each is a cold path after a large kernel,
                # ~30 us together at 1 thread on Zen 4 (performance-history.md, session 33 call33); ``detach`` rather
                # than ``Tensor._make_subclass`` (the same detach behind a seven-argument parser and a stashed
                # dispatch-mode stack): 3-10 us less a call there (session 35 call35)
                out = _DETACH(entry.keeper)
            kept.append(entry)
            return out
        return None

    def drop(self, tensor: torch.Tensor) -> None:
        """Forget the kept storage under ``tensor`` (from :meth:`take`), which its caller refused (4K-aliased with
        the call's inputs: ``direct_call``). Kept, it would be taken first again by every later call on those
        inputs, refused again, and the fresh output made instead pushed out of the full ring: a fresh allocation
        each call (page faults where glibc maps large outputs anew)."""
        address = tensor.data_ptr()
        for entry in list(self._kept):
            if entry.address == address:
                try:
                    self._kept.remove(entry)
                except ValueError:  # taken by a call on another thread at this moment
                    return
                _KEPT_BYTES.discard(entry)
                return

    def keep(self, tensor: torch.Tensor) -> None:
        """Record ``tensor``'s storage (a fresh output, about to be handed out): the ring's oldest entry is dropped
        when the ring is full, and the process's oldest while its kept bytes are over :data:`KEPT_BYTES_LIMIT`."""
        entry = _Kept(tensor)
        if entry.nbytes > KEPT_BYTES_LIMIT:
            return
        if len(self._kept) == KEPT_OUTPUTS:
            try:
                _KEPT_BYTES.discard(self._kept.popleft())
            except IndexError:  # taken by a call on another thread at this moment
                pass
        self._kept.append(entry)
        _KEPT_BYTES.add(entry, self._kept)

    def __del__(self) -> None:
        for entry in list(self._kept):
            _KEPT_BYTES.discard(entry)


def kept_bytes() -> int:
    """Bytes of output storages the process's graphs keep now (at most :data:`KEPT_BYTES_LIMIT`)."""
    return _KEPT_BYTES.total


__all__ = ["KEPT_BYTES_LIMIT", "KEPT_OUTPUTS", "OutputRing", "kept_bytes"]
