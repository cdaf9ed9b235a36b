"""What the environment asks of the remote compile cache tier: the server, the shared key, the timeout.

    NEURONCC_REMOTE_CACHE=redis://host:6379/0       the server (redis://, rediss:// or unix://)
    NEURONCC_REMOTE_CACHE_KEY=<secret>              the HMAC key every writer and reader shares; without it the
                                                    remote tier is off (one notice per process)
    NEURONCC_REMOTE_CACHE_TIMEOUT=2                 seconds for a connect or a reply (default 2)

Apart from the tier itself (``driver.remote``: the Redis client and signed bundles), so that a process that
asks for no remote tier (every graph cache hit of a warm start) reads its environment without importing it.
"""

from __future__ import annotations

import threading
import urllib.parse
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field

from neuroncc.driver.notices import CacheWarning
from neuroncc.errors import InputError
from neuroncc.codegen.llvm.fork_safety import renew_in_child

URL_VARIABLE = "NEURONCC_REMOTE_CACHE"
KEY_VARIABLE = "NEURONCC_REMOTE_CACHE_KEY"
TIMEOUT_VARIABLE = "NEURONCC_REMOTE_CACHE_TIMEOUT"
DEFAULT_TIMEOUT_S = 2.0
#: Shorter secrets are refused (the tier stays off): the signature is all that stands between a shared server
#: and native code run on this machine.
MIN_SECRET_LENGTH = 16


@dataclass(frozen=True, slots=True)
class RemoteSettings:
    """Where the remote tier is and how long to wait for it.

    ``lock_lease_s``: how long a compile lock outlives a process that died holding it (a live holder renews it
    every third of that); ``lock_wait_s``: how long to wait for another machine's compile of the same key
    before compiling it here as well.
    """

    url: str
    secret: bytes = field(repr=False)
    timeout_s: float = DEFAULT_TIMEOUT_S
    lock_lease_s: float = 30.0
    lock_wait_s: float = 600.0

    @property
    def display_url(self) -> str:
        return display_url(self.url)


def display_url(url: str) -> str:
    """``url`` without its password, for messages."""
    parts = urllib.parse.urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.rpartition("@")[2]
    user = f"{parts.username}:***@" if parts.username else "***@"
    return urllib.parse.urlunsplit(parts._replace(netloc=user + netloc))


_NOTICES: set[str] = set()
_NOTICES_LOCK = renew_in_child(threading.Lock())


def notice_once(message: str) -> None:
    """Warn ``message`` once per process."""
    with _NOTICES_LOCK:
        if message in _NOTICES:
            return
        _NOTICES.add(message)
    warnings.warn(message, CacheWarning, stacklevel=3)


def _timeout_from_environ(environ: Mapping[str, str]) -> float:
    timeout = environ.get(TIMEOUT_VARIABLE, "")
    try:
        timeout_s = float(timeout) if timeout else DEFAULT_TIMEOUT_S
        if not 0 < timeout_s < 3600:
            raise ValueError
    except ValueError:
        notice_once(f"ignoring {TIMEOUT_VARIABLE}={timeout!r} (not a number of seconds); using {DEFAULT_TIMEOUT_S}")
        timeout_s = DEFAULT_TIMEOUT_S
    return timeout_s


def inspection_settings(environ: Mapping[str, str], *, need_secret: bool) -> RemoteSettings:
    """The remote tier that ``neuroncc cache ... --remote`` looks into; raises :class:`InputError` if
    ``environ`` names none (or, when ``need_secret``, lacks the key that checking entries needs). Listing and
    deleting need no key: they run nothing."""
    url = environ.get(URL_VARIABLE, "").strip()
    if not url:
        raise InputError(f"--remote needs {URL_VARIABLE} (e.g. redis://host:6379/0)")
    secret = environ.get(KEY_VARIABLE, "")
    if need_secret and len(secret) < MIN_SECRET_LENGTH:
        problem = "is not set" if not secret else f"is shorter than {MIN_SECRET_LENGTH} characters"
        raise InputError(f"checking remote entries needs the shared key, and {KEY_VARIABLE} {problem}")
    return RemoteSettings(url=url, secret=secret.encode("utf-8"), timeout_s=_timeout_from_environ(environ))


def settings_from_environ(environ: Mapping[str, str]) -> RemoteSettings | None:
    """The remote tier ``environ`` asks for, or None (not asked for, or off for want of a usable key: then one
    notice per process says so)."""
    url = environ.get(URL_VARIABLE, "").strip()
    if not url:
        return None
    where = display_url(url)
    secret = environ.get(KEY_VARIABLE, "")
    if not secret:
        notice_once(f"remote compile cache {where} is off: {KEY_VARIABLE} is not set (remote artifacts hold native "
                    "code and are used only when signed with that shared key)")
        return None
    if len(secret) < MIN_SECRET_LENGTH:
        notice_once(f"remote compile cache {where} is off: {KEY_VARIABLE} is shorter than {MIN_SECRET_LENGTH} "
                    "characters (use e.g. 32 random hex digits)")
        return None
    return RemoteSettings(url=url, secret=secret.encode("utf-8"), timeout_s=_timeout_from_environ(environ))
