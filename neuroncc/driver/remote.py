"""The remote tier of the compile cache: signed artifact bundles in a Redis server shared by many machines.

    NEURONCC_REMOTE_CACHE=redis://host:6379/0       the server; NEURONCC_REMOTE_CACHE_KEY the shared HMAC key
                                                    (``driver.remote_settings`` reads them and the timeout)

Redis keys: ``neuroncc:artifact:<key>`` holds a bundle (``driver.bundle``), ``neuroncc:lock:<key>`` is held
while some process (on any machine) compiles that key. The environment is read by the caller at the API
boundary (``driver.compile``, the CLI), which hands :func:`tier_for` a :class:`RemoteSettings`.

Failure is never worse than no remote tier: the first connection error or timeout (bounded by the timeout
above: no retries) warns once and turns the tier off for the rest of the process, which then uses its local
cache only.
"""

from __future__ import annotations

import contextlib
import enum
import secrets
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from neuroncc.driver.bundle import HEADER, MAC_SIZE, BadBundleError, BundleHead, head_length_of, read_head
from neuroncc.driver.notices import CacheWarning
from neuroncc.driver.remote_settings import RemoteSettings, settings_from_environ
from neuroncc.errors import ArtifactError
from neuroncc.codegen.llvm.fork_safety import renew_in_child

ARTIFACT_PREFIX = "neuroncc:artifact:"
LOCK_PREFIX = "neuroncc:lock:"

# Release or extend a lock only while it is still ours (a lease that expired may have been taken by another).
_RELEASE = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end"
_EXTEND = ("if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('pexpire', KEYS[1], ARGV[2]) "
           "else return 0 end")

T = TypeVar("T")


class RemoteUnavailableError(ArtifactError):
    """The remote cache server could not be reached or did not answer in time."""


class LockOutcome(enum.Enum):
    """What :meth:`RemoteTier.compile_lock` found."""

    ACQUIRED = "acquired"  # this process compiles the key; others wait for it
    PUBLISHED = "published"  # another process published the key while we waited: fetch it
    UNAVAILABLE = "unavailable"  # the tier is off (unreachable, or we waited too long): compile locally


@dataclass(frozen=True, slots=True)
class RemoteEntry:
    """An entry as ``neuroncc cache list --remote`` sees it; ``head`` is unverified (None if unreadable)."""

    key: str
    size: int
    head: BundleHead | None
    problem: str | None


class RemoteTier:
    """One Redis server. Use :func:`tier_for` so every cache in the process shares one connection pool and one
    verdict about the server's health.

    The compile path (``fetch``, ``store``, ``compile_lock``) never raises for a server problem: the first one
    warns and switches the tier off. The inspection methods (``list_entries``, ``get``, ``delete``) raise
    :class:`RemoteUnavailableError` instead, for the CLI to report.
    """

    def __init__(self, settings: RemoteSettings):
        self.settings = settings
        self._client: Any = None
        self._scripts: dict[str, Any] = {}
        self._down: str | None = None
        self._lock = renew_in_child(threading.Lock())

    @property
    def available(self) -> bool:
        return self._down is None

    @property
    def problem(self) -> str | None:
        """Why the tier is off in this process, if it is."""
        return self._down

    def _redis(self) -> Any:
        with self._lock:
            if self._client is None:
                import redis  # an optional dependency (the `remote` extra), needed only with a remote tier
                from redis.backoff import NoBackoff
                from redis.retry import Retry

                timeout = self.settings.timeout_s
                self._client = redis.Redis.from_url(
                    self.settings.url, socket_timeout=timeout, socket_connect_timeout=timeout,
                    retry=Retry(NoBackoff(), 0), health_check_interval=0)
                self._scripts = {"release": self._client.register_script(_RELEASE),
                                 "extend": self._client.register_script(_EXTEND)}
            return self._client

    def _call(self, what: str, operation: Callable[[Any], T]) -> T:
        """Run ``operation(client)``; on a server problem switch the tier off (warning once) and raise."""
        if self._down is not None:
            raise RemoteUnavailableError(self._down)
        try:
            return operation(self._redis())
        except ModuleNotFoundError as exc:
            reason = f"the redis client is not installed ({exc.name}); pip install 'neuroncc[remote]'"
        except Exception as exc:  # redis.RedisError, OSError: anything from the network or the server
            if not _is_server_problem(exc):
                raise
            reason = f"{type(exc).__name__}: {exc}"
        raise self._switch_off(what, reason)

    def _switch_off(self, what: str, reason: str) -> RemoteUnavailableError:
        """Turn the tier off for the rest of the process (warning the first time); the error to raise."""
        message = f"remote compile cache {self.settings.display_url} unavailable ({what}: {reason})"
        with self._lock:
            first = self._down is None
            if first:
                self._down = message
        if first:
            warnings.warn(f"{message}; this process uses its local cache only", CacheWarning, stacklevel=5)
        return RemoteUnavailableError(message)

    # ---- the compile path -------------------------------------------------------------------------------

    def fetch(self, key: str) -> bytes | None:
        """The value stored under ``key``, or None (absent, or the tier is off)."""
        with contextlib.suppress(RemoteUnavailableError):
            return self._call("get", lambda r: r.get(ARTIFACT_PREFIX + key))
        return None

    def store(self, key: str, value: bytes) -> bool:
        """Store ``value`` under ``key`` (replacing a refused entry); False if the tier is off."""
        with contextlib.suppress(RemoteUnavailableError):
            self._call("set", lambda r: r.set(ARTIFACT_PREFIX + key, value))
            return True
        return False

    @contextlib.contextmanager
    def compile_lock(self, key: str, refused: bytes | None = None,
                     sleep: Callable[[float], None] = time.sleep) -> Iterator[LockOutcome]:
        """Hold ``key``'s compile lock across machines while the body compiles (``ACQUIRED``), or say that
        another process published the key meanwhile (``PUBLISHED``) or that the tier cannot coordinate
        (``UNAVAILABLE``: compile without it). ``refused``: the value the caller found under the key and
        refused; it does not count as published. The lock is a lease renewed while the body runs, so a holder
        that dies blocks the others for at most ``lock_lease_s``."""
        token = secrets.token_hex(16)
        outcome = self._acquire(key, token, refused, sleep)
        if outcome is not LockOutcome.ACQUIRED:
            yield outcome
            return
        renewer = _LeaseRenewer(self, LOCK_PREFIX + key, token)
        renewer.start()
        try:
            yield outcome
        finally:
            renewer.stop()
            self._release(key, token)

    def _published(self, key: str, refused: bytes | None) -> bool:
        """Whether a value other than ``refused`` is stored under ``key`` (values compared by their signature,
        the last 32 bytes)."""
        if refused is None:
            return bool(self._call("exists", lambda r: r.exists(ARTIFACT_PREFIX + key)))
        tail = self._call("exists", lambda r: r.getrange(ARTIFACT_PREFIX + key, -MAC_SIZE, -1))
        return bool(tail) and tail != refused[-MAC_SIZE:]

    def _release(self, key: str, token: str) -> None:
        with contextlib.suppress(RemoteUnavailableError):
            self._call("unlock", lambda r: self._scripts["release"](keys=[LOCK_PREFIX + key], args=[token]))

    def _acquire(self, key: str, token: str, refused: bytes | None, sleep: Callable[[float], None]) -> LockOutcome:
        lease_ms = max(1, int(self.settings.lock_lease_s * 1000))
        deadline = time.monotonic() + self.settings.lock_wait_s
        delay = 0.01
        try:
            while True:
                if self._call("lock", lambda r: r.set(LOCK_PREFIX + key, token, nx=True, px=lease_ms)):
                    # the previous holder may have published and released just before we took the lock
                    if not self._published(key, refused):
                        return LockOutcome.ACQUIRED
                    self._release(key, token)
                    return LockOutcome.PUBLISHED
                if self._published(key, refused):
                    return LockOutcome.PUBLISHED
                if time.monotonic() > deadline:
                    warnings.warn(f"waited {self.settings.lock_wait_s:g} s for another process's compile of "
                                  f"{key[:16]} (remote compile lock); compiling here as well", CacheWarning,
                                  stacklevel=5)
                    return LockOutcome.UNAVAILABLE
                sleep(delay)
                delay = min(delay * 2, 0.2)
        except RemoteUnavailableError:
            return LockOutcome.UNAVAILABLE

    def _extend(self, lock_key: str, token: str) -> bool:
        lease_ms = max(1, int(self.settings.lock_lease_s * 1000))
        with contextlib.suppress(RemoteUnavailableError):
            return bool(self._call("renew lock", lambda r: self._scripts["extend"](keys=[lock_key],
                                                                                    args=[token, lease_ms])))
        return False

    # ---- inspection and maintenance (``neuroncc cache ... --remote``) -------------------------------------

    def keys(self) -> list[str]:
        """Every artifact key stored, sorted."""
        return sorted(k.decode()[len(ARTIFACT_PREFIX):] for k in
                      self._call("scan", lambda r: list(r.scan_iter(match=ARTIFACT_PREFIX + "*", count=1000))))

    def list_entries(self) -> list[RemoteEntry]:
        """Every entry with its size and unverified head (two pipelined round trips for the lot)."""
        keys = self.keys()
        if not keys:
            return []

        def sizes_and_prefixes(r: Any) -> list[Any]:
            pipe = r.pipeline(transaction=False)
            for key in keys:
                pipe.strlen(ARTIFACT_PREFIX + key)
                pipe.getrange(ARTIFACT_PREFIX + key, 0, HEADER.size - 1)
            return pipe.execute()

        first = self._call("list", sizes_and_prefixes)
        sizes, prefixes = first[0::2], first[1::2]
        lengths: dict[str, int] = {}
        problems: dict[str, str] = {}
        for key, prefix in zip(keys, prefixes):
            try:
                lengths[key] = head_length_of(prefix)
            except BadBundleError as exc:
                problems[key] = exc.reason

        def heads(r: Any) -> list[Any]:
            pipe = r.pipeline(transaction=False)
            for key, length in lengths.items():
                pipe.getrange(ARTIFACT_PREFIX + key, 0, HEADER.size + length - 1)
            return pipe.execute()

        parsed: dict[str, BundleHead] = {}
        for (key, _), data in zip(lengths.items(), self._call("list", heads) if lengths else []):
            try:
                parsed[key] = read_head(data)
            except BadBundleError as exc:
                problems[key] = exc.reason
        return [RemoteEntry(key, int(size), parsed.get(key), problems.get(key)) for key, size in zip(keys, sizes)
                if size]  # a key deleted between the scan and the read has size 0

    def get(self, key: str) -> bytes | None:
        return self._call("get", lambda r: r.get(ARTIFACT_PREFIX + key))

    def delete(self, keys: list[str]) -> int:
        if not keys:
            return 0
        return int(self._call("delete", lambda r: r.delete(*(ARTIFACT_PREFIX + k for k in keys))))

    def resolve_key(self, prefix: str) -> str:
        """The full key of the one remote entry whose key starts with ``prefix``."""
        if len(prefix) < 4:
            raise ArtifactError(f"key prefix '{prefix}' is too short (give at least 4 characters)")
        matches = [k for k in self.keys() if k.startswith(prefix.lower())]
        if not matches:
            raise ArtifactError(f"no remote cache entry with key {prefix} in {self.settings.display_url}")
        if len(matches) > 1:
            raise ArtifactError(f"key prefix {prefix} matches {len(matches)} remote entries; give more characters")
        return matches[0]


def _is_server_problem(exc: BaseException) -> bool:
    """A network or server failure (the tier turns off), as opposed to a bug in the caller."""
    if isinstance(exc, OSError):
        return True
    try:
        import redis
    except ModuleNotFoundError:
        return False
    return isinstance(exc, redis.RedisError)


class _LeaseRenewer:
    """Renews a held compile lock every third of its lease until stopped (a daemon thread)."""

    def __init__(self, tier: RemoteTier, lock_key: str, token: str):
        self._tier, self._lock_key, self._token = tier, lock_key, token
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="neuroncc-remote-lease", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopped.set()
        self._thread.join()

    def _run(self) -> None:
        interval = self._tier.settings.lock_lease_s / 3
        while not self._stopped.wait(interval):
            if not self._tier._extend(self._lock_key, self._token):
                return  # lost (expired and taken, or the tier is off): nothing left to renew


_TIERS: dict[RemoteSettings, RemoteTier] = {}
_TIERS_LOCK = renew_in_child(threading.Lock())


def tier_for(settings: RemoteSettings) -> RemoteTier:
    """The process-wide tier for ``settings`` (one connection pool, one health verdict per server)."""
    with _TIERS_LOCK:
        tier = _TIERS.get(settings)
        if tier is None:
            tier = _TIERS[settings] = RemoteTier(settings)
        return tier


def remote_tier_from_environ(environ: Mapping[str, str]) -> RemoteTier | None:
    """The process's tier for ``$NEURONCC_REMOTE_CACHE`` if ``$NEURONCC_REMOTE_CACHE_KEY`` is set (without the
    key: None, and one notice per process)."""
    settings = settings_from_environ(environ)
    return tier_for(settings) if settings is not None else None
