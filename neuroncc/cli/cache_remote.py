"""``neuroncc cache list | explain | verify | clear --remote``: the same views of the remote cache tier.

    neuroncc cache list --remote                 key, target, size, created, graph name of every remote entry
                                                 (read from each value's head, unverified: listing runs nothing)
    neuroncc cache verify --remote               every entry checked as a remote hit is (signature with
                                                 $NEURONCC_REMOTE_CACHE_KEY, then every file); exit 1 on bad ones
    neuroncc cache clear --remote [--older-than DAYS]
    neuroncc cache explain --key KEY --remote    a remote entry's key components (after the full check)

The server is ``$NEURONCC_REMOTE_CACHE``; an unreachable one is an error here (exit 2), not a fallback.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import time
import warnings
from collections.abc import Iterator

from neuroncc.driver.bundle import BadBundleError, verify_bundle
from neuroncc.driver.notices import CacheWarning
from neuroncc.driver.remote import RemoteEntry, RemoteTier
from neuroncc.driver.remote_settings import inspection_settings
from neuroncc.errors import ArtifactError

@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """The tier warns when it switches itself off; here the error itself is reported (one line, exit 2)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CacheWarning)
        yield


def open_tier(need_secret: bool) -> RemoteTier:
    """A tier of its own (not the process-wide one): the CLI reports failures instead of degrading."""
    return RemoteTier(inspection_settings(os.environ, need_secret=need_secret))


def _created(entry: RemoteEntry) -> str:
    if entry.head is None:
        return "?"
    try:
        stamp = datetime.datetime.fromisoformat(entry.head.created_at)
    except ValueError:
        return entry.head.created_at
    return stamp.astimezone(datetime.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _created_timestamp(entry: RemoteEntry) -> float | None:
    if entry.head is None:
        return None
    with contextlib.suppress(ValueError):
        return datetime.datetime.fromisoformat(entry.head.created_at).timestamp()
    return None


def list_remote() -> tuple[str, list[tuple[str, str, int, str, str]]]:
    """(server, rows of key, target, size, created, graph) from each value's unverified head."""
    tier = open_tier(need_secret=False)
    with _quiet():
        entries = tier.list_entries()
    rows = []
    for entry in sorted(entries, key=_created):
        if entry.head is None:
            rows.append((entry.key, "?", entry.size, "?", f"(unreadable: {entry.problem})"))
        else:
            rows.append((entry.key, entry.head.target, entry.size, _created(entry), entry.head.graph_name))
    return tier.settings.display_url, rows


def verify_remote() -> tuple[str, int, list[tuple[str, str]]]:
    """(server, entries checked, [(key, problem) of each bad one]): each checked as a remote hit is."""
    tier = open_tier(need_secret=True)
    checked, bad = 0, []
    with _quiet():
        for key in tier.keys():
            value = tier.get(key)
            if value is None:  # deleted meanwhile
                continue
            checked += 1
            try:
                verify_bundle(value, key, tier.settings.secret)
            except BadBundleError as exc:
                bad.append((key, exc.reason))
    return tier.settings.display_url, checked, bad


def clear_remote(older_than_s: float | None) -> tuple[str, int, int]:
    """Delete remote entries (all, or those created more than ``older_than_s`` ago): (server, removed, bytes)."""
    tier = open_tier(need_secret=False)
    now = time.time()
    with _quiet():
        doomed = []
        for entry in tier.list_entries():
            created = _created_timestamp(entry)
            # an entry whose age cannot be read goes only with a full clear (it is unusable anyway)
            if older_than_s is None or (created is not None and now - created >= older_than_s):
                doomed.append(entry)
        removed = tier.delete([e.key for e in doomed])
    return tier.settings.display_url, removed, sum(e.size for e in doomed)


def stored_components(prefix: str) -> tuple[str, str, dict[str, tuple[str, str]]]:
    """(title, key, {component: (digest, summary)}) of a remote entry, read only after its full check."""
    tier = open_tier(need_secret=True)
    with _quiet():
        key = tier.resolve_key(prefix)
        value = tier.get(key)
    if value is None:
        raise ArtifactError(f"remote cache entry {key[:16]} was deleted meanwhile")
    try:
        manifest = verify_bundle(value, key, tier.settings.secret)
    except BadBundleError as exc:
        raise ArtifactError(f"remote cache entry {key[:16]} is refused: {exc.reason}") from None
    title = (f"remote entry @{manifest.graph_name} in {tier.settings.display_url}, target {manifest.target}, "
             f"created {manifest.created_at}")
    return title, key, {name: (c.digest, c.summary) for name, c in manifest.key_components.items()}
