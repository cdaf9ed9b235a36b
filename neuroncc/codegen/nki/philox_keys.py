"""The host side of the random ops on NKI: each op's key schedule, and which ops the device computes.

See :mod:`neuroncc.codegen.nki.philox` for the device side. The key schedule is ordinary IR (a host step runs
it with the reference interpreter's exact int64 arithmetic), so this module does not import the emitter.
"""

from __future__ import annotations

import numpy as np

from neuroncc.ir import Builder, DenseAttr, DType, Op, TensorType, Value
from neuroncc.ir.ops.random import PHILOX_ROUNDS, PHILOX_W0, PHILOX_W1

#: Words of the key schedule: the offset's 4 limbs, then per round (k0 low, k0 high, k1 low, k1 high).
WORDS = 4 + 4 * PHILOX_ROUNDS
LIMB = 1 << 16
MASK = LIMB - 1
GPSIMD = "nisa.engine.gpsimd"
#: Tiles a Philox stage keeps live at once, for the stage's SBUF budget (counted like operands).
LIVE_TILES = 24

I64 = TensorType((), DType.i64)


def key_schedule(seed: Value, offset: Value) -> tuple[list[Op], Value]:
    """IR ops computing the i64 ``[WORDS]`` key schedule of a random op from its seed and offset (host side)."""
    b = Builder("philox_key_schedule")
    s, o = b.param(I64, "seed"), b.param(I64, "offset")

    def const(value: int) -> Value:
        return b.op("full", shape=(), dtype=DType.i64, value=value)

    def floor_div(x: Value, n: int) -> Value:
        return b.op("div", x, const(n), rounding_mode="floor")

    two32 = 1 << 32
    seed_lo = b.op("remainder", s, const(two32))
    seed_hi = b.op("remainder", floor_div(s, two32), const(two32))
    rounds = b.op("iota", length=PHILOX_ROUNDS, dtype=DType.i64)
    limbs = []
    for start, weyl in ((seed_lo, PHILOX_W0), (seed_hi, PHILOX_W1)):
        key = b.op("remainder", b.op("add", start, b.op("mul", rounds, const(weyl))), const(two32))
        limbs += [b.op("remainder", key, const(LIMB)), floor_div(key, LIMB)]
    keys = b.op("reshape", b.op("cat", *(b.op("unsqueeze", limb, dim=1) for limb in limbs), dim=1),
                shape=(4 * PHILOX_ROUNDS,))
    places = b.op("constant", value=DenseAttr(np.array([1, 1 << 16, 1 << 32, 1 << 48], dtype=np.int64), DType.i64))
    offset_limbs = b.op("remainder", b.op("div", o, places, rounding_mode="floor"), const(LIMB))
    words = b.op("cat", offset_limbs, keys, dim=0)
    fn = b.build([words])
    mapping = {s: seed, o: offset}
    ops = [Op(op.name, tuple(mapping.get(v, v) for v in op.operands), op.results, op.attrs) for op in fn.ops]
    return ops, words


def on_device(op: Op) -> bool:
    """Whether the NKI device computes ``op`` (i64 bits do not fit the int32 the device holds int64 in)."""
    return op.results[0].type.dtype is not DType.i64



__all__ = ["GPSIMD", "LIMB", "LIVE_TILES", "MASK", "WORDS", "key_schedule", "on_device"]
