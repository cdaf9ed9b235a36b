"""What the front end keeps of each graph it compiled (``neuroncc.frontend.stats.compile_records()``).

A module of its own (not :mod:`neuroncc.frontend.stats`, which every graph cache hit imports): a hit compiles
nothing and makes no record, and the class's generated methods are ~0.6 ms of an import
(docs/performance-history.md, session 23 hit23).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the records come from a compile (driver/records.py): off a graph cache hit's path
    from neuroncc.driver.records import CompileRecord


@dataclass(frozen=True)
class CompiledGraphRecord:
    """A graph the front end compiled: the driver's record plus the time spent importing the FX graph to IR."""

    record: CompileRecord
    import_seconds: float
