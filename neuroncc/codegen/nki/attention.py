"""Attention as one flash-style kernel: ``mm -> softmax -> mm`` fused, the scores never leave the chip.

The nki pipeline leaves attention as three top-level steps: the scores matmul, a ``softmax`` kernel region
over its rows and the matmul by ``v``. Emitted one by one, the ``[Sq, Sk]`` scores and probabilities go to
HBM and back. When the three are consecutive and each result feeds only the next, ``find_attention``
matches them and ``emit_attention`` writes one kernel in the shape of AWS's attention tutorial kernels,
with an online softmax (flash attention):

- ``q.T`` (``[D, Sq]``), ``k`` (``[D, Sk]``) and ``v`` as ``[128 keys, Sk / 128, Dv]`` stay in SBUF, loaded
  once (an operand stored the other way round is turned by TensorE transposes);
- per 128 query rows and per block of 512 keys: the scores into one PSUM bank (``nc_matmul``), the negated
  block max (VectorE reads PSUM directly), ``exp(s - max)`` and its row sum in one ScalarE activation into
  bf16 probabilities, four TensorE transposes of the probabilities into one PSUM bank, one copy back to
  SBUF, and four matmuls by ``v`` accumulating in PSUM (three PSUM banks per block, so the next query rows'
  block can run in the other banks);
- the running max, row sum and fp32 output accumulator are rescaled by ``exp(old max - new max)`` once per
  block (one ScalarE activation, two ``scalar_tensor_tensor``), and the division by the row sum happens
  once at the end, on the ``[128, Dv]`` output.

The forms attention is written in all match (the fuse pass puts what sits between the scores and the
softmax into the softmax's kernel region, so it is that region's prologue):

- ``bmm`` as well as ``mm`` (``[B, Sq, D]`` operands: the kernel loops over the batch);
- a scale: ``mul`` by a positive scalar constant (either side) or ``div`` by one, folded into the exponent
  (``exp(c s - c max)`` is one ScalarE activation with ``scale=c``; the running max is kept scaled);
- a mask after the scale: ``add`` of an additive mask or ``where(mask, fill, s)`` / ``where(mask, s, fill)``
  with a constant ``fill`` (``masked_fill``), the mask ``[Sq, Sk]`` (shared by the batch) or ``[B, Sq, Sk]``.
  The mask rows of each 128 query rows load in one DMA; per block ``c s + mask`` is one VectorE instruction
  (the fill a predicated copy), and the first block's max is clamped to a finite value so that a row whose first
  block is wholly masked (``-inf``) does not turn into NaN (a row masked everywhere is NaN, as in eager).

The pattern follows values, not positions: the softmax kernel is the first matmul's only user and the second
matmul reads its result, directly or through single-use reshapes. That is how torch.compile hands over
``[B, H, L, E]`` attention: ``bmm`` of ``[B * H, ...]`` views, a softmax region that starts by viewing the
scores as ``[B, H, Sq, Sk]`` (a mask may then be ``[B, H, Sq, Sk]`` too), a reshape back, and ``v``'s own view
in between; the kernel is emitted where the second matmul was, when ``v`` and the mask exist.

Otherwise: ``D, Dv <= 128``; ``Sq`` and ``Sk`` multiples of 128; bf16 or fp32; anything else is emitted as
before (three kernels).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from neuroncc.codegen.nki.source import Names, SourceWriter, identifier, literal, nki_dtype
from neuroncc.errors import PassError
from neuroncc.hardware.neuron import PARTITIONS, NeuronCore
from neuroncc.ir import Op, Value
from neuroncc.ir.dtypes import DType
from neuroncc.passes.tile import tile_kernel

SOFTMAX_CHAIN = ("amax", "sub", "exp", "sum", "div")
P = PARTITIONS
#: The first block's negated row max is clamped to this (the largest fp32): a wholly masked first block
#: (max -inf) must not make exp(-inf + inf) NaN; its probabilities are then 0 and the next block's rescale
#: exp(-huge) is 0, which is exact.
FINITE_MAX = 3.4028234663852886e38


@dataclass(frozen=True)
class SoftmaxPrologue:
    """What the softmax kernel region applies to the scores before the softmax: ``scale`` times the scores,
    then the mask (operand ``mask_position`` of the kernel): added (``mask_kind == "add"``), or ``fill``
    written where the mask is true (``"fill"``) or false (``"keep"``)."""

    scale: float = 1.0
    mask_position: int | None = None
    mask_kind: str = ""
    fill: float = 0.0


@dataclass(frozen=True)
class AttentionPattern:
    """Three consecutive top-level ops computing ``softmax(A @ B) @ C`` and how their operands are stored."""

    scores: Op
    softmax: Op
    output: Op
    q: Value  # A, stored [D, Sq] when q_rows_major is False
    k: Value  # B, stored [D, Sk] when k_rows_major is False
    v: Value  # C, stored [Sk, Dv] when v_keys_major is True
    q_rows_major: bool  # A is [Sq, D] (needs TensorE transposes)
    k_rows_major: bool  # B is [Sk, D]
    v_keys_major: bool  # C is [Sk, Dv] (else [Dv, Sk]: TensorE transposes)
    sq: int
    sk: int
    d: int
    dv: int
    dtype: DType
    block: int  # keys per block: one PSUM bank of fp32 scores when ``Sk`` allows, else 128
    batch: int = 1  # bmm: the batch size (0 for mm)
    prologue: SoftmaxPrologue = SoftmaxPrologue()
    mask: Value | None = None  # the mask the prologue reads ([Sq, Sk], or one [Sq, Sk] per batch)
    positions: tuple[int, ...] = ()  # where the softmax kernel, the reshapes after it and the last matmul are

    @property
    def inputs(self) -> list[Value]:
        """The values the kernel takes, in argument order."""
        return [self.q, self.k, self.v] + ([self.mask] if self.mask is not None else [])


def _scalar(op: Op | None) -> float | None:
    """The value of a scalar constant (``full`` / ``constant`` of one element), else None."""
    if op is None or op.result.type.numel != 1:
        return None
    if op.name == "full":
        return float(op.attrs["value"])
    if op.name == "constant":
        return float(op.attrs["value"].array.reshape(-1)[0])
    return None


def _softmax_prologue(kernel: Op, scores_position: int) -> SoftmaxPrologue | None:
    """The scale and mask a softmax kernel region applies to its operand ``scores_position`` before a softmax
    over the last dim that it returns, or None when the region is anything else (see the module docstring)."""
    if kernel.name != "kernel" or len(kernel.regions) != 1:
        return None
    region = kernel.regions[0]
    if len(region.outputs) != 1 or not 1 <= len(region.params) <= 2:
        return None
    x = region.params[scores_position]
    constants = {op.result: _scalar(op) for op in region.ops if _scalar(op) is not None}
    body = [op for op in region.ops if op.result not in constants]
    if len(body) < len(SOFTMAX_CHAIN) or any(len(op.results) != 1 for op in body):
        return None
    scale, mask_position, mask_kind, fill = 1.0, None, "", 0.0
    current = x
    if body[0].name == "reshape" and body[0].operands == (x,) and \
            _splits_batch(x.type.shape, body[0].result.type.shape):
        current, body = body[0].result, body[1:]  # torch's heads: [B * H, Sq, Sk] viewed as [B, H, Sq, Sk]
        if len(body) < len(SOFTMAX_CHAIN):
            return None
    shape = current.type.shape
    for op in body[:-len(SOFTMAX_CHAIN)]:
        others = [v for v in op.operands if v is not current]
        if current not in op.operands or op.result.type.shape != shape:
            return None
        if op.name in ("mul", "div") and mask_position is None and len(others) == 1 and others[0] in constants:
            if op.name == "div" and op.operands[0] is not current:
                return None
            factor = constants[others[0]]
            scale = scale * factor if op.name == "mul" else scale / factor
        elif op.name == "add" and mask_position is None and len(others) == 1 and others[0] in region.params:
            mask_position, mask_kind = region.params.index(others[0]), "add"
        elif op.name == "where" and mask_position is None and op.operands[0] in region.params and \
                op.operands[0].type.dtype is DType.bool and len(others) == 2:
            value = op.operands[1] if op.operands[2] is current else op.operands[2]
            if value not in constants:
                return None
            mask_position, fill = region.params.index(op.operands[0]), constants[value]
            mask_kind = "fill" if op.operands[2] is current else "keep"
        else:
            return None
        current = op.result
    if not (scale > 0 and scale != float("inf")) or len(region.params) != 1 + (mask_position is not None):
        return None
    amax, sub, exp, total, div = body[-len(SOFTMAX_CHAIN):]
    last = (len(shape) - 1,)
    chain = (tuple(o.name for o in (amax, sub, exp, total, div)) == SOFTMAX_CHAIN
             and tuple(amax.attrs.get("dims", ())) == last and amax.attrs.get("keepdim")
             and amax.operands == (current,) and sub.operands == (current, amax.result)
             and exp.operands == (sub.result,) and total.operands == (exp.result,)
             and tuple(total.attrs.get("dims", ())) == last and total.attrs.get("keepdim")
             and div.operands == (exp.result, total.result) and region.outputs == (div.result,))
    return SoftmaxPrologue(scale, mask_position, mask_kind, fill) if chain else None


def _splits_batch(flat: tuple[int, ...], split: tuple[int, ...]) -> bool:
    """``split`` is ``flat`` ([N, Sq, Sk]) with its leading dim split in several ([B, H, Sq, Sk])."""
    return len(flat) == 3 and len(split) > 3 and split[-2:] == flat[-2:] and math.prod(split[:-2]) == flat[0]


def _user(ops: tuple[Op, ...], start: int, value: Value) -> int | None:
    """The position of the first op after ``start`` reading ``value``."""
    return next((j for j in range(start + 1, len(ops)) if value in ops[j].operands), None)


def find_attention(ops: tuple[Op, ...], index: int, uses: Mapping[Value, int],
                   target: NeuronCore) -> AttentionPattern | None:
    """The attention pattern whose first matmul is ``ops[index]``, or None (see the module docstring). The
    softmax kernel is the matmul's only user, the second matmul its result's (through reshapes that only
    merge the leading dims back, as torch's multi-head graphs have); ``positions`` says where they are. The
    resident operands must fit the SBUF budget the tile pass gives the softmax kernel."""
    first = ops[index]
    if first.name not in ("mm", "bmm") or uses.get(first.result, 0) != 1:
        return None
    middle_at = _user(ops, index, first.result)
    if middle_at is None or ops[middle_at].name != "kernel" or len(ops[middle_at].results) != 1:
        return None
    middle = ops[middle_at]
    positions, value, at = [middle_at], middle.result, middle_at
    while True:  # the softmax's result, back to the scores' shape through single-use reshapes
        user_at = _user(ops, at, value)
        if user_at is None or uses.get(value, 0) != 1:
            return None
        positions.append(user_at)
        if ops[user_at].name != "reshape":
            break
        value, at = ops[user_at].result, user_at
    last = ops[positions[-1]]
    if last.name != first.name or last.operands[0] is not value or value.type.shape != first.result.type.shape \
            or last.attrs.get("transpose_a") or last.operands[1] is value:
        return None
    prologue = _softmax_prologue(middle, middle.operands.index(first.result))
    if prologue is None:
        return None
    a, b = first.operands
    c = last.operands[1]
    dtype = first.result.type.dtype
    if dtype not in (DType.bf16, DType.f32) or any(v.type.dtype != dtype for v in (a, b, c, last.result)):
        return None
    batched = first.name == "bmm"
    q_rows_major = not first.attrs.get("transpose_a", False)
    k_rows_major = bool(first.attrs.get("transpose_b", False))
    v_keys_major = not last.attrs.get("transpose_b", False)
    sq, sk = first.result.type.shape[-2:]
    d = a.type.shape[-1] if q_rows_major else a.type.shape[-2]
    dv = last.result.type.shape[-1]
    if d > P or dv > P or sq % P or sk % P:
        return None
    mask = None
    if prologue.mask_position is not None:
        mask = middle.operands[prologue.mask_position]
        whole = mask.type.shape[-2:] == (sq, sk) and mask.type.numel == first.result.type.numel
        if (mask.type.shape != (sq, sk) and not (batched and whole)) or \
                mask.type.dtype not in ((DType.bool,) if prologue.mask_kind != "add" else (dtype, DType.f32)):
            return None
    block = target.psum_free_fp32 if sk % target.psum_free_fp32 == 0 else P
    pattern = AttentionPattern(first, middle, last, a, b, c, q_rows_major, k_rows_major, v_keys_major,
                               sq, sk, d, dv, dtype, block, first.result.type.shape[0] if batched else 0,
                               prologue, mask, tuple(positions))
    itemsize = 2 if dtype is DType.bf16 else 4
    resident = (sq + sk + sk // P * dv) * itemsize + 4 * pattern.block * 4 + 16 * dv
    if mask is not None:  # the masked scores of two blocks in flight, the mask rows of two query tiles
        resident += 2 * (pattern.block * 4 + sk * mask.type.dtype.itemsize)
    try:
        budget = tile_kernel(middle, target.name).attrs["sbuf_budget"]
    except PassError:
        return None
    if resident > budget:
        return None
    return pattern


def emit_attention(function_name: str, pattern: AttentionPattern, names: Names) -> tuple[str, list[Value]]:
    """The source of the flash-attention kernel and the values it takes, in argument order."""
    local = Names(set(names.taken))
    q, k, v = (local.fresh(identifier(value.hint or default)) for value, default in
               ((pattern.q, "q"), (pattern.k, "k"), (pattern.v, "v")))
    mask = local.fresh(identifier(pattern.mask.hint or "mask")) if pattern.mask is not None else None
    dt = f"nl.{nki_dtype(pattern.dtype)}"
    sq, sk, d, dv, block = pattern.sq, pattern.sk, pattern.d, pattern.dv, pattern.block
    batch = "b, " if pattern.batch else ""  # the index prefix of a batched operand
    w = SourceWriter()
    w.line("@nki.jit")
    w.open(f"def {function_name}({', '.join([q, k, v] + ([mask] if mask else []))}):")
    out_shape = f"({pattern.batch}, {sq}, {dv})" if pattern.batch else f"({sq}, {dv})"
    w.line(f"out = nl.ndarray({out_shape}, dtype={dt}, buffer=nl.shared_hbm)")
    prologue = pattern.prologue
    what = f"{literal(prologue.scale)} * ({q} @ {k})" if prologue.scale != 1.0 else f"{q} @ {k}"
    if mask:
        what += {"add": f" + {mask}", "fill": f" filled with {prologue.fill!r} where {mask}",
                 "keep": f" filled with {prologue.fill!r} where not {mask}"}[prologue.mask_kind]
    w.comment(f"flash attention: softmax({what}) @ {v} over [{sq}, {sk}], online softmax per {block} keys"
              + (f", for each of {pattern.batch} batches" if pattern.batch else ""))
    if pattern.batch:
        w.open(f"for b in nl.affine_range({pattern.batch}):")
    _resident(w, "q_t", q, d, sq, pattern.q_rows_major, dt, batch)
    _resident(w, "k_t", k, d, sk, pattern.k_rows_major, dt, batch)
    w.line(f"v_sb = nl.ndarray(({P}, {sk // P}, {dv}), dtype={dt}, buffer=nl.sbuf)")
    if pattern.v_keys_major:
        w.open(f"for j in nl.affine_range({sk // P}):")
        w.line(f"nisa.dma_copy(dst=v_sb[:, j, :], src={v}[{batch}nl.ds(j * {P}, {P}), :])")
        w.close()
    else:
        w.line(f"v_rows = nl.ndarray(({dv}, {sk}), dtype={dt}, buffer=nl.sbuf)")
        w.line(f"nisa.dma_copy(dst=v_rows, src={v}[{batch}:, :])" if batch else f"nisa.dma_copy(dst=v_rows, src={v})")
        w.open(f"for j in nl.affine_range({sk // P}):")
        w.line(f"v_t = nl.ndarray(({P}, {dv}), dtype={dt}, buffer=nl.psum)")
        w.line(f"nisa.nc_transpose(dst=v_t, data=v_rows[:, nl.ds(j * {P}, {P})])")
        w.line("nisa.tensor_copy(dst=v_sb[:, j, :], src=v_t)")
        w.close()
    w.open(f"for i in nl.affine_range({sq // P}):")
    w.line(f"neg_max = nl.ndarray(({P}, 1), dtype=nl.float32, buffer=nl.sbuf)")
    w.line(f"row_sum = nl.ndarray(({P}, 1), dtype=nl.float32, buffer=nl.sbuf)")
    w.line(f"acc = nl.ndarray(({P}, {dv}), dtype=nl.float32, buffer=nl.sbuf)")
    mask_index = None
    if mask:
        # the query tile's mask rows in one DMA (whole rows: long runs), sliced per block of keys
        shared = pattern.mask.type.shape == (sq, sk)  # one [Sq, Sk] mask for every batch
        source = mask if shared or pattern.mask.type.rank == 3 else \
            f"{mask}.reshape(({pattern.batch}, {sq}, {sk}))"  # [B, H, Sq, Sk]: batch b is head b % H of b // H
        w.line(f"mask_rows = nl.ndarray(({P}, {sk}), dtype=nl.{nki_dtype(pattern.mask.type.dtype)}, buffer=nl.sbuf)")
        w.line(f"nisa.dma_copy(dst=mask_rows, src={source}[{'' if shared else batch}nl.ds(i * {P}, {P}), :])")
        mask_index = f"mask_rows[:, nl.ds({{j}} * {block}, {block})]"
    _block(w, pattern, dt, mask_index, first=True)
    if sk // block > 1:
        w.open(f"for j in nl.sequential_range(1, {sk // block}):")
        _block(w, pattern, dt, mask_index, first=False)
        w.close()
    w.line(f"inverse = nl.ndarray(({P}, 1), dtype=nl.float32, buffer=nl.sbuf)")
    w.line("nisa.reciprocal(dst=inverse, data=row_sum)")
    w.line(f"result = nl.ndarray(({P}, {dv}), dtype={dt}, buffer=nl.sbuf)")
    w.line("nisa.tensor_scalar(dst=result, data=acc, op0=nl.multiply, operand0=inverse)")
    w.line(f"nisa.dma_copy(dst=out[{batch}nl.ds(i * {P}, {P}), :], src=result)")
    w.close()
    if pattern.batch:
        w.close()
    w.line("return (out,)")
    w.close()
    return w.text(), pattern.inputs


def _resident(w: SourceWriter, name: str, source: str, rows: int, cols: int, rows_major: bool, dt: str,
              batch: str) -> None:
    """``name = [rows, cols]`` in SBUF from ``source`` stored ``[rows, cols]``, or ``[cols, rows]`` (transposed
    by TensorE in 128 x 128 pieces); ``batch`` is the index prefix of a batched ``source`` ("b, " or "")."""
    w.line(f"{name} = nl.ndarray(({rows}, {cols}), dtype={dt}, buffer=nl.sbuf)")
    if not rows_major:
        w.line(f"nisa.dma_copy(dst={name}, src={source}[{batch}:, :])" if batch else
               f"nisa.dma_copy(dst={name}, src={source})")
        return
    w.open(f"for t in nl.affine_range({cols // P}):")
    w.line(f"piece = nl.ndarray(({P}, {rows}), dtype={dt}, buffer=nl.sbuf)")
    w.line(f"nisa.dma_copy(dst=piece, src={source}[{batch}nl.ds(t * {P}, {P}), :])")
    w.line(f"flipped = nl.ndarray(({rows}, {P}), dtype={dt}, buffer=nl.psum)")
    w.line("nisa.nc_transpose(dst=flipped, data=piece)")
    w.line(f"nisa.tensor_copy(dst={name}[:, nl.ds(t * {P}, {P})], src=flipped)")
    w.close()


def _scores(w: SourceWriter, pattern: AttentionPattern, mask_index: str | None, j: str) -> str:
    """The block's scores as the softmax reads them: the PSUM matmul result, or (with a mask) ``scale * s``
    masked into an fp32 SBUF tile. Returns the tile's name."""
    prologue, block = pattern.prologue, pattern.block
    if mask_index is None:
        return "scores"
    mask_sb = mask_index.format(j=j)
    w.line(f"masked = nl.ndarray(({P}, {block}), dtype=nl.float32, buffer=nl.sbuf)")
    if prologue.mask_kind == "add":
        w.line(f"nisa.scalar_tensor_tensor(dst=masked, data=scores, op0=nl.multiply, "
               f"operand0={literal(prologue.scale)}, op1=nl.add, operand1={mask_sb})")
    else:
        w.line(f"nisa.tensor_scalar(dst=masked, data=scores, op0=nl.multiply, operand0={literal(prologue.scale)})")
        reverse = ", reverse_pred=True" if prologue.mask_kind == "keep" else ""
        w.line(f"nisa.tensor_copy_predicated(dst=masked, src={literal(prologue.fill)}, predicate={mask_sb}{reverse})")
    return "masked"


def _block(w: SourceWriter, pattern: AttentionPattern, dt: str, mask_index: str | None, first: bool) -> None:
    """One block of keys: scores, the (online) softmax statistics, and the accumulation of probs @ v."""
    block, dv = pattern.block, pattern.dv
    j = "0" if first else "j"
    w.line(f"scores = nl.ndarray(({P}, {block}), dtype=nl.float32, buffer=nl.psum)")
    w.line(f"nisa.nc_matmul(dst=scores, stationary=q_t[:, nl.ds(i * {P}, {P})], moving=k_t[:, nl.ds({j} * {block}, "
           f"{block})])")
    data = _scores(w, pattern, mask_index, j)
    # unmasked: the exponent is scale * s + bias, in one ScalarE activation reading PSUM; the max is kept scaled
    scale = pattern.prologue.scale if mask_index is None else 1.0
    scale_arg = f", scale={literal(scale)}" if scale != 1.0 else ""
    w.line(f"probs = nl.ndarray(({P}, {block}), dtype={dt}, buffer=nl.sbuf)")
    target = "neg_max" if first else "block_max"
    if not first:
        w.line(f"block_max = nl.ndarray(({P}, 1), dtype=nl.float32, buffer=nl.sbuf)")
    w.line(f"nisa.tensor_reduce(dst={target}, op=nl.maximum, data={data}, axis=(1,), negate=True, keepdims=True)")
    if scale != 1.0:
        w.line(f"nisa.tensor_scalar(dst={target}, data={target}, op0=nl.multiply, operand0={literal(scale)})")
    if first and mask_index is not None:
        w.comment("a wholly masked first block: max -inf, exp(-inf + inf) would be NaN")
        w.line(f"nisa.tensor_scalar(dst=neg_max, data=neg_max, op0=nl.minimum, operand0={literal(FINITE_MAX)})")
    if first:
        w.line(f"nisa.activation(dst=probs, op=nl.exp, data={data}, bias=neg_max{scale_arg}, reduce_op=nl.add, "
               "reduce_res=row_sum)")
    else:
        w.line(f"new_max = nl.ndarray(({P}, 1), dtype=nl.float32, buffer=nl.sbuf)")
        w.line("nisa.tensor_tensor(dst=new_max, data1=neg_max, data2=block_max, op=nl.minimum)")
        w.comment("exp(old max - new max) rescales what the earlier blocks accumulated")
        w.line(f"rescale = nl.ndarray(({P}, 1), dtype=nl.float32, buffer=nl.sbuf)")
        w.line("nisa.activation(dst=rescale, op=nl.exp, data=neg_max, bias=new_max, scale=-1.0)")
        w.line(f"block_sum = nl.ndarray(({P}, 1), dtype=nl.float32, buffer=nl.sbuf)")
        w.line(f"nisa.activation(dst=probs, op=nl.exp, data={data}, bias=new_max{scale_arg}, reduce_op=nl.add, "
               "reduce_res=block_sum)")
        w.line("nisa.scalar_tensor_tensor(dst=row_sum, data=row_sum, op0=nl.multiply, operand0=rescale, "
               "op1=nl.add, operand1=block_sum)")
        w.line("nisa.tensor_copy(dst=neg_max, src=new_max)")
    # The block's probabilities transposed into one PSUM bank (keys on partitions), copied out in one go.
    w.line(f"probs_ps = nl.ndarray(({P}, {block // P}, {P}), dtype={dt}, buffer=nl.psum)")
    w.open(f"for t in nl.affine_range({block // P}):")
    w.line(f"nisa.nc_transpose(dst=probs_ps[:, t, :], data=probs[:, nl.ds(t * {P}, {P})])")
    w.close()
    w.line(f"probs_t = nl.ndarray(({P}, {block // P}, {P}), dtype={dt}, buffer=nl.sbuf)")
    w.line("nisa.tensor_copy(dst=probs_t, src=probs_ps)")
    w.line(f"pv = nl.ndarray(({P}, {dv}), dtype=nl.float32, buffer=nl.psum)")
    w.open(f"for t in nl.affine_range({block // P}):")
    w.line(f"nisa.nc_matmul(dst=pv, stationary=probs_t[:, t, :], moving=v_sb[:, {j} * {block // P} + t, :])")
    w.close()
    if first:
        w.line("nisa.tensor_copy(dst=acc, src=pv)")
    else:
        w.line("nisa.scalar_tensor_tensor(dst=acc, data=acc, op0=nl.multiply, operand0=rescale, op1=nl.add, "
               "operand1=pv)")
