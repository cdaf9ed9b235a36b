"""The test suite's memo of neuroncc's source digest (neuroncc/testing/digest_memo.py): a package's files are
hashed once per process while their stat list is unchanged and settled; each new cache directory still gets
the stamp ``package_digest`` would write."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

import neuroncc
from neuroncc.driver import cache_key, source_digest
from neuroncc.testing import digest_memo

pytestmark = pytest.mark.skipif(os.environ.get("NEURONCC_TEST_DIGEST_MEMO") == "0", reason="memo turned off")

OLD = time.time_ns() - 60 * 10**9  # an mtime a minute ago
#: The files were just written (their ctime is now): they count as settled at once, and a change is made only
#: after the file system's timestamp clock (a few ms) has moved on, so that it shows in the ctime (as in
#: tests/driver/test_source_digest.py).
SETTLED = 0


def _package(root: Path) -> Path:
    package = root / "pkg"
    package.mkdir()
    for name, text in {"__init__.py": "x = 1\n", "a.py": "y = 2\n"}.items():
        (package / name).write_text(text)
        os.utime(package / name, ns=(OLD, OLD))
    return package


def _cache(root: Path) -> Path:
    root.mkdir(mode=0o700)
    return root


def _counting_hashes(monkeypatch) -> list[Path]:
    hashed = []
    original = source_digest.hash_files
    monkeypatch.setattr(source_digest, "hash_files", lambda package, files: hashed.append(package) or
                        original(package, files))
    return hashed


def test_the_test_processes_key_with_the_memo():
    assert cache_key.package_digest is digest_memo.remembered_package_digest  # installed by tests/conftest.py


def test_a_second_cache_directory_is_stamped_without_hashing_again(tmp_path, monkeypatch):
    package, hashed = _package(tmp_path), _counting_hashes(monkeypatch)
    first = digest_memo.remembered_package_digest(package, _cache(tmp_path / "a"), settle_ns=SETTLED)
    second = digest_memo.remembered_package_digest(package, _cache(tmp_path / "b"), settle_ns=SETTLED)
    full = source_digest.hash_files(package, source_digest.source_files(package))
    assert first == second == (full, 2) and len(hashed) == 2  # the first call and the full hash here
    for root in (tmp_path / "a", tmp_path / "b"):  # the stamps package_digest writes, in both directories
        stats = source_digest.stat_list(package)
        assert source_digest.read_stamp(source_digest.stamp_path(root, package), package, stats) == full


def test_a_changed_file_is_hashed_again(tmp_path, monkeypatch):
    package, hashed = _package(tmp_path), _counting_hashes(monkeypatch)
    before = digest_memo.remembered_package_digest(package, None, settle_ns=SETTLED)
    assert digest_memo.remembered_package_digest(package, None, settle_ns=SETTLED) == before and len(hashed) == 1
    time.sleep(0.05)
    (package / "a.py").write_text("y = 3\n")  # same size and (restored) mtime: only ctime tells
    os.utime(package / "a.py", ns=(OLD, OLD))
    after = digest_memo.remembered_package_digest(package, None, settle_ns=SETTLED)
    assert after != before and after[0] == source_digest.hash_files(package, ["__init__.py", "a.py"])
    assert len(hashed) == 3


def test_a_list_that_has_not_settled_is_never_remembered(tmp_path, monkeypatch):
    package, hashed = _package(tmp_path), _counting_hashes(monkeypatch)
    recent = 3600 * 10**9  # every file changed within the last hour
    digest_memo.remembered_package_digest(package, None, settle_ns=recent)
    digest_memo.remembered_package_digest(package, None, settle_ns=recent)
    assert len(hashed) == 2


def test_neuroncc_digest_is_the_full_hash(tmp_path):
    package = Path(neuroncc.__file__).resolve().parent
    digest = digest_memo.remembered_package_digest(package, _cache(tmp_path / "cache"))
    assert digest == (source_digest.hash_files(package, source_digest.source_files(package)),
                      len(source_digest.source_files(package)))
