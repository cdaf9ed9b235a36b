"""The on-disk form of a compiled graph: an *artifact directory* and its ``manifest.json``.

    <artifact>/
      manifest.json        what is here: key and key components, target, input/output types, options,
                           pipeline, per-stage timings, versions, and the sha256 and size of every other file
      graph.nir            the graph the executable runs (after the pipeline), as text
      constants.npz        its large constants, by resource name (np.load(allow_pickle=False); absent if none)
      stages.nir           the IR text after each pipeline stage (for reading; not needed to load)
      ...                  the target's own files (cpu: kernels.ll LLVM IR, kernels.so the kernels linked into
                           one shared library (or kernels.a, their object files, where no linker was found),
                           launch plan .json, the launcher's process-wide helpers' code runtime.json;
                           nki-sim: the NKI kernel sources)

Nothing here is pickled: text, JSON, ``.npz`` and machine code only. Every file is checked against its recorded
size and sha256 before anything uses its bytes (machine code is loaded only after), and the manifest carries a
checksum of its own bytes, so a flipped bit anywhere is caught: :func:`verify_artifact` (``neuroncc cache verify``,
publishing, bundles) checks every file; a cache hit (:func:`read_artifact`) hashes every file it reads before it
uses it and checks the size of the ones it never reads (the stages' text; ``runtime.json`` once the process has
the helpers it offers).

Targets plug in through :data:`ARTIFACT_CODECS`: a saver that writes the executable's own files into the
directory and a loader that rebuilds the executable from the directory and the graph.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from neuroncc.driver.strict_json import SchemaError, decode, encode, minimum, pattern
from neuroncc.errors import ArtifactError
from neuroncc.driver.host_stamp import remembered_target_cpu
from neuroncc.ir import Function, TensorType, collect_resources, parse, print_function
from neuroncc.executors.executable import Executable

#: Bump when the directory layout or the manifest schema changes; older entries then read as misses.
#: 2: cpu kernels as one shared library (kernels.so; kernels.a only where the compiling process had no linker)
#: 3: the stages' IR in one file, stages.nir (was stages/NN-NAME.nir, a file each)
#: 4: manifest_sha256 is the sha256 of the manifest's bytes before it (was of a canonical re-dump of its fields)
FORMAT_VERSION = 4

MANIFEST_NAME = "manifest.json"
GRAPH_NAME = "graph.nir"
CONSTANTS_NAME = "constants.npz"
#: the IR after each pipeline stage, one file (format 3; format 2 had a file per stage under ``stages/``: a hit
#: checks every file, and 8 of an eager kernel's 14 were stages): per stage a header line
#: ``// stage NN-NAME.nir BYTES`` and then that many bytes of its text (:func:`read_stages`)
STAGES_NAME = "stages.nir"
_STAGE_HEADER = "// stage "

# ---- the target protocol ---------------------------------------------------------------------------------

Saver = Callable[[Executable, Path], Sequence[str]]
#: ``load(directory, fn, options, files)``: ``options`` are the compile options the artifact was stored under (its
#: manifest's, part of the key): a cpu executable takes its thread count and threading from them as a build does;
#: ``files``: every file's bytes by name, each checked against the manifest when first asked for (a loader reads
#: nothing again, and should ask only for what it uses: :class:`CheckedFiles`)
Loader = Callable[[Path, Function, Mapping[str, Any], Mapping[str, bytes]], Executable]


def _no_host_dependence() -> str:
    return ""


@dataclass(frozen=True, slots=True)
class ArtifactCodec:
    """How one target's executable is written into an artifact directory and read back.

    ``save(executable, directory)`` writes the target's own files (the graph is written for every target by
    :func:`write_artifact`) and returns their names relative to ``directory``. ``load(directory, fn, options, files)``
    rebuilds the executable from those files (their bytes as checked, ``files``) and the graph ``fn`` read from
    ``graph.nir``.
    ``host_fingerprint()`` names what on this machine the saved code depends on (cpu: the CPU compiled for,
    the host's or the one ``NEURONCC_CPU`` names, and its features); it is part of the cache key, so object
    code is never loaded on a machine it was not built for.
    """

    save: Saver
    load: Loader
    host_fingerprint: Callable[[], str] = _no_host_dependence


def _save_with_method(executable: Executable, directory: Path) -> Sequence[str]:
    return executable.save(directory)  # type: ignore[attr-defined]


def _load_interp(directory: Path, fn: Function, options: Mapping[str, Any], files: Mapping[str, bytes]) -> Executable:
    # imported for an interp artifact only: a graph cache hit loads cpu artifacts
    from neuroncc.executors.interpreter_executable import load_interp_executable

    return load_interp_executable(directory, fn)


def _load_cpu(directory: Path, fn: Function, options: Mapping[str, Any], files: Mapping[str, bytes]) -> Executable:
    from neuroncc.executors.cpu.launcher import load_cpu_executable  # type: ignore[import-not-found]

    # the codec's contract: every file, the plan and graph.nir among them, was checked against its sha256; the
    # options: a ``threads`` option stays fixed on a hit as on the build (without them the loaded executable
    # followed torch's count: session 20 a1t)
    return load_cpu_executable(directory, fn, options, graph_checked=True, files=files)


def _load_nki(directory: Path, fn: Function, options: Mapping[str, Any], files: Mapping[str, bytes]) -> Executable:
    # the NKI simulator: imported for an nki-sim artifact only (~60 ms, which loading a cpu artifact never needs)
    from neuroncc.executors.nki_sim.executable import load_nki_executable

    return load_nki_executable(directory, fn, files)


def _host_cpu_fingerprint() -> str:
    # LLVM's answer from the cache directory's stamp when it has one; the CPU NEURONCC_CPU names, when it does
    # (checked against that host: a named CPU's artifacts never mix with the host's or another CPU's)
    return remembered_target_cpu().fingerprint


#: Every target whose executables can be cached, by target name. A target missing here compiles uncached.
ARTIFACT_CODECS: dict[str, ArtifactCodec] = {
    "interp": ArtifactCodec(save=_save_with_method, load=_load_interp),
    "cpu": ArtifactCodec(save=_save_with_method, load=_load_cpu, host_fingerprint=_host_cpu_fingerprint),
    # nki-sim: the generated kernel module (nki_kernels.py) and its launch plan (nki_plan.json)
    "nki-sim": ArtifactCodec(save=_save_with_method, load=_load_nki),
}

# ---- the manifest ----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FileRecord:
    """One file of an artifact as its manifest records it."""

    sha256: str = field(metadata=pattern(r"[0-9a-f]{64}"))
    size: int = field(metadata=minimum(0))


@dataclass(frozen=True, slots=True)
class TensorRecord:
    """An input's or output's type as the artifact was compiled for it."""

    dtype: str
    shape: list[int]
    strides: list[int]

    @classmethod
    def of(cls, t: TensorType) -> TensorRecord:
        return cls(dtype=t.dtype.value, shape=list(t.shape), strides=list(t.layout_strides))


@dataclass(frozen=True, slots=True)
class ComponentRecord:
    """One named part of the cache key: its digest and a short human-readable summary."""

    digest: str = field(metadata=pattern(r"[0-9a-f]{64}"))
    summary: str


@dataclass(frozen=True, slots=True)
class Manifest:
    """``manifest.json``. ``created_at`` and ``timings`` describe this build and are not part of the key.
    Checked field by field when read (``strict_json``: exact JSON types, no unknown or missing field)."""

    format_version: int
    key: str = field(metadata=pattern(r"[0-9a-f]{64}"))
    key_components: dict[str, ComponentRecord]
    target: str
    graph_name: str
    inputs: list[TensorRecord]
    outputs: list[TensorRecord]
    options: dict[str, Any]
    pipeline: str
    stages: list[str]  # the stages' names (NN-NAME.nir) in stages.nir, in pipeline order
    target_files: list[str]
    timings: dict[str, float]
    neuroncc_version: str
    created_at: str  # ISO 8601, UTC
    files: dict[str, FileRecord]  # every file of the artifact except manifest.json


#: manifest.json ends with this member and then ``"<64 hex digits>"\n}\n``: the sha256 of every byte before it
_SEAL = b',\n "manifest_sha256": "'
_SEAL_TAIL = re.compile(rb'[0-9a-f]{64}"\n\}\n')


def seal_manifest(fields: Mapping[str, Any]) -> bytes:
    """``fields`` as ``manifest.json``'s bytes: indented JSON (field order kept: key components in key order)
    whose last member, ``manifest_sha256``, is the sha256 of the bytes before it (format 4: checking it is one
    hash of ~4 KB, 5 us, where the canonical re-dump of the fields format 3 hashed took 60-90 us a load)."""
    text = json.dumps(dict(fields), indent=1)  # a non-empty object: ends with "\n}"
    if "manifest_sha256" in fields or not text.endswith("\n}"):
        raise ValueError("a manifest's fields are a non-empty object without manifest_sha256")
    body = text[:-2].encode()
    return body + _SEAL + hashlib.sha256(body).hexdigest().encode() + b'"\n}\n'


def manifest_bytes(manifest: Manifest) -> bytes:
    """The manifest as written: its fields plus ``manifest_sha256``, a checksum of the bytes before it."""
    return seal_manifest(encode(manifest))


def _sealed(data: bytes) -> bool:
    """Whether ``data`` ends with the seal :func:`seal_manifest` writes and that seal is the sha256 of the bytes
    before it."""
    at = data.rfind(_SEAL)
    tail = data[at + len(_SEAL):] if at >= 0 else b""
    return _SEAL_TAIL.fullmatch(tail) is not None and hashlib.sha256(data[:at]).hexdigest().encode() == tail[:64]


def read_manifest(directory: Path) -> Manifest:
    """Read and check ``manifest.json`` (schema, self-checksum, format version) without touching other files."""
    path = directory / MANIFEST_NAME
    try:
        data = path.read_bytes()
        raw = json.loads(data.decode("utf-8"))
    except FileNotFoundError:
        raise ArtifactError(f"{path}: missing") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ArtifactError(f"{path}: unreadable ({exc})") from None
    if not isinstance(raw, dict):
        raise ArtifactError(f"{path}: not a JSON object")
    version = raw.get("format_version")
    if version != FORMAT_VERSION:
        raise ArtifactError(f"{path}: artifact format version {version!r}, this neuroncc reads {FORMAT_VERSION}")
    raw.pop("manifest_sha256", None)
    if not _sealed(data):
        raise ArtifactError(f"{path}: manifest checksum mismatch (the file was modified or damaged)")
    try:
        return decode(Manifest, raw)
    except SchemaError as exc:
        raise ArtifactError(f"{path}: invalid manifest ({exc.where}: {exc.message})") from None


def file_digest(path: Path) -> FileRecord:
    h = hashlib.sha256()
    size = 0
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
            size += len(chunk)
    return FileRecord(sha256=h.hexdigest(), size=size)


def _safe_name(directory: Path, name: str) -> None:
    parts = name.split("/")
    if name.startswith("/") or ".." in parts or all(part in ("", ".") for part in parts):
        raise ArtifactError(f"{directory}: file name {name!r} leaves the artifact directory")  # inside_artifact's


def _read_checked(directory: Path, name: str, record: FileRecord) -> bytes:
    """The bytes of the artifact's file ``name``, once found with its recorded size and sha256.

    One open, fstat, read and close on its descriptor (the size read is the size checked); Path.stat/open and a
    chunked read loop cost ~3x as much (session 29 load29)."""
    path = os.path.join(os.fspath(directory), name)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        raise ArtifactError(f"{path}: missing") from None
    except OSError as exc:
        raise ArtifactError(f"{path}: unreadable ({exc})") from None
    try:
        size = os.fstat(fd).st_size
        if size != record.size:
            raise ArtifactError(f"{path}: {size} bytes, the manifest says {record.size}")
        chunks = []
        remaining = size + 1  # one byte more: a file that grew since the fstat fails the size below
        while remaining and (chunk := os.read(fd, min(remaining, 1 << 24))):
            chunks.append(chunk)
            remaining -= len(chunk)
    except OSError as exc:
        raise ArtifactError(f"{path}: unreadable ({exc})") from None
    finally:
        os.close(fd)
    data = chunks[0] if len(chunks) == 1 else b"".join(chunks)
    if remaining != 1 or hashlib.sha256(data).hexdigest() != record.sha256:
        raise ArtifactError(f"{path}: sha256 mismatch (the file was modified or damaged)")
    return data


def verify_files(directory: Path, manifest: Manifest) -> dict[str, bytes]:
    """Every recorded file's bytes, by name, once each was found with its recorded size and sha256; raise
    :class:`ArtifactError` naming the first one that was not (:func:`verify_artifact`'s full check)."""
    for name in manifest.files:
        _safe_name(directory, name)
    return {name: _read_checked(directory, name, record) for name, record in manifest.files.items()}


class CheckedFiles(Mapping[str, bytes]):
    """A cache hit's view of an artifact's files (:func:`read_artifact`): ``files[name]`` reads the file once and
    checks its size and sha256 against the manifest before returning its bytes (:class:`ArtifactError`
    otherwise), so every byte a loader uses was checked, and a file no one asks for is not read or hashed: the
    stages' text (2 KB, never used by a load) and ``runtime.json`` (36 KB, used once per process) were 15 and
    38 us of a ~1.4 ms load (session 31 nir31). :meth:`check_unread` checks the others' sizes.

    Every name is checked when it is made (none leaves the directory)."""

    def __init__(self, directory: Path, manifest: Manifest):
        self.directory, self.records = directory, manifest.files
        for name in self.records:
            _safe_name(directory, name)
        self.read: dict[str, bytes] = {}

    def __getitem__(self, name: str) -> bytes:
        data = self.read.get(name)
        if data is None:
            data = self.read[name] = _read_checked(self.directory, name, self.records[name])
        return data

    def __contains__(self, name: object) -> bool:
        return name in self.records

    def __iter__(self):
        return iter(self.records)

    def __len__(self) -> int:
        return len(self.records)

    def check_unread(self) -> None:
        """Each file not read is there with its recorded size (a missing or truncated one fails a hit as a
        damaged file it reads does); its bytes are hashed by :func:`verify_artifact` and whoever reads it."""
        base = os.fspath(self.directory)
        for name, record in self.records.items():
            if name in self.read:
                continue
            path = os.path.join(base, name)
            try:
                size = os.stat(path).st_size
            except FileNotFoundError:
                raise ArtifactError(f"{path}: missing") from None
            except OSError as exc:
                raise ArtifactError(f"{path}: unreadable ({exc})") from None
            if size != record.size:
                raise ArtifactError(f"{path}: {size} bytes, the manifest says {record.size}")


def verify_artifact(directory: Path) -> Manifest:
    """The manifest of a fully intact artifact; :class:`ArtifactError` naming the first problem otherwise."""
    return read_verified(directory)[0]


def read_verified(directory: Path) -> tuple[Manifest, dict[str, bytes]]:
    """The manifest of a fully intact artifact and its files' bytes, each checked against the manifest (see
    :func:`verify_files`); :class:`ArtifactError` naming the first problem otherwise."""
    manifest = _read_own_manifest(directory)
    return manifest, verify_files(directory, manifest)


def _read_own_manifest(directory: Path) -> Manifest:
    manifest = read_manifest(directory)
    if manifest.key != directory.name:
        raise ArtifactError(f"{directory}: holds key {manifest.key[:16]}..., not its directory name")
    return manifest


def inside_artifact(directory: Path, name: str) -> Path:
    """``directory / name``, refusing names that would leave the artifact (absolute, ``..``)."""
    path = Path(name)
    if path.is_absolute() or ".." in path.parts or not path.parts:
        raise ArtifactError(f"{directory}: file name {name!r} leaves the artifact directory")
    return directory / path

# ---- writing and reading ---------------------------------------------------------------------------------


def write_new_file(path: Path, data: bytes) -> None:
    """Write ``data`` to a new file (not synced: the cache publishes an entry with one fsync, see
    :mod:`neuroncc.driver.cache`)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    finally:
        os.close(fd)


def fsync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _stage_file_name(index: int, stage: str) -> str:
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", stage).strip("._") or "stage"
    return f"{index:02d}-{safe}.nir"


def read_stages(directory: Path) -> dict[str, str]:
    """The IR text after each pipeline stage of an artifact, by its name (``NN-NAME.nir``), in pipeline order
    (for reading: a load never reads it). Checked against the manifest (size, sha256) as a hit's files are;
    raises :class:`ArtifactError` for a damaged or malformed file."""
    path = directory / STAGES_NAME
    record = _read_own_manifest(directory).files.get(STAGES_NAME)
    if record is None:
        return {}
    data, stages, pos = _read_checked(directory, STAGES_NAME, record), {}, 0
    while pos < len(data):
        end = data.find(b"\n", pos)
        header = data[pos:end].decode("utf-8", errors="replace") if end >= 0 else ""
        name, _, size = header.removeprefix(_STAGE_HEADER).rpartition(" ")
        if not header.startswith(_STAGE_HEADER) or not size.isdigit():
            raise ArtifactError(f"{path}: malformed stage header at byte {pos}")
        pos = end + 1 + int(size)
        stages[name] = data[end + 1:pos].decode("utf-8", errors="replace")
    return stages


def write_graph(fn: Function, directory: Path) -> None:
    """``graph.nir`` plus ``constants.npz`` (when ``fn`` has large constants)."""
    write_new_file(directory / GRAPH_NAME, print_function(fn).encode())
    resources = collect_resources(fn)
    if resources:
        with os.fdopen(os.open(directory / CONSTANTS_NAME, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as f:
            np.savez(f, **{name: np.ascontiguousarray(array) for name, array in resources.items()})


def read_graph(directory: Path, files: Mapping[str, bytes] | None = None) -> Function:
    """The graph of an artifact: from ``files``, its files' bytes as :func:`read_verified` checked them, else
    read from ``directory``."""
    resources: dict[str, np.ndarray] = {}
    if files is None:
        constants: Any = directory / CONSTANTS_NAME
        if not constants.exists():
            constants = None
        text = (directory / GRAPH_NAME).read_text(encoding="utf-8")
    else:
        constants = io.BytesIO(files[CONSTANTS_NAME]) if CONSTANTS_NAME in files else None
        try:
            text = files[GRAPH_NAME].decode("utf-8")
        except KeyError:
            raise ArtifactError(f"{directory}: no {GRAPH_NAME} in its manifest") from None
        except UnicodeDecodeError as exc:
            raise ArtifactError(f"{directory / GRAPH_NAME}: unreadable ({exc})") from None
    if constants is not None:
        with np.load(constants, allow_pickle=False) as archive:
            resources = {name: archive[name] for name in archive.files}
    # The graph was verified when it was compiled and its sha256 was checked before we got here; verifying
    # it again would nearly double the warm-load time of a large graph.
    return parse(text, source=str(directory / GRAPH_NAME), resources=resources, verify=False)


def write_artifact(directory: Path, executable: Executable, contents: Any, codec: ArtifactCodec,
                   checkpoint: Callable[[str], None] = lambda step: None) -> Manifest:
    """Fill the empty ``directory`` with the artifact of ``executable``; the manifest is written last.

    ``contents`` is a :class:`neuroncc.driver.compile_request.ArtifactContents` (not imported here: this module
    is a graph cache hit's, which reads artifacts only, and that module imports this one).
    ``checkpoint("graph-written")`` is called halfway (tests kill the process there).
    """
    start = time.perf_counter()
    write_graph(executable.function, directory)
    checkpoint("graph-written")
    stage_names = []
    if contents.stages:
        sections = []
        for index, (stage, text) in enumerate(contents.stages.items()):
            name = _stage_file_name(index, stage)
            data = text.encode()
            sections.append(f"{_STAGE_HEADER}{name} {len(data)}\n".encode() + data)
            stage_names.append(name)
        write_new_file(directory / STAGES_NAME, b"".join(sections))
    target_files = [str(name) for name in codec.save(executable, directory)]
    for name in target_files:
        path = inside_artifact(directory, name)
        if not path.is_file():
            raise ArtifactError(f"target '{contents.target}' reported saving {name!r} but did not write it")
        os.chmod(path, 0o600)  # a codec writes with the umask's mode; the cache's files are 0600 (docs/cache.md)
    files = {
        path.relative_to(directory).as_posix(): file_digest(path)
        for path in sorted(directory.rglob("*")) if path.is_file()
    }
    manifest = Manifest(
        format_version=FORMAT_VERSION,
        key=contents.key,
        key_components=dict(contents.key_components),
        target=contents.target,
        graph_name=contents.input_function.name,
        inputs=[TensorRecord.of(t) for t in contents.input_function.input_types],
        outputs=[TensorRecord.of(t) for t in contents.input_function.output_types],
        options=json.loads(json.dumps(dict(contents.options), sort_keys=True)),
        pipeline=contents.pipeline,
        stages=stage_names,
        target_files=target_files,
        timings={**contents.timings, "save": time.perf_counter() - start},
        neuroncc_version=contents.neuroncc_version,
        created_at=contents.created_at,
        files=files,
    )
    write_new_file(directory / MANIFEST_NAME, manifest_bytes(manifest))
    return manifest


def read_artifact(directory: Path, codec: ArtifactCodec) -> tuple[Manifest, Executable]:
    """Load the executable of ``directory``: its manifest checked (schema, self-checksum, format version, key),
    every file the graph's parse and the target's loader read checked (size, sha256) before its bytes are used,
    and read once (:class:`CheckedFiles`), the others' sizes checked after. Raises :class:`ArtifactError` if
    damaged."""
    manifest = _read_own_manifest(directory)
    files = CheckedFiles(directory, manifest)
    executable = codec.load(directory, read_graph(directory, files), manifest.options, files)
    files.check_unread()
    return manifest, executable


def artifact_size(directory: Path) -> int:
    """Bytes used by the files of an artifact (0 for a directory that vanished meanwhile)."""
    total = 0
    for root, _dirs, files in os.walk(directory):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except FileNotFoundError:
                pass
    return total
