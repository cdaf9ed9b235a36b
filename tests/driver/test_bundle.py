"""The remote tier's wire format (``driver.bundle``): one signed value per artifact; nothing in it is parsed
before its signature checks out, and what comes out is verified as an artifact before anything loads it."""

from __future__ import annotations

import json

import pytest
from cache_testing import sample_function

from neuroncc.driver.artifact import verify_artifact
from neuroncc.driver.bundle import (
    BUNDLE_VERSION,
    HEADER,
    MAC_SIZE,
    MAGIC,
    BadBundleError,
    open_bundle,
    pack_bundle,
    read_head,
    sign,
)
from neuroncc.driver.compile import compile_graph, make_request

SECRET = b"0123456789abcdef0123456789abcdef"


@pytest.fixture
def entry(cache, target):
    fn = sample_function()
    compile_graph(fn, target=target, cache=cache)
    return cache.entry_dir(cache.key_of(make_request(fn, target=target)).key)


def _resign(body: bytes, key: str, secret: bytes = SECRET) -> bytes:
    return body + sign(secret, key, body)


def test_a_bundle_round_trips_into_an_intact_artifact(entry, tmp_path):
    value = pack_bundle(entry, SECRET)
    assert value.startswith(MAGIC) and b"pickle" not in value[:HEADER.size]
    bundle = open_bundle(value, entry.name, SECRET)
    assert bundle.head.files[0].name == "manifest.json"
    assert read_head(value).key == entry.name  # the unverified head, for listing
    out = tmp_path / "copy" / entry.name
    out.mkdir(parents=True)
    bundle.extract(out)
    assert verify_artifact(out) == verify_artifact(entry)
    assert {p.relative_to(out) for p in out.rglob("*")} == {p.relative_to(entry) for p in entry.rglob("*")}


def test_every_flipped_byte_is_refused(entry):
    value = pack_bundle(entry, SECRET)
    for position in range(HEADER.size, len(value), max(1, len(value) // 200)):
        damaged = value[:position] + bytes([value[position] ^ 0x80]) + value[position + 1:]
        with pytest.raises(BadBundleError):
            open_bundle(damaged, entry.name, SECRET)


@pytest.mark.parametrize("cut", [0, 10, HEADER.size, HEADER.size + 5, -MAC_SIZE - 1, -1])
def test_a_truncated_value_is_refused_as_truncated(entry, cut):
    value = pack_bundle(entry, SECRET)
    with pytest.raises(BadBundleError, match="truncated"):
        open_bundle(value[:cut] if cut else b"", entry.name, SECRET)


def test_another_secret_or_another_key_is_refused(entry):
    value = pack_bundle(entry, SECRET)
    with pytest.raises(BadBundleError, match="bad signature"):
        open_bundle(value, entry.name, b"another secret, just as long....")
    other_key = "f" * 64  # the same value copied under another key
    with pytest.raises(BadBundleError, match="bad signature"):
        open_bundle(value, other_key, SECRET)


def test_a_signed_value_naming_another_key_or_escaping_the_directory_is_refused(entry, tmp_path):
    value = pack_bundle(entry, SECRET)
    _magic, _version, length = HEADER.unpack_from(value)
    head = json.loads(value[HEADER.size:HEADER.size + length])
    payload = value[HEADER.size + length:-MAC_SIZE]

    def rebuilt(new_head: dict, key: str) -> bytes:
        data = json.dumps(new_head).encode()
        return _resign(HEADER.pack(MAGIC, BUNDLE_VERSION, len(data)) + data + payload, key)

    other = "e" * 64
    with pytest.raises(BadBundleError, match="holds key"):
        open_bundle(rebuilt(head, other), other, SECRET)  # signed by a key holder, but for another artifact
    escaping = dict(head, files=[head["files"][0], {**head["files"][1], "name": "../../escaped"},
                                 *head["files"][2:]])
    bundle = open_bundle(rebuilt(escaping, entry.name), entry.name, SECRET)
    target = tmp_path / "x" / entry.name
    target.mkdir(parents=True)
    with pytest.raises(Exception, match="leaves the artifact directory"):
        bundle.extract(target)
    assert not (tmp_path / "escaped").exists()


def test_other_bundle_and_artifact_versions_are_refused_by_name(entry):
    value = pack_bundle(entry, SECRET)
    _magic, _version, length = HEADER.unpack_from(value)
    newer = _resign(HEADER.pack(MAGIC, BUNDLE_VERSION + 1, length) + value[HEADER.size:-MAC_SIZE], entry.name)
    with pytest.raises(BadBundleError, match=f"bundle format version {BUNDLE_VERSION + 1}"):
        open_bundle(newer, entry.name, SECRET)
    head = json.loads(value[HEADER.size:HEADER.size + length])
    data = json.dumps(dict(head, format_version=head["format_version"] + 1)).encode()
    skewed = _resign(HEADER.pack(MAGIC, BUNDLE_VERSION, len(data)) + data + value[HEADER.size + length:-MAC_SIZE],
                     entry.name)
    with pytest.raises(BadBundleError, match="artifact format version"):
        open_bundle(skewed, entry.name, SECRET)
    with pytest.raises(BadBundleError, match="not a neuroncc artifact bundle"):
        open_bundle(b"\x80\x04pickle" + value[10:], entry.name, SECRET)


def test_a_damaged_local_entry_is_never_bundled(entry):
    (entry / "graph.nir").write_text("damaged")
    with pytest.raises(Exception, match="graph.nir"):
        pack_bundle(entry, SECRET)
