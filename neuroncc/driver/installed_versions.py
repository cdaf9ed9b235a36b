"""The installed versions of the key's dependencies (torch, llvmlite), remembered between processes.

``importlib.metadata.version`` scans the entries of ``sys.path`` for a distribution's metadata: ~2.5-3 ms for
torch and llvmlite, once per process, which every warm start paid. Its answer depends only on the entries'
directory listings and the metadata files it then reads, so the answer is stored in the cache directory (beside
neuroncc's source digest, :mod:`neuroncc.driver.source_digest`) with a sha256 of what it depended on:

    <cache dir>/source/versions-<sha256(names)[:16]>.json
        {"version", "names", "stats_sha256", "versions", "checksum"}

where ``stats_sha256`` covers each ``sys.path`` entry (and the current directory, if an entry is relative) with
its (mtime_ns, ctime_ns, inode) or "missing", and each found distribution's metadata directory and ``METADATA`` file with theirs (and
the size). An install, upgrade or uninstall adds, removes or renames entries of a ``sys.path`` directory,
which sets that directory's mtime and ctime (no system call sets a ctime back); a metadata file rewritten in
place gets a new ctime; another ``sys.path`` is another list. Timestamps are coarse, so as for the source
digest nothing is stamped while any of them is younger than :data:`neuroncc.driver.source_digest.SETTLE_NS`.
Distributions found by an import hook other than the standard path finder cannot be stamped this way: then the
versions are read every time. A stamp that is unreadable, damaged (its checksum) or of another version is
ignored and rewritten. Nothing here is pickled.
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.metadata
import os
import sys
import time
from pathlib import Path
from typing import Any

from neuroncc.driver.source_digest import SETTLE_NS, STAMP_DIR, read_checked, write_checked

STAMP_VERSION = 1
NOT_INSTALLED = "not installed"


def installed_versions(names: tuple[str, ...], stamp_root: Path | None = None,
                       settle_ns: int = SETTLE_NS) -> dict[str, str]:
    """Each distribution's installed version (:data:`NOT_INSTALLED` when absent), from the stamp under
    ``stamp_root`` while nothing it depended on changed, else read (and stamped when ``stamp_root`` is given)."""
    if stamp_root is None or not _only_the_path_finder():
        return {name: _read_version(name)[0] for name in names}
    path = stamp_root / STAMP_DIR / f"versions-{hashlib.sha256(repr(names).encode()).hexdigest()[:16]}.json"
    stamped = _read_stamp(path, names)
    if stamped is not None:
        versions, distributions, stats = stamped
        if _stats(distributions)[0] == stats:
            return versions
    now = time.time_ns()
    read = {name: _read_version(name) for name in names}
    distributions = {name: location for name, (_, location) in read.items()}
    stats, newest = _stats(distributions)
    versions = {name: version for name, (version, _) in read.items()}
    if newest < now - settle_ns:
        _write_stamp(path, names, versions, distributions, stats)
    return versions


def _only_the_path_finder() -> bool:
    """Whether the standard path finder is the only import hook that finds distributions."""
    return all(finder is importlib.machinery.PathFinder for finder in sys.meta_path
               if hasattr(finder, "find_distributions"))


def _read_version(name: str) -> tuple[str, str | None]:
    """(version, its metadata directory, or None when not installed or not a directory)."""
    try:
        distribution = importlib.metadata.distribution(name)
    except importlib.metadata.PackageNotFoundError:
        return NOT_INSTALLED, None
    location = getattr(distribution, "_path", None)
    return distribution.version, None if location is None else str(location)


def _stats(distributions: dict[str, str | None]) -> tuple[str, int]:
    """(sha256 over what the versions depend on, the newest of those timestamps)."""
    lines, newest = [], 0
    relative = any(not os.path.isabs(entry) for entry in sys.path)  # "" (python -c) or "dir": read from the cwd
    places = [*([os.getcwd()] if relative else []), *sys.path]
    for name, location in sorted(distributions.items()):
        places += [f"{name}={location}"] if location is None else [location, os.path.join(location, "METADATA")]
    for place in places:
        try:
            st = os.stat(place)
        except (OSError, ValueError):
            lines.append(f"{place} missing")
            continue
        lines.append(f"{place} {st.st_size} {st.st_mtime_ns} {st.st_ctime_ns} {st.st_ino}")
        newest = max(newest, st.st_mtime_ns, st.st_ctime_ns)
    return hashlib.sha256("\n".join(lines).encode()).hexdigest(), newest


def _read_stamp(path: Path, names: tuple[str, ...]) -> tuple[dict[str, str], dict[str, str | None], str] | None:
    """(the versions, their metadata directories, the digest of the stats they depended on), or None."""
    fields = read_checked(path)
    if fields is None:
        return None
    versions, distributions, stats = fields.get("versions"), fields.get("distributions"), fields.get("stats_sha256")
    if fields.get("version") != STAMP_VERSION or fields.get("names") != list(names) or type(stats) is not str \
            or not isinstance(versions, dict) or not isinstance(distributions, dict) \
            or sorted(versions) != sorted(names) or sorted(distributions) != sorted(names) \
            or any(type(v) is not str for v in versions.values()) \
            or any(v is not None and type(v) is not str for v in distributions.values()):
        return None
    return versions, distributions, stats


def _write_stamp(path: Path, names: tuple[str, ...], versions: dict[str, str], distributions: dict[str, str | None],
                 stats: str) -> None:
    """Write the stamp (a temp file renamed into place); failing to only costs the next process the reading."""
    fields: dict[str, Any] = {"version": STAMP_VERSION, "names": list(names), "stats_sha256": stats,
                              "versions": versions, "distributions": distributions}
    write_checked(path, fields)


__all__ = ["NOT_INSTALLED", "installed_versions"]
