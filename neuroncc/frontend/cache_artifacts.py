"""neuroncc's artifacts in PyTorch's portable cache: ``torch.compiler.save_cache_artifacts()`` returns them with
Inductor's and AOTAutograd's, ``torch.compiler.load_cache_artifacts(data)`` puts them into this machine's
compile cache, so a fresh machine's first ``torch.compile(..., backend="neuron")`` compiles nothing.

    compile (frontend.aten_compiler) -> record(key): the cache entry, signed (driver.portable), handed to
                                        CacheArtifactManager as a "neuroncc" artifact
    load_cache_artifacts(data)       -> NeuronccCacheArtifact.populate_cache: signature and artifact checked
                                        (driver.portable.import_entry), then entries/<key> in $NEURONCC_CACHE_DIR

Signed with ``$NEURONCC_CACHE_ARTIFACTS_KEY`` (else ``$NEURONCC_REMOTE_CACHE_KEY``): without a key, compiles
record nothing (one debug line) and loading a payload that holds neuroncc artifacts raises
:class:`~neuroncc.errors.InputError`. A payload that does not verify raises
:class:`~neuroncc.driver.bundle.BadBundleError` out of ``load_cache_artifacts``; nothing in it is run.

:func:`register` must run before ``load_cache_artifacts`` meets a neuroncc artifact (PyTorch refuses the whole
payload on an unknown type): the ``torch.backends`` entry point calls it at ``import torch``, the backend when it
is first used. This module stays cheap for that reason: the compiler is imported when an artifact is recorded
or loaded, not here.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from torch.compiler._cache import CacheArtifact, CacheArtifactFactory, CacheArtifactManager

from neuroncc.errors import ArtifactError, NeuronccError

ARTIFACT_TYPE = "neuroncc"
log = logging.getLogger("neuroncc.frontend")


class NeuronccCacheArtifact(CacheArtifact):
    """One compile-cache entry (``key``: its cache key) as a signed bundle (``content``).

    A compile records its entry before the entry is on the disk: the cache's writer publishes it in the
    background, after the graph's optimized code is built (executors/cpu/tiers.py). Exporting it at once made
    every compile wait for both (~1-2 s a graph of the transformer step). So ``content`` may be recorded as a
    function that exports it, called when ``save_cache_artifacts()`` first reads it; the artifact is equal to
    another by key (PyTorch's set of seen artifacts would otherwise read the content to hash it)."""

    @staticmethod
    def type() -> str:
        return ARTIFACT_TYPE

    @staticmethod
    def encode(content: Any) -> Any:
        return content  # bytes, or a function returning them (see the class docstring)

    @property  # type: ignore[override]
    def content(self) -> bytes:
        value = self.__dict__["_content"]
        if callable(value):
            value = self.__dict__["_content"] = value()
        return value

    @content.setter
    def content(self, value: Any) -> None:
        self.__dict__["_content"] = value  # the frozen dataclass's __init__ sets it through object.__setattr__

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other.key == self.key  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash((ARTIFACT_TYPE, self.key))

    def populate_cache(self) -> None:
        load_artifact(self.key, self.content)


def register() -> None:
    """Make ``neuroncc`` an artifact type PyTorch's portable cache knows (idempotent)."""
    known = CacheArtifactFactory._artifact_types.get(ARTIFACT_TYPE)
    if known is None:
        CacheArtifactFactory.register(NeuronccCacheArtifact)
    elif known is not NeuronccCacheArtifact:
        raise ArtifactError(f"another '{ARTIFACT_TYPE}' cache artifact type is registered with PyTorch "
                            f"({known.__module__}.{known.__qualname__})")


def record(key: str) -> None:
    """Hand the compile-cache entry ``key`` (just compiled or loaded) to ``save_cache_artifacts()``. Never
    raises: a compile must not fail because its artifact cannot be exported."""
    # the driver is imported here, not at module level: register() runs while `import torch` does
    from neuroncc.driver.cache import CompileCache
    from neuroncc.driver.portable import export_entry, secret_from_environ

    try:
        secret = secret_from_environ(os.environ)
        cache = CompileCache.from_environ(os.environ)
    except (OSError, NeuronccError) as exc:
        log.warning("neuroncc: cache entry %s is left out of save_cache_artifacts(): %s", key[:16], exc)
        return
    if secret is None or cache is None:
        log.debug("neuroncc: not recording cache entry %s for save_cache_artifacts(): %s", key[:16],
                  "no compile cache" if cache is None else "NEURONCC_CACHE_ARTIFACTS_KEY is not set")
        return

    def export() -> bytes:
        """The signed entry, once the cache's writer has published it; empty (left out on loading) if it
        cannot be exported: ``save_cache_artifacts()`` must not fail for one entry."""
        try:
            return export_entry(cache, key, secret)
        except (OSError, NeuronccError) as exc:
            log.warning("neuroncc: cache entry %s is left out of save_cache_artifacts(): %s", key[:16], exc)
            return b""

    register()
    CacheArtifactManager.record_artifact(ARTIFACT_TYPE, key, export)


def load_artifact(key: str, content: bytes) -> bool:
    """Verify the signed entry ``content`` and install it as ``key`` in ``$NEURONCC_CACHE_DIR`` (True; False
    when an intact entry was there already, or the cache is disabled). Raises
    :class:`~neuroncc.driver.bundle.BadBundleError` for a payload that must not be used,
    :class:`~neuroncc.errors.InputError` without the signing key."""
    from neuroncc.driver.cache import CompileCache
    from neuroncc.driver.portable import import_entry, require_secret

    if not content:  # an entry the saving process could not export (see record)
        log.warning("neuroncc: cache entry %s from load_cache_artifacts() is empty (the saving process could not "
                    "export it); it is compiled when used", key[:16])
        return False
    cache = CompileCache.from_environ(os.environ)
    if cache is None:
        log.warning("neuroncc: NEURONCC_DISABLE_CACHE is set; cache entry %s from load_cache_artifacts() is "
                    "not loaded", key[:16])
        return False
    installed = import_entry(cache, key, content, require_secret(os.environ))
    log.debug("neuroncc: %s cache entry %s from load_cache_artifacts()",
              "installed" if installed else "already had", key[:16])
    return installed
