"""The source digest stamp: the same digest as a full hash, and never an old digest for changed files."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from neuroncc.driver import source_digest
from neuroncc.driver.cache_key import BuildEnvironment, package_source_digest
from neuroncc.driver.source_digest import hash_files, package_digest, source_files, stamp_path
import neuroncc

OLD = time.time_ns() - 60 * 10**9  # an mtime a minute ago
#: The tests' files were just written (their ctime is now): they count as settled at once, and a change is made
#: only after the file system's timestamp clock (a few ms) has moved on, so it shows in the ctime.
SETTLED = 0


def _digest(package: Path, cache: Path | None) -> tuple[str, int]:
    if cache is not None and not cache.exists():
        cache.mkdir(mode=0o700)  # as the compile cache makes it (the stamp goes into an existing cache directory)
    return package_digest(package, cache, settle_ns=SETTLED)


def _package(root: Path) -> Path:
    package = root / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__pycache__").mkdir()
    for name, text in {"__init__.py": "x = 1\n", "sub/a.py": "y = 2\n", "__pycache__/c.py": "skipped\n",
                       "data.txt": "not source\n"}.items():
        (package / name).write_text(text)
        os.utime(package / name, ns=(OLD, OLD))
    return package


def _full(package: Path) -> str:
    return hash_files(package.resolve(), source_files(package.resolve()))


def test_files_are_the_py_files_outside_pycache(tmp_path):
    assert source_files(_package(tmp_path)) == ["__init__.py", "sub/a.py"]


def test_stamp_gives_the_full_hash_and_is_used(tmp_path, monkeypatch):
    package, cache = _package(tmp_path), tmp_path / "cache"
    first = _digest(package, cache)
    assert first == (_full(package), 2)
    assert stamp_path(cache, package.resolve()).is_file()
    monkeypatch.setattr(source_digest, "hash_files", lambda *a: pytest.fail("hashed despite a valid stamp"))
    assert _digest(package, cache) == first


@pytest.mark.parametrize("change", ["same-size edit", "new file", "removed file", "replaced by rename"])
def test_a_change_is_never_hidden_by_the_stamp(tmp_path, change):
    package, cache = _package(tmp_path), tmp_path / "cache"
    _digest(package, cache)
    assert stamp_path(cache, package.resolve()).is_file()
    time.sleep(0.05)
    target = package / "sub" / "a.py"
    if change == "same-size edit":  # same size and (restored) mtime: only ctime tells
        target.write_text("y = 3\n")
        os.utime(target, ns=(OLD, OLD))
    elif change == "new file":
        (package / "sub" / "b.py").write_text("z = 1\n")
    elif change == "removed file":
        target.unlink()
    else:
        (package / "tmp.txt").write_text("y = 4\n")
        os.replace(package / "tmp.txt", target)
        os.utime(target, ns=(OLD, OLD))
    assert _digest(package, cache)[0] == _full(package)
    assert _digest(package, None)[0] == _full(package)


def test_recently_changed_files_are_not_stamped(tmp_path):
    """A file changed within the file system's timestamp granularity could change again unseen: no stamp."""
    package, cache = _package(tmp_path), tmp_path / "cache"
    (package / "sub" / "a.py").write_text("y = 5\n")  # now: not settled
    assert package_digest(package, cache)[0] == _full(package)
    assert not stamp_path(cache, package.resolve()).exists()


@pytest.mark.parametrize("damage", ["garbage", "checksum", "digest", "other package"])
def test_a_damaged_stamp_is_ignored_and_rewritten(tmp_path, damage):
    package, cache = _package(tmp_path), tmp_path / "cache"
    expected = _digest(package, cache)
    path = stamp_path(cache, package.resolve())
    fields = json.loads(path.read_text())
    if damage == "garbage":
        path.write_bytes(b"\xff{not json")
    elif damage == "checksum":
        fields["digest"] = "0" * 64  # without a matching checksum
        path.write_text(json.dumps(fields))
    elif damage == "digest":  # well formed, but for another list of files
        fields["digest"] = "0" * 64
        fields["stats_sha256"] = "0" * 64
        del fields["checksum"]
        fields["checksum"] = source_digest._checksum(fields)
        path.write_text(json.dumps(fields))
    else:
        fields["package"] = "/elsewhere"
        del fields["checksum"]
        fields["checksum"] = source_digest._checksum(fields)
        path.write_text(json.dumps(fields))
    assert _digest(package, cache) == expected
    assert json.loads(path.read_text())["package"] == str(package.resolve())  # rewritten


def test_an_unwritable_stamp_directory_only_costs_the_hash(tmp_path):
    package = _package(tmp_path)
    blocker = tmp_path / "file"
    blocker.write_text("a file where the cache directory would be")
    assert _digest(package, blocker) == (_full(package), 2)


def test_neuroncc_digest_matches_the_full_hash(tmp_path):
    package = Path(neuroncc.__file__).resolve().parent
    full = _full(package)
    assert BuildEnvironment.current().neuroncc_source == package_source_digest(package)[0] == full
    assert _digest(package, tmp_path)[0] == full


def _counting_hashes(monkeypatch) -> list[Path]:
    hashed = []
    original = source_digest.hash_files
    monkeypatch.setattr(source_digest, "hash_files", lambda package, files: hashed.append(package) or
                        original(package, files))
    return hashed


def test_a_process_hashes_a_settled_list_once_and_stamps_each_new_directory(tmp_path, monkeypatch):
    """A test run keys compiles in one cache directory per test: the sources are hashed once per process."""
    package, hashed = _package(tmp_path), _counting_hashes(monkeypatch)
    first = _digest(package, tmp_path / "a")
    second = _digest(package, tmp_path / "b")
    assert _digest(package, None) == first == second == (_full(package), 2)
    assert len(hashed) == 1  # the first call (_full hashes through its own name, uncounted)
    stats = source_digest.stat_list(package.resolve())
    for root in (tmp_path / "a", tmp_path / "b"):  # the stamps a hash would write, in both directories
        assert source_digest.read_stamp(stamp_path(root, package.resolve()), package.resolve(), stats) == first[0]


def test_a_changed_file_is_hashed_again_in_the_same_process(tmp_path, monkeypatch):
    package, hashed = _package(tmp_path), _counting_hashes(monkeypatch)
    before = _digest(package, None)
    assert _digest(package, None) == before and len(hashed) == 1
    time.sleep(0.05)
    target = package / "sub" / "a.py"
    target.write_text("y = 3\n")  # same size and (restored) mtime: only ctime tells
    os.utime(target, ns=(OLD, OLD))
    after = _digest(package, None)
    assert after != before and after[0] == _full(package) and len(hashed) == 2


def test_a_list_that_has_not_settled_is_not_remembered(tmp_path, monkeypatch):
    package, hashed = _package(tmp_path), _counting_hashes(monkeypatch)
    recent = 3600 * 10**9  # every file changed within the last hour
    package_digest(package, None, settle_ns=recent)
    package_digest(package, None, settle_ns=recent)
    assert len(hashed) == 2


@pytest.mark.parametrize("trusted", [True, False])
def test_the_cache_stamps_only_in_a_directory_it_trusts(tmp_path, monkeypatch, trusted):
    """A directory others can write into is not used as a cache (cached code is run), nor for the stamp."""
    import warnings

    from neuroncc.driver import cache_key
    from neuroncc.driver.cache import CompileCache

    root = tmp_path / "cache"
    root.mkdir(mode=0o700)
    if not trusted:
        os.chmod(root, 0o777)
    seen = []
    monkeypatch.setattr(cache_key, "_ENVIRONMENT", None)
    monkeypatch.setattr(cache_key, "package_digest",
                        lambda package, stamp_root: seen.append(stamp_root) or ("0" * 64, 1))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        CompileCache(root).build_environment()
    assert seen == [root if trusted else None]


def test_no_stamp_without_the_cache_directory(tmp_path):
    package = _package(tmp_path)
    assert package_digest(package, tmp_path / "missing", settle_ns=SETTLED) == (_full(package), 2)
    assert not (tmp_path / "missing").exists()  # never created here: the cache creates it, mode 0700


def test_an_environment_keyed_before_the_cache_directory_existed_is_stamped_once_there(tmp_path, monkeypatch):
    """A cold process's first lookup comes before its cache directory exists: the stamps are written once the
    directory is there (else the next process's graph cache hit hashes the sources again), and the process
    keeps the environment it keyed with."""
    from neuroncc.driver import cache_key
    from neuroncc.driver.cache import CompileCache

    root = tmp_path / "cache"
    seen = []
    monkeypatch.setattr(cache_key, "_ENVIRONMENT", None)
    monkeypatch.setattr(cache_key, "_STAMPED_ROOTS", set())
    monkeypatch.setattr(cache_key, "package_digest",
                        lambda package, stamp_root: seen.append(stamp_root) or ("0" * 64, 1))
    first = CompileCache(root).build_environment()
    assert seen == [None] and not root.exists()
    root.mkdir(mode=0o700)
    assert CompileCache(root).build_environment() is first
    assert CompileCache(root).build_environment() is first
    assert seen == [None, root]  # stamped once
