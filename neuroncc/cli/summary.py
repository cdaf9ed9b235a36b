"""Kernel summaries of compiled graphs: how many kernels, which matmuls run as extern calls, what each kernel
computes (its ops in short form), as ``neuroncc compile``, ``inspect --kernels`` and ``demo`` print them.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from neuroncc.ir import REGISTRY, Category, Function, Op

#: Ops listed per kernel before the list is cut short.
_SHORT_FORM_LIMIT = 10


@dataclass(frozen=True, slots=True)
class KernelInfo:
    name: str
    ops: tuple[str, ...]  # the region's op names, in order

    @property
    def has_matmul(self) -> bool:
        return any(_category(name) is Category.MATMUL for name in self.ops)


@dataclass(frozen=True, slots=True)
class GraphSummary:
    """What a compiled graph launches."""

    name: str
    ops: int  # every op, inside kernels too
    kernels: tuple[KernelInfo, ...]
    extern_matmuls: tuple[str, ...]  # top-level matmul ops (run as extern calls, e.g. ATen GEMMs)
    loose_ops: tuple[str, ...]  # other top-level ops, not in any kernel

    def to_json(self) -> dict[str, object]:
        return {"name": self.name, "ops": self.ops, "kernels": len(self.kernels),
                "extern_matmuls": len(self.extern_matmuls), "loose_ops": len(self.loose_ops),
                "kernel_ops": {k.name: list(k.ops) for k in self.kernels}}

    def headline(self) -> str:
        if not self.kernels:
            return (f"{self.ops} ops, no fused kernels (this build's pipeline does not fuse): "
                    f"{len(self.extern_matmuls)} matmuls, {len(self.loose_ops)} other ops run one by one")
        parts = [f"{len(self.kernels)} kernels", f"{len(self.extern_matmuls)} extern matmuls"]
        if self.loose_ops:
            parts.append(f"{len(self.loose_ops)} ops outside kernels")
        return f"{self.ops} ops -> " + ", ".join(parts)

    def lines(self, limit: int | None = None, ops_limit: int | None = _SHORT_FORM_LIMIT) -> list[str]:
        """The headline, then one line per kernel (at most ``limit``), extern matmuls, loose ops (each op list
        cut after ``ops_limit`` distinct names)."""
        lines = [self.headline()]
        width = max((len(k.name) for k in self.kernels), default=0)
        shown = self.kernels if limit is None else self.kernels[:limit]
        for kernel in shown:
            lines.append(f"  {kernel.name.ljust(width)}  {short_op_list(kernel.ops, ops_limit)}")
        if len(shown) < len(self.kernels):
            lines.append(f"  ... and {len(self.kernels) - len(shown)} more kernels")
        if self.extern_matmuls:
            lines.append(f"  extern matmuls: {short_op_list(self.extern_matmuls, ops_limit)}")
        if self.loose_ops:
            lines.append(f"  {'other ops' if self.kernels else 'ops'}: {short_op_list(self.loose_ops, ops_limit)}")
        return lines


def summarize(fn: Function) -> GraphSummary:
    """Count what ``fn`` (normally the post-pipeline graph an executable runs) launches."""
    kernels: list[KernelInfo] = []
    matmuls: list[str] = []
    loose: list[str] = []
    for op in fn.ops:
        category = _category(op.name)
        if category is Category.KERNEL:
            kernels.append(KernelInfo(str(op.attrs.get("name", f"kernel{len(kernels)}")), _region_ops(op)))
        elif category is Category.MATMUL or (category is Category.EXTERN and "mm" in op.name):
            matmuls.append(op.name)
        elif category is not Category.CONSTANT:
            loose.append(op.name)
    return GraphSummary(fn.name, sum(1 for _ in fn.walk()), tuple(kernels), tuple(matmuls), tuple(loose))


def short_op_list(names: tuple[str, ...] | list[str], limit: int | None = _SHORT_FORM_LIMIT) -> str:
    """``(sub, mul, mul, add)`` -> ``sub, mul x2, add`` (counts by name, in order of first use)."""
    counts = Counter(names)
    items = [name if counts[name] == 1 else f"{name} x{counts[name]}" for name in dict.fromkeys(names)]
    if limit is not None and len(items) > limit:
        return ", ".join(items[:limit]) + f", ... (+{len(items) - limit})"
    return ", ".join(items)


def _region_ops(op: Op) -> tuple[str, ...]:
    return tuple(inner.name for region in op.regions for inner in region.walk())


def _category(name: str) -> Category | None:
    return REGISTRY.get(name).category if name in REGISTRY else None
