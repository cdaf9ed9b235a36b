"""The per-op test table: every registered op (except ``kernel``) maps to an :class:`OpSpec`.

Each cases module holds one op family; this module only merges them, so a new op needs one entry in the
family's module (``test_op_table_covers_the_registry`` fails until it has one).
"""

from __future__ import annotations

from . import (
    cases_attention, cases_complex, cases_creation, cases_elementwise, cases_indexing, cases_library, cases_linalg,
    cases_movement, cases_random, cases_reduction,
)
from .spec import OpSpec

SPECS: dict[str, OpSpec] = {}
for _module in (cases_elementwise, cases_reduction, cases_linalg, cases_movement, cases_indexing, cases_creation,
                cases_library, cases_attention, cases_complex, cases_random):
    _overlap = set(SPECS) & set(_module.SPECS)
    assert not _overlap, f"ops specified twice: {sorted(_overlap)}"
    SPECS.update(_module.SPECS)

#: Ops tested elsewhere: ``kernel`` needs a hand-built region (see test_kernel.py).
TESTED_SEPARATELY = frozenset({"kernel"})
