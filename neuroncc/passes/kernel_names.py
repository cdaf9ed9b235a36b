"""How the fusion pass names kernels: ``fused_<n>_<what is inside>``, from a table of recognized patterns.

The name says what a kernel computes (``fused_3_softmax``, ``fused_5_mm_add_gelu``): its matmul, else the first
pattern of :data:`PATTERNS` whose ops all appear in it, else its first distinct compute ops (copies and casts,
which say nothing of what a kernel computes, left out). Names are deterministic; nothing reads them for meaning.
"""

from __future__ import annotations

from neuroncc.ir import REGISTRY, Category, Op
from neuroncc.passes.fusion_groups import CONSTANT, VIEW, op_kind

#: Recognized patterns, most specific first: (name, ops that must all appear in the region).
PATTERNS = (
    ("log_softmax", frozenset({"amax", "exp", "sum", "log"})),
    ("softmax", frozenset({"amax", "exp", "sum"})),
    ("layer_norm", frozenset({"mean", "rsqrt"})),
    ("layer_norm", frozenset({"var", "rsqrt"})),
)

#: Ops left out of a name.
UNDESCRIPTIVE = frozenset({"copy", "cast"})


def describe(ops: list[Op]) -> str:
    """A short name for a kernel body: its matmul, a recognized pattern, or its first distinct compute ops."""
    names = [op.name for op in ops if op_kind(op) not in (VIEW, CONSTANT)]
    parts = [n for n in names if REGISTRY.get(n).category is Category.MATMUL]
    present = set(names)
    pattern = next((label for label, needed in PATTERNS if needed <= present), None)
    if pattern is not None:
        parts.append(pattern)
    else:
        for n in names:
            if n not in parts and n not in UNDESCRIPTIVE and len(parts) < 3:
                parts.append(n)
    return "_".join(parts) or (names[0] if names else "empty")
