"""One compile cache entry as ``neuroncc cache list/verify`` sees it (:meth:`CompileCache.list_entries`).

A module of its own (not :mod:`neuroncc.driver.cache`, which every graph cache hit imports): only the cache's
inspection and maintenance build these, and the class's generated methods are ~0.8 ms of an import
(docs/performance-history.md, session 23 hit23).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from neuroncc.driver.artifact import Manifest


@dataclass(frozen=True, slots=True)
class CacheEntry:
    """One entry as ``neuroncc cache list/verify`` sees it; ``problem`` is None for a readable manifest."""

    key: str
    directory: Path
    manifest: Manifest | None
    problem: str | None
    size: int
    modified: float  # st_mtime of the entry directory
