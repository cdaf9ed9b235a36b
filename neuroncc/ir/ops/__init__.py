"""The op registry: every op of the IR, gathered in one place from the op modules.

Each op module defines its ops' definitions (types, attributes, traits) and numpy references. May import: errors,
the rest of ``neuroncc.ir``."""

from neuroncc.ir.opdef import Category, OpDef, OpRegistry
from neuroncc.ir.ops import (
    complex, creation, elementwise, indexing, library_attention, library_fft, library_ldl, library_linalg,
    library_sort, linalg, movement, random, reduction,
)

REGISTRY = OpRegistry(
    elementwise.OPS + reduction.OPS + linalg.OPS + movement.OPS + complex.OPS + indexing.OPS + creation.OPS
    + library_linalg.OPS + library_ldl.OPS + library_sort.OPS + library_attention.OPS + library_fft.OPS
    + random.OPS
)

__all__ = ["REGISTRY", "Category", "OpDef", "OpRegistry"]
