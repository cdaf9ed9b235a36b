"""Loading ``torch.export`` archives (``.pt2``) without unpickling anything.

``torch.export.load`` unpickles the archive's sample inputs (falling back to ``weights_only=False``) and any
weight or constant stored in pickle form, so a .pt2 from an untrusted source can run code. neuroncc reads the
archive itself: the program is JSON, plain tensors are raw bytes, and everything pickled is refused with an
:class:`~neuroncc.errors.InputError` naming the entry. Every malformed archive (not a zip, truncated, CRC
errors, missing records, another archive/schema version, inconsistent tensor metadata, absurd sizes) gives
one typed error and nothing else.
"""

from __future__ import annotations

import json
import math
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from neuroncc.errors import InputError

_ARCHIVE_FORMAT = "pt2"
_ARCHIVE_VERSION = "0"
#: Larger weights or inputs than this are refused before anything is allocated.
MAX_TENSOR_BYTES = 16 << 30


@dataclass(frozen=True)
class _Archive:
    path: Path
    zf: zipfile.ZipFile
    root: str

    def has(self, name: str) -> bool:
        return f"{self.root}{name}" in self.zf.NameToInfo

    def read(self, name: str) -> bytes:
        try:
            return self.zf.read(f"{self.root}{name}")
        except KeyError:
            raise InputError(f"{self.path}: not a valid .pt2 archive (missing record '{name}')") from None
        except (zipfile.BadZipFile, OSError, EOFError, ValueError) as exc:
            raise InputError(f"{self.path}: corrupt .pt2 archive (record '{name}': {exc})") from None

    def read_json(self, name: str) -> Any:
        try:
            return json.loads(self.read(name).decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise InputError(f"{self.path}: record '{name}' is not valid JSON ({exc})") from None

    def size(self, name: str) -> int:
        return self.zf.getinfo(f"{self.root}{name}").file_size


def _open(path: Path) -> _Archive:
    if not path.exists():
        raise InputError(f"{path}: no such file")
    if path.is_dir():
        raise InputError(f"{path}: is a directory, expected a .pt2 file from torch.export.save")
    if not zipfile.is_zipfile(path):
        raise InputError(f"{path}: not a .pt2 archive (not a zip file; save models with torch.export.save)")
    try:
        zf = zipfile.ZipFile(path)
        broken = zf.testzip()  # CRC-checks every record: catches truncation and flipped bits
    except (zipfile.BadZipFile, OSError, EOFError, ValueError, NotImplementedError) as exc:
        raise InputError(f"{path}: corrupt or truncated .pt2 archive ({exc})") from None
    if broken is not None:
        raise InputError(f"{path}: corrupt .pt2 archive (record '{broken}' fails its CRC check)")
    names = zf.namelist()
    roots = {name.split("/", 1)[0] for name in names if "/" in name}
    if len(roots) != 1 or any("/" not in name for name in names):
        raise InputError(f"{path}: not a .pt2 archive (expected one top-level folder, found {sorted(roots)[:3]})")
    archive = _Archive(path, zf, roots.pop() + "/")
    fmt = archive.read("archive_format").decode(errors="replace").strip()
    if fmt != _ARCHIVE_FORMAT:
        raise InputError(f"{path}: not a .pt2 archive (archive_format is '{fmt[:20]}')")
    version = archive.read("archive_version").decode(errors="replace").strip()
    if version != _ARCHIVE_VERSION:
        raise InputError(f"{path}: .pt2 archive version '{version[:20]}' is not the version {_ARCHIVE_VERSION} that "
                         f"torch {torch.__version__} reads (saved by another torch version?)")
    return archive


def _pick_model(archive: _Archive, model: str | None) -> str:
    models = sorted(
        n[len(archive.root) + len("models/"):-len(".json")]
        for n in archive.zf.namelist()
        if n.startswith(f"{archive.root}models/") and n.endswith(".json")
    )
    if not models:
        if any(n.startswith(f"{archive.root}data/aotinductor/") for n in archive.zf.namelist()):
            raise InputError(f"{archive.path}: is an AOTInductor package (torch._inductor.aoti_compile_and_package: "
                             "compiled code, no exported program); neuroncc reads programs saved with "
                             "torch.export.save")
        raise InputError(f"{archive.path}: the archive holds no exported program (no models/*.json)")
    if model is None:
        if len(models) > 1:
            raise InputError(f"{archive.path}: holds several programs ({', '.join(models)}); choose one")
        return models[0]
    if model not in models:
        raise InputError(f"{archive.path}: no program named '{model}' (found {', '.join(models)})")
    return model


def _tensor_from_record(archive: _Archive, directory: str, fqn: str, entry: dict[str, Any]) -> torch.Tensor:
    from torch._export.serde import schema
    from torch._export.serde.serialize import _dict_to_dataclass, deserialize_scalar_type

    where = f"{archive.path}: tensor '{fqn}'"
    if entry.get("use_pickle"):
        raise InputError(f"{where} is stored as an embedded pickle; neuroncc never unpickles (re-export it as a "
                         "plain tensor)")
    try:
        meta = _dict_to_dataclass(schema.TensorMeta, entry["tensor_meta"])
        dtype = deserialize_scalar_type(meta.dtype)
        sizes = tuple(int(s.as_int) for s in meta.sizes)
        strides = tuple(int(s.as_int) for s in meta.strides)
        offset = int(meta.storage_offset.as_int)
        record = f"{directory}{entry['path_name']}"
    except Exception as exc:  # malformed metadata of any shape
        raise InputError(f"{where} has malformed metadata ({type(exc).__name__}: {exc})") from None
    if len(sizes) != len(strides) or min(sizes + strides + (offset,), default=0) < 0:
        raise InputError(f"{where} has inconsistent sizes {list(sizes)} / strides {list(strides)}")
    element = torch.empty((), dtype=dtype).element_size()
    extent = 0 if 0 in sizes else offset + 1 + sum((n - 1) * s for n, s in zip(sizes, strides))
    if math.prod(sizes) * element > MAX_TENSOR_BYTES or extent * element > MAX_TENSOR_BYTES:
        raise InputError(f"{where} has an absurd size {list(sizes)} (over {MAX_TENSOR_BYTES >> 30} GiB)")
    if not archive.has(record):
        raise InputError(f"{where}: record '{record}' is missing from the archive")
    if archive.size(record) < extent * element:
        raise InputError(f"{where}: record holds {archive.size(record)} bytes, its metadata needs {extent * element}")
    if extent == 0:
        return torch.zeros(sizes, dtype=dtype)
    storage = torch.frombuffer(bytearray(archive.read(record)), dtype=torch.uint8)
    flat = storage[: (archive.size(record) // element) * element].view(dtype)
    return torch.as_strided(flat, sizes, strides, offset).clone()


def _load_payloads(archive: _Archive, config_name: str, directory: str, kind: str) -> dict[str, torch.Tensor]:
    legacy = f"{directory}{config_name.split('_')[0]}.pt"
    if archive.has(legacy):
        raise InputError(f"{archive.path}: {kind} are stored in the legacy pickle format; neuroncc never unpickles")
    if not archive.has(f"{directory}{config_name}"):
        raise InputError(f"{archive.path}: not a valid .pt2 archive (missing '{directory}{config_name}')")
    config = archive.read_json(f"{directory}{config_name}")
    entries = config.get("config") if isinstance(config, dict) else None
    if not isinstance(entries, dict):
        raise InputError(f"{archive.path}: '{directory}{config_name}' has no 'config' table")
    tensors = {}
    for fqn, entry in entries.items():
        if not isinstance(entry, dict) or not isinstance(entry.get("path_name"), str):
            raise InputError(f"{archive.path}: {kind} entry '{fqn}' is malformed")
        if not entry["path_name"].startswith(("weight_", "tensor_")):
            raise InputError(f"{archive.path}: {kind} entry '{fqn}' is a pickled object "
                             f"('{entry['path_name']}'); neuroncc never unpickles")
        tensor = _tensor_from_record(archive, directory, fqn, entry)
        # Parameters become nn.Parameter as torch.export.load makes them; buffers (BatchNorm's running stats)
        # stay plain tensors, or they would be traced as parameters (mutated, and asked for gradients).
        # Archives without the flag: every floating-point weight is taken for a parameter.
        is_param = entry.get("is_param", tensor.is_floating_point()) is True
        if is_param and kind == "weights":
            meta = entry.get("tensor_meta")
            requires_grad = not (isinstance(meta, dict) and meta.get("requires_grad") is False)
            tensor = torch.nn.Parameter(tensor, requires_grad=requires_grad and tensor.is_floating_point())
        tensors[fqn] = tensor
    return tensors


def _with_known_pytree_types(serialized: Any) -> None:
    """The program's input and output structures (``in_spec``/``out_spec``, pytree JSON) with every container
    type this process has not registered replaced by a builtin one, in place.

    A program's structures name the user's container types: a Hugging Face model returns a ``ModelOutput``
    subclass, others a dataclass registered with ``torch.export.register_dataclass``. torch registers them
    when the module defining them is imported, which the loader will not do (importing modules a file names
    runs their code), so a fresh ``neuroncc run`` could not read any Hugging Face program. The leaves and their
    order are what the program computes; the container only groups them. A type keyed by field names (a
    ``ModelOutput``'s context is its keys, a registered dataclass's its field names and its None fields)
    becomes a dict of those fields, anything else a tuple.
    """
    for entry in serialized.graph_module.module_call_graph:
        signature = entry.signature
        if signature is not None:
            signature.in_spec = _known_spec(signature.in_spec)
            signature.out_spec = _known_spec(signature.out_spec)


def _known_spec(text: str) -> str:
    import torch.utils._pytree as pytree

    try:
        protocol, tree = json.loads(text)
    except (TypeError, ValueError):
        return text  # not the JSON protocol: torch's deserializer reports it
    if protocol != 1 or not isinstance(tree, dict):
        return text
    changed = False

    def known(node: Any) -> None:
        nonlocal changed
        if not isinstance(node, dict):
            return
        kind, children = node.get("type"), node.get("children_spec") or []
        unknown_namedtuple = kind == "collections.namedtuple" and node.get("context") not in \
            pytree.SERIALIZED_TYPE_TO_PYTHON_TYPE
        if kind is not None and (kind not in pytree.SERIALIZED_TYPE_TO_PYTHON_TYPE or unknown_namedtuple):
            keys = _field_names(node.get("context"), len(children))
            node["type"], node["context"] = ("builtins.dict", json.dumps(keys)) if keys else ("builtins.tuple", "null")
            changed = True
        for child in children:
            known(child)

    known(tree)
    return json.dumps([protocol, tree]) if changed else text


def _field_names(context: Any, count: int) -> list[str] | None:
    """The field names an unregistered container's serialized context gives its ``count`` children, if any."""
    try:
        value = json.loads(context) if isinstance(context, str) else None
    except ValueError:
        return None
    if isinstance(value, list) and len(value) == 2 and all(isinstance(part, list) for part in value):
        value = value[0]  # register_dataclass: [fields holding values, fields that were None]
    if isinstance(value, list) and len(value) == count and all(isinstance(k, str) for k in value) and \
            len(set(value)) == count:
        return value
    return None


def load_exported_program(path: str | Path, model: str | None = None) -> torch.export.ExportedProgram:
    """Load a ``torch.export.save`` archive without unpickling; refuse anything that would need pickle."""
    from torch._export.serde import schema
    from torch._export.serde.serialize import ExportedProgramDeserializer, _bytes_to_dataclass

    archive = _open(Path(path))
    with archive.zf:
        name = _pick_model(archive, model)
        state_dict = _load_payloads(archive, f"{name}_weights_config.json", "data/weights/", "weights")
        constants = _load_payloads(archive, f"{name}_constants_config.json", "data/constants/", "constants")
        program_bytes = archive.read(f"models/{name}.json")
        try:
            serialized = _bytes_to_dataclass(schema.ExportedProgram, program_bytes)
            _with_known_pytree_types(serialized)
        except Exception as exc:
            raise InputError(f"{archive.path}: the program JSON is malformed ({type(exc).__name__}: {exc})") from None
    try:
        # Empty sample inputs: torch would unpickle them; neuroncc derives inputs from the graph's metadata.
        return ExportedProgramDeserializer().deserialize(serialized, state_dict, constants, b"")
    except Exception as exc:
        message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise InputError(f"{archive.path}: cannot load the exported program ({message}; saved by another torch "
                         f"version? this is torch {torch.__version__})") from None
