"""Building ``kernel`` ops: the shape the launcher expects at the top level of a compiled function.

After the pass pipeline the top level holds only kernel ops, MATMUL and EXTERN (library) ops, pure views
and constants. Until the
fusion pass lands (and for any op it leaves behind), :func:`wrap_remaining_ops` wraps each other op in a
kernel of its own; :func:`fuse_whole_function` makes one kernel of a whole matmul-free graph (benchmarks use
it to measure code generation apart from the fusion heuristics).
"""

from __future__ import annotations

from collections.abc import Sequence

from neuroncc.ir.attrs import EMPTY_ATTRS, Attrs
from neuroncc.ir.graph import Builder, Function, Op, Value
from neuroncc.ir.opdef import Category, Trait
from neuroncc.ir.ops import REGISTRY
from neuroncc.ir.signs import facts_for
from neuroncc.ir.strides import aliases_operand


def is_top_level_op(op: Op) -> bool:
    """Whether the launcher runs ``op`` as it is (no kernel needed): kernels, ATen calls, views aliasing their
    operand's buffer (it executes them as views of their source's buffer) and stored constants."""
    category = REGISTRY.get(op.name).category
    return category in (Category.KERNEL, Category.MATMUL, Category.EXTERN) or aliases_operand(op) \
        or op.has(Trait.STORED)


def make_kernel(ops: Sequence[Op], inputs: Sequence[Value], outputs: Sequence[Value], name: str,
                facts: Attrs = EMPTY_ATTRS) -> Op:
    """A kernel op computing ``outputs`` from ``inputs`` with a region holding (fresh copies of) ``ops``;
    ``facts``: what is known about the inputs, as the region's metadata (``ir/signs.py``)."""
    region = Builder(name, facts)
    mapping = {v: region.param(v.type, v.hint) for v in inputs}
    for op in ops:
        results = tuple(Value(r.type, r.hint) for r in op.results)
        mapping.update(zip(op.results, results))
        region.append(Op(op.name, tuple(mapping[v] for v in op.operands), results, op.attrs, op.regions))
    body = region.build([mapping[v] for v in outputs])
    results = tuple(Value(v.type, v.hint) for v in outputs)
    attrs = REGISTRY.get("kernel").normalize_attrs({"name": name})
    return Op("kernel", tuple(inputs), results, attrs, (body,))


def wrap_remaining_ops(fn: Function) -> Function:
    """Wrap every top-level op the launcher cannot run directly into a single-op kernel."""
    if all(is_top_level_op(op) for op in fn.ops):
        return fn
    ops: list[Op] = []
    mapping: dict[Value, Value] = {}
    for number, op in enumerate(fn.ops):
        op = Op(op.name, tuple(mapping.get(v, v) for v in op.operands), op.results, op.attrs, op.regions)
        if is_top_level_op(op):
            ops.append(op)
            continue
        inputs = list(dict.fromkeys(op.operands))
        kernel = make_kernel([op], inputs, list(op.results), f"{op.name}_{number}", facts_for(fn, inputs))
        mapping.update(zip(op.results, kernel.results))
        ops.append(kernel)
    outputs = tuple(mapping.get(v, v) for v in fn.outputs)
    return Function(fn.name, fn.params, tuple(ops), outputs, fn.metadata)


def fuse_whole_function(fn: Function) -> Function:
    """One kernel for the whole body of a graph without MATMUL or kernel ops (else the graph unchanged)."""
    if any(REGISTRY.get(op.name).category in (Category.MATMUL, Category.KERNEL, Category.EXTERN) for op in fn.ops):
        return fn
    kernel = make_kernel(fn.ops, fn.params, list(dict.fromkeys(fn.outputs)), fn.name, facts_for(fn, fn.params))
    by_value = dict(zip(dict.fromkeys(fn.outputs), kernel.results))
    return Function(fn.name, fn.params, (kernel,), tuple(by_value[v] for v in fn.outputs), fn.metadata)
