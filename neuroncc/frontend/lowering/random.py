"""Lowerings of the generator ops (``neuroncc.philox_*``, see :mod:`neuroncc.frontend.lowering.random_ops`) to the IR.

``philox_seed`` is where a graph's randomness enters: the first one lowered gives the IR function its per-call
key parameter (``%rng_key``, 0-dim i64, the last parameter; :class:`~neuroncc.frontend.compiled.CompiledGraph`
fills it from PyTorch's generator on every call), and the ``j``-th one lowers to the state ``[rng_key,
j << 40]``. ``philox_uniform`` / ``philox_bits`` become the IR ops of the same names on the state's two words.
A state that arrives as a graph input (a backward regenerating a mask from the state its forward saved) is
read with two ``select`` ops. Which stream number the trace gave a ``philox_seed`` is not looked at: offsets
follow the graph's order, so equal graphs give equal IR (and one compile cache entry).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch.fx as fx

from neuroncc.errors import UnsupportedOpError
from neuroncc.frontend.lowering.context import LoweringContext, ir_dtype
from neuroncc.frontend.lowering.random_ops import OFFSET_SHIFT, PHILOX_BITS, PHILOX_SEED, PHILOX_UNIFORM
from neuroncc.ir import Builder, DType, TensorType, Value

I64 = TensorType((), DType.i64)


class GraphRandomness:
    """The random state of one imported graph: its per-call key parameter and the states made from it."""

    def __init__(self, builder: Builder):
        self.builder = builder
        self.key: Value | None = None
        self.streams = 0
        self.parts: dict[Value, tuple[Value, Value]] = {}  # state value -> (seed, offset) it was built from

    def new_state(self) -> Value:
        """The (seed, offset) pair of the next random op of the graph, as an i64 [2] value."""
        b = self.builder
        if self.key is None:
            self.key = b.param(I64, "rng_key")
        offset = b.op("full", shape=(), dtype=DType.i64, value=self.streams << OFFSET_SHIFT)
        self.streams += 1
        state = b.op("cat", b.op("reshape", self.key, shape=(1,)), b.op("reshape", offset, shape=(1,)), dim=0)
        self.parts[state] = (self.key, offset)
        return state

    def seed_and_offset(self, state: Value) -> tuple[Value, Value]:
        known = self.parts.get(state)
        if known is not None:
            return known
        if state.type.shape != (2,) or state.type.dtype is not DType.i64:
            raise UnsupportedOpError(f"a random state must be i64 [2] (seed, offset), got {state.type}")
        b = self.builder
        return b.op("select", state, dim=0, index=0), b.op("select", state, dim=0, index=1)


def _philox_seed(ctx: LoweringContext, node: fx.Node, stream: int, device: Any = None) -> Value:
    return ctx.randomness.new_state()


def _generator(name: str) -> Callable[..., Value]:
    def lower(ctx: LoweringContext, node: fx.Node, state: Any, size: Any, dtype: Any, word: int = 0) -> Value:
        seed, offset = ctx.randomness.seed_and_offset(ctx.value(state))
        shape = tuple(int(s) for s in size)
        count = 1
        for s in shape:
            count *= s
        if count > 1 << OFFSET_SHIFT:
            raise UnsupportedOpError(f"a random tensor of {count} elements (at most 2^{OFFSET_SHIFT} per op)")
        return ctx.emit(name, seed, offset, shape=shape, dtype=ir_dtype(dtype), word=int(word))
    return lower


RANDOM_LOWERINGS: dict[Any, Callable[..., Any]] = {
    PHILOX_SEED: _philox_seed,
    PHILOX_UNIFORM: _generator("philox_uniform"),
    PHILOX_BITS: _generator("philox_bits"),
}
