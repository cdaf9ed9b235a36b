"""Why a compile-cache lookup missed: the closest stored entry and the key components it differs in.

Read only when a miss is to be explained (the log line of a compile, ``NEURONCC_LOG``/``TORCH_LOGS``):
``cache miss (closest stored entry, @g0_0_inference, differs in: graph, inputs)``.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

from neuroncc.driver.artifact import read_manifest
from neuroncc.driver.cache_key import CacheKey, component_differences
from neuroncc.errors import ArtifactError

#: How many stored entries of a graph name a miss is compared with, newest first.
EXPLAIN_MISS_ENTRIES = 64


def closest_entry(entries_dir: Path, key: CacheKey, graph_name: str,
                  target: str | None = None) -> tuple[str | None, tuple[str, ...]]:
    """(the closest stored entry's graph name, the key components in which it differs from ``key``).

    Entries of the same graph name are compared first, then any entry (a new specialization has a new name);
    the newest :data:`EXPLAIN_MISS_ENTRIES` of each are read, only those built for ``target`` when given (an
    entry of another kind, such as a graph cache entry, differs in every component and explains nothing).
    ``(None, ())`` when there is none."""
    mine = {c.name: c.digest for c in key.components}
    manifests = []
    with contextlib.suppress(OSError):
        for directory in sorted(entries_dir.iterdir(), key=_modified, reverse=True)[:4 * EXPLAIN_MISS_ENTRIES]:
            with contextlib.suppress(ArtifactError):
                manifest = read_manifest(directory)
                if manifest.key != key.key and target in (None, manifest.target):
                    manifests.append(manifest)
    same_name = [m for m in manifests if m.graph_name == graph_name][:EXPLAIN_MISS_ENTRIES]
    best: tuple[str | None, tuple[str, ...]] = (None, ())
    for manifest in same_name or manifests[:EXPLAIN_MISS_ENTRIES]:
        theirs = {name: record.digest for name, record in manifest.key_components.items()}
        differing = tuple(component_differences(mine, theirs))
        if best[0] is None or len(differing) < len(best[1]):
            best = (manifest.graph_name, differing)
    return best


def _modified(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0
