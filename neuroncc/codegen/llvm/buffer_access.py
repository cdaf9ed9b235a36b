"""Reads and writes of a kernel's buffers at an element index, as the kernel emitter makes them: a mixin of
:class:`~neuroncc.codegen.llvm.emit.KernelEmitter` (as :class:`~neuroncc.codegen.llvm.indexing.IndexArithmetic`
is), which supplies the builder (``b``), the buffers' pointers (``ptrs``), the constant buffers' data, the pair
of 16-bit elements being emitted (``_pair``, ``pairs.py``) and the index arithmetic."""

from __future__ import annotations

from typing import Any

from llvmlite import ir

from neuroncc.codegen.llvm.bf16_words import rounded_word
from neuroncc.codegen.llvm.context import Index
from neuroncc.codegen.llvm.pairs import WORD_ALIGN, half_of, halfwords, word_of
from neuroncc.codegen.llvm.scalars import I16, I32, I64, constant, load, storage_type, store
from neuroncc.codegen.llvm.views import Layout
from neuroncc.codegen.llvm.word_copies import copy_row


class BufferAccess:
    """Element loads and stores through a :class:`Layout`, both halves of a 16-bit pair as one 32-bit word."""

    def _offset(self, layout: Layout, idx: Index) -> Any:
        """The element offset of ``idx`` in ``layout``'s buffer."""
        offset: Any = layout.offset
        for i, size, stride in zip(idx, layout.shape, layout.strides):
            if size != 1 and stride != 0:
                offset = self.add(offset, self.mul(i, stride))
        return offset

    def address(self, layout: Layout, idx: Index) -> ir.Value:
        return self.b.gep(self.ptrs[layout.arg], [self.ir_index(self._offset(layout, idx))],
                          source_etype=storage_type(layout.dtype), inbounds=True)

    def pair_half(self, i: Any) -> int | None:
        return None if self._pair is None else self._pair.half(self.form(i))

    def _pair_half(self, layout: Layout, idx: Index) -> int | None:
        """Which half of the current pair ``layout`` is read or written at by ``idx`` (None: not paired)."""
        return self.pair_half(idx[-1]) if halfwords(layout) else None

    def load(self, layout: Layout, idx: Index) -> ir.Value:
        data = self._constant_data.get(layout.arg)
        if data is not None:
            offset = self._offset(layout, idx)
            if isinstance(offset, int):  # a constant read at a constant index is that element
                return constant(layout.dtype, data.array.reshape(-1)[offset].item())
            if layout.dtype.is_bool:
                self.wish_unrolled(self.form(offset))
        half = self._pair_half(layout, idx)
        if half is not None:  # both halves of the pair from one 32-bit load (``pairs.py``)
            assert self._pair is not None
            even = list(idx[:-1]) + [self._pair.even]
            word = self.memoized(("pair", layout.arg, self.form(self._offset(layout, even))),
                                 lambda: self.b.load(self._word_address(layout, even), typ=I32, align=WORD_ALIGN))
            return half_of(self.b, word, half)
        return load(self.b, self.address(layout, idx), layout.dtype)

    def _word_address(self, layout: Layout, even: Index) -> ir.Value:
        """Where a pair's word is read: its row's copy where the stage reads one (``word_copies.py``), else its
        buffer."""
        copies = self._word_copies
        if copies is None or layout != copies.words or self._stage_number != copies.reader:
            return self.address(layout, even)
        row = copy_row(self, copies, self._offset(layout, [*even[:-1], 0]))
        return self.b.gep(row, [self.ir_index(even[-1])], source_etype=I16, inbounds=True)

    def store(self, layout: Layout, idx: Index, value: ir.Value) -> ir.Instruction | None:
        half = self._pair_half(layout, idx)
        if half is None:
            return store(self.b, value, self.address(layout, idx), layout.dtype)
        assert self._pair is not None
        even = list(idx[:-1]) + [self._pair.even]
        self._store_half(("pair", layout.arg, self.form(self._offset(layout, even))), self.address(layout, even),
                         value, half)
        return None

    def _store_half(self, key: Any, even_pointer: ir.Value, value: ir.Value, half: int) -> None:
        """Store 16-bit ``value`` as ``half`` of the current pair at the word of ``even_pointer`` (``key``: the
        buffer and the word's offset): the even half waits for the odd one, which stores both as one word."""
        assert self._pair is not None
        pending = self._pair.pending
        if half == 0:
            pending[key] = (even_pointer, value)
        elif key in pending:
            even = pending.pop(key)[1]
            word_pointer = self.b.bitcast(even_pointer, I32.as_pointer())  # (a row buffer element: typed i16*)
            word = rounded_word(self.b, even, value, self.target) or word_of(self.b, even, value)
            self.b.store(word, word_pointer, align=WORD_ALIGN)
        else:
            self.b.store(value, self.b.gep(even_pointer, [ir.Constant(I64, 1)], source_etype=I16, inbounds=True))

