"""Random numbers in traced graphs: PyTorch's random ops rewritten onto a counter-based generator.

AOTAutograd traces with the decompositions below, which rewrite every random aten op (``native_dropout``,
``rand``, ``randn``, ``*_like``, ``bernoulli``, ``randint``, ``normal``, ``uniform``, ``exponential``, ``cauchy``,
``log_normal``, ``geometric``, ``random_``, ``randperm``, ``multinomial``, training ``rrelu``) into three ops of the ``neuroncc`` torch library:

    state = neuroncc.philox_seed(stream)                 int64 [2]: (seed, offset) of one random op
    u     = neuroncc.philox_uniform(state, size, dtype, word)   Philox 4x32-10 uniforms, as the IR op
    bits  = neuroncc.philox_bits(state, size, dtype, word)      Philox random bits, as the IR op

plus ordinary aten math (Box-Muller for normals, ``u >= p`` for dropout masks, a remainder for randint, a sort
of random keys for randperm). The ``philox_*`` ops are pure functions of ``state``, so AOTAutograd's
partitioner may save their results for the backward or recompute them there from the saved ``state`` (8
bytes x 2): :func:`regenerate_random_in_backward` asks for the second. ``philox_seed`` is the only
nondeterministic op; ``stream`` is a number unique to each traced random op that keeps CSE from merging two of
them (its value means nothing otherwise: the importer ignores it, so it never reaches the IR or a cache key).

At run time every ``philox_seed`` of one compiled graph reads the same per-call 64-bit key, drawn from
PyTorch's default generator when the graph is called (``CompiledGraph``), with offset ``j << 40`` for the
graph's ``j``-th random op: disjoint counter ranges. So ``torch.manual_seed`` makes compiled runs
reproducible, every call draws fresh numbers, and ``torch.get_rng_state``/``set_rng_state`` replay them.

Eager implementations (the numpy reference, so eager and compiled bits agree for a given state) let the ops
run outside neuroncc too: under ``fallback="cpu"`` pieces, in ``make_fx`` tests.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from torch._decomp import get_decompositions
from torch.utils.checkpoint import CheckpointPolicy  # the partitioners module imports Inductor (~2 s)

from neuroncc.frontend.imported import draw_key
from neuroncc.ir import REGISTRY, DType

aten = torch.ops.aten

#: Offsets of the random ops of one graph are ``j << OFFSET_SHIFT``: each op owns 2^40 counters (elements).
OFFSET_SHIFT = 40

_LIBRARY = torch.library.Library("neuroncc", "DEF")
_LIBRARY.define("philox_seed(int stream, Device? device=None) -> Tensor", tags=(torch.Tag.nondeterministic_seeded,))
_LIBRARY.define("philox_uniform(Tensor state, SymInt[] size, ScalarType dtype, int word=0) -> Tensor")
_LIBRARY.define("philox_bits(Tensor state, SymInt[] size, ScalarType dtype, int word=0) -> Tensor")

_streams = itertools.count()

#: The torch dtype -> IR dtype map without importing the lowering context (numpy reference's uniform widths).
_UNIFORM_IR = {torch.float32: "f32", torch.float64: "f32", torch.bfloat16: "bf16", torch.float16: "f16"}


def _philox_seed(stream: int, device: torch.device | None = None) -> torch.Tensor:
    return torch.tensor([draw_key(), 0], dtype=torch.int64, device=device)


def _reference(name: str, state: torch.Tensor, size: Sequence[int], dtype: torch.dtype, word: int) -> torch.Tensor:
    seed, offset = (int(v) for v in state.tolist())
    ir_dtype = DType(_UNIFORM_IR[dtype]) if dtype.is_floating_point else DType.i64 if dtype is torch.int64 else DType.i32
    array = REGISTRY.get(name).reference(np.int64(seed), np.int64(offset), tuple(size), ir_dtype, word)
    result = torch.from_numpy(np.ascontiguousarray(array))
    return result.to(device=state.device, dtype=dtype)


def _philox_uniform(state, size, dtype, word=0):
    return _reference("philox_uniform", state, size, dtype, word)


def _philox_bits(state, size, dtype, word=0):
    return _reference("philox_bits", state, size, dtype, word)


_LIBRARY.impl("philox_seed", _philox_seed, "CompositeExplicitAutograd")
_LIBRARY.impl("philox_uniform", _philox_uniform, "CompositeExplicitAutograd")
_LIBRARY.impl("philox_bits", _philox_bits, "CompositeExplicitAutograd")


@torch.library.register_fake("neuroncc::philox_seed")
def _philox_seed_fake(stream, device=None):
    return torch.empty((2,), dtype=torch.int64, device=device)


@torch.library.register_fake("neuroncc::philox_uniform")
def _philox_uniform_fake(state, size, dtype, word=0):
    torch._check(dtype.is_floating_point, lambda: f"philox_uniform makes floats, not {dtype}")
    return torch.empty(tuple(size), dtype=dtype, device=state.device)


@torch.library.register_fake("neuroncc::philox_bits")
def _philox_bits_fake(state, size, dtype, word=0):
    torch._check(dtype in (torch.int32, torch.int64), lambda: f"philox_bits makes int32 or int64, not {dtype}")
    return torch.empty(tuple(size), dtype=dtype, device=state.device)


PHILOX_SEED = torch.ops.neuroncc.philox_seed.default
PHILOX_UNIFORM = torch.ops.neuroncc.philox_uniform.default
PHILOX_BITS = torch.ops.neuroncc.philox_bits.default


# ---- the distributions, written over the generator -----------------------------------------------------


def _state(device: torch.device | None) -> torch.Tensor:
    """A random op's (seed, offset), on the device its numbers are made on (a ``neuron`` graph's tensors all
    live there; ``None``: the default device)."""
    return PHILOX_SEED(next(_streams), device=device)


def _uniform(size: Sequence[int], dtype: torch.dtype = torch.float32, *, state: torch.Tensor | None = None,
             word: int = 0, device: torch.device | None = None) -> torch.Tensor:
    return PHILOX_UNIFORM(_state(device) if state is None else state, list(size), dtype, word)


def _standard_normal(size: Sequence[int], device: torch.device | None = None) -> torch.Tensor:
    """Box-Muller on two words of one block, in float32: sqrt(-2 ln(1 - u1)) cos(2 pi u2) (1 - u1 > 0)."""
    state = _state(device)
    u1, u2 = _uniform(size, state=state, word=0), _uniform(size, state=state, word=1)
    return torch.sqrt(torch.log1p(-u1) * -2.0) * torch.cos(u2 * (2.0 * math.pi))


def _float_dtype(dtype: torch.dtype | None) -> torch.dtype:
    return torch.get_default_dtype() if dtype is None else dtype


def _rand(size, *, generator=None, dtype=None, layout=None, device=None, pin_memory=None):
    if generator is not None:
        return NotImplemented
    dtype = _float_dtype(dtype)
    return _uniform(size, dtype, device=device) if dtype.is_floating_point else NotImplemented


def _randn(size, *, generator=None, dtype=None, layout=None, device=None, pin_memory=None):
    if generator is not None:
        return NotImplemented
    return _standard_normal(size, device).to(_float_dtype(dtype))


def _like(fn: Callable[..., torch.Tensor]) -> Callable[..., Any]:
    def like(self, *, generator=None, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
        result = fn(self.shape, generator=generator, dtype=self.dtype if dtype is None else dtype,
                    device=self.device if device is None else device)
        if result is NotImplemented or memory_format not in (None, torch.preserve_format, torch.contiguous_format):
            return NotImplemented if result is NotImplemented else result.contiguous(memory_format=memory_format)
        return result
    return like


def _native_dropout(input, p, train):
    if train is False or p == 0:  # as PyTorch's own decomposition: the input, and a mask of ones
        return input, torch.ones_like(input, dtype=torch.bool)
    if p == 1:
        return torch.zeros_like(input), torch.zeros_like(input, dtype=torch.bool)
    if not input.dtype.is_floating_point:
        return NotImplemented
    keep = _uniform(input.shape, device=input.device) >= p  # P(u >= p) = 1 - p on the 2^-24 grid
    return keep * input * float(1.0 / (1.0 - p)), keep


def _bernoulli_p(self, p=0.5, *, generator=None):
    if generator is not None:
        return NotImplemented
    return (_uniform(self.shape, device=self.device) < p).to(self.dtype)


def _bernoulli_tensor(self, p, *, generator=None):
    if generator is not None:
        return NotImplemented
    return (_uniform(self.shape, device=self.device) < p.to(torch.float32)).to(self.dtype)  # p broadcasts to self's shape


def _random_below(size: Sequence[int], low: int, high: int, device: torch.device | None = None) -> torch.Tensor:
    """int64 values in [low, high): 64 random bits modulo the range (bias below 2^-64 x range)."""
    torch._check(low < high, lambda: f"random_ expects 'from' to be less than 'to', but got from={low} >= to={high}")
    bits = PHILOX_BITS(_state(device), list(size), torch.int64, 0)
    return torch.remainder(bits, high - low) + low


def _randint_low(low, high, size, *, generator=None, dtype=None, layout=None, device=None, pin_memory=None):
    if generator is not None:
        return NotImplemented
    return _random_below(size, int(low), int(high), device).to(torch.int64 if dtype is None else dtype)


def _randint(high, size, *, generator=None, dtype=None, layout=None, device=None, pin_memory=None):
    return _randint_low(0, high, size, generator=generator, dtype=dtype, device=device)


def _randint_like(self, high, *, generator=None, dtype=None, layout=None, device=None, pin_memory=None,
                  memory_format=None):
    return _randint_like_low(self, 0, high, generator=generator, dtype=dtype)


def _randint_like_low(self, low, high, *, generator=None, dtype=None, layout=None, device=None, pin_memory=None,
                      memory_format=None):
    if generator is not None:
        return NotImplemented
    return _random_below(self.shape, int(low), int(high), self.device).to(self.dtype if dtype is None else dtype)


def _random_bound(dtype: torch.dtype) -> int:
    """``random_()``'s exclusive upper bound without from/to: integers up to the type's max, floats up to the
    largest integer their significand holds exactly (PyTorch's rule)."""
    if dtype.is_floating_point:
        return 2 ** {torch.float32: 24, torch.float64: 53, torch.bfloat16: 8, torch.float16: 11}[dtype] + 1
    if dtype is torch.bool:
        return 2
    return int(torch.iinfo(dtype).max) + 1


def _random(self, *, generator=None):
    if generator is not None:
        return NotImplemented
    return _random_below(self.shape, 0, _random_bound(self.dtype), self.device).to(self.dtype)


def _random_from(self, from_, to=None, *, generator=None):
    if generator is not None:
        return NotImplemented
    high = _random_bound(self.dtype) if to is None else int(to)
    return _random_below(self.shape, int(from_), high, self.device).to(self.dtype)


def _random_to(self, to, *, generator=None):
    return _random_from(self, 0, to, generator=generator)


def _normal_tensor_float(mean, std=1.0, *, generator=None):
    if generator is not None:
        return NotImplemented
    return (_standard_normal(mean.shape, mean.device) * std + mean).to(mean.dtype)


def _normal_float_tensor(mean, std, *, generator=None):
    if generator is not None:
        return NotImplemented
    return (_standard_normal(std.shape, std.device) * std + mean).to(std.dtype)


def _normal_tensor_tensor(mean, std, *, generator=None):
    if generator is not None:
        return NotImplemented
    shape = torch.broadcast_shapes(mean.shape, std.shape)
    return (_standard_normal(shape, mean.device) * std + mean).to(torch.promote_types(mean.dtype, std.dtype))


def _normal_float_float(mean, std, size, *, generator=None, dtype=None, layout=None, device=None, pin_memory=None):
    if generator is not None:
        return NotImplemented
    return (_standard_normal(size, device) * std + mean).to(_float_dtype(dtype))


def _normal_functional(self, mean=0.0, std=1.0, *, generator=None):
    if generator is not None:
        return NotImplemented
    return (_standard_normal(self.shape, self.device) * std + mean).to(self.dtype)


def _uniform_range(self, from_=0.0, to=1.0, *, generator=None):
    if generator is not None:
        return NotImplemented
    return (_uniform(self.shape, device=self.device) * (to - from_) + from_).to(self.dtype)


def _exponential(self, lambd=1.0, *, generator=None):
    if generator is not None:
        return NotImplemented
    return (torch.log1p(-_uniform(self.shape, device=self.device)) * (-1.0 / lambd)).to(self.dtype)


def _cauchy(self, median=0.0, sigma=1.0, *, generator=None):
    if generator is not None:
        return NotImplemented
    return (torch.tan((_uniform(self.shape, device=self.device) - 0.5) * math.pi) * sigma + median).to(self.dtype)


def _log_normal(self, mean=1.0, std=2.0, *, generator=None):
    if generator is not None:
        return NotImplemented
    return torch.exp(_standard_normal(self.shape, self.device) * std + mean).to(self.dtype)


def _geometric(self, p, *, generator=None):
    """The number of Bernoulli(p) trials to the first success: ceil(ln(1 - u) / ln(1 - p)), at least 1."""
    if generator is not None:
        return NotImplemented
    trials = torch.ceil(torch.log1p(-_uniform(self.shape, device=self.device)) / math.log1p(-p))
    return torch.clamp(trials, min=1.0).to(self.dtype)


def _randperm(n, *, generator=None, dtype=None, layout=None, device=None, pin_memory=None):
    """The permutation sorting ``n`` random 64-bit keys (ties, at probability ~ n^2 / 2^65, keep index order)."""
    if generator is not None:
        return NotImplemented
    keys = PHILOX_BITS(_state(device), [int(n)], torch.int64, 0)
    return torch.sort(keys, stable=True)[1].to(torch.int64 if dtype is None else dtype)


def _rrelu_with_noise_functional(self, noise, lower=0.125, upper=1.0 / 3.0, training=False, generator=None):
    """rrelu: a random slope in [lower, upper) for each element <= 0 in training (its noise, 1 elsewhere, is
    what the backward multiplies by); the mean slope in eval."""
    if generator is not None:
        return NotImplemented
    if not training:
        return torch.where(self >= 0, self, self * ((lower + upper) / 2)), noise
    slopes = (_uniform(self.shape, device=self.device) * (upper - lower) + lower).to(self.dtype)
    noise_out = torch.where(self <= 0, slopes, torch.ones_like(slopes))
    return self * noise_out, noise_out


def _multinomial(self, num_samples, replacement=False, *, generator=None):
    """Indices drawn in proportion to each row's weights. With replacement: the inverse CDF of a uniform per
    sample (a search in the normalized cumulative weights). Without: the ``num_samples`` smallest exponential
    clocks ``-ln(u) / w`` (a zero weight's clock is infinite), which picks in the order sequential draws do."""
    if generator is not None:
        return NotImplemented
    weights = self.to(torch.float32)
    rows = weights.shape[:-1]
    if replacement:
        cdf = torch.cumsum(weights, -1)
        cdf = cdf / cdf[..., -1:]
        u = _uniform((*rows, int(num_samples)), device=self.device)
        picked = torch.searchsorted(cdf.contiguous(), u.contiguous(), right=True)
        return torch.clamp(picked, max=weights.shape[-1] - 1)
    clocks = -torch.log1p(-_uniform(weights.shape, device=self.device)) / weights
    return torch.topk(clocks, int(num_samples), dim=-1, largest=False, sorted=True)[1]


def random_decompositions() -> dict[Any, Callable[..., Any]]:
    """aten random op -> its rewrite over the generator (added to the front end's decomposition table)."""
    table: dict[Any, Callable[..., Any]] = {
        aten.native_dropout.default: _native_dropout,
        aten.rand.default: _rand,
        aten.rand.generator: _rand,
        aten.randn.default: _randn,
        aten.randn.generator: _randn,
        aten.rand_like.default: _like(_rand),
        aten.randn_like.default: _like(_randn),
        aten.bernoulli.p: _bernoulli_p,
        aten.bernoulli.Tensor: _bernoulli_tensor,
        aten.randint.low: _randint_low,
        aten.randint.default: _randint,
        aten.randint_like.default: _randint_like,
        aten.randint_like.low_dtype: _randint_like_low,
        aten.random.default: _random,
        aten.random.to: _random_to,
        getattr(aten.random, "from"): _random_from,  # "from" is a Python keyword
        aten.normal.Tensor_float: _normal_tensor_float,
        aten.normal.float_Tensor: _normal_float_tensor,
        aten.normal.Tensor_Tensor: _normal_tensor_tensor,
        aten.normal.float_float: _normal_float_float,
        aten.normal_functional.default: _normal_functional,
        aten.uniform.default: _uniform_range,
        aten.exponential.default: _exponential,
        aten.cauchy.default: _cauchy,
        aten.log_normal.default: _log_normal,
        aten.geometric.default: _geometric,
        aten.randperm.default: _randperm,
        aten.rrelu_with_noise_functional.default: _rrelu_with_noise_functional,
        aten.multinomial.default: _multinomial,
    }
    table.update(get_decompositions([aten.rrelu_with_noise_backward]))  # grad * noise in training
    return table


def save_random_states(joint: torch.fx.GraphModule) -> None:
    """Mark every ``philox_seed`` of a joint graph to be saved, never recomputed: a checkpointed region
    (``torch.utils.checkpoint``) asks to recompute all of its ops in the backward, and a recomputed seed would
    draw a new key (AOTAutograd would wrap it in ``run_with_rng_state``, a CUDA-style replay of the generator).
    Saving the 16-byte state lets the backward recompute everything after it, the masks included, exactly."""
    for node in joint.graph.nodes:
        if node.op == "call_function" and node.target is PHILOX_SEED:
            node.meta["recompute"] = CheckpointPolicy.MUST_SAVE


def regenerate_random_in_backward(joint: torch.fx.GraphModule) -> None:
    """Mark the generator ops of a joint graph for recomputation: the backward then regenerates a dropout mask
    from the saved (seed, offset) instead of reading the mask the forward saved (see docs/torch-backend.md
    for when each is faster)."""
    for node in joint.graph.nodes:
        if node.op == "call_function" and node.target in (PHILOX_UNIFORM, PHILOX_BITS):
            node.meta["recompute"] = CheckpointPolicy.MUST_RECOMPUTE
