"""The test suite's memo of neuroncc's source digest: the sources hashed once per test process, not once per test.

Every test compiles into a compile cache of its own (``tests/conftest.py``). A process keys its compiles with one
build environment (``driver/cache_key.py``: computed once), and stamps it into each cache directory it trusts,
for the next process to read instead of hashing (``driver/source_digest.py``). So each test's first compile
read and hashed neuroncc's ~330 source files (2.9 MB) again: 12-20 ms of CPU on the cache's publisher thread,
which competes with the test for the GIL (a 40 Hz profile of ``tests/edge/test_special_functions.py``: 6% of
its samples in ``hash_files``), ~25 ms with the rest of a new directory's stamps, in thousands of tests.

A digest depends only on the files' bytes, and the stamp's own argument says when they are unchanged: the same
list of (path, size, mtime_ns, ctime_ns, inode), taken before the hash, with no file changed in the last
``SETTLE_NS``. :func:`install` wraps the ``package_digest`` the cache key calls (``cache_key``'s name for it)
to take the digest of a list it has hashed before in this process, and to leave the stamp as
``package_digest`` leaves it (a valid one kept, else the digest written). A list that changed, or that is not
settled, is hashed as before. ``source_digest.package_digest`` itself (what its tests call) is unchanged, and a
test that replaces ``cache_key.package_digest`` replaces the memo with it for its duration.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

from neuroncc.driver import cache_key, source_digest

#: ``cache_key.package_digest`` as it was before :func:`install` (what a memo miss calls); None before.
ORIGINAL: Any = None
#: (resolved package directory, sha256 of its stat list) -> digest, for settled lists hashed in this process.
DIGESTS: dict[tuple[str, str], str] = {}
_LOCK = threading.Lock()


def remembered_package_digest(package_dir: Path, stamp_root: Path | None = None,
                              settle_ns: int = source_digest.SETTLE_NS) -> tuple[str, int]:
    """``package_digest`` with the digest of a settled stat list taken from :data:`DIGESTS`."""
    package_dir = package_dir.resolve()
    stats = source_digest.stat_list(package_dir)
    now = time.time_ns()
    settled = all(max(s[2], s[3]) < now - settle_ns for s in stats)
    key = (str(package_dir), source_digest._stats_digest(stats))
    with _LOCK:
        digest = DIGESTS.get(key) if settled else None
    if digest is None:
        # a change after this list was taken gives a newer ctime or inode: this key never lists those files again
        digest, count = ORIGINAL(package_dir, stamp_root, settle_ns)
        if settled:
            with _LOCK:
                DIGESTS[key] = digest
        return digest, count
    if stamp_root is not None:
        path = source_digest.stamp_path(stamp_root, package_dir)
        if source_digest.read_stamp(path, package_dir, stats) is None:
            source_digest.write_stamp(path, package_dir, stats, digest)
    return digest, len(stats)


def install() -> None:
    """Put the memo in place of ``cache_key.package_digest`` (once per process)."""
    global ORIGINAL
    if ORIGINAL is not None:
        return
    ORIGINAL = cache_key.package_digest
    cache_key.package_digest = remembered_package_digest
