"""An artifact as one signed byte string: the value the remote cache tier stores under the artifact's key.

    offset 0     8 bytes   magic  b"\\x89NCCART\\n"
           8     4 bytes   bundle format version (big-endian u32), BUNDLE_VERSION
          12     4 bytes   length H of the head (big-endian u32)
          16     H bytes   the head: JSON {key, format_version, target, graph_name, created_at, neuroncc_version,
                           files: [{name, size}, ...]}; manifest.json is the first file
        16+H               the files' bytes, back to back, in the head's order
        end-32  32 bytes   HMAC-SHA256 over everything before it, keyed by the shared secret
                           (NEURONCC_REMOTE_CACHE_KEY), prefixed by a domain string and the artifact's key

The same bundle, signed under another domain (:data:`PORTABLE_DOMAIN`, keyed by
NEURONCC_CACHE_ARTIFACTS_KEY), is what ``torch.compiler.save_cache_artifacts()`` carries for neuroncc
(``driver.portable``); a value signed for one use is refused by the other.

No pickle, no archive library: a length-prefixed list of files. An artifact holds native code, so nothing in a
bundle is parsed before its signature is checked (only the fixed 16-byte header is read first, to name a
version skew or a foreign value in the warning). The signature binds the key, so a value copied to another key
is refused. After the signature, the files are written into a fresh directory and that directory goes through
the same full check as a local entry (:func:`neuroncc.driver.artifact.verify_artifact`: manifest schema and
self-checksum, artifact format version, key, every file's size and sha256) before anything loads it.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import struct
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from neuroncc.driver.artifact import FORMAT_VERSION, MANIFEST_NAME, Manifest, inside_artifact, verify_artifact
from neuroncc.driver.strict_json import SchemaError, decode, encode, minimum, pattern
from neuroncc.errors import ArtifactError

MAGIC = b"\x89NCCART\n"
#: Bump when the layout above changes; a bundle of another version is a miss (with one warning).
BUNDLE_VERSION = 1
HEADER = struct.Struct(">8sII")  # magic, bundle version, head length
MAC_SIZE = hashlib.sha256().digest_size
KEY_PATTERN = re.compile(r"^[0-9a-f]{64}$")
#: What a signature is for, hashed in front of everything it covers.
REMOTE_DOMAIN = b"neuroncc remote artifact\0"
PORTABLE_DOMAIN = b"neuroncc portable artifact\0"
#: The environment variable holding each domain's secret, named when a signature does not check out.
_SECRET_VARIABLES = {REMOTE_DOMAIN: "NEURONCC_REMOTE_CACHE_KEY", PORTABLE_DOMAIN: "NEURONCC_CACHE_ARTIFACTS_KEY"}


class BadBundleError(ArtifactError):
    """A bundle (a remote value, or an artifact loaded from ``torch.compiler.load_cache_artifacts``) that must not
    be used: not a bundle, truncated, a bad signature, another version, or a
    damaged artifact inside. ``reason`` is a short phrase for the warning."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True, slots=True)
class BundleFile:
    name: str
    size: int = field(metadata=minimum(0))


@dataclass(frozen=True, slots=True)
class BundleHead:
    """What a bundle holds; ``target`` .. ``neuroncc_version`` repeat the manifest's so that ``neuroncc cache
    list --remote`` can show an entry from its first bytes. Checked field by field when read (``strict_json``)."""

    key: str = field(metadata=pattern(KEY_PATTERN.pattern))
    format_version: int
    target: str
    graph_name: str
    created_at: str
    neuroncc_version: str
    files: list[BundleFile]

    @property
    def payload_size(self) -> int:
        return sum(f.size for f in self.files)


def sign(secret: bytes, key: str, body: bytes | memoryview, domain: bytes = REMOTE_DOMAIN) -> bytes:
    """HMAC-SHA256 of ``body`` as stored under ``key`` for ``domain``'s use."""
    mac = hmac.new(secret, domain + key.encode("ascii") + b"\0", hashlib.sha256)
    mac.update(body)
    return mac.digest()


def pack_bundle(directory: Path, secret: bytes, domain: bytes = REMOTE_DOMAIN) -> bytes:
    """The signed bundle of the artifact in ``directory`` (checked intact first: a damaged local entry is never
    shared)."""
    manifest = verify_artifact(directory)
    names = [MANIFEST_NAME, *sorted(manifest.files)]
    contents = [inside_artifact(directory, name).read_bytes() for name in names]
    head = BundleHead(key=manifest.key, format_version=manifest.format_version, target=manifest.target,
                      graph_name=manifest.graph_name, created_at=manifest.created_at,
                      neuroncc_version=manifest.neuroncc_version,
                      files=[BundleFile(name=n, size=len(c)) for n, c in zip(names, contents)])
    head_bytes = json.dumps(encode(head), separators=(",", ":")).encode()
    body = b"".join([HEADER.pack(MAGIC, BUNDLE_VERSION, len(head_bytes)), head_bytes, *contents])
    return body + sign(secret, manifest.key, body, domain)


def _check_header(value: bytes | memoryview) -> int:
    """The head length, after checking the fixed header (magic and version); nothing after it is read."""
    if len(value) < HEADER.size:
        raise BadBundleError(f"truncated value ({len(value)} bytes, shorter than the bundle header)")
    magic, version, head_length = HEADER.unpack_from(value)
    if magic != MAGIC:
        raise BadBundleError("not a neuroncc artifact bundle")
    if version != BUNDLE_VERSION:
        raise BadBundleError(f"bundle format version {version}, this neuroncc reads {BUNDLE_VERSION} "
                             "(written by another neuroncc)")
    return head_length


@dataclass(frozen=True, slots=True)
class Bundle:
    """A bundle whose signature checked out; its files are not yet on disk."""

    head: BundleHead
    value: bytes | memoryview

    def extract(self, directory: Path) -> None:
        """Write the files into the empty ``directory`` (mode 0600 files, 0700 directories), fsync'ed."""
        offset = HEADER.size + _check_header(self.value)
        view = memoryview(self.value)
        for record in self.head.files:
            path = inside_artifact(directory, record.name)
            path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            try:
                chunk = view[offset:offset + record.size]
                while chunk:
                    chunk = chunk[os.write(fd, chunk):]
                os.fsync(fd)
            finally:
                os.close(fd)
            offset += record.size


def open_bundle(value: bytes, key: str, secret: bytes, domain: bytes = REMOTE_DOMAIN) -> Bundle:
    """Check ``value`` as the bundle stored under ``key``: header, signature, then the head. Raises
    :class:`BadBundleError` naming the problem (truncated, tampered or foreign-key, version skew, wrong key)."""
    if not KEY_PATTERN.fullmatch(key):  # it names a directory: never let a value choose a path
        raise BadBundleError(f"'{key[:80]}' is not a cache key (64 hex digits)")
    head_length = _check_header(value)
    if len(value) < HEADER.size + head_length + MAC_SIZE:
        raise BadBundleError(f"truncated value ({len(value)} bytes, the header alone needs "
                             f"{HEADER.size + head_length + MAC_SIZE})")
    body, mac = memoryview(value)[:-MAC_SIZE], bytes(value[-MAC_SIZE:])
    if not hmac.compare_digest(mac, sign(secret, key, body, domain)):
        raise BadBundleError(_diagnose_bad_signature(value, head_length, domain))
    head = _parse_head(bytes(body[HEADER.size:HEADER.size + head_length]))
    if head.key != key:
        raise BadBundleError(f"holds key {head.key[:16]}, not {key[:16]}")
    if head.format_version != FORMAT_VERSION:
        raise BadBundleError(f"artifact format version {head.format_version}, this neuroncc reads {FORMAT_VERSION}")
    if HEADER.size + head_length + head.payload_size != len(body):
        raise BadBundleError("the head's file sizes do not add up to the value's length")
    if not head.files or head.files[0].name != MANIFEST_NAME:
        raise BadBundleError(f"the first file is not {MANIFEST_NAME}")
    return Bundle(head, value)


def _parse_head(data: bytes) -> BundleHead:
    try:
        return decode(BundleHead, json.loads(data.decode("utf-8")))
    except (UnicodeDecodeError, json.JSONDecodeError, SchemaError) as exc:
        raise BadBundleError(f"unreadable head ({type(exc).__name__})") from None


def _diagnose_bad_signature(value: bytes, head_length: int, domain: bytes) -> str:
    """Why the signature failed, as far as the (untrusted, only measured) head tells: a value cut short reads
    as truncated; anything else is tampering or another key."""
    try:
        head = _parse_head(bytes(value[HEADER.size:HEADER.size + head_length]))
    except BadBundleError:
        head = None
    if head is not None:
        expected = HEADER.size + head_length + head.payload_size + MAC_SIZE
        if len(value) < expected:
            return f"truncated value ({len(value)} of {expected} bytes)"
    return (f"bad signature (the value was modified, or signed with another {_SECRET_VARIABLES.get(domain, 'key')}, "
            "or stored under another key)")


def read_head(prefix: bytes) -> BundleHead:
    """The head of a bundle from its first ``16 + head length`` bytes, UNVERIFIED: for listing only
    (``neuroncc cache list --remote``), never for loading."""
    head_length = _check_header(prefix)
    if len(prefix) < HEADER.size + head_length:
        raise BadBundleError("truncated head")
    return _parse_head(bytes(prefix[HEADER.size:HEADER.size + head_length]))


def head_length_of(prefix: bytes) -> int:
    """The head length from a bundle's first 16 bytes (to know how much more to read for :func:`read_head`)."""
    return _check_header(prefix)


def verify_bundle(value: bytes, key: str, secret: bytes) -> Manifest:
    """The manifest of the artifact in ``value`` after the full check a remote hit gets (signature, head, then
    every file unpacked into a scratch directory and verified as an artifact); nothing is loaded or run.
    Raises :class:`BadBundleError` naming the problem."""
    bundle = open_bundle(value, key, secret)
    with tempfile.TemporaryDirectory(prefix="neuroncc-verify.") as scratch:
        directory = Path(scratch) / key  # verify_artifact checks that the directory is named after the key
        directory.mkdir(mode=0o700)
        try:
            bundle.extract(directory)
            return verify_artifact(directory)
        except ArtifactError as exc:
            raise BadBundleError(str(exc).replace(str(directory), "<bundle>")) from None
