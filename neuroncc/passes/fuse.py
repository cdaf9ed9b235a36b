"""``fuse``: group ops into kernels (see :mod:`neuroncc.passes.fusion_groups` for which ops group together).

The result satisfies the kernel contract that codegen relies on (:func:`neuroncc.passes.kernels.check_kernel_contract`):

* the top level holds only ``kernel`` ops, matmul ops (mm, bmm, addmm, convolution, convolution_backward)
  whose results need no epilogue, extern ops, and pure views that read their source buffer in place
  (reshape, permute, expand, slice, select, squeeze, unsqueeze);
* each kernel owns one region isolated from above; views and constants it reads are re-created inside it
  (so a kernel loads through a permute or broadcast instead of materializing it);
* a region holds at most one matmul, as its first compute op, reading region parameters directly or through
  views that read them in place (strided windows); the ops after it are its elementwise epilogue, applied
  to the output while it is hot.

Fusion is a pure regrouping: the reference interpreter gives bit-identical results before and after.
Kernel names are deterministic and say what is inside: ``fused_3_softmax``, ``fused_5_mm_add_gelu``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from neuroncc.ir import REGISTRY, Attrs, Category, Function, Op, TensorType, Trait, Value
from neuroncc.passes.fusion_groups import CONSTANT, MATMUL, OPAQUE, VIEW, FusionPlanner, Group, op_kind
from neuroncc.passes.kernel_names import describe
from neuroncc.passes.kernels import check_kernel_contract
from neuroncc.passes.manager import Pass, PassContext
from neuroncc.passes.rewrite import dce, named
from neuroncc.ir.signs import facts_for
from neuroncc.ir.view_windows import view_chain_layout


@dataclass(frozen=True)
class Fuse(Pass):
    """Fuse elementwise ops, reductions and matmul epilogues into kernels.

    ``epilogues=false`` keeps every matmul at the top level (no epilogue fusion); ``horizontal=false`` keeps
    independent elementwise kernels of one shape apart (no horizontal fusion).
    """

    name: ClassVar[str] = "fuse"
    epilogues: bool = True
    horizontal: bool = True

    def apply(self, fn: Function, ctx: PassContext) -> Function:
        fn = copy_views_that_cannot_stay(transpose_after_elementwise(dce(fn)))
        fused = _Outliner(fn, FusionPlanner(fn, epilogues=self.epilogues, horizontal=self.horizontal)).build()
        check_kernel_contract(fused)
        return fused


def transpose_after_elementwise(fn: Function) -> Function:
    """``bmm(q, mul(permute(k, swap last two), scale))`` -> ``bmm(q, permute(mul(k, scale)))``.

    An elementwise op whose only tensor operand is a transpose and whose only user is a matmul reading it as
    a transposable operand runs on the untransposed value instead: its kernel then writes in the source's
    own order, and the transpose stays a view the layout pass folds into the matmul's transpose flag
    (attention's scaled k^T was written as [B, H, 64, S], element by element across rows)."""
    producers, users = fn.producers(), fn.users()
    outputs = set(fn.outputs)
    moved: dict[Value, tuple[Op, Op]] = {}  # elementwise result -> (its op on the source, the transpose)
    for op in fn.ops:
        for position in _factor_positions(op):
            value = op.operands[position]
            elementwise = producers.get(value)
            if (value in moved or value in outputs or elementwise is None or len(users.get(value, ())) != 1
                    or REGISTRY.get(elementwise.name).category is not Category.ELEMENTWISE):
                continue
            tensors = [v for v in elementwise.operands if v.type.rank > 0]
            permute = named(producers.get(tensors[0]), "permute") if len(tensors) == 1 else None
            if permute is None or not _swaps_last_two(permute.attrs["dims"]):
                continue
            source = permute.operands[0]
            operands = tuple(source if v is tensors[0] else v for v in elementwise.operands)
            natural = Value(TensorType(source.type.shape, value.type.dtype), value.hint)
            moved[value] = (Op(elementwise.name, operands, (natural,), elementwise.attrs),
                            Op("permute", (natural,), (value,), permute.attrs))
    if not moved:
        return fn
    ops: list[Op] = []
    for op in fn.ops:
        ops += moved.get(op.results[0], (op,)) if op.results else [op]
    return Function(fn.name, fn.params, tuple(ops), fn.outputs, fn.metadata)


def copy_views_that_cannot_stay(fn: Function) -> Function:
    """Insert ``copy`` where an anchor op or a function output reads a constant or a view that cannot read its
    buffer in place: the copy is then fused like any other op (often into the producer's kernel)."""
    producers = fn.producers()

    def needs_copy(value: Value) -> bool:
        op = producers.get(value)
        if op is None or op_kind(op) not in (VIEW, CONSTANT):
            return False
        found = view_chain_layout(value, producers)
        if found is None:
            return True
        root_op = producers.get(found[0])
        return root_op is not None and op_kind(root_op) == CONSTANT

    def copied(op: Op, position: int, value: Value) -> Value:
        """The value to copy for operand ``position``: a transposed matrix operand copies the untransposed
        value, written in its own order (the layout pass then folds the transpose into the matmul's
        transpose flag), instead of writing the transpose element by element across rows."""
        permute = named(producers.get(value), "permute")
        if (position in _factor_positions(op) and permute is not None and _swaps_last_two(permute.attrs["dims"])
                and needs_copy(permute.operands[0])):
            return permute.operands[0]
        return value

    wanted = [copied(op, i, v) for op in fn.ops if op_kind(op) in (MATMUL, OPAQUE)
              for i, v in enumerate(op.operands) if needs_copy(v)]
    wanted += [v for v in fn.outputs if needs_copy(v)]
    if not wanted:
        return fn
    copies: dict[Value, Value] = {}
    ops: list[Op] = []
    for op in fn.ops:
        if op_kind(op) in (MATMUL, OPAQUE):
            op = Op(op.name, tuple(copies.get(v, v) for v in op.operands), op.results, op.attrs, op.regions)
        elif named(op, "permute") and op.operands[0] in copies:  # a transpose of a copy: a view of it
            op = Op(op.name, (copies[op.operands[0]],), op.results, op.attrs, op.regions)
        ops.append(op)
        for result in op.results:
            if result in wanted and result not in copies:
                copy = Op("copy", (result,), (Value(result.type.contiguous(), result.hint),), Attrs())
                copies[result] = copy.result
                ops.append(copy)
    return Function(fn.name, fn.params, tuple(ops), tuple(copies.get(v, v) for v in fn.outputs), fn.metadata)


def _factor_positions(op: Op) -> tuple[int, ...]:
    """The operands a matrix product's transpose flags can read transposed: its two factors, the last two
    operands (addmm's operand 0 is the bias); none for other ops."""
    count = len(op.operands)
    return (count - 2, count - 1) if op.has(Trait.MATRIX_PRODUCT) else ()


def _swaps_last_two(dims: tuple[int, ...]) -> bool:
    rank = len(dims)
    return rank >= 2 and tuple(dims) == tuple(range(rank - 2)) + (rank - 1, rank - 2)


class _Outliner:
    """Builds the fused function: anchor ops, top-level views and one kernel op per group."""

    def __init__(self, fn: Function, planner: FusionPlanner):
        self.fn, self.planner = fn, planner
        self.producers = planner.producers
        self.users = fn.users()
        self.outputs = set(fn.outputs)
        self.ops: list[Op] = []
        self.top: dict[Value, Value] = {p: p for p in fn.params}  # old value -> value at the new top level
        self.kernel_count = 0

    def build(self) -> Function:
        for group in self.planner.ordered_groups():
            if group.is_kernel:
                self.emit_kernel(group)
            else:
                (op,) = group.ops
                operands = tuple(self.at_top(v) for v in op.operands)
                results = tuple(Value(r.type, r.hint) for r in op.results)
                self.ops.append(Op(op.name, operands, results, op.attrs, op.regions))
                self.top.update(zip(op.results, results))
        outputs = tuple(self.at_top(v) for v in self.fn.outputs)
        return Function(self.fn.name, self.fn.params, tuple(self.ops), outputs, self.fn.metadata)

    def at_top(self, value: Value) -> Value:
        """``value`` at the new top level, re-creating the views it is read through."""
        if value in self.top:
            return self.top[value]
        op = self.producers.get(value)
        if op is None or op_kind(op) != VIEW:
            raise AssertionError(f"fuse: {value!r} is not available at the top level")
        view = Op(op.name, (self.at_top(op.operands[0]),), (Value(value.type, value.hint),), op.attrs)
        self.ops.append(view)
        self.top[value] = view.result
        return view.result

    def escapes(self, value: Value, group: Group) -> bool:
        """Is ``value`` (computed in ``group``) read outside it, directly or through views?"""
        stack = [value]
        while stack:
            v = stack.pop()
            if v in self.outputs:
                return True
            for user, _ in self.users.get(v, []):
                if op_kind(user) == VIEW:
                    stack.append(user.result)
                elif self.planner.group_of.get(user) != group.gid:
                    return True
        return False

    def emit_kernel(self, group: Group) -> None:
        params: list[Value] = []
        operands: list[Value] = []
        body: list[Op] = []
        local: dict[Value, Value] = {}

        def inside(value: Value) -> Value:
            if value in local:
                return local[value]
            op = self.producers.get(value)
            if op is not None and op_kind(op) in (VIEW, CONSTANT):
                clone = Op(op.name, tuple(inside(v) for v in op.operands), (Value(value.type, value.hint),), op.attrs)
                body.append(clone)
                local[value] = clone.result
            else:
                param = Value(value.type, value.hint)
                params.append(param)
                operands.append(self.at_top(value))
                local[value] = param
            return local[value]

        matmul = group.matmul
        ordered = ([matmul] if matmul is not None else []) + [op for op in group.ops if op is not matmul]
        for op in ordered:
            new_operands = tuple(inside(v) for v in op.operands)
            results = tuple(Value(r.type, r.hint) for r in op.results)
            body.append(Op(op.name, new_operands, results, op.attrs))
            local.update(zip(op.results, results))
        escaping = [r for op in group.ops for r in op.results if self.escapes(r, group)]
        if not escaping:
            return
        name = f"fused_{self.kernel_count}_{describe(body)}"
        self.kernel_count += 1
        # the facts known about the function's parameters hold for the region's parameters they feed
        region = Function(name, tuple(params), tuple(body), tuple(local[r] for r in escaping),
                          facts_for(self.fn, operands))
        results = tuple(Value(r.type, r.hint) for r in escaping)
        attrs = REGISTRY.get("kernel").normalize_attrs({"name": name})
        self.ops.append(Op("kernel", tuple(operands), results, attrs, (region,)))
        self.top.update(zip(escaping, results))
