"""Reduce a failing graph to a smaller one that fails the same way (delta debugging on the IR).

Hypothesis shrinks the *choices* that generated a graph, which leaves detours such as a chain of ``neg`` s
feeding the op that matters. :func:`reduce_graph` then edits the IR itself, keeping each edit that still
fails: drop an output; turn an op's results into new parameters (which also drops everything that only fed
that op); bypass an op by one of its operands of the same type. Unused parameters go too. The result is a
test case a pass developer can read at a glance.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from neuroncc.ir import Function, Op, Value
from neuroncc.passes.rewrite import dce


def reduce_graph(fn: Function, still_fails: Callable[[Function], bool], *, max_attempts: int = 400) -> Function:
    """The smallest graph reachable from ``fn`` by the edits above for which ``still_fails`` holds."""
    current, attempts = fn, 0
    progress = True
    while progress and attempts < max_attempts:
        progress = False
        for candidate in candidates(current):
            attempts += 1
            if still_fails(candidate):
                current, progress = candidate, True
                break
            if attempts >= max_attempts:
                break
    return current


def size(fn: Function) -> tuple[int, int, int]:
    """What reduction minimizes: ops (regions included), outputs, parameters."""
    return sum(1 for _ in fn.walk()), len(fn.outputs), len(fn.params)


def candidates(fn: Function) -> Iterator[Function]:
    """Every one-step reduction of ``fn`` (each strictly smaller by :func:`size`, so reduction ends)."""
    for candidate in _edits(fn):
        candidate = prune(candidate)
        if size(candidate) < size(fn):
            yield candidate


def _edits(fn: Function) -> Iterator[Function]:
    outputs = fn.outputs
    for index in range(len(outputs) if len(outputs) > 1 else 0):
        yield fn.with_ops(fn.ops, outputs=outputs[:index] + outputs[index + 1:])
    for op in fn.ops:
        yield cut(fn, op)
    for op in fn.ops:
        if len(op.results) != 1:
            continue
        result = op.result
        for operand in dict.fromkeys(op.operands):
            if operand.type.shape == result.type.shape and operand.type.dtype == result.type.dtype:
                yield fn.replace_uses({result: operand})


def cut(fn: Function, op: Op) -> Function:
    """``fn`` with ``op`` removed and its results turned into new parameters."""
    fresh = {r: Value(r.type, r.hint) for r in op.results}
    rest = fn.with_ops([o for o in fn.ops if o is not op]).replace_uses(fresh)
    return Function(fn.name, fn.params + tuple(fresh.values()), rest.ops, rest.outputs, fn.metadata)


def prune(fn: Function) -> Function:
    """``fn`` without dead ops and without parameters nothing reads."""
    fn = dce(fn)
    used: set[Value] = set(fn.outputs)
    for op in fn.ops:
        used.update(op.operands)
    params = tuple(p for p in fn.params if p in used)
    if len(params) == len(fn.params):
        return fn
    return Function(fn.name, params, fn.ops, fn.outputs, fn.metadata)
