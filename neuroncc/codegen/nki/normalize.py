"""Put a kernel region in the form the NKI planner expects (semantics unchanged; the interpreter agrees).

Rules, applied in one walk (after convolutions are rewritten into pads, strided reads and matmuls):

* ``split`` results become ``slice`` views of the operand (each result is a window of it);
* a view chain that cannot read its root in place (a reshape merging permuted dims) gets a ``copy`` where it
  breaks, so every remaining chain is a strided window of a stored tensor;
* a region output that is a parameter, a view or a constant gets a ``copy`` (the kernel must write it).
"""

from __future__ import annotations

from neuroncc.codegen.nki.conv import decompose_convolutions
from neuroncc.ir import REGISTRY, Category, Function, Op, Trait, Value
from neuroncc.passes.rewrite import named
from neuroncc.ir.view_windows import StridedView, apply_view


def _slice(source: Value, result: Value, dim: int, start: int, size: int) -> Op:
    attrs = REGISTRY.get("slice").normalize_attrs({"dim": dim, "start": start, "end": start + size, "step": 1})
    return Op("slice", (source,), (result,), attrs)


def _copy(value: Value) -> Op:
    return Op("copy", (value,), (Value(value.type.contiguous(), value.hint),), REGISTRY.get("copy").normalize_attrs({}))


class _Normalizer:
    def __init__(self, region: Function):
        self.region = region
        self.ops: list[Op] = []
        self.producers: dict[Value, Op] = {}

    def emit(self, op: Op) -> None:
        self.ops.append(op)
        for result in op.results:
            self.producers[result] = op

    def run(self) -> Function:
        for op in self.region.ops:
            split = named(op, "split")
            if split is not None:  # each result is a slice of the operand
                start = 0
                dim = split.attrs["dim"] % split.operands[0].type.rank
                for result, size in zip(split.results, split.attrs["sizes"]):
                    self.emit(_slice(split.operands[0], result, dim, start, size))
                    start += size
                continue
            if op.has(Trait.STRIDED_VIEW):
                self.emit(op)
                continue
            operands = tuple(self.readable(v) for v in op.operands)
            self.emit(op if operands == op.operands else Op(op.name, operands, op.results, op.attrs, op.regions))
        outputs = tuple(self.written(v) for v in self.region.outputs)
        return Function(self.region.name, self.region.params, tuple(self.ops), outputs, self.region.metadata)

    def chain(self, value: Value) -> tuple[Value, list[Op]]:
        views: list[Op] = []
        while (op := self.producers.get(value)) is not None and op.has(Trait.STRIDED_VIEW):
            views.append(op)
            value = op.operands[0]
        return value, list(reversed(views))

    def readable(self, value: Value) -> Value:
        """``value``, or an equal value whose view chain reads a stored tensor in place."""
        root, views = self.chain(value)
        window: StridedView | None = StridedView.contiguous(root.type.shape)
        current = root
        for index, view in enumerate(views):
            window = apply_view(view, window)
            if window is None:
                copy = _copy(current)
                self.emit(copy)
                current = copy.result
                for rest in views[index:]:
                    rebuilt = Op(rest.name, (current,), (Value(rest.result.type.contiguous(), rest.result.hint),),
                                 rest.attrs)
                    self.emit(rebuilt)
                    current = rebuilt.result
                return self.readable(current)
            current = view.result
        return value

    def written(self, value: Value) -> Value:
        op = self.producers.get(value)
        if op is None or op.has(Trait.STRIDED_VIEW) or REGISTRY.get(op.name).category is Category.CONSTANT:
            copy = _copy(self.readable(value))
            self.emit(copy)
            return copy.result
        return value


def normalize_region(region: Function) -> Function:
    """The normalized form of ``region`` (see the module docstring); convolutions are decomposed first
    (:mod:`neuroncc.codegen.nki.conv`)."""

    return _Normalizer(decompose_convolutions(region)).run()
