"""Graph entries: what the torch front end's graph cache stores beside the compiled artifacts it points to.

A graph entry is an ordinary cache entry (``entries/<key>/``, the artifact format of
:mod:`neuroncc.driver.artifact`: a ``manifest.json`` with the key's components and the sha256 of every file,
plus a self-checksum), whose one file is ``aot_graph.json``: JSON data the front end wrote (which compiled
artifacts, by their keys, a TorchDynamo graph became, and what AOTAutograd's runtime needs to run them; or the
eager device's signature index, ``neuroncc.device.signature_index``). Its
manifest's target is ``aot:<target>`` (``aot:cpu``), so ``neuroncc cache list / verify / explain --key /
clear``, the remote tier's bundles and ``torch.compiler.save_cache_artifacts()`` handle it as any entry.

    write_graph_entry(cache, key, ...)   under the key's lock: written into tmp/, renamed into entries/<key>
                                         (by the cache's background writer, if it has one)
    update_graph_entry(cache, key, ...)  the same, the new payload made from the current one under the lock (the
                                         eager device's signature index, which many processes add to)
    read_graph_entry(cache, key)         -> the JSON payload, after the full check of the entry (manifest,
                                            format version, key, every file's size and sha256); a damaged
                                            entry is a miss with one CacheWarning
    is_graph_entry(manifest)             a graph entry, not a compiled artifact

No pickle: the payload is JSON, and this module only checks and moves bytes; the front end decodes the
payload field by field. Nothing here imports torch.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import shutil
import tempfile
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from neuroncc.driver.artifact import (
    FORMAT_VERSION,
    MANIFEST_NAME,
    ComponentRecord,
    Manifest,
    TensorRecord,
    file_digest,
    fsync_directory,
    manifest_bytes,
    verify_artifact,
    write_new_file,
)
from neuroncc.driver.cache import CompileCache
from neuroncc.driver.cache_key import BuildEnvironment, CacheKey, _component, host_fingerprint
from neuroncc.driver.notices import CacheWarning
from neuroncc.driver.publisher import PUBLISHER
from neuroncc.errors import ArtifactError, NeuronccError

#: Bump when the payload's layout changes: entries of another version are never found (the key includes it).
GRAPH_FORMAT_VERSION = 1
#: A graph entry's manifest target is this prefix plus the target its artifacts were built for.
TARGET_PREFIX = "aot:"
PAYLOAD_NAME = "aot_graph.json"


def graph_key(parts: Sequence[tuple[str, str, str | None]], target: str,
              environment: BuildEnvironment | None = None) -> CacheKey:
    """The key of a graph entry: a sha256 over the caller's named components (name, canonical text, summary),
    then the target, its host fingerprint and the build environment (``environment``, default this
    process's: pass the cache's, ``CompileCache.build_environment()``), each hashed on its own as in
    :func:`neuroncc.driver.cache_key.compute_key` (so ``neuroncc cache explain --key A --key B`` compares
    two graph entries component by component)."""
    env = environment or BuildEnvironment.current()
    components = (
        *(_component(name, canonical, summary) for name, canonical, summary in parts),
        _component("target", target),
        _component("host", host_fingerprint(target), " ".join(host_fingerprint(target).split()[:2]) or "-"),
        _component("neuroncc_version", env.neuroncc_version),
        _component("neuroncc_source", env.neuroncc_source, f"{env.neuroncc_source_files} files"),
        _component("torch_version", env.torch_version),
        _component("llvmlite_version", env.llvmlite_version),
        _component("format_version", f"{FORMAT_VERSION}/{GRAPH_FORMAT_VERSION}"),
    )
    text = "neuroncc-graph-key\n" + "".join(f"{c.name}={c.digest}\n" for c in components)
    return CacheKey(hashlib.sha256(text.encode()).hexdigest(), components)


def is_graph_entry(manifest: Manifest) -> bool:
    return manifest.target.startswith(TARGET_PREFIX)


def write_graph_entry(cache: CompileCache, key: CacheKey, *, graph_name: str, target: str,
                      inputs: Sequence[tuple[str, Sequence[int], Sequence[int]]], options: Mapping[str, Any],
                      payload: Mapping[str, Any], timings: Mapping[str, float], neuroncc_version: str,
                      replace: bool = False) -> bool:
    """Publish the graph entry ``key`` (replacing a damaged one, or with ``replace`` any one: an entry whose
    payload did not decode); False, with one warning, if it could not be written. ``inputs``: (dtype, shape,
    strides) of each graph input, for ``neuroncc cache list``.

    A cache that publishes in the background (``cache_from_environ``'s) hands the files to its writer with the
    key's lock, as it does a compiled artifact (``CompileCache.publish_locked``): the caller, the backward
    graph's compile, returns without waiting for the directory's fsync (2-8 ms of the first backward call on
    row f2), True means handed over, and a write that fails warns on the writer. The entry is still whole or
    absent (written in ``tmp/``, renamed under the lock), and this process's lookups of the key wait for it."""
    if not cache.ensure_usable():
        return False
    try:
        data = _payload_bytes(payload)
        fields = _manifest_fields(key, graph_name, target, inputs, options, timings, neuroncc_version)
        return cache.publish_locked(key.key, lambda: _write_entry(cache, key.key, data, fields, replace))
    except (OSError, ValueError, NeuronccError) as exc:
        _write_failed(cache, key.key, exc)
        return False


def update_graph_entry(cache: CompileCache, key: CacheKey, *, graph_name: str, target: str,
                       update: Callable[[Mapping[str, Any] | None], Mapping[str, Any]],
                       neuroncc_version: str) -> bool:
    """Replace the graph entry ``key`` by ``update(its current payload)`` (None when there is none, or it is
    damaged), holding the key's lock from the read to the rename: processes updating one entry at once each
    see the others' updates (an index several processes add to). On the cache's writer when it publishes in
    the background (True: handed over). False, with one warning, if it could not be written."""
    if not cache.ensure_usable():
        return False

    def write() -> bool:
        try:
            current = _payload_of(cache.entries_dir / key.key, target)
        except (ArtifactError, OSError, UnicodeDecodeError, ValueError):
            current = None  # damaged: replaced
        data = _payload_bytes(update(current))
        fields = _manifest_fields(key, graph_name, target, [], {}, {}, neuroncc_version)
        return _write_entry(cache, key.key, data, fields, replace=True)

    try:
        return cache.publish_locked(key.key, write)
    except (OSError, ValueError, NeuronccError) as exc:
        _write_failed(cache, key.key, exc)
        return False


def _payload_bytes(payload: Mapping[str, Any]) -> bytes:
    return (json.dumps(payload, sort_keys=True, separators=(",", ":"), allow_nan=False) + "\n").encode()


def _manifest_fields(key: CacheKey, graph_name: str, target: str,
                     inputs: Sequence[tuple[str, Sequence[int], Sequence[int]]], options: Mapping[str, Any],
                     timings: Mapping[str, float], neuroncc_version: str) -> dict[str, Any]:
    """A graph entry's manifest fields but its files' digests."""
    return dict(
        format_version=FORMAT_VERSION, key=key.key,
        key_components={c.name: ComponentRecord(digest=c.digest, summary=c.summary) for c in key.components},
        target=TARGET_PREFIX + target, graph_name=graph_name,
        inputs=[TensorRecord(dtype=d, shape=list(s), strides=list(t)) for d, s, t in inputs], outputs=[],
        options=json.loads(json.dumps(dict(options), sort_keys=True, default=str)), pipeline="", stages=[],
        target_files=[PAYLOAD_NAME], timings=dict(timings), neuroncc_version=neuroncc_version,
        created_at=datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"))


def _write_entry(cache: CompileCache, key: str, data: bytes, fields: dict[str, Any], replace: bool) -> bool:
    """Write the entry ``key`` (payload ``data``, a manifest of ``fields`` and the payload's digest) into
    ``tmp/`` and rename it into place; the caller holds the key's lock. False, with one warning, if it could
    not."""
    try:
        if not replace and _intact(cache.entries_dir / key):
            return True  # another process published it meanwhile: keep it (a reader may be loading it)
        temp = Path(tempfile.mkdtemp(prefix=f"{key[:16]}.{os.getpid()}.", dir=cache.tmp_dir))
        try:
            write_new_file(temp / PAYLOAD_NAME, data)
            manifest = Manifest(**fields, files={PAYLOAD_NAME: file_digest(temp / PAYLOAD_NAME)})
            write_new_file(temp / MANIFEST_NAME, manifest_bytes(manifest))
            final = cache.entries_dir / key
            if final.exists():
                shutil.rmtree(final, ignore_errors=True)
            os.rename(temp, final)
            fsync_directory(cache.entries_dir)
        finally:
            if temp.exists():
                shutil.rmtree(temp, ignore_errors=True)
    except (OSError, ValueError, NeuronccError) as exc:
        _write_failed(cache, key, exc)
        return False
    return True


def _write_failed(cache: CompileCache, key: str, exc: Exception) -> None:
    cache.stats.add("publish_failures")
    warnings.warn(f"could not save graph cache entry {key[:16]} ({exc}); the graph is compiled again next time",
                  CacheWarning, stacklevel=2)


def read_graph_entry(cache: CompileCache, key: str, target: str) -> Mapping[str, Any] | None:
    """The payload of the graph entry ``key`` for ``target``; None if there is none, or (with one warning)
    if it is damaged or not a graph entry for ``target``."""
    directory = cache.entries_dir / key
    PUBLISHER.wait((cache.root, key))
    if not directory.exists():
        return None
    try:
        payload = _payload_of(directory, target)
    except (ArtifactError, OSError, UnicodeDecodeError, ValueError) as exc:
        cache.stats.add("bad_entries")
        warnings.warn(f"ignoring damaged graph cache entry {key[:16]} ({exc}); recompiling", CacheWarning,
                      stacklevel=3)
        return None
    return payload


def _payload_of(directory: Path, target: str) -> dict[str, Any]:
    """The payload of the graph entry in ``directory``, after the full check; raises ArtifactError (or OSError,
    ValueError) if it is damaged or not a graph entry for ``target``."""
    manifest = verify_artifact(directory)
    if manifest.target != TARGET_PREFIX + target:
        raise ArtifactError(f"{directory}: an entry of target '{manifest.target}', not a graph entry for '{target}'")
    payload = json.loads((directory / PAYLOAD_NAME).read_bytes().decode("utf-8"))
    if not isinstance(payload, dict):
        raise ArtifactError(f"{directory / PAYLOAD_NAME}: not a JSON object")
    return payload


def _intact(directory: Path) -> bool:
    if not directory.exists():
        return False
    try:
        verify_artifact(directory)
    except ArtifactError:
        return False
    return True
