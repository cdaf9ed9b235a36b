"""The random ops on NKI: Philox 4x32-10 written in NKI instructions, giving the reference's bits.

NKI has no 64-bit integers and no 32x32 -> 64-bit multiply, and a kernel argument holds int64 values as
int32. So the generator works on 16-bit *limbs*, each in a uint32 tile element:

* the host computes the op's **key schedule** from its seed and offset (:func:`key_schedule`: ordinary IR ops,
  run by a host step with exact int64 arithmetic): the offset's four 16-bit limbs and, for each of the ten
  rounds, the limbs of both round keys: an i64 ``[44]`` tensor whose values fit int32;
* on the device, ``nisa.iota`` writes each tile element's flat index in the op's result (the affine map of
  the result over the loop nest: partition ``p``, free indices and the loop variables), the counter is the
  offset plus that index (limb adds with carries), and each round's ``mulhilo`` multiplies 16-bit limbs
  (products < 2^32, exact in uint32) and recombines them; round keys enter as per-partition columns.

Every intermediate value is a non-negative integer below 2^32, so the instructions are exact whether the
engine wraps, saturates or widens (GpSimdE's native 32-bit integer path; the simulator computes in int64).
They are pinned to GpSimdE, which NKI's documentation gives exact 32-bit integer arithmetic (VectorE computes
arithmetic in float32). About 40 instructions per round: the cost model shows what a Philox tile costs.
"""

from __future__ import annotations

from neuroncc.codegen.nki.body import Body
from neuroncc.codegen.nki.instructions import Instr, Operand, Ref
from neuroncc.codegen.nki.philox_keys import GPSIMD, LIMB, MASK, WORDS
from neuroncc.ir import Op, Value
from neuroncc.ir.ops.random import PHILOX_M0, PHILOX_M1, PHILOX_ROUNDS, UNIFORM_BITS

class _Limbs:
    """Instruction helpers over uint32 tiles of one shape (numbers stand for constant limbs: 0 folds away)."""

    def __init__(self, body: Body, shape: tuple[int, ...], columns: Ref):
        self.body, self.shape, self.columns = body, shape, columns

    def column(self, word: int) -> Ref:
        """Key schedule word ``word`` as a per-partition ``(P, 1)`` operand."""
        c = self.columns
        return Ref(c.tile, (c.shape[0], 1), c.dtype, c.buffer, view=f"[:, {word}:{word + 1}]")

    def tile(self, base: str) -> Ref:
        return self.body.new(base, self.shape, "uint32")

    def scalar(self, base: str, data: Operand, op0: str, operand0: Operand, op1: str | None = None,
               operand1: Operand | None = None) -> Ref:
        args = {"data": data, "op0": op0, "operand0": operand0, "op1": op1, "operand1": operand1,
                "engine": GPSIMD}
        return self.body.add("tensor_scalar", self.tile(base), **args)

    def tensor(self, base: str, a: Operand, b: Operand, op: str) -> Operand:
        """``a <op> b`` (add or xor) of full tiles, per-partition columns and numbers."""
        if not isinstance(a, Ref) and not isinstance(b, Ref):
            return int({"nl.add": a + b, "nl.bitwise_xor": a ^ b}[op])
        if not isinstance(a, Ref) or (a.is_column and isinstance(b, Ref) and not b.is_column):
            a, b = b, a  # the full tile first: numbers and columns are tensor_scalar operands
        if not isinstance(b, Ref) and b == 0:
            return a if not a.is_column else self.body.broadcast(a, self.shape)
        if not isinstance(b, Ref) or b.is_column:
            return self.scalar(base, a, op, b)
        return self.body.add("tensor_tensor", self.tile(base), data1=a, data2=b, op=op, engine=GPSIMD)

    def add_carry(self, base: str, a: Operand, b: Operand) -> tuple[Operand, Operand]:
        """(a + b) mod 2^16 and its carry, for limbs (or a limb plus a carry)."""
        total = self.tensor(base, a, b, "nl.add")
        if not isinstance(total, Ref):
            return total & MASK, total >> 16
        return (self.scalar(f"{base}_lo", total, "nl.bitwise_and", MASK),
                self.scalar(f"{base}_carry", total, "nl.right_shift", 16))

    def mulhilo(self, multiplier: int, word: tuple[Operand, Operand]) -> tuple[tuple[Operand, ...], ...]:
        """The 64-bit product of constant ``multiplier`` and a word (low limb, high limb): its high word's and
        low word's limbs, from four 16x16-bit products."""
        low, high = word
        if not isinstance(low, Ref) and not isinstance(high, Ref) and low == 0 and high == 0:
            return (0, 0), (0, 0)
        m_lo, m_hi = multiplier & MASK, multiplier >> 16
        ll = self.scalar("ll", low, "nl.multiply", m_lo)
        lh_lo = self.scalar("lh_lo", low, "nl.multiply", m_hi, "nl.bitwise_and", MASK)
        hl_lo = self.scalar("hl_lo", high, "nl.multiply", m_lo, "nl.bitwise_and", MASK)
        mid = self.tensor("mid", self.tensor("mid", self.scalar("ll_hi", ll, "nl.right_shift", 16), lh_lo, "nl.add"),
                          hl_lo, "nl.add")  # < 3 * 2^16
        product_lo = (self.scalar("p_lo_lo", ll, "nl.bitwise_and", MASK),
                      self.scalar("p_lo_hi", mid, "nl.bitwise_and", MASK))
        hh = self.scalar("hh", high, "nl.multiply", m_hi)
        carry = self.tensor("t", self.scalar("lh_hi", low, "nl.multiply", m_hi, "nl.right_shift", 16),
                            self.scalar("hl_hi", high, "nl.multiply", m_lo, "nl.right_shift", 16), "nl.add")
        carry = self.tensor("t", carry, self.scalar("mid_hi", mid, "nl.right_shift", 16), "nl.add")
        total = self.tensor("t", carry, self.scalar("hh_lo", hh, "nl.bitwise_and", MASK), "nl.add")  # < 2^18
        product_hi = (self.scalar("p_hi_lo", total, "nl.bitwise_and", MASK),
                      self.tensor("p_hi_hi", self.scalar("hh_hi", hh, "nl.right_shift", 16),
                                  self.scalar("t_hi", total, "nl.right_shift", 16), "nl.add"))
        return product_hi, product_lo

    def xor3(self, base: str, a: Operand, b: Operand, key_word: int) -> Operand:
        return self.tensor(base, self.tensor(base, a, b, "nl.bitwise_xor"), self.column(key_word), "nl.bitwise_xor")


def emit_random(body: Body, op: Op, words_root: Value) -> Ref:
    """Emit ``op`` (philox_uniform, or philox_bits with i32) for this iteration of its stage; ``words_root``
    holds the op's key schedule in HBM (see the module docstring)."""
    layout = body.layout
    amap = layout.lift(body.stage.placements[op.results[0]])
    shape = layout.tile_shape(amap)
    if op.results[0].type.numel >= 1 << 31:
        raise body.ctx.fail(f"op '{op.name}' of {op.results[0].type.numel} elements: flat indices beyond int32")
    limbs = _Limbs(body, shape, _key_columns(body, words_root, shape[0]))
    word = _philox_word(body, limbs, _flat_index(body, amap, shape), op.attrs["word"])
    return FINISHES[op.name](body, limbs, op, word)


def _key_columns(body: Body, words_root: Value, partitions: int) -> Ref:
    """The key schedule as a ``(partitions, WORDS)`` int32 tile (loaded and broadcast once, in the prologue)."""
    key = ("philox_words", words_root, partitions)
    if key in body.cache:
        return body.cache[key]
    row = body.new("philox_words", (1, WORDS), "int32")
    source = body.ctx.hbm_name(words_root)

    def render(writer, names) -> None:
        writer.line(f"nisa.dma_copy(dst={row.tile}, src={source}.reshape((1, {WORDS})))")

    body.instrs.append(Instr("dma", row, {"loop_free": True}, render=render))
    body.cache[key] = body.broadcast(row, (partitions, WORDS))
    return body.cache[key]


def _flat_index(body: Body, amap, shape: tuple[int, ...]) -> Ref:
    """Each tile element's flat position in the op's result: ``offset + p * cm + sum(step_k * i_k)``."""
    layout = body.layout
    terms = [str(amap.offset)] if amap.offset else []
    for dim, coeff in enumerate(amap.coeffs):
        start = layout.indexes[dim].start
        if coeff and start != "0":
            terms.append(f"{start} * {coeff}" if coeff != 1 else start)
    pattern = [[amap.coeffs[d], layout.bounds[d]] if amap.coeffs[d] else [0, 1] for d in layout.tile_dims] or [[0, 1]]
    partition = layout.partition
    multiplier = amap.coeffs[partition] if partition is not None and shape[0] > 1 else 0
    flat = body.new("flat", shape, "int32")
    # the offset names loop variables: the record must stay in the loop (hoisting follows reads, and iota has none)
    body.instrs.append(Instr("iota", flat, {"pattern": pattern, "offset": " + ".join(terms) or "0",
                                            "channel_multiplier": multiplier, "loop_free": False}))
    return flat


def _philox_word(body: Body, limbs: _Limbs, flat: Ref, word: int) -> tuple[Operand, Operand]:
    """Output word ``word`` of the Philox block of each element: (low limb, high limb)."""
    c0_lo, carry = limbs.add_carry("c0_lo", limbs.scalar("flat_lo", flat, "nl.bitwise_and", MASK), limbs.column(0))
    c0_hi, carry = limbs.add_carry("c0_hi", limbs.tensor("c0_hi", limbs.scalar("flat_hi", flat, "nl.right_shift", 16),
                                                          carry, "nl.add"), limbs.column(1))
    c1_lo, carry = limbs.add_carry("c1_lo", carry, limbs.column(2))
    c1_hi = limbs.scalar("c1_hi", carry, "nl.add", limbs.column(3), "nl.bitwise_and", MASK)
    counter: list[tuple[Operand, Operand]] = [(c0_lo, c0_hi), (c1_lo, c1_hi), (0, 0), (0, 0)]
    for number in range(PHILOX_ROUNDS):
        keys = 4 + 4 * number
        hi0, lo0 = limbs.mulhilo(PHILOX_M0, counter[0])
        hi1, lo1 = limbs.mulhilo(PHILOX_M1, counter[2])
        counter = [
            (limbs.xor3("c0_lo", hi1[0], counter[1][0], keys), limbs.xor3("c0_hi", hi1[1], counter[1][1], keys + 1)),
            lo1,
            (limbs.xor3("c2_lo", hi0[0], counter[3][0], keys + 2), limbs.xor3("c2_hi", hi0[1], counter[3][1], keys + 3)),
            lo0,
        ]
    return counter[word]


def _finish_bits(body: Body, limbs: _Limbs, op: Op, word: tuple[Operand, Operand]) -> Ref:
    """philox_bits, i32 (i64 bits run on the host): the word as a two's-complement int32."""
    low, high = word
    dst = body.result(op)
    sign = limbs.scalar("sign", high, "nl.right_shift", 15, "nl.multiply", LIMB)  # 2^16 where bit 31 is set
    signed_high = body.add("tensor_tensor", body.new("signed_high", dst.shape, "int32"), data1=high, data2=sign,
                           op="nl.subtract", engine=GPSIMD)  # in [-2^15, 2^15)
    shifted = body.add("tensor_scalar", body.new("high_part", dst.shape, "int32"), data=signed_high,
                       op0="nl.multiply", operand0=LIMB, engine=GPSIMD)
    return body.add("tensor_tensor", dst, data1=shifted, data2=low, op="nl.add", engine=GPSIMD)


def _finish_uniform(body: Body, limbs: _Limbs, op: Op, word: tuple[Operand, Operand]) -> Ref:
    """philox_uniform: the word's top bits as a float on the dtype's grid in [0, 1)."""
    low, high = word
    dst = body.result(op)
    bits = UNIFORM_BITS[op.attrs["dtype"]]  # the word's top `bits` bits, times 2^-bits
    if bits > 16:
        top = limbs.tensor("top", limbs.scalar("top_hi", high, "nl.left_shift", bits - 16),
                           limbs.scalar("top_lo", low, "nl.right_shift", 32 - bits), "nl.add")
    else:
        top = limbs.scalar("top", high, "nl.right_shift", 16 - bits)
    as_float = body.copy(top, body.new("top_f", dst.shape, "float32"))  # < 2^24: exact
    return body.add("tensor_scalar", dst, data=as_float, op0="nl.multiply", operand0=2.0 ** -bits)


#: How each random op turns its Philox word into its result.
FINISHES = {"philox_bits": _finish_bits, "philox_uniform": _finish_uniform}


__all__ = ["emit_random"]
