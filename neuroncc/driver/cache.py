"""The compile cache: same request (graph, input types, target, options, pipeline, versions) -> same artifact.

Three tiers, looked up in order: this process's memory (executables already loaded, when the cache is given a
:class:`MemoryTier`), the local directory below, and a remote Redis server shared by many machines (when given
a :class:`neuroncc.driver.remote.RemoteTier`). A hit in a lower tier is copied into the ones above it; a
compile is published to all of them.

    <cache dir>/              mode 0700; $NEURONCC_CACHE_DIR, default ~/.cache/neuroncc (read by the caller)
      entries/<key>/          one artifact per key (see neuroncc.driver.artifact)
      locks/<key>.lock        flock'ed while a process looks up, compiles and publishes that key
      tmp/<key16>.<pid>.*     artifacts being written, and old entries being deleted
      tables/<digest>         tables a compile computes once per host (codegen/llvm/table_files.py)

A lookup reads ``entries/<key>`` without locking and checks every file's sha256; on a miss the process takes
the key's lock, looks again (another process may have just published it), compiles, writes the artifact into
``tmp/``, renames it into place and releases the lock. So concurrent processes compile a key once, a reader
sees a whole artifact or none, and a process killed at any point leaves no entry behind (its lock dies with
it; its temp dir is collected later). A damaged or foreign-version entry is a miss with one
:class:`CacheWarning`, recompiled and replaced; nothing in the cache can crash a compile or change a result.

With ``publish_in_background`` (the caches that ``driver.compile`` opens from the environment) the write,
rename and unlock happen on the process's writer thread (:mod:`neuroncc.driver.publisher`) while the caller
runs the executable it already has; this process waits for that write before it reads the key from the disk,
and the interpreter waits for it at exit.

Durability: one fsync per entry, of ``entries/`` after the rename (the files themselves are not synced: a
dozen fsyncs cost more than the rest of a one-op compile). A power loss soon after a publish can therefore
leave an entry whose files did not reach the disk; the sha256 check finds it on the next lookup, which then
is a miss with one warning, recompiled and replaced, as for any damaged entry.
"""

from __future__ import annotations

import contextlib
import datetime
import fcntl
import os
import shutil
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from neuroncc.codegen.llvm import table_files
from neuroncc.errors import ArtifactError, NeuronccError
from neuroncc.driver.cache_locks import LockTimeoutError, flock_until, temp_is_stale
from neuroncc.driver.notices import CacheWarning
from neuroncc.driver.remote_settings import settings_from_environ
from neuroncc.driver.artifact import (
    ARTIFACT_CODECS,
    ArtifactCodec,
    ComponentRecord,
    artifact_size,
    fsync_directory,
    read_artifact,
    read_manifest,
    verify_artifact,
    write_artifact,
)
from neuroncc.driver.cache_key import (
    BuildEnvironment,
    CacheKey,
    UncacheableRequestError,
    compute_key,
)
from neuroncc.executors.executable import Executable
from neuroncc.driver.process_cache import CACHE_STATS, PROCESS_MEMORY, CacheStats, MemoryTier
from neuroncc.driver.publisher import PUBLISHER

if TYPE_CHECKING:  # the remote tier and its bundles are imported where a remote tier is used (off a hit's path);
    # a compile's request and result where the cache compiles (driver/compile_request.py); the CLI's listing's
    # entries where it lists them (driver/cache_entry.py)
    from neuroncc.driver.bundle import Bundle
    from neuroncc.driver.cache_entry import CacheEntry
    from neuroncc.driver.compile_request import CacheOutcome, CompileFunction, CompileRequest, CompileResult
    from neuroncc.driver.remote import RemoteTier

CACHE_DIR_VARIABLE = "NEURONCC_CACHE_DIR"
DISABLE_VARIABLE = "NEURONCC_DISABLE_CACHE"
DEFAULT_CACHE_DIR = "~/.cache/neuroncc"
#: The cache directory's subdirectory of computed tables (``codegen/llvm/table_files.py``).
TABLES_DIR = "tables"


class CompileCache:
    """A compile cache rooted at ``directory``, with an optional ``memory`` tier in front of it and an optional
    ``remote`` tier behind it.

    ``checkpoint(step)`` (tests only) is called at each step of a miss: ``compile`` (lock held, before
    compiling), ``compiled``, ``graph-written``, ``artifact-written`` (before the rename), ``published``,
    ``stored-remote``; a test kills or stalls the process there. With ``publish_in_background`` the steps from
    ``graph-written`` on run on the writer thread.
    """

    def __init__(self, directory: str | os.PathLike[str], *, environment: BuildEnvironment | None = None,
                 stats: CacheStats | None = None, lock_timeout_s: float = 600.0,
                 checkpoint: Callable[[str], None] | None = None, memory: MemoryTier | None = None,
                 remote: RemoteTier | None = None, publish_in_background: bool = False):
        self.memory = memory
        self.publish_in_background = publish_in_background
        self.remote = remote
        self.root = Path(directory).expanduser()
        self.entries_dir = self.root / "entries"
        self.locks_dir = self.root / "locks"
        self.tmp_dir = self.root / "tmp"
        self.environment = environment
        self.stats = stats if stats is not None else CACHE_STATS
        self.lock_timeout_s = lock_timeout_s
        self._checkpoint = checkpoint or (lambda step: None)
        self._usable: bool | None = None

    @staticmethod
    def directory_from_environ(environ: Mapping[str, str]) -> Path:
        return Path(environ.get(CACHE_DIR_VARIABLE) or DEFAULT_CACHE_DIR).expanduser()

    @classmethod
    def from_environ(cls, environ: Mapping[str, str], **kwargs: Any) -> CompileCache | None:
        """The cache that ``environ`` asks for (``$NEURONCC_CACHE_DIR``), or None if
        ``$NEURONCC_DISABLE_CACHE`` is set to anything but ``0`` or empty."""
        if environ.get(DISABLE_VARIABLE, "0") not in ("", "0"):
            return None
        return cls(cls.directory_from_environ(environ), **kwargs)

    def build_environment(self) -> BuildEnvironment:
        """The environment the keys include: the one given, else this process's (its source digest remembered
        in this cache's directory when it exists and is one we trust, see :mod:`neuroncc.driver.source_digest`)."""
        if self.environment is not None:
            return self.environment
        trusted = self._usable if self._usable is not None else self.root.is_dir() and self.ensure_usable()
        return BuildEnvironment.current(self.root if trusted else None)

    def key_of(self, request: CompileRequest) -> CacheKey:
        return compute_key(request, self.build_environment())

    def entry_dir(self, key: str) -> Path:
        """The directory of ``key``'s entry, once this process's write of it (if one is under way) is done."""
        PUBLISHER.wait((self.root, key))
        return self.entries_dir / key

    # ---- compile through the cache ---------------------------------------------------------------------

    def get_or_compile(self, request: CompileRequest, compile_fn: CompileFunction,
                       outcome: CacheOutcome | None = None) -> Executable:
        """The executable for ``request``: from memory, the local directory or the remote server, or compiled
        by ``compile_fn`` and published to every tier. ``outcome``, when given, is filled in with what
        happened."""
        from neuroncc.driver.compile_request import CacheOutcome

        outcome = outcome if outcome is not None else CacheOutcome()
        codec = ARTIFACT_CODECS.get(request.target)
        try:
            key = self.key_of(request)
        except UncacheableRequestError:
            key = None
        if codec is None or key is None or not self.ensure_usable():
            self.stats.add("uncached")
            return compile_fn(request).executable
        outcome.key = key.key
        if self.memory is not None and (executable := self.memory.get((self.root, key.key))) is not None:
            self.stats.add("hits")
            self.stats.add("memory_hits")
            outcome.status = "hit"
            return executable
        executable = self._lookup_and_compile(key, request, compile_fn, codec, outcome)
        if self.memory is not None:
            self.memory.put((self.root, key.key), executable)
        return executable

    def load_entry(self, key: str, target: str) -> Executable | None:
        """The executable of the stored entry ``key`` built for ``target`` (memory tier, then the local
        directory), or None when there is none or it is damaged (then one warning). For callers that recorded
        the keys of the artifacts they compiled (the torch front end's graph cache)."""
        codec = ARTIFACT_CODECS.get(target)
        if codec is None or not self.ensure_usable():
            return None
        if self.memory is not None and (executable := self.memory.get((self.root, key))) is not None:
            self.stats.add("hits")
            self.stats.add("memory_hits")
            return executable
        PUBLISHER.wait((self.root, key))
        executable, _problem = self._load(key, target, codec)
        if executable is not None and self.memory is not None:
            self.memory.put((self.root, key), executable)
        return executable

    def _lookup_and_compile(self, key: CacheKey, request: CompileRequest, compile_fn: CompileFunction,
                            codec: ArtifactCodec, outcome: CacheOutcome) -> Executable:
        PUBLISHER.wait((self.root, key.key))  # this process's own write of the key, if one is under way
        executable, problem = self._load(key.key, request.target, codec)
        if executable is not None:
            outcome.status = "hit"
            return executable
        warned = problem is not None
        try:
            lock_fd = self._acquire_key_lock(key.key)
        except LockTimeoutError as exc:
            self.stats.add("misses")
            self._warn(f"{exc}; compiling without the cache")
            self.stats.add("compiles")
            return compile_fn(request).executable
        try:
            executable, problem = self._load(key.key, request.target, codec, warn=not warned)
            if executable is not None:
                outcome.status = "hit"
                return executable
            executable, refused = self._fetch_remote(key.key, request.target, codec)
            if executable is not None:
                outcome.status = "hit"
                return executable
            outcome.status = "miss"
            if outcome.explain_miss:
                outcome.closest, outcome.differing = self.explain_miss(key, request.function.name, request.target)
            self.stats.add("misses")
            with self._remote_compile_lock(key.key, refused) as published:
                if published:  # another machine compiled it while we waited
                    executable, _ = self._fetch_remote(key.key, request.target, codec)
                    if executable is not None:
                        outcome.status = "hit"
                        return executable
                self._checkpoint("compile")
                self.stats.add("compiles")
                table_files.keep_in(self.root / TABLES_DIR)  # what the compile makes once, for later processes
                result = compile_fn(request)
                self._checkpoint("compiled")
                if self.publish_in_background and self.remote is None:
                    # the writer publishes, then closes the lock file (releasing the lock)
                    PUBLISHER.submit((self.root, key.key), lambda: self._publish(key, request, result, codec),
                                     lock_fd)
                    lock_fd = -1
                elif self._publish(key, request, result, codec):
                    self._store_remote(key.key)
                return result.executable
        finally:
            if lock_fd >= 0:
                os.close(lock_fd)

    # ---- the remote tier -------------------------------------------------------------------------------

    @contextlib.contextmanager
    def _remote_compile_lock(self, key: str, refused: bytes | None) -> Iterator[bool]:
        """The remote tier's compile lock of ``key`` (held until the block ends); yields whether another machine
        published the key while this process waited for it."""
        if self.remote is None:
            yield False
            return
        from neuroncc.driver.remote import LockOutcome

        with self.remote.compile_lock(key, refused) as outcome:
            yield outcome is LockOutcome.PUBLISHED

    def _fetch_remote(self, key: str, target: str, codec: ArtifactCodec) -> tuple[Executable | None, bytes | None]:
        """Load ``key`` from the remote tier into the local directory and from there (the key's local lock is
        held): (executable, None) on a hit; (None, the value) if a value was refused, with one warning (nothing
        in it is run); (None, None) if there is none."""
        if self.remote is None:
            return None, None
        from neuroncc.driver.bundle import BadBundleError, open_bundle

        value = self.remote.fetch(key)
        if value is None:
            return None, None
        try:
            self.install_bundle(key, open_bundle(value, key, self.remote.settings.secret))
        except (BadBundleError, ArtifactError) as exc:
            self.stats.add("remote_bad_entries")
            reason = exc.reason if isinstance(exc, BadBundleError) else str(exc)
            self._warn(f"refusing remote cache entry {key[:16]} from {self.remote.settings.display_url} "
                       f"({reason}); recompiling")
            return None, value
        except OSError as exc:
            self._warn(f"could not save remote cache entry {key[:16]} locally ({exc}); recompiling")
            return None, None
        executable, _problem = self._load(key, target, codec)
        if executable is not None:
            self.stats.add("remote_hits")
        return executable, None

    def install_bundle(self, key: str, bundle: Bundle) -> None:
        """Unpack ``bundle`` (whose signature checked out) into ``tmp/``, verify it as an artifact, rename it
        into ``entries/<key>`` (replacing what is there). The caller holds the key's lock. Raises
        :class:`ArtifactError` (nothing is installed) if the artifact inside is damaged."""
        self._collect_garbage()
        temp = Path(tempfile.mkdtemp(prefix=f"{key[:16]}.{os.getpid()}.", dir=self.tmp_dir))
        try:
            staged = temp / key  # verify_artifact checks that the directory is named after the key
            staged.mkdir(mode=0o700)
            bundle.extract(staged)
            verify_artifact(staged)
            fsync_directory(staged)
            final = self.entries_dir / key
            if final.exists():
                self._discard(final)
            os.rename(staged, final)
            fsync_directory(self.entries_dir)
        finally:
            shutil.rmtree(temp, ignore_errors=True)

    def _store_remote(self, key: str) -> None:
        """Send the just-published local entry to the remote tier (replacing whatever was refused there)."""
        if self.remote is None or not self.remote.available:
            return
        from neuroncc.driver.bundle import pack_bundle

        try:
            value = pack_bundle(self.entries_dir / key, self.remote.settings.secret)
        except (OSError, ArtifactError) as exc:
            self._warn(f"could not bundle cache entry {key[:16]} for the remote cache ({exc})")
            return
        if self.remote.store(key, value):
            self.stats.add("remote_stores")
            self._checkpoint("stored-remote")

    def explain_miss(self, key: CacheKey, graph_name: str, target: str | None = None) -> tuple[str | None,
                                                                                          tuple[str, ...]]:
        """(the closest stored entry's graph name, the key components in which it differs from ``key``):
        :func:`neuroncc.driver.miss_explanation.closest_entry` over this cache's entries."""
        from neuroncc.driver.miss_explanation import closest_entry

        PUBLISHER.flush()  # this process's entries still being written are compared too (a graph entry's is)
        return closest_entry(self.entries_dir, key, graph_name, target)

    def _load(self, key: str, target: str, codec: ArtifactCodec,
              warn: bool = True) -> tuple[Executable | None, str | None]:
        """(executable, None) on a hit; (None, None) if there is no entry; (None, problem) if it is bad."""
        directory = self.entries_dir / key
        if not directory.exists():
            return None, None
        start = time.perf_counter()
        try:
            manifest, executable = read_artifact(directory, codec)
            if manifest.target != target:
                raise ArtifactError(f"{directory}: built for target '{manifest.target}', not '{target}'")
        except Exception as exc:  # any failure to read an entry is a miss, never a crash
            problem = str(exc) if isinstance(exc, NeuronccError) else f"{type(exc).__name__}: {exc}"
            if warn:
                self.stats.add("bad_entries")
                self._warn(f"ignoring damaged cache entry {key[:16]} ({problem}); recompiling")
            return None, problem
        self.stats.add("load_seconds", time.perf_counter() - start)
        self.stats.add("hits")
        return executable, None

    def _publish(self, key: CacheKey, request: CompileRequest, result: CompileResult, codec: ArtifactCodec) -> bool:
        """Write the local entry; False (with one warning) if it could not be written."""
        from neuroncc.driver.compile_request import ArtifactContents

        self._collect_garbage()
        temp = Path(tempfile.mkdtemp(prefix=f"{key.key[:16]}.{os.getpid()}.", dir=self.tmp_dir))
        try:
            env = self.build_environment()
            contents = ArtifactContents(
                key=key.key,
                key_components={c.name: ComponentRecord(digest=c.digest, summary=c.summary) for c in key.components},
                target=request.target, input_function=request.function, options=request.options,
                pipeline=request.pipeline, stages=result.stages,
                timings=result.timings, neuroncc_version=env.neuroncc_version,
                created_at=datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            )
            write_artifact(temp, result.executable, contents, codec, checkpoint=self._checkpoint)
            self._checkpoint("artifact-written")
            final = self.entries_dir / key.key
            if final.exists():  # a damaged entry we are replacing (we hold the key's lock)
                self._discard(final)
            os.rename(temp, final)
            fsync_directory(self.entries_dir)  # the one fsync (see "Durability" in the module docstring)
            self._checkpoint("published")
            return True
        except (OSError, NeuronccError) as exc:
            self.stats.add("publish_failures")
            self._warn(f"could not save cache entry {key.key[:16]} ({exc}); the compiled code is used uncached")
            return False
        finally:
            if temp.exists():
                shutil.rmtree(temp, ignore_errors=True)

    # ---- the directory ---------------------------------------------------------------------------------

    def ensure_usable(self) -> bool:
        """Create the cache directories (mode 0700) once; refuse a directory others could write into (False, with
        one warning)."""
        if self._usable is None:
            self._usable = self._prepare_directories()
        return self._usable

    def _prepare_directories(self) -> bool:
        try:
            created = not self.root.exists()
            self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
            if created:
                os.chmod(self.root, 0o700)  # whatever the umask
            info = self.root.stat()
            if info.st_uid != os.geteuid() or info.st_mode & 0o022:
                self._warn(f"not using compile cache {self.root}: it is owned by another user or writable by "
                           "others (cached code is loaded and run)")
                return False
            for sub in (self.entries_dir, self.locks_dir, self.tmp_dir):
                sub.mkdir(mode=0o700, exist_ok=True)
        except OSError as exc:
            self._warn(f"not using compile cache {self.root}: {exc}")
            return False
        return True

    @contextlib.contextmanager
    def key_lock(self, key: str) -> Iterator[None]:
        """Hold an exclusive flock on ``locks/<key>.lock``. The kernel drops it if this process dies."""
        fd = self._acquire_key_lock(key)
        try:
            yield
        finally:
            os.close(fd)

    def publish_locked(self, key: str, write: Callable[[], bool]) -> bool:
        """Run ``write()`` (it writes ``key``'s entry into ``tmp/``, renames it into place and says whether it
        did) holding ``key``'s lock. With ``publish_in_background``: on the process's writer, which releases the
        lock once ``write`` returns, and True at once (this process's readers of the key wait for the write;
        a failed write warns there). Else here, and ``write``'s answer. Raises what taking the lock raises."""
        PUBLISHER.wait((self.root, key))  # this process's own pending write of the key holds the key's lock
        lock_fd = self._acquire_key_lock(key)
        if self.publish_in_background:
            PUBLISHER.submit((self.root, key), write, lock_fd)
            return True
        try:
            return write()
        finally:
            os.close(lock_fd)

    def _acquire_key_lock(self, key: str) -> int:
        """An open fd of ``locks/<key>.lock`` holding its exclusive flock (closing the fd releases it)."""
        path = self.locks_dir / f"{key}.lock"
        deadline = time.monotonic() + self.lock_timeout_s
        while True:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            try:
                flock_until(fd, deadline, path, on_slow=lambda: self._warn_waiting(path))
                with contextlib.suppress(FileNotFoundError):
                    if os.stat(path).st_ino == os.fstat(fd).st_ino:
                        return fd  # still the lock file at that path (cache clear did not replace it meanwhile)
            except BaseException:
                os.close(fd)
                raise
            os.close(fd)

    def _discard(self, directory: Path) -> None:
        """Move ``directory`` out of the way atomically, then delete it."""
        trash = Path(tempfile.mkdtemp(prefix=f"trash.{os.getpid()}.", dir=self.tmp_dir))
        os.rename(directory, trash / "entry")
        shutil.rmtree(trash, ignore_errors=True)

    def _collect_garbage(self) -> None:
        """Delete temp dirs left by processes that died mid-write (or that are very old)."""
        with contextlib.suppress(OSError):
            for path in self.tmp_dir.iterdir():
                if temp_is_stale(path):
                    shutil.rmtree(path, ignore_errors=True)

    def _warn(self, message: str) -> None:
        warnings.warn(message, CacheWarning, stacklevel=4)

    def _warn_waiting(self, path: Path) -> None:
        warnings.warn(f"waiting for the compile lock {path}: another process is compiling the same graph (or is "
                      f"stuck holding the lock); after {self.lock_timeout_s:g} s this process compiles without "
                      "the cache", CacheWarning, stacklevel=2)

    # ---- inspection and maintenance (the ``neuroncc cache`` CLI) ----------------------------------------

    def list_entries(self) -> list[CacheEntry]:
        """Every entry, its manifest read and checked (files are not hashed: see :meth:`verify_entry`)."""
        from neuroncc.driver.cache_entry import CacheEntry  # the CLI's: off a graph cache hit's path

        PUBLISHER.flush()  # this process's entries still being written are listed too
        found = []
        with contextlib.suppress(FileNotFoundError):
            for directory in sorted(self.entries_dir.iterdir()):
                try:
                    manifest, problem = read_manifest(directory), None
                except ArtifactError as exc:
                    manifest, problem = None, str(exc)
                with contextlib.suppress(FileNotFoundError):
                    found.append(CacheEntry(directory.name, directory, manifest, problem, artifact_size(directory),
                                            directory.stat().st_mtime))
        return found

    def verify_entry(self, entry: CacheEntry) -> str | None:
        """None if ``entry`` is intact (manifest and every file's size and sha256); the problem otherwise."""
        try:
            verify_artifact(entry.directory)
        except ArtifactError as exc:
            return str(exc)
        return None

    def resolve_key(self, prefix: str) -> str:
        """The full key of the one entry whose key starts with ``prefix``."""
        if len(prefix) < 4:
            raise ArtifactError(f"key prefix '{prefix}' is too short (give at least 4 characters)")
        matches = [e.name for e in self._entry_dirs() if e.name.startswith(prefix.lower())]
        if not matches:
            raise ArtifactError(f"no cache entry with key {prefix} in {self.root}")
        if len(matches) > 1:
            raise ArtifactError(f"key prefix {prefix} matches {len(matches)} entries; give more characters")
        return matches[0]

    def clear(self, older_than_s: float | None = None, now: float | None = None) -> tuple[int, int]:
        """Delete entries (all, or those created more than ``older_than_s`` ago) and leftovers of dead
        processes. Returns (entries removed, bytes freed)."""
        PUBLISHER.flush()  # an entry still being written would otherwise appear after the clear
        now = time.time() if now is None else now
        removed = freed = 0
        if not self.root.exists():
            return 0, 0
        self.tmp_dir.mkdir(mode=0o700, exist_ok=True)
        for entry in self.list_entries():
            if older_than_s is not None and now - _created_timestamp(entry) < older_than_s:
                continue
            with contextlib.suppress(FileNotFoundError):
                self._discard(entry.directory)
                removed, freed = removed + 1, freed + entry.size
        self._collect_garbage()
        if older_than_s is None:
            self._remove_idle_locks()
            freed += self._remove_tables()
        return removed, freed

    def _remove_tables(self) -> int:
        """Delete the kept tables (a compile that needs one makes it again); the bytes freed."""
        freed = 0
        with contextlib.suppress(FileNotFoundError):
            for path in (self.root / TABLES_DIR).iterdir():
                with contextlib.suppress(FileNotFoundError):
                    size = path.stat().st_size
                    path.unlink()
                    freed += size
        return freed

    def _entry_dirs(self) -> list[Path]:
        PUBLISHER.flush()
        with contextlib.suppress(FileNotFoundError):
            return sorted(self.entries_dir.iterdir())
        return []

    def _remove_idle_locks(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            for path in self.locks_dir.iterdir():
                with contextlib.suppress(OSError), open(path, "rb") as f:
                    fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)  # skip locks someone holds
                    path.unlink()


def _created_timestamp(entry: CacheEntry) -> float:
    if entry.manifest is not None:
        with contextlib.suppress(ValueError):
            return datetime.datetime.fromisoformat(entry.manifest.created_at).timestamp()
    return entry.modified


def cache_from_environ(environ: Mapping[str, str], **kwargs: Any) -> CompileCache | None:
    """The cache ``environ`` asks for: the directory ``$NEURONCC_CACHE_DIR`` (None if
    ``$NEURONCC_DISABLE_CACHE``), this process's memory tier in front of it, and behind it the remote tier
    :func:`~neuroncc.driver.remote_settings.settings_from_environ` names (the tier's client, ``driver.remote``, is
    imported only then). It publishes new entries in the background
    (a compile returns before its artifact is on the disk; see :mod:`neuroncc.driver.publisher`). ``kwargs``
    go to :class:`CompileCache`."""
    kwargs.setdefault("memory", PROCESS_MEMORY)
    kwargs.setdefault("publish_in_background", True)
    cache = CompileCache.from_environ(environ, **kwargs)
    if cache is not None and "remote" not in kwargs and (settings := settings_from_environ(environ)) is not None:
        from neuroncc.driver.remote import tier_for

        cache.remote = tier_for(settings)
    return cache
