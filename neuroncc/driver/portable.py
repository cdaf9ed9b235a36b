"""Compile-cache entries carried from machine to machine as signed bytes: neuroncc's part of PyTorch's portable
cache (``torch.compiler.save_cache_artifacts()`` / ``load_cache_artifacts()``).

    export_entry(cache, key, secret)         -> bytes: the entry as a bundle (driver.bundle) signed for
                                                PORTABLE_DOMAIN
    import_entry(cache, key, value, secret)  -> the bundle's signature checked, its files unpacked and verified
                                                as an artifact, then renamed into ``entries/<key>``

The value is the remote tier's bundle format under another signing domain, so it gets the same checks: the
HMAC-SHA256 first (keyed by ``NEURONCC_CACHE_ARTIFACTS_KEY``, else ``NEURONCC_REMOTE_CACHE_KEY``; bound to the
key), nothing parsed before it; then the manifest, format version, key and every file's size and sha256. An
entry holds native code, so an unsigned payload is never loaded: without a key nothing is exported and
importing is refused. The torch side (the artifact type registered with PyTorch) is
``neuroncc.frontend.cache_artifacts``; the environment is read there, and handed in here. The bundle format is
imported when an entry is exported or imported, not here: every graph cache hit records its entries through
this module (the export itself waits for ``save_cache_artifacts()``).
"""

from __future__ import annotations

from collections.abc import Mapping

from neuroncc.driver.artifact import verify_artifact
from neuroncc.driver.cache import CompileCache
from neuroncc.driver.remote_settings import KEY_VARIABLE as REMOTE_KEY_VARIABLE
from neuroncc.driver.remote_settings import MIN_SECRET_LENGTH
from neuroncc.errors import ArtifactError, InputError

KEY_VARIABLE = "NEURONCC_CACHE_ARTIFACTS_KEY"


def secret_from_environ(environ: Mapping[str, str]) -> bytes | None:
    """The signing secret: ``$NEURONCC_CACHE_ARTIFACTS_KEY``, else ``$NEURONCC_REMOTE_CACHE_KEY`` (a deployment
    that shares a remote cache secret needs no second one); None if neither is set. Raises
    :class:`InputError` for a secret shorter than 16 characters (the signature is all that stands between the
    payload and native code run on this machine)."""
    for variable in (KEY_VARIABLE, REMOTE_KEY_VARIABLE):
        secret = environ.get(variable, "")
        if secret:
            if len(secret) < MIN_SECRET_LENGTH:
                raise InputError(f"{variable} is shorter than {MIN_SECRET_LENGTH} characters; neuroncc's cache "
                                 "artifacts are signed with it (use e.g. `openssl rand -hex 32`)")
            return secret.encode("utf-8")
    return None


def require_secret(environ: Mapping[str, str]) -> bytes:
    """:func:`secret_from_environ`, or an :class:`InputError` saying which variable to set."""
    secret = secret_from_environ(environ)
    if secret is None:
        raise InputError(f"loading neuroncc's cache artifacts needs the key they were signed with: set {KEY_VARIABLE} "
                         f"(or {REMOTE_KEY_VARIABLE}) to the secret the saving process used; they hold native code, "
                         "so unsigned ones are never loaded")
    return secret


def export_entry(cache: CompileCache, key: str, secret: bytes) -> bytes:
    """The entry ``key`` of ``cache`` as a signed bundle (the entry is verified intact first). Raises
    :class:`ArtifactError` if it is missing or damaged, ``OSError`` if it cannot be read."""
    from neuroncc.driver.bundle import PORTABLE_DOMAIN, pack_bundle

    return pack_bundle(cache.entry_dir(key), secret, PORTABLE_DOMAIN)


def import_entry(cache: CompileCache, key: str, value: bytes, secret: bytes) -> bool:
    """Install the bundle ``value`` as the entry ``key`` of ``cache``: True if installed, False if an intact
    entry was already there (it is kept). Raises :class:`~neuroncc.driver.bundle.BadBundleError` for a value
    that must not be used (tampered, signed with another secret or for another key or use, truncated, another
    format version, a damaged artifact inside): nothing of it is installed or run."""
    from neuroncc.driver.bundle import PORTABLE_DOMAIN, BadBundleError, open_bundle

    bundle = open_bundle(value, key, secret, PORTABLE_DOMAIN)  # before anything touches the disk
    if not cache.ensure_usable():
        raise ArtifactError(f"cannot load neuroncc cache artifacts into {cache.root}: the directory is unusable")
    with cache.key_lock(key):
        if _intact(cache, key):
            return False
        try:
            cache.install_bundle(key, bundle)
        except BadBundleError:
            raise
        except ArtifactError as exc:  # signed, but the artifact inside does not verify
            raise BadBundleError(str(exc).replace(str(cache.root), "<cache>")) from None
    return True


def _intact(cache: CompileCache, key: str) -> bool:
    if not cache.entry_dir(key).exists():
        return False
    try:
        verify_artifact(cache.entry_dir(key))
    except ArtifactError:
        return False  # damaged: replaced by the verified one
    return True
