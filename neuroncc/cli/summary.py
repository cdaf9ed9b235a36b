"""Kernel summaries of compiled graphs, as ``neuroncc compile``, ``inspect --kernels`` and ``demo`` print them:
the launches (the passes' :func:`~neuroncc.passes.kernels.kernel_summary`), and what each kernel computes in
short form (its ops without views and constants, which cost nothing: ``sub, mul x2, add, gelu``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from neuroncc.ir import REGISTRY, Category, Function, Op
from neuroncc.passes.kernels import KernelSummary, is_free, kernel_summary

#: Ops that run as a GEMM (at the top level: an extern call with no fused epilogue).
_MATMULS = frozenset(d.name for d in REGISTRY.by_category(Category.MATMUL))
#: Distinct op names listed per line before the list is cut short.
_SHORT_FORM_LIMIT = 10


@dataclass(frozen=True, slots=True)
class KernelInfo:
    name: str
    ops: tuple[str, ...]  # the region's compute ops (views and constants left out), in order


@dataclass(frozen=True, slots=True)
class GraphSummary:
    """What a compiled graph launches."""

    name: str
    ops: int  # every op, inside kernels too
    counts: KernelSummary
    kernels: tuple[KernelInfo, ...]
    extern_matmuls: tuple[str, ...]  # matmuls at the top level, run alone (extern GEMM calls)
    other_ops: tuple[str, ...]  # top-level ops that are neither kernels, matmuls, views nor constants

    def to_json(self) -> dict[str, object]:
        c = self.counts
        return {"name": self.name, "ops": self.ops, "launches": c.launches, "kernels": len(self.kernels),
                "fused_kernels": c.fused_kernels, "matmul_kernels": c.matmul_kernels,
                "extern_matmuls": c.matmuls, "views": c.views, "other_ops": c.other,
                "kernel_ops": {k.name: list(k.ops) for k in self.kernels}}

    def headline(self) -> str:
        c = self.counts
        parts = [f"{_count(len(self.kernels), 'kernel')} ({c.matmul_kernels} with a matmul)",
                 _count(c.matmuls, "extern matmul")]
        if c.other:
            parts.append(_count(c.other, "unfused op"))
        return f"{_count(self.ops, 'op')} -> {_count(c.launches, 'launch', 'launches')}: " + ", ".join(parts)

    def lines(self, limit: int | None = None, ops_limit: int | None = _SHORT_FORM_LIMIT) -> list[str]:
        """The headline, then one line per kernel (at most ``limit``), the extern matmuls and unfused ops
        (each op list cut after ``ops_limit`` distinct names)."""
        lines = [self.headline()]
        width = max((len(k.name) for k in self.kernels), default=0)
        shown = self.kernels if limit is None else self.kernels[:limit]
        for kernel in shown:
            lines.append(f"  {kernel.name.ljust(width)}  {short_op_list(kernel.ops, ops_limit) or '(moves data)'}")
        if len(shown) < len(self.kernels):
            lines.append(f"  ... and {len(self.kernels) - len(shown)} more kernels")
        if self.extern_matmuls:
            lines.append(f"  extern matmuls: {short_op_list(self.extern_matmuls, ops_limit)}")
        if self.other_ops:
            lines.append(f"  unfused ops: {short_op_list(self.other_ops, ops_limit)}")
        return lines


def summarize(fn: Function) -> GraphSummary:
    """Summarize ``fn``, normally the post-pipeline graph an executable runs."""
    counts = kernel_summary(fn)
    kernels, matmuls, other = [], [], []
    for op in fn.ops:
        if op.regions and "name" in op.attrs:
            kernels.append(KernelInfo(str(op.attrs["name"]), _compute_ops(op)))
        elif op.name in _MATMULS:
            matmuls.append(op.name)
        elif not is_free(op):
            other.append(op.name)
    return GraphSummary(fn.name, sum(1 for _ in fn.walk()), counts, tuple(kernels), tuple(matmuls), tuple(other))


def short_op_list(names: Sequence[str], limit: int | None = _SHORT_FORM_LIMIT) -> str:
    """``(sub, mul, mul, add)`` -> ``sub, mul x2, add`` (counts by name, in order of first use)."""
    counts = Counter(names)
    items = [name if counts[name] == 1 else f"{name} x{counts[name]}" for name in dict.fromkeys(names)]
    if limit is not None and len(items) > limit:
        return ", ".join(items[:limit]) + f", ... (+{len(items) - limit})"
    return ", ".join(items)


def _count(n: int, one: str, many: str | None = None) -> str:
    return f"{n} {one if n == 1 else many or one + 's'}"


def _compute_ops(kernel: Op) -> tuple[str, ...]:
    return tuple(op.name for region in kernel.regions for op in region.walk() if not is_free(op))
