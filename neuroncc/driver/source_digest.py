"""neuroncc's own source digest (the ``neuroncc_source`` key component), remembered between processes.

Every cache key includes a sha256 over neuroncc's ``.py`` files, so a compiler change is a miss. Reading and
hashing the ~300 files costs 10-40 ms, once per process: on a warm start (the graph cache's first call) it was
a quarter of neuroncc's own time. So the digest is stored in the cache directory beside the list of what each
file was when it was hashed, and a process whose files match that list takes the digest from there:

    <cache dir>/source/<sha256(package path)[:16]>.json
        {"version", "package", "stats_sha256", "digest", "count", "checksum"}

where ``stats_sha256`` is a sha256 over each file's (path, size, mtime_ns, ctime_ns, inode), in path order.

Why a matching list cannot hide a change: a write to a file (or a truncation) sets its ctime, which only the
kernel sets (no system call puts a chosen ctime on a file); a file replaced by a rename has another inode; a
file added or removed changes the list itself. The list is taken *before* the files are hashed, so a file
changed during the hash leaves a stamp whose list is already out of date (the next process hashes again),
never a new list beside an old digest. File systems stamp times from a coarse clock (a few ms), so a second
write right after the first may leave the same ctime ("racy git"): no stamp is written while any file was
changed less than :data:`SETTLE_NS` before the list was taken (the next process then hashes, and stamps). A
stamp that is unreadable, damaged (its checksum), of another version or package, or whose list differs is
ignored and rewritten; failing to write it only costs the next process the full hash. Nothing here is pickled.

The same argument holds inside a process: a settled list's digest is remembered in memory, so a process that
keys compiles in several cache directories (a test run makes one per test) hashes its sources once and still
stamps each new directory.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from neuroncc.codegen.llvm.fork_safety import renew_in_child

STAMP_VERSION = 1
STAMP_DIR = "source"
#: A file changed less than this long before the stat list was taken keeps the stamp from being written.
SETTLE_NS = 2_000_000_000

#: (path relative to the package, size, mtime_ns, ctime_ns, inode) of one source file
FileStat = tuple[str, int, int, int, int]

#: (resolved package directory, sha256 of its stat list) -> digest, for the settled lists this process hashed
#: or read from a stamp (the stamp's argument, kept in memory)
_DIGESTS: dict[tuple[str, str], str] = {}
_DIGESTS_LOCK = renew_in_child(threading.Lock())


def source_files(package_dir: Path) -> list[str]:
    """The package's ``.py`` files, as sorted posix paths relative to ``package_dir`` (``__pycache__`` and
    symbolic links to directories left out)."""
    return sorted(name for name, _ in _scan(str(package_dir)))


def stat_list(package_dir: Path) -> list[FileStat]:
    """(path, size, mtime_ns, ctime_ns, inode) of each of the package's ``.py`` files, sorted by path."""
    return sorted((name, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino) for name, st in _scan(str(package_dir)))


def _scan(root: str, prefix: str = "") -> list[tuple[str, os.stat_result]]:
    found = []
    with os.scandir(root) as entries:
        for entry in entries:
            if entry.is_dir(follow_symlinks=False):
                if entry.name != "__pycache__":
                    found.extend(_scan(entry.path, f"{prefix}{entry.name}/"))
            elif entry.name.endswith(".py"):
                found.append((prefix + entry.name, entry.stat()))
    return found


def _stats_digest(stats: list[FileStat]) -> str:
    return hashlib.sha256("\n".join(" ".join(map(str, s)) for s in stats).encode()).hexdigest()


def hash_files(package_dir: Path, files: list[str]) -> str:
    """sha256 over ``files`` (relative path and bytes, in the given order)."""
    h = hashlib.sha256()
    for name in files:
        h.update(name.encode() + b"\0")
        data = (package_dir / name).read_bytes()
        h.update(len(data).to_bytes(8, "little") + data)
    return h.hexdigest()


def package_digest(package_dir: Path, stamp_root: Path | None = None, settle_ns: int = SETTLE_NS) -> tuple[str, int]:
    """(sha256 over the package's ``.py`` files, how many): from the stamp under ``stamp_root`` when the files
    are unchanged since it was written, else from this process's memory of the same settled list, else hashed;
    the stamp is written when ``stamp_root`` is given, it did not hold the digest, and no file changed in the
    last ``settle_ns``."""
    package_dir = package_dir.resolve()
    stats = stat_list(package_dir)  # before hashing: see the module docstring
    files = [s[0] for s in stats]
    now = time.time_ns()
    settled = all(max(s[2], s[3]) < now - settle_ns for s in stats)
    # a change after this list was taken gives a newer ctime or inode: this key never lists those files again
    key = (str(package_dir), _stats_digest(stats))
    path = None if stamp_root is None else stamp_path(stamp_root, package_dir)
    digest = None if path is None else read_stamp(path, package_dir, stats)
    stamped = digest is not None
    if not stamped:
        with _DIGESTS_LOCK:
            digest = _DIGESTS.get(key) if settled else None
        if digest is None:
            digest = hash_files(package_dir, files)
    if settled:
        with _DIGESTS_LOCK:
            _DIGESTS[key] = digest
        if path is not None and not stamped:
            write_stamp(path, package_dir, stats, digest)
    return digest, len(files)


def stamp_path(stamp_root: Path, package_dir: Path) -> Path:
    return stamp_root / STAMP_DIR / f"{hashlib.sha256(str(package_dir).encode()).hexdigest()[:16]}.json"


def _checksum(fields: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(fields, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def read_stamp(path: Path, package_dir: Path, stats: list[FileStat]) -> str | None:
    """The digest the stamp at ``path`` records for exactly ``stats`` of ``package_dir``, else None."""
    fields = read_checked(path)
    if fields is None:
        return None
    digest = fields.get("digest")
    if fields.get("version") != STAMP_VERSION or fields.get("package") != str(package_dir) \
            or fields.get("stats_sha256") != _stats_digest(stats) or fields.get("count") != len(stats) \
            or type(digest) is not str or len(digest) != 64:
        return None
    return digest


def write_stamp(path: Path, package_dir: Path, stats: list[FileStat], digest: str) -> bool:
    """Write the stamp (a temp file renamed into place: readers see a whole stamp or none); False on failure."""
    fields: dict[str, Any] = {"version": STAMP_VERSION, "package": str(package_dir),
                              "stats_sha256": _stats_digest(stats), "digest": digest, "count": len(stats)}
    return write_checked(path, fields)


def read_checked(path: Path) -> dict[str, Any] | None:
    """The fields of the stamp at ``path`` (a JSON object with its own checksum), or None when it is missing,
    unreadable or damaged."""
    try:
        fields = json.loads(path.read_bytes().decode("utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    if not isinstance(fields, dict) or fields.pop("checksum", None) != _checksum(fields):
        return None
    return fields


def write_checked(path: Path, fields: dict[str, Any]) -> bool:
    """Write ``fields`` with their checksum as the stamp at ``path`` (a temp file renamed into place: readers see
    a whole stamp or none); False on failure, which only costs the next process the work the stamp saves."""
    fields = {**fields, "checksum": _checksum(fields)}
    try:
        path.parent.mkdir(mode=0o700, exist_ok=True)  # in the cache directory, which the cache created (0700)
        fd, temp = tempfile.mkstemp(prefix=path.name, dir=path.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(fields, f, separators=(",", ":"))
            os.replace(temp, path)
        except BaseException:
            os.unlink(temp)
            raise
    except OSError:
        return False
    return True


__all__ = ["package_digest", "source_files", "stamp_path"]
