"""``layout``: choose how each buffer is laid out and read.

* Transposes fold into matmul operands: ``mm(permute(a, [1, 0]), b)`` becomes ``mm(a, b, transpose_a=true)``
  (bmm and addmm likewise), at the top level and inside kernels. BLAS and TensorE read either layout, so the
  transpose costs nothing. (Inside kernels every other view is already folded into the kernel's loads: fusion
  re-creates views inside the kernels that read them.)
* Top-level views read their source buffer in place; their types get the strides of that window.
* For NKI targets each kernel gets ``domain`` (its iteration space) and ``partition_dim``: the domain dim laid
  on the 128 partitions. NKI reduces along free dims only, so it is a dim no reduction reduces, preferably one
  of at least 128 (the outermost such); failing that, a dim only terminal reductions reduce (their partial
  sums add up across partitions, e.g. a LayerNorm weight gradient); a matmul kernel puts its output rows (M)
  there. ``none`` when every dim is reduced and read again (e.g. a full softmax over a vector).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

from neuroncc.hardware import neuron_core
from neuroncc.ir import Category, Function, Op, TensorType, Trait, Value
from neuroncc.passes.kernels import kernel_domain, reduced_domain_dims, region_matmul
from neuroncc.passes.manager import Pass, PassContext
from neuroncc.passes.rewrite import Replacement, Rule, Site, map_regions, rewrite_to_fixed_point
from neuroncc.ir.strides import reinterpreted_strides
from neuroncc.ir.view_windows import view_chain_layout


def fold_transpose_into_matmul(site: Site) -> Replacement:
    op = site.op
    first = len(op.operands) - 2  # the factors are the last two operands (addmm's operand 0 is the bias)
    for flag, index in (("transpose_a", first), ("transpose_b", first + 1)):
        operand = op.operands[index]
        rank = operand.type.rank
        swap_last_two = tuple(range(rank - 2)) + (rank - 1, rank - 2)
        permute = site.producer_named(operand, "permute")
        if permute is not None and permute.attrs["dims"] == swap_last_two:
            operands = list(op.operands)
            operands[index] = permute.operands[0]
            return site.emit(op.name, *operands, **dict(op.attrs, **{flag: not op.attrs[flag]}))
    return None


LAYOUT_RULES: tuple[Rule, ...] = (
    Rule("mm", fold_transpose_into_matmul),  # mm(permute(a, [1,0]), b) -> mm(a, b, transpose_a=!transpose_a)
    Rule("bmm", fold_transpose_into_matmul),  # bmm(a, permute(b, [0,2,1])) -> bmm(a, b, transpose_b=!...)
    Rule("addmm", fold_transpose_into_matmul),  # addmm(c, permute(a), b) -> addmm(c, a, b, transpose_a=!...)
)


@dataclass(frozen=True)
class ChooseLayouts(Pass):
    """Fold transposes into matmuls, give top-level views their strides, pick NKI partition dims."""

    name: ClassVar[str] = "layout"
    target: Literal["any", "cpu", "trn1", "trn2", "trn3"] = "any"
    fold_transposes: bool = True

    def apply(self, fn: Function, ctx: PassContext) -> Function:
        if self.fold_transposes:
            fn = self.fold(fn)
        fn = annotate_view_strides(fn)
        if neuron_core(self.target) is not None:
            fn = fn.with_ops(_with_partition_dim(op) if op.regions and op.opdef.category is Category.KERNEL else op
                             for op in fn.ops)
        return fn

    def fold(self, fn: Function) -> Function:
        return rewrite_to_fixed_point(map_regions(fn, self.fold), LAYOUT_RULES)


def annotate_view_strides(fn: Function) -> Function:
    """Top-level views whose window on their source buffer is not contiguous get those strides in their type
    (views that change the element type count them in their own elements)."""
    producers = fn.producers()
    renamed: dict[Value, Value] = {}
    ops: list[Op] = []
    for op in fn.ops:
        operands = tuple(renamed.get(v, v) for v in op.operands)
        new = op if operands == op.operands else Op(op.name, operands, op.results, op.attrs, op.regions)
        strides = None
        if op.has(Trait.STRIDED_VIEW):
            found = view_chain_layout(op.result, producers)
            strides = found[1].strides if found is not None else None
        elif op.has(Trait.REINTERPRET):  # c64 <-> f32 pairs: strides in the result's own elements
            strides = reinterpreted_strides(op, operands[0].type.layout_strides)
        if strides is not None:
            t = op.result.type
            strided = TensorType(t.shape, t.dtype, strides)
            if strided != t:
                result = Value(strided, op.result.hint)
                renamed[op.result] = result
                new = Op(op.name, operands, (result,), op.attrs, op.regions)
        ops.append(new)
    if not renamed:
        return fn
    return Function(fn.name, fn.params, tuple(ops), tuple(renamed.get(v, v) for v in fn.outputs), fn.metadata)


def choose_partition_dim(region: Function) -> int | None:
    """The domain dim a NKI kernel lays on the partitions (see the module docstring)."""
    domain = kernel_domain(region)
    if region_matmul(region) is not None:
        return len(domain) - 2
    reduced = reduced_domain_dims(region, domain)
    candidates = [d for d in range(len(domain)) if d not in reduced.all and domain[d] > 1]
    if not candidates:  # dims only terminal reductions reduce can be summed across partitions (TensorE)
        candidates = [d for d in range(len(domain)) if d not in reduced.whole and domain[d] > 1]
    return partition_among(domain, candidates)


def partition_among(domain: tuple[int, ...], candidates: list[int]) -> int | None:
    """The dim of ``domain`` among ``candidates`` to lay on the partitions: the outermost that fills them all,
    else the largest (the outermost on ties); None without candidates. The one partition rule: the NKI emitter
    applies it too, to loop nests whose dims it lays out differently from the kernel's domain."""
    if not candidates:
        return None
    from neuroncc.hardware.neuron import PARTITIONS  # NKI paths only: a cpu compile never loads the tables

    large = [d for d in candidates if domain[d] >= PARTITIONS]
    if large:
        return large[0]
    return max(candidates, key=lambda d: (domain[d], -d))


def _with_partition_dim(kernel: Op) -> Op:
    (region,) = kernel.regions
    attrs = kernel.attrs.replace(domain=kernel_domain(region), partition_dim=choose_partition_dim(region))
    return Op(kernel.name, kernel.operands, kernel.results, attrs, kernel.regions)


__all__ = ["LAYOUT_RULES", "ChooseLayouts", "annotate_view_strides", "choose_partition_dim", "partition_among"]
