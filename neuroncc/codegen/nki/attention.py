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

Only the plain pattern is matched (no scale, mask or bias between the matmuls; ``D, Dv <= 128``; ``Sq`` and
``Sk`` multiples of 128; bf16 or fp32); anything else is emitted as before.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from neuroncc.codegen.nki.source import Names, SourceWriter, identifier, nki_dtype
from neuroncc.errors import PassError
from neuroncc.hardware.neuron import PARTITIONS, NeuronCore
from neuroncc.ir import Op, Value
from neuroncc.ir.dtypes import DType
from neuroncc.passes.tile import tile_kernel

SOFTMAX_CHAIN = ("amax", "sub", "exp", "sum", "div")
P = PARTITIONS


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


def _is_softmax_region(op: Op) -> bool:
    if op.name != "kernel" or len(op.regions) != 1:
        return False
    region = op.regions[0]
    if [o.name for o in region.ops] != list(SOFTMAX_CHAIN) or len(region.params) != 1:
        return False
    amax, sub, exp, total, div = region.ops
    x = region.params[0]
    rank = x.type.rank
    return (rank == 2 and tuple(amax.attrs.get("dims", ())) == (1,) and amax.attrs.get("keepdim")
            and sub.operands == (x, amax.result) and exp.operands == (sub.result,)
            and total.operands == (exp.result,) and tuple(total.attrs.get("dims", ())) == (1,)
            and total.attrs.get("keepdim") and div.operands == (exp.result, total.result)
            and region.outputs == (div.result,))


def find_attention(ops: tuple[Op, ...], index: int, uses: Mapping[Value, int],
                   target: NeuronCore) -> AttentionPattern | None:
    """The attention pattern starting at ``ops[index]``, or None (see the module docstring). The resident
    operands must fit the SBUF budget the tile pass gives the softmax kernel."""
    if index + 2 >= len(ops):
        return None
    first, middle, last = ops[index], ops[index + 1], ops[index + 2]
    if first.name != "mm" or last.name != "mm" or not _is_softmax_region(middle):
        return None
    if middle.operands != (first.result,) or last.operands[0] != middle.result:
        return None
    if uses.get(first.result, 0) != 1 or uses.get(middle.result, 0) != 1 or last.attrs.get("transpose_a"):
        return None
    a, b = first.operands
    c = last.operands[1]
    dtype = first.result.type.dtype
    if dtype not in (DType.bf16, DType.f32) or any(v.type.dtype != dtype for v in (a, b, c, last.result)):
        return None
    q_rows_major = not first.attrs.get("transpose_a", False)
    k_rows_major = bool(first.attrs.get("transpose_b", False))
    v_keys_major = not last.attrs.get("transpose_b", False)
    sq, sk = first.result.type.shape
    d = a.type.shape[1] if q_rows_major else a.type.shape[0]
    dv = last.result.type.shape[1]
    if d > P or dv > P or sq % P or sk % P:
        return None
    block = target.psum_free_fp32 if sk % target.psum_free_fp32 == 0 else P
    pattern = AttentionPattern(first, middle, last, a, b, c, q_rows_major, k_rows_major, v_keys_major,
                               sq, sk, d, dv, dtype, block)
    itemsize = 2 if dtype is DType.bf16 else 4
    resident = (sq + sk + sk // P * dv) * itemsize + 4 * pattern.block * 4 + 16 * dv
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
    dt = f"nl.{nki_dtype(pattern.dtype)}"
    sq, sk, d, dv, block = pattern.sq, pattern.sk, pattern.d, pattern.dv, pattern.block
    w = SourceWriter()
    w.line("@nki.jit")
    w.open(f"def {function_name}({q}, {k}, {v}):")
    w.line(f"out = nl.ndarray(({sq}, {dv}), dtype={dt}, buffer=nl.shared_hbm)")
    w.comment(f"flash attention: softmax({q} @ {k}) @ {v} over [{sq}, {sk}], online softmax per {block} keys")
    _resident(w, "q_t", q, d, sq, pattern.q_rows_major, dt)
    _resident(w, "k_t", k, d, sk, pattern.k_rows_major, dt)
    w.line(f"v_sb = nl.ndarray(({P}, {sk // P}, {dv}), dtype={dt}, buffer=nl.sbuf)")
    if pattern.v_keys_major:
        w.open(f"for j in nl.affine_range({sk // P}):")
        w.line(f"nisa.dma_copy(dst=v_sb[:, j, :], src={v}[nl.ds(j * {P}, {P}), :])")
        w.close()
    else:
        w.line(f"v_rows = nl.ndarray(({dv}, {sk}), dtype={dt}, buffer=nl.sbuf)")
        w.line(f"nisa.dma_copy(dst=v_rows, src={v})")
        w.open(f"for j in nl.affine_range({sk // P}):")
        w.line(f"v_t = nl.ndarray(({P}, {dv}), dtype={dt}, buffer=nl.psum)")
        w.line(f"nisa.nc_transpose(dst=v_t, data=v_rows[:, nl.ds(j * {P}, {P})])")
        w.line("nisa.tensor_copy(dst=v_sb[:, j, :], src=v_t)")
        w.close()
    w.open(f"for i in nl.affine_range({sq // P}):")
    w.line(f"neg_max = nl.ndarray(({P}, 1), dtype=nl.float32, buffer=nl.sbuf)")
    w.line(f"row_sum = nl.ndarray(({P}, 1), dtype=nl.float32, buffer=nl.sbuf)")
    w.line(f"acc = nl.ndarray(({P}, {dv}), dtype=nl.float32, buffer=nl.sbuf)")
    _block(w, pattern, dt, first=True)
    if sk // block > 1:
        w.open(f"for j in nl.sequential_range(1, {sk // block}):")
        _block(w, pattern, dt, first=False)
        w.close()
    w.line(f"inverse = nl.ndarray(({P}, 1), dtype=nl.float32, buffer=nl.sbuf)")
    w.line("nisa.reciprocal(dst=inverse, data=row_sum)")
    w.line(f"result = nl.ndarray(({P}, {dv}), dtype={dt}, buffer=nl.sbuf)")
    w.line("nisa.tensor_scalar(dst=result, data=acc, op0=nl.multiply, operand0=inverse)")
    w.line(f"nisa.dma_copy(dst=out[nl.ds(i * {P}, {P}), :], src=result)")
    w.close()
    w.line("return (out,)")
    w.close()
    return w.text(), [pattern.q, pattern.k, pattern.v]


def _resident(w: SourceWriter, name: str, source: str, rows: int, cols: int, rows_major: bool, dt: str) -> None:
    """``name = [rows, cols]`` in SBUF from ``source`` stored ``[rows, cols]``, or ``[cols, rows]`` (transposed
    by TensorE in 128 x 128 pieces)."""
    w.line(f"{name} = nl.ndarray(({rows}, {cols}), dtype={dt}, buffer=nl.sbuf)")
    if not rows_major:
        w.line(f"nisa.dma_copy(dst={name}, src={source})")
        return
    w.open(f"for t in nl.affine_range({cols // P}):")
    w.line(f"piece = nl.ndarray(({P}, {rows}), dtype={dt}, buffer=nl.sbuf)")
    w.line(f"nisa.dma_copy(dst=piece, src={source}[nl.ds(t * {P}, {P}), :])")
    w.line(f"flipped = nl.ndarray(({rows}, {P}), dtype={dt}, buffer=nl.psum)")
    w.line("nisa.nc_transpose(dst=flipped, data=piece)")
    w.line(f"nisa.tensor_copy(dst={name}[:, nl.ds(t * {P}, {P})], src=flipped)")
    w.close()


def _block(w: SourceWriter, pattern: AttentionPattern, dt: str, first: bool) -> None:
    """One block of keys: scores, the (online) softmax statistics, and the accumulation of probs @ v."""
    block, dv = pattern.block, pattern.dv
    j = "0" if first else "j"
    w.line(f"scores = nl.ndarray(({P}, {block}), dtype=nl.float32, buffer=nl.psum)")
    w.line(f"nisa.nc_matmul(dst=scores, stationary=q_t[:, nl.ds(i * {P}, {P})], moving=k_t[:, nl.ds({j} * {block}, "
           f"{block})])")
    w.line(f"probs = nl.ndarray(({P}, {block}), dtype={dt}, buffer=nl.sbuf)")
    if first:
        w.line("nisa.tensor_reduce(dst=neg_max, op=nl.maximum, data=scores, axis=(1,), negate=True, keepdims=True)")
        w.line("nisa.activation(dst=probs, op=nl.exp, data=scores, bias=neg_max, reduce_op=nl.add, "
               "reduce_res=row_sum)")
    else:
        w.line(f"block_max = nl.ndarray(({P}, 1), dtype=nl.float32, buffer=nl.sbuf)")
        w.line("nisa.tensor_reduce(dst=block_max, op=nl.maximum, data=scores, axis=(1,), negate=True, "
               "keepdims=True)")
        w.line(f"new_max = nl.ndarray(({P}, 1), dtype=nl.float32, buffer=nl.sbuf)")
        w.line("nisa.tensor_tensor(dst=new_max, data1=neg_max, data2=block_max, op=nl.minimum)")
        w.comment("exp(old max - new max) rescales what the earlier blocks accumulated")
        w.line(f"rescale = nl.ndarray(({P}, 1), dtype=nl.float32, buffer=nl.sbuf)")
        w.line("nisa.activation(dst=rescale, op=nl.exp, data=neg_max, bias=new_max, scale=-1.0)")
        w.line(f"block_sum = nl.ndarray(({P}, 1), dtype=nl.float32, buffer=nl.sbuf)")
        w.line("nisa.activation(dst=probs, op=nl.exp, data=scores, bias=new_max, reduce_op=nl.add, "
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
