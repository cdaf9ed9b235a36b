"""The emitter's instruction list: one record per NKI ISA call in a loop body, then rendered to source.

Op rules (:mod:`neuroncc.codegen.nki.op_rules`) append :class:`Instr` records; :func:`optimize` fuses
neighbours the way a hand-written kernel does (a bias subtraction into an activation's ``bias``, a row sum
into an activation's ``reduce_res``, a per-partition scalar step and a full-tile step into one
``scalar_tensor_tensor``...); the stage emitter hoists loop-invariant records and renders each with
:data:`RENDERERS`. Every tile is written by one record (a select's predicated copy updates its own result),
which is what makes the fusions safe to check locally.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from neuroncc.codegen.nki.source import SourceWriter, literal, shape_tuple
from neuroncc.hardware.neuron import DEFAULT_NEURON_CORE, MIN_ISSUE_CYCLES, NEURON_CORES

Number = float | int | bool


@dataclass(frozen=True)
class Ref:
    """An on-chip operand: tile variable ``tile`` (static ``shape``), or the view ``expr`` of it."""

    tile: str
    shape: tuple[int, ...]
    dtype: str  # NKI dtype name: float32, bfloat16, int32, bool_...
    buffer: str = "sbuf"
    view: str = ""  # index suffix, e.g. "[:, 0:1]"

    @property
    def expr(self) -> str:
        return self.tile + self.view

    @property
    def partitions(self) -> int:
        return self.shape[0]

    @property
    def free(self) -> int:
        return math.prod(self.shape[1:])

    @property
    def is_column(self) -> bool:
        return self.free == 1


Operand = Ref | Number


def operand_text(value: Operand) -> str:
    return value.expr if isinstance(value, Ref) else literal(value)


@dataclass
class Instr:
    """One ISA call. ``dst`` is the tile it writes (allocated by it when ``fresh``); ``args`` by name."""

    kind: str
    dst: Ref | None
    args: dict[str, Any] = field(default_factory=dict)
    fresh: bool = True
    render: Callable[[SourceWriter, Any], None] | None = None  # DMAs render themselves
    stores: bool = False  # writes HBM
    also_allocates: tuple[Ref, ...] = ()  # tiles this call writes besides dst (an activation's reduce_res)
    phase: str = "body"  # "pre" / "post": before / after the partition loop of a partition reduction

    def reads(self) -> list[Ref]:
        found = []
        for value in self.args.values():
            if isinstance(value, Ref):
                found.append(value)
        if self.kind in ("predicated", "matmul") and self.dst is not None:
            found.append(self.dst)  # updates its destination
        return found


# ---- rendering ------------------------------------------------------------------------------------


def _alloc(writer: SourceWriter, ref: Ref) -> None:
    writer.line(f"{ref.tile} = nl.ndarray({shape_tuple([str(n) for n in ref.shape])}, dtype=nl.{ref.dtype}, "
                f"buffer=nl.{ref.buffer})")


def _call(name: str, instr: Instr, keys: tuple[str, ...]) -> str:
    parts = [f"dst={instr.dst.expr}"] if instr.dst is not None else []
    for key in keys:
        if key not in instr.args or instr.args[key] is None:
            continue
        value = instr.args[key]
        if key == "scale" and value == 1.0:
            continue
        if isinstance(value, bool):
            parts.append(f"{key}={value}")
        elif isinstance(value, (Ref, int, float)):
            parts.append(f"{key}={operand_text(value)}")
        else:
            parts.append(f"{key}={value}")
    return f"nisa.{name}({', '.join(parts)})"


_KEYS: dict[str, tuple[str, tuple[str, ...]]] = {
    "tensor_tensor": ("tensor_tensor", ("data1", "data2", "op", "engine")),
    "tensor_scalar": ("tensor_scalar", ("data", "op0", "operand0", "reverse0", "op1", "operand1", "reverse1",
                                        "engine")),
    "stt": ("scalar_tensor_tensor", ("data", "op0", "operand0", "op1", "operand1", "reverse0", "reverse1")),
    "activation": ("activation", ("op", "data", "bias", "scale", "reduce_op", "reduce_res")),
    "tensor_reduce": ("tensor_reduce", ("op", "data", "axis", "negate", "keepdims")),
    "tensor_copy": ("tensor_copy", ("src",)),
    "memset": ("memset", ("value",)),
    "predicated": ("tensor_copy_predicated", ("src", "predicate", "reverse_pred")),
    "iota": ("iota", ("pattern", "offset", "channel_multiplier")),
    "transpose": ("nc_transpose", ("data",)),
    "matmul": ("nc_matmul", ("stationary", "moving")),
}


def render(writer: SourceWriter, instr: Instr, names: Any) -> None:
    """Write ``instr`` (with its allocation when fresh)."""
    for extra in instr.also_allocates:
        _alloc(writer, extra)
    if instr.render is not None:
        if instr.fresh and instr.dst is not None:
            _alloc(writer, instr.dst)
        instr.render(writer, names)
        return
    if instr.kind == "broadcast":
        source = instr.args["src"]
        writer.line(f"{instr.dst.tile} = nl.broadcast_to({source.expr}, "
                    f"shape={shape_tuple([str(n) for n in instr.dst.shape])})")
        return
    if instr.fresh and instr.dst is not None:
        _alloc(writer, instr.dst)
    name, keys = _KEYS[instr.kind]
    writer.line(_call(name, instr, keys))


# ---- fusion ------------------------------------------------------------------------------------------


def _use_counts(instrs: list[Instr]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for instr in instrs:
        for ref in instr.reads():
            counts[ref.tile] = counts.get(ref.tile, 0) + 1
    return counts


def _producers(instrs: list[Instr]) -> dict[str, int]:
    found: dict[str, int] = {}
    for index, instr in enumerate(instrs):
        if instr.dst is not None:
            found[instr.dst.tile] = index
    return found


def _whole(ref: Any) -> bool:
    return isinstance(ref, Ref) and not ref.view


def _single_op_scalar(instr: Instr) -> bool:
    return instr.kind == "tensor_scalar" and instr.args.get("op1") is None and instr.fresh


def _pinned(*instrs: Instr) -> bool:
    """Records pinned to an engine (the exact integer steps of the random generator, on GpSimdE) are not fused
    into instructions of another engine (scalar_tensor_tensor runs on VectorE, which computes in float32)."""
    return any(instr.args.get("engine") is not None for instr in instrs)


_NEGATE = {"nl.add": "nl.subtract", "nl.subtract": "nl.add"}


def _fuse_activation_input(instrs: list[Instr], counts: dict[str, int], producers: dict[str, int],
                           fresh: Callable[[str], str]) -> bool:
    """``act(x - c)`` / ``act(x + c)`` / ``act(x * s)`` -> one activation with ``bias`` / ``scale``."""
    for index, instr in enumerate(instrs):
        if instr.kind != "activation" or instr.args.get("bias") is not None or instr.args.get("scale", 1.0) != 1.0:
            continue
        data = instr.args["data"]
        if not _whole(data) or counts.get(data.tile) != 1 or data.tile not in producers:
            continue
        first = instrs[producers[data.tile]]
        if not _single_op_scalar(first) or first.dst.dtype not in ("float32", "bfloat16", "float16"):
            continue
        op, operand, reverse = first.args["op0"], first.args["operand0"], first.args.get("reverse0", False)
        scale: Operand = 1.0
        if op == "nl.multiply" and not isinstance(operand, Ref):
            scale = operand
            bias = None
        elif op == "nl.add":
            bias = operand
        elif op == "nl.subtract" and not reverse and not isinstance(operand, Ref):
            bias = -operand
        elif op == "nl.subtract" and reverse and not isinstance(operand, Ref):
            bias, scale = operand, -1.0
        elif op == "nl.subtract" and not reverse and isinstance(operand, Ref):
            bias = operand
        else:
            continue
        if isinstance(bias, Ref) and (not bias.is_column or bias.partitions != first.args["data"].partitions):
            continue
        if op == "nl.subtract" and isinstance(bias, Ref):
            bias, shift = _negated_column(instrs, counts, producers, bias, index, fresh)
            index += shift
        instrs[index] = replace(instr, args={**instr.args, "data": first.args["data"], "bias": bias, "scale": scale})
        del instrs[producers[data.tile]]
        return True
    return False


def _negated_column(instrs: list[Instr], counts: dict[str, int], producers: dict[str, int], column: Ref,
                    before: int, fresh: Callable[[str], str]) -> tuple[Ref, int]:
    """``-column`` for an activation bias: flip the max-reduction that made it when nothing else reads it,
    else negate it with one small instruction (inserted at ``before``; returns the new position shift)."""
    origin = producers.get(column.tile)
    if origin is not None and counts.get(column.tile) == 1 and _whole(column):
        reduce = instrs[origin]
        if reduce.kind == "tensor_reduce" and not reduce.args.get("negate"):
            negated = replace(column, tile=fresh(f"neg_{column.tile}"))
            reduce.args["negate"] = True
            reduce.dst = negated  # the tile now holds -max: say so in its name
            return negated, 0
    negated = Ref(fresh(f"neg_{column.tile}"), column.shape, "float32")
    instrs.insert(before, Instr("tensor_scalar", negated, {"data": column, "op0": "nl.multiply", "operand0": -1.0}))
    return negated, 1


def _fuse_reduce_into_activation(instrs: list[Instr], counts: dict[str, int], producers: dict[str, int],
                                 fresh: Callable[[str], str]) -> bool:
    """``s = sum(act(...))`` over every free axis -> the activation's fused ``reduce_res``."""
    for index, instr in enumerate(instrs):
        if instr.kind != "tensor_reduce" or instr.args["op"] != "nl.add" or instr.args.get("negate"):
            continue
        data = instr.args["data"]
        if not _whole(data) or data.tile not in producers or not instr.dst.is_column or not _whole(instr.dst):
            continue
        if instr.dst.dtype != "float32" or instr.dst.partitions != data.partitions:
            continue
        first = instrs[producers[data.tile]]
        if first.kind != "activation" or first.args.get("reduce_res") is not None or first.dst.shape != data.shape:
            continue
        if tuple(instr.args["axis"]) != tuple(range(1, len(data.shape))):
            continue
        first.args["reduce_op"] = "nl.add"
        first.args["reduce_res"] = instr.dst
        first.also_allocates = first.also_allocates + (instr.dst,)
        del instrs[index]
        return True
    return False


def _commute_scalar_multiply(instrs: list[Instr], counts: dict[str, int], producers: dict[str, int],
                             fresh: Callable[[str], str]) -> bool:
    """``(x * c) * y`` -> ``(x * y) * c`` (c a per-partition scalar, y a tile), so each scalar step can pair
    with the full-tile step after it into one scalar_tensor_tensor (LayerNorm's ``* rstd * gamma + beta``)."""
    for index, instr in enumerate(instrs):
        if instr.kind != "tensor_tensor" or instr.args["op"] != "nl.multiply":
            continue
        for key, other_key in (("data1", "data2"), ("data2", "data1")):
            data = instr.args[key]
            if not _whole(data) or counts.get(data.tile) != 1 or data.tile not in producers:
                continue
            first = instrs[producers[data.tile]]
            if not _single_op_scalar(first) or first.args["op0"] != "nl.multiply":
                continue
            other = instr.args[other_key]
            source = first.args["data"]
            if not isinstance(source, Ref) or source.shape != instr.dst.shape or other.shape != instr.dst.shape:
                continue
            product = replace(first.dst, tile=first.dst.tile)
            # both land where the second multiply was: ``other`` may be computed after the first one
            instrs[index] = Instr("tensor_scalar", instr.dst, {"data": product, "op0": "nl.multiply",
                                                                "operand0": first.args["operand0"]})
            instrs.insert(index, Instr("tensor_tensor", product, {"data1": source, "data2": other,
                                                                  "op": "nl.multiply"}))
            del instrs[producers[data.tile]]
            return True
    return False


def _fuse_scalar_then_tensor(instrs: list[Instr], counts: dict[str, int], producers: dict[str, int],
                             fresh: Callable[[str], str]) -> bool:
    """``(x <op0> c) <op1> y`` -> one scalar_tensor_tensor (c a number or per-partition scalar)."""
    for index, instr in enumerate(instrs):
        if instr.kind != "tensor_tensor":
            continue
        for key, other_key, reverse1 in (("data1", "data2", False), ("data2", "data1", True)):
            data = instr.args[key]
            if not _whole(data) or counts.get(data.tile) != 1 or data.tile not in producers:
                continue
            first = instrs[producers[data.tile]]
            if not _single_op_scalar(first) or first.dst.shape != instr.dst.shape:
                continue
            other = instr.args[other_key]
            source = first.args["data"]
            if not isinstance(other, Ref) or other.shape[0] != instr.dst.partitions or other.free != instr.dst.free:
                continue
            if source.shape[0] != instr.dst.partitions or source.free != other.free:
                continue
            if "bool" in (instr.dst.dtype, first.dst.dtype) or instr.args["op"].startswith("nl.bitwise"):
                continue
            if _pinned(instr, first):
                continue
            instrs[index] = Instr("stt", instr.dst, {
                "data": first.args["data"], "op0": first.args["op0"], "operand0": first.args["operand0"],
                "reverse0": first.args.get("reverse0", False) or None, "op1": instr.args["op"],
                "operand1": other, "reverse1": reverse1 or None})
            del instrs[producers[data.tile]]
            return True
    return False


def _fuse_scalar_pairs(instrs: list[Instr], counts: dict[str, int], producers: dict[str, int],
                       fresh: Callable[[str], str]) -> bool:
    """Two one-operator tensor_scalar steps -> one tensor_scalar with ``op0`` and ``op1``."""
    for index, instr in enumerate(instrs):
        if not _single_op_scalar(instr):
            continue
        data = instr.args["data"]
        if not _whole(data) or counts.get(data.tile) != 1 or data.tile not in producers:
            continue
        first = instrs[producers[data.tile]]
        if not _single_op_scalar(first) or first.dst.shape != instr.dst.shape:
            continue
        if "bool_" in (first.dst.dtype,) or first.dst.dtype != instr.dst.dtype:
            continue
        if first.args.get("engine") != instr.args.get("engine"):
            continue
        instrs[index] = Instr("tensor_scalar", instr.dst, {
            "data": first.args["data"], "op0": first.args["op0"], "operand0": first.args["operand0"],
            "reverse0": first.args.get("reverse0") or None, "op1": instr.args["op0"],
            "operand1": instr.args["operand0"], "reverse1": instr.args.get("reverse0") or None,
            "engine": instr.args.get("engine")})
        del instrs[producers[data.tile]]
        return True
    return False


_READS_PSUM = {"activation": "data", "tensor_scalar": "data", "tensor_tensor": "data1", "stt": "data",
               "tensor_reduce": "data"}


def _forward_copy(instrs: list[Instr], counts: dict[str, int], producers: dict[str, int],
                  fresh: Callable[[str], str]) -> bool:
    """``y = f(copy(x))`` -> ``y = f(x)`` when the copy changes no dtype and ``f`` is its only reader (the
    engines read PSUM directly: a matmul's result goes straight into its epilogue)."""
    for index, instr in enumerate(instrs):
        for key in ("data", "data1", "data2"):
            data = instr.args.get(key)
            if instr.kind not in _READS_PSUM or not _whole(data) or counts.get(data.tile) != 1:
                continue
            if data.tile not in producers:
                continue
            first = instrs[producers[data.tile]]
            source = first.args.get("src")
            if first.kind != "tensor_copy" or not isinstance(source, Ref) or source.dtype != data.dtype:
                continue
            if source.shape != data.shape or any(ref.buffer == "psum" for ref in instr.reads() if ref is not data) \
                    and source.buffer == "psum":
                continue
            instr.args[key] = source
            del instrs[producers[data.tile]]
            return True
    return False


#: Fusion rules, applied to a fixed point in this order (each returns True when it rewrote something).
FUSIONS = (
    _forward_copy,                 # f(copy(x)) -> f(x), reading PSUM directly
    _fuse_activation_input,        # act(x - c) -> activation(bias=-c)
    _fuse_reduce_into_activation,  # sum(act(x)) -> activation(reduce_res=...)
    _commute_scalar_multiply,      # (x * c) * y -> (x * y) * c
    _fuse_scalar_then_tensor,      # (x op c) op y -> scalar_tensor_tensor
    _fuse_scalar_pairs,            # (x op c) op d -> tensor_scalar(op0, op1)
)


def optimize(instrs: list[Instr], fresh: Callable[[str], str]) -> list[Instr]:
    """Apply :data:`FUSIONS` until none applies, then balance VectorE and ScalarE (``fresh`` names new
    tiles); returns the rewritten list."""
    instrs = list(instrs)
    changed = True
    while changed:
        changed = False
        for rule in FUSIONS:
            if rule(instrs, _use_counts(instrs), _producers(instrs), fresh):
                changed = True
                break
    balance_engines(instrs, fresh)
    return instrs


# ---- engine balance ----------------------------------------------------------------------------------

#: Elements per partition per nanosecond of VectorE (by operand width) and ScalarE, and the minimum issue
#: interval in cycles; only used to compare the two engines, with the default generation's (trn2) rates on
#: every target (per-generation balancing would change trn1 / trn3 kernels: an open item in docs/nki.md).
_BALANCE_CORE = NEURON_CORES[DEFAULT_NEURON_CORE]
VECTOR_RATE = {4: _BALANCE_CORE.vector_lanes_fp32 * _BALANCE_CORE.vector_ghz,
               2: _BALANCE_CORE.vector_lanes_16bit * _BALANCE_CORE.vector_ghz}
SCALAR_RATE = _BALANCE_CORE.scalar_lanes_fp32 * _BALANCE_CORE.scalar_ghz
MIN_CYCLES = MIN_ISSUE_CYCLES
_VECTOR_PASSES = {"tensor_tensor": 2, "stt": 2, "predicated": 2, "tensor_scalar": 1, "tensor_copy": 1,
                  "memset": 1, "tensor_reduce": 1, "broadcast": 1, "reduce_loop": 1}
_WIDTH = {"float32": 4, "int32": 4, "uint32": 4, "bfloat16": 2, "float16": 2, "int16": 2, "uint16": 2,
          "int8": 1, "uint8": 1, "bool_": 1}


def _vector_ns(instr: Instr) -> float:
    data = next((v for k, v in instr.args.items() if isinstance(v, Ref) and k in ("data", "data1", "src")), instr.dst)
    width = 4 if _WIDTH.get(data.dtype, 4) == 4 else 2
    passes = _VECTOR_PASSES[instr.kind]
    if passes == 2 and any(isinstance(v, Ref) and v.buffer == "psum" for v in instr.args.values()):
        passes = 1
    return max(MIN_CYCLES / _BALANCE_CORE.vector_ghz, passes * data.free / VECTOR_RATE[width])


def _scalar_ns(free: int) -> float:
    return max(MIN_CYCLES, free) / SCALAR_RATE


def balance_engines(instrs: list[Instr], fresh: Callable[[str], str]) -> None:
    """Move whole-row sums from VectorE to ScalarE (an identity activation with a fused row sum) while
    VectorE has more work than ScalarE, as a hand-written LayerNorm does."""
    vector = sum(_vector_ns(i) for i in instrs if i.kind in _VECTOR_PASSES)
    scalar = sum(_scalar_ns(i.dst.free) for i in instrs if i.kind == "activation")
    for index, instr in enumerate(instrs):
        if instr.kind != "tensor_reduce" or instr.args["op"] != "nl.add" or instr.args.get("negate"):
            continue
        data = instr.args["data"]
        if not _whole(data) or not instr.dst.is_column or instr.dst.dtype != "float32" or len(data.shape) < 2:
            continue
        if tuple(instr.args["axis"]) != tuple(range(1, len(data.shape))) or data.dtype not in ("float32", "bfloat16"):
            continue
        moved_from, moved_to = _vector_ns(instr), _scalar_ns(data.free) + MIN_CYCLES / SCALAR_RATE
        if vector - moved_from <= scalar + moved_to:
            continue
        scratch = Ref(fresh(f"{data.tile}_copy"), data.shape, data.dtype)
        instrs[index] = Instr("activation", scratch, {"op": "nl.copy", "data": data, "reduce_op": "nl.add",
                                                      "reduce_res": instr.dst}, also_allocates=(instr.dst,))
        vector, scalar = vector - moved_from, scalar + moved_to
