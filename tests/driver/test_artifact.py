"""The artifact directory: write, verify, read back, for every target with an artifact codec."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from cache_testing import sample_function, sample_inputs

from neuroncc.errors import ArtifactError
from neuroncc.ir import DType, interpret
from neuroncc.driver.artifact import (
    ARTIFACT_CODECS,
    FORMAT_VERSION,
    ArtifactCodec,
    ComponentRecord,
    file_digest,
    manifest_bytes,
    seal_manifest,
    read_artifact,
    read_graph,
    read_manifest,
    read_stages,
    verify_artifact,
    write_artifact,
)
from neuroncc.driver.compile_request import ArtifactContents
from neuroncc.executors.executable import build_executable

KEY = "ab" * 32


def _contents(fn, target, **changes) -> ArtifactContents:
    fields = dict(key=KEY, key_components={"graph": ComponentRecord(digest="0" * 64, summary="g")}, target=target,
                  input_function=fn, options={"tile": [8, 16]}, pipeline="", stages={}, timings={"build": 0.5},
                  neuroncc_version="0.1.0", created_at="2026-01-02T03:04:05+00:00")
    return ArtifactContents(**(fields | changes))


def _write(tmp_path: Path, target: str, fn=None, **changes) -> Path:
    fn = fn if fn is not None else sample_function()
    directory = tmp_path / KEY
    directory.mkdir()
    write_artifact(directory, build_executable(fn, target), _contents(fn, target, **changes), ARTIFACT_CODECS[target])
    return directory


def test_a_load_opens_each_file_of_its_artifact_once(tmp_path, target, monkeypatch):
    """read_artifact hands the graph's parse and the target's loader each file's bytes as it checked them (size,
    sha256): no file is opened again after its check (the cpu loader read the plan, the graph, the code,
    kernels.ll and runtime.json a second time: session 30 cload30), and the stages' text, which no load uses, is
    not read at all (session 31 nir31). The loaded executable still runs right."""
    import builtins
    import io
    import os

    fn = sample_function()
    directory = _write(tmp_path, target, fn, stages={"input": "x"})
    opened: list[str] = []
    real_os_open, real_open = os.open, builtins.open

    def os_open(path, *args, **kwargs):
        opened.append(os.fspath(path))
        return real_os_open(path, *args, **kwargs)

    def open_(file, *args, **kwargs):
        if isinstance(file, (str, os.PathLike)):
            opened.append(os.fspath(file))
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(os, "open", os_open)
    monkeypatch.setattr(builtins, "open", open_)
    monkeypatch.setattr(io, "open", open_)
    manifest, executable = read_artifact(directory, ARTIFACT_CODECS[target])
    monkeypatch.undo()
    inside = [Path(path).relative_to(directory).as_posix() for path in opened
              if Path(path).is_relative_to(directory)]
    assert len(inside) == len(set(inside)), inside
    assert {"manifest.json", "graph.nir"} <= set(inside) <= {"manifest.json", *manifest.files} - {"stages.nir"}, inside
    inputs = sample_inputs(fn)
    for out, ref in zip(executable(*inputs), interpret(fn, inputs)):
        np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)


def test_every_file_of_an_artifact_is_private(tmp_path, target):
    """docs/cache.md: files in the cache are 0600; the cpu and nki-sim codecs wrote theirs with the umask's mode
    (0644) until session 30."""
    directory = _write(tmp_path, target, stages={"input": "x"})
    modes = {path.relative_to(directory).as_posix(): path.stat().st_mode & 0o777
             for path in directory.rglob("*") if path.is_file()}
    assert set(modes.values()) == {0o600}, modes


def test_round_trip_runs_like_the_graph(tmp_path, target):
    fn = sample_function()
    directory = _write(tmp_path, target, fn)
    manifest, executable = read_artifact(directory, ARTIFACT_CODECS[target])
    inputs = sample_inputs(fn)
    for out, ref in zip(executable(*inputs), interpret(fn, inputs)):
        np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)
    assert manifest.target == target and manifest.key == KEY and manifest.format_version == FORMAT_VERSION
    assert manifest.graph_name == "mlp"
    assert [(r.dtype, r.shape, r.strides) for r in manifest.inputs] == [("f32", [4, 32], [32, 1]), ("f32", [8], [1])]
    assert [(r.dtype, r.shape) for r in manifest.outputs] == [("f32", [4, 8]), ("f32", [4])]
    assert manifest.options == {"tile": [8, 16]} and manifest.timings["build"] == 0.5 and "save" in manifest.timings


def test_every_file_is_recorded_with_its_sha256(tmp_path, target):
    directory = _write(tmp_path, target)
    manifest = read_manifest(directory)
    on_disk = {p.relative_to(directory).as_posix() for p in directory.rglob("*") if p.is_file()}
    assert set(manifest.files) == on_disk - {"manifest.json"}
    assert {"graph.nir", "constants.npz"} <= set(manifest.files)
    for name, record in manifest.files.items():
        assert file_digest(directory / name) == record
    assert all(name in manifest.files for name in manifest.target_files)


def test_constants_are_a_plain_npz_and_the_graph_is_text(tmp_path, target):
    directory = _write(tmp_path, target)
    with np.load(directory / "constants.npz", allow_pickle=False) as archive:
        assert [archive[name].shape for name in archive.files] == [(32, 8)]
    assert "resource<32x8xf32" in (directory / "graph.nir").read_text()


def test_bf16_constants_round_trip(tmp_path):
    fn = sample_function(dtype=DType.bf16)
    directory = _write(tmp_path, "interp", fn)
    again = read_graph(directory)
    assert again == fn


def test_stages_are_saved_in_order_with_safe_names(tmp_path):
    stages = {"input": "func @a() -> () {\n  return\n}\n", "fuse{max=4}": "// fused\n", "../escape": "x"}
    directory = _write(tmp_path, "interp", stages=stages)
    manifest = read_manifest(directory)
    assert manifest.stages == ["00-input.nir", "01-fuse_max_4.nir", "02-escape.nir"]
    assert read_stages(directory) == {"00-input.nir": stages["input"], "01-fuse_max_4.nir": "// fused\n",
                                      "02-escape.nir": "x"}
    # one file for all of them (format 3): a hit checks every file of its entry, and an eager kernel's 8 stage
    # files were 8 of its 14 (session 30 cload30)
    assert sorted(manifest.files) == ["constants.npz", "graph.nir", "stages.nir"] and not (directory / "stages").exists()


def test_a_stage_whose_text_looks_like_a_header_reads_back_whole(tmp_path):
    stages = {"a": "// stage 01-b.nir 3\nxyz", "b": ""}
    directory = _write(tmp_path, "interp", stages=stages)
    assert read_stages(directory) == {"00-a.nir": stages["a"], "01-b.nir": ""}


def test_object_arrays_are_never_unpickled(tmp_path):
    directory = _write(tmp_path, "interp")
    (directory / "constants.npz").unlink()
    np.savez(directory / "constants.npz", **{"c_x": np.array([{"evil": 1}], dtype=object)})
    with pytest.raises(ValueError, match="pickle"):
        read_graph(directory)


def _rewrite_manifest(directory: Path, **changes) -> None:
    """Change manifest fields and re-seal it with a valid checksum (so only the change itself is wrong)."""
    fields = json.loads((directory / "manifest.json").read_text())
    fields.pop("manifest_sha256")
    fields.update(changes)
    (directory / "manifest.json").write_bytes(seal_manifest(fields))


@pytest.mark.parametrize("changes, message", [
    ({"format_version": FORMAT_VERSION + 1}, "format version"),
    ({"surprise": 1}, "invalid manifest"),
    ({"inputs": "x"}, "invalid manifest"),
    ({"files": {"../../etc/passwd": {"sha256": "0" * 64, "size": 1}}}, "leaves the artifact"),
    ({"files": {"/etc/passwd": {"sha256": "0" * 64, "size": 1}}}, "leaves the artifact"),
    ({"files": {"stages/../../x": {"sha256": "0" * 64, "size": 1}}}, "leaves the artifact"),
    ({"files": {"./": {"sha256": "0" * 64, "size": 1}}}, "leaves the artifact"),
    ({"files": {"": {"sha256": "0" * 64, "size": 1}}}, "leaves the artifact"),
    ({"key": "cd" * 32}, "not its directory name"),
])
def test_bad_manifests_are_artifact_errors(tmp_path, changes, message):
    directory = _write(tmp_path, "interp")
    _rewrite_manifest(directory, **changes)
    with pytest.raises(ArtifactError, match=message):
        verify_artifact(directory)


def _flip_a_bit(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x10
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("name", ["graph.nir", "constants.npz", "plan.json", "kernels.so", "kernels.ll"])
def test_a_hit_refuses_a_damaged_file_it_reads(tmp_path, name, monkeypatch):
    """Every file a cpu hit uses is hashed before its bytes are used: a flipped bit is an ArtifactError."""
    from neuroncc.codegen.llvm import native_library

    if name == "kernels.so" and native_library.linker() is None:
        pytest.skip("no linker: the artifact holds objects")
    # the shared-library form even if an earlier test in this process gave it up (native_library.give_up)
    monkeypatch.setattr(native_library, "_BROKEN", [])
    directory = _write(tmp_path, "cpu", stages={"input": "x"})
    _flip_a_bit(directory / name)
    with pytest.raises(ArtifactError, match=f"{name}: sha256 mismatch"):
        read_artifact(directory, ARTIFACT_CODECS["cpu"])


@pytest.mark.parametrize("damage, message", [
    (lambda path: path.write_bytes(path.read_bytes()[:-1]), r"\d+ bytes, the manifest says"),
    (lambda path: path.unlink(), "missing"),
])
def test_a_hit_refuses_a_truncated_or_missing_file_it_does_not_read(tmp_path, damage, message):
    """The stages' text is not read by a load, but a missing or truncated one still fails the hit (its size is
    checked), as before session 31 nir31, when every file was hashed on every hit."""
    directory = _write(tmp_path, "cpu", stages={"input": "x"})
    damage(directory / "stages.nir")
    with pytest.raises(ArtifactError, match=f"stages.nir: {message}"):
        read_artifact(directory, ARTIFACT_CODECS["cpu"])


def test_a_flipped_bit_in_a_file_no_load_reads_is_found_by_verify_not_by_a_hit(tmp_path):
    """A hit hashes what it uses; the stages' text (for reading) is hashed by verify_artifact (``neuroncc cache
    verify``, publishing, bundles) and by read_stages, which checks it against the manifest."""
    fn = sample_function()
    directory = _write(tmp_path, "cpu", fn, stages={"input": "x" * 64})
    _flip_a_bit(directory / "stages.nir")
    _, executable = read_artifact(directory, ARTIFACT_CODECS["cpu"])
    inputs = sample_inputs(fn)
    for out, ref in zip(executable(*inputs), interpret(fn, inputs)):
        np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)
    for check in (verify_artifact, read_stages):
        with pytest.raises(ArtifactError, match="stages.nir: sha256 mismatch"):
            check(directory)


def test_the_manifest_seal_is_the_sha256_of_the_bytes_before_it(tmp_path):
    """Format 4: manifest.json ends with ``"manifest_sha256": "<sha256 of every byte before this member>"``;
    anything after it, or a seal of other bytes, is a checksum mismatch."""
    import hashlib

    directory = _write(tmp_path, "interp")
    data = (directory / "manifest.json").read_bytes()
    body, _, tail = data.rpartition(b',\n "manifest_sha256": "')
    assert tail == hashlib.sha256(body).hexdigest().encode() + b'"\n}\n'
    assert json.loads(data)["manifest_sha256"] == tail[:64].decode()
    for edited in (data + b" ", data.replace(b'"manifest_sha256": "', b'"manifest_sha256":  "'),
                   body.replace(b'"pipeline": ""', b'"pipeline": "x"') + data[len(body):]):
        (directory / "manifest.json").write_bytes(edited)
        with pytest.raises(ArtifactError, match="checksum"):
            read_manifest(directory)


def test_a_format_3_manifest_is_refused_by_its_version(tmp_path):
    """A format-3 entry (its checksum over a canonical re-dump of the fields) is another format: refused by its
    version before its checksum is looked at (and never found: format_version is part of the key)."""
    import hashlib

    directory = _write(tmp_path, "interp")
    fields = json.loads((directory / "manifest.json").read_text())
    fields.pop("manifest_sha256")
    fields["format_version"] = 3
    canonical = json.dumps(fields, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    fields["manifest_sha256"] = hashlib.sha256(canonical.encode()).hexdigest()
    (directory / "manifest.json").write_text(json.dumps(fields, indent=1) + "\n")
    with pytest.raises(ArtifactError, match="artifact format version 3, this neuroncc reads 4"):
        read_manifest(directory)


def test_a_file_that_grew_after_its_size_was_read_is_a_mismatch(tmp_path, monkeypatch):
    """verify_files reads each file through one descriptor: bytes beyond the size its fstat gave fail the check."""
    import os

    directory = _write(tmp_path, "interp")
    real_fstat = os.fstat
    grown = directory / "graph.nir"

    def fstat_then_grow(fd):
        result = real_fstat(fd)
        if os.path.realpath(f"/proc/self/fd/{fd}") == str(grown.resolve()):
            with open(grown, "ab") as f:
                f.write(b"// appended\n")
        return result

    monkeypatch.setattr(os, "fstat", fstat_then_grow)
    with pytest.raises(ArtifactError, match="sha256 mismatch"):
        verify_artifact(directory)


def test_any_edit_to_the_manifest_breaks_its_checksum(tmp_path):
    directory = _write(tmp_path, "interp")
    text = (directory / "manifest.json").read_text()
    (directory / "manifest.json").write_text(text.replace('"pipeline": ""', '"pipeline": "x"'))
    with pytest.raises(ArtifactError, match="checksum"):
        read_manifest(directory)


def test_manifest_bytes_are_json_with_a_self_checksum(tmp_path):
    directory = _write(tmp_path, "interp")
    manifest = read_manifest(directory)
    assert manifest_bytes(manifest) == (directory / "manifest.json").read_bytes()


def test_a_saver_that_lies_about_its_files_is_an_error(tmp_path):
    codec = ArtifactCodec(save=lambda exe, directory: ["kernel.ll"], load=ARTIFACT_CODECS["interp"].load)
    fn = sample_function()
    (tmp_path / KEY).mkdir()
    with pytest.raises(ArtifactError, match="kernel.ll"):
        write_artifact(tmp_path / KEY, build_executable(fn, "interp"), _contents(fn, "interp"), codec)


def test_target_files_are_recorded_and_checked(tmp_path):
    def save(executable, directory):
        (directory / "plan.json").write_text('{"launch": []}')
        (directory / "kernels").mkdir()
        (directory / "kernels" / "k0.py").write_text("def k0(): pass\n")
        return ["plan.json", "kernels/k0.py"]

    codec = ArtifactCodec(save=save, load=ARTIFACT_CODECS["interp"].load)
    fn = sample_function()
    (tmp_path / KEY).mkdir()
    manifest = write_artifact(tmp_path / KEY, build_executable(fn, "interp"), _contents(fn, "interp"), codec)
    assert manifest.target_files == ["plan.json", "kernels/k0.py"]
    (tmp_path / KEY / "kernels" / "k0.py").write_text("def k1(): pass\n")  # same size
    with pytest.raises(ArtifactError, match="k0.py: sha256 mismatch"):
        verify_artifact(tmp_path / KEY)
