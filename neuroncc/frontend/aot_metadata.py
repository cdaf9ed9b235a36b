"""AOTAutograd's runtime metadata as JSON, field by field, for the graph cache (no pickle).

AOTAutograd's runtime wrappers (the autograd.Function it builds, the epilogue that writes input mutations back
and regenerates aliased outputs) run from a :class:`ViewAndMutationMeta`. PyTorch's own AOTAutograd cache
pickles it; the graph cache (``frontend.graph_cache``) encodes it instead, one table entry per attribute of
the live object (its dataclass fields and the ones ``__post_init__`` derives), each with a strict codec:

    encode_metadata(meta) -> JSON data    raises UnsupportedMetadata naming the field for anything outside
                                          the codecs (tensor subclasses, effect tokens, symbolic sizes, RNG
                                          state inputs, an attribute this table does not know: a new torch)
    decode_metadata(data) -> meta         rebuilds the object as unpickling would (the attributes set, no
                                          __post_init__), checking every field's JSON type; raises
                                          BadMetadata for anything else

Values that are objects (input/output alias infos, tangent memory formats, view-replay sequences, the
descriptors that name tangents in error messages) are rebuilt from named, allow-listed classes only: the
schema dataclasses, ``torch._C._functionalization.*_ViewMeta`` from their ``as_tuple()`` form, and the
dataclasses of AOTAutograd's ``descriptors`` module. Nothing is imported or evaluated by name beyond those.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import torch
import torch._dynamo  # noqa: F401 - first: AOTAutograd's modules import each other in TorchDynamo's order
from torch._C import _functionalization
from torch._functorch._aot_autograd import descriptors
from torch._functorch._aot_autograd.functional_utils import MetadataKey, ViewMetaSequence
from torch._functorch._aot_autograd.schemas import (
    InputAliasInfo,
    MemoryFormatMeta,
    OutputAliasInfo,
    OutputType,
    PlainTensorMeta,
    ViewAndMutationMeta,
)
from torch._subclasses.functional_tensor import FunctionalTensor
from torch.fx.experimental.symbolic_shapes import SymIntEqByExpr


class UnsupportedMetadata(Exception):
    """The metadata holds something the graph cache does not encode: the graph is compiled, not cached."""


class BadMetadata(Exception):
    """Stored metadata that does not decode: the entry is a miss."""


Codec = tuple[Callable[[Any], Any], Callable[[Any], Any]]


def _check(condition: bool, what: str) -> None:
    if not condition:
        raise BadMetadata(what)


def _exact(kind: type, name: str) -> Codec:
    def encode(value: Any) -> Any:
        if type(value) is not kind:
            raise UnsupportedMetadata(f"{name}: a {type(value).__name__}, not {kind.__name__}")
        return value

    def decode(data: Any) -> Any:
        _check(type(data) is kind, f"{name}: not {kind.__name__}")
        return data

    return encode, decode


INT, BOOL, STR = _exact(int, "int"), _exact(bool, "bool"), _exact(str, "str")


def _optional(codec: Codec) -> Codec:
    encode, decode = codec
    return (lambda v: None if v is None else encode(v)), (lambda d: None if d is None else decode(d))


def _list(codec: Codec, container: Callable[[list[Any]], Any] = list) -> Codec:
    encode, decode = codec

    def encode_list(value: Any) -> Any:
        if not isinstance(value, (list, tuple)):
            raise UnsupportedMetadata(f"not a list: {type(value).__name__}")
        return [encode(v) for v in value]

    def decode_list(data: Any) -> Any:
        _check(type(data) is list, "not a list")
        return container([decode(d) for d in data])

    return encode_list, decode_list


def _empty(kind: type) -> Codec:
    """A field the cache only supports empty (effect tokens, dynamic saved tensors)."""
    def encode(value: Any) -> Any:
        if type(value) is not kind or value:
            raise UnsupportedMetadata(f"not an empty {kind.__name__}: {value!r}")
        return None

    def decode(data: Any) -> Any:
        _check(data is None, "expected an empty value")
        return kind()

    return encode, decode


def _none_only(value_name: str) -> Codec:
    def encode(value: Any) -> Any:
        if value is not None:
            raise UnsupportedMetadata(f"{value_name} is set")
        return None

    def decode(data: Any) -> Any:
        _check(data is None, f"{value_name}: expected null")
        return None

    return encode, decode


def _zero(value_name: str) -> Codec:
    def encode(value: Any) -> Any:
        if value != 0 or type(value) is not int:
            raise UnsupportedMetadata(f"{value_name} is {value!r}")
        return 0

    def decode(data: Any) -> Any:
        _check(data == 0 and type(data) is int, f"{value_name}: expected 0")
        return 0

    return encode, decode


#: The Python types AOTAutograd records for outputs (``raw_type``, ``output_types``), by name.
_TYPES: dict[str, type] = {
    "Tensor": torch.Tensor, "FunctionalTensor": FunctionalTensor, "int": int, "float": float, "bool": bool,
    "SymInt": torch.SymInt, "SymFloat": torch.SymFloat, "SymBool": torch.SymBool, "NoneType": type(None),
}
_TYPE_NAMES = {kind: name for name, kind in _TYPES.items()}


def _encode_type(value: Any) -> str:
    if value not in _TYPE_NAMES:
        raise UnsupportedMetadata(f"output type {value!r}")
    return _TYPE_NAMES[value]


def _decode_type(data: Any) -> type:
    _check(type(data) is str and data in _TYPES, f"unknown output type {data!r}")
    return _TYPES[data]


TYPE: Codec = (_encode_type, _decode_type)


def _torch_constant(kind: type, prefix: str = "torch.") -> Codec:
    """A ``torch.dtype`` / ``torch.layout`` / ``torch.memory_format`` by its name in the torch namespace."""
    def encode(value: Any) -> Any:
        if type(value) is not kind:
            raise UnsupportedMetadata(f"not a {kind.__name__}: {value!r}")
        return str(value).removeprefix(prefix)

    def decode(data: Any) -> Any:
        _check(type(data) is str and data.isidentifier(), f"bad {kind.__name__} name {data!r}")
        value = getattr(torch, data, None)
        _check(type(value) is kind, f"unknown {kind.__name__} {data!r}")
        return value

    return encode, decode


LAYOUT, MEMORY_FORMAT = _torch_constant(torch.layout), _torch_constant(torch.memory_format)


def _dataclass(cls: type, fields: dict[str, Codec]) -> Codec:
    """A dataclass built with its constructor from exactly ``fields`` (a field this table lacks: unsupported)."""
    names = [f.name for f in dataclasses.fields(cls)]
    assert sorted(names) == sorted(fields), f"{cls.__name__}: table out of date"

    def encode(value: Any) -> Any:
        if type(value) is not cls:
            raise UnsupportedMetadata(f"a {type(value).__name__} where {cls.__name__} was expected")
        return {name: fields[name][0](getattr(value, name)) for name in names}

    def decode(data: Any) -> Any:
        _check(type(data) is dict and sorted(data) == sorted(names), f"{cls.__name__}: wrong fields")
        return cls(**{name: fields[name][1](data[name]) for name in names})

    return encode, decode


def _int_set() -> Codec:
    encode, decode = _list(INT)
    return (lambda v: sorted(encode(sorted(v))) if isinstance(v, (set, frozenset)) else _fail(f"not a set: {v!r}"),
            lambda d: set(decode(d)))


def _fail(message: str) -> Any:
    raise UnsupportedMetadata(message)


def _encode_output_type(value: Any) -> str:
    if type(value) is not OutputType:
        raise UnsupportedMetadata(f"output_type {value!r}")
    return value.name


def _decode_output_type(data: Any) -> OutputType:
    _check(type(data) is str and data in OutputType.__members__, f"unknown OutputType {data!r}")
    return OutputType[data]


# ---- view replay: ViewMeta objects from their as_tuple() form --------------------------------------------

def _encode_view_arg(value: Any) -> Any:
    if value is None or type(value) in (bool, int, float, str):
        return value
    if isinstance(value, list):
        return [_encode_view_arg(v) for v in value]
    if isinstance(value, tuple):
        return {"tuple": [_encode_view_arg(v) for v in value]}
    if type(value) is _functionalization.InverseReturnMode:
        return {"inverse_return_mode": value.name}
    if type(value) is torch.dtype:
        return {"dtype": str(value).removeprefix("torch.")}
    raise UnsupportedMetadata(f"view replay argument {value!r} ({type(value).__name__})")


def _decode_view_arg(data: Any) -> Any:
    if data is None or type(data) in (bool, int, float, str):
        return data
    if type(data) is list:
        return [_decode_view_arg(d) for d in data]
    _check(type(data) is dict and len(data) == 1, f"bad view replay argument {data!r}")
    (tag, inner), = data.items()
    if tag == "tuple":
        _check(type(inner) is list, "bad tuple")
        return tuple(_decode_view_arg(d) for d in inner)
    if tag == "inverse_return_mode":
        _check(type(inner) is str and inner in _functionalization.InverseReturnMode.__members__,
               f"bad InverseReturnMode {inner!r}")
        return _functionalization.InverseReturnMode.__members__[inner]
    if tag == "dtype":
        return _torch_constant(torch.dtype)[1](inner)
    raise BadMetadata(f"unknown view replay argument tag {tag!r}")


def _encode_view_meta(value: Any) -> Any:
    name = type(value).__name__
    if not name.endswith("_ViewMeta") or getattr(_functionalization, name, None) is not type(value):
        raise UnsupportedMetadata(f"view replay step {name}")
    if value.has_symbolic_inputs:
        raise UnsupportedMetadata("view replay with symbolic sizes")
    return {"view": name, "args": _encode_view_arg(value.as_tuple())}


def _decode_view_meta(data: Any) -> Any:
    _check(type(data) is dict and sorted(data) == ["args", "view"], "bad view replay step")
    name = data["view"]
    _check(type(name) is str and name.endswith("_ViewMeta") and name.isidentifier(), f"bad view {name!r}")
    cls = getattr(_functionalization, name, None)
    _check(isinstance(cls, type), f"unknown view replay step {name!r}")
    args = _decode_view_arg(data["args"])
    _check(type(args) is tuple, "view replay arguments are not a tuple")
    try:
        return cls(args)
    except (TypeError, ValueError, RuntimeError) as exc:
        raise BadMetadata(f"{name}: {exc}") from None


def _encode_sym(value: Any) -> int:
    if type(value) is not SymIntEqByExpr or not getattr(value.val, "is_Integer", False):
        raise UnsupportedMetadata(f"symbolic view metadata {value!r}")
    return int(value.val)


SYM_INT: Codec = (_encode_sym, lambda d: SymIntEqByExpr(INT[1](d)))
METADATA_KEY = _dataclass(MetadataKey, {
    "size": _list(SYM_INT, tuple), "layout": LAYOUT, "is_sparse": BOOL,
    "stride": _optional(_list(SYM_INT, tuple)), "storage_offset": _optional(SYM_INT),
    "is_conj": BOOL, "is_neg": BOOL,
})


def _encode_view_sequence(value: Any) -> Any:
    if type(value) is not ViewMetaSequence or set(vars(value)) != {"sequence", "metadata"}:
        raise UnsupportedMetadata(f"view replay sequence {value!r}")
    return {"sequence": [_encode_view_meta(v) for v in value.sequence], "metadata": METADATA_KEY[0](value.metadata)}


def _decode_view_sequence(data: Any) -> Any:
    _check(type(data) is dict and sorted(data) == ["metadata", "sequence"] and type(data["sequence"]) is list,
           "bad view replay sequence")
    sequence = object.__new__(ViewMetaSequence)  # as unpickling does: its constructor needs a live tensor
    sequence.sequence = [_decode_view_meta(d) for d in data["sequence"]]
    sequence.metadata = METADATA_KEY[1](data["metadata"])
    return sequence


VIEW_SEQUENCE: Codec = (_encode_view_sequence, _decode_view_sequence)

# ---- descriptors (named in AOTAutograd's error messages about tangents) ---------------------------------


def _encode_descriptor(value: Any) -> Any:
    cls = type(value)
    if getattr(descriptors, cls.__name__, None) is not cls or not dataclasses.is_dataclass(cls):
        raise UnsupportedMetadata(f"descriptor {cls.__name__}")
    fields = {}
    for field in dataclasses.fields(cls):
        item = getattr(value, field.name)
        if item is None or type(item) in (bool, int, str):
            fields[field.name] = item
        elif isinstance(item, (descriptors.AOTInput, descriptors.AOTOutput)):
            fields[field.name] = _encode_descriptor(item)
        else:
            raise UnsupportedMetadata(f"descriptor {cls.__name__}.{field.name} = {item!r}")
    return {"descriptor": cls.__name__, "fields": fields}


def _decode_descriptor(data: Any) -> Any:
    _check(type(data) is dict and sorted(data) == ["descriptor", "fields"], "bad descriptor")
    name, fields = data["descriptor"], data["fields"]
    cls = getattr(descriptors, name, None) if type(name) is str and name.isidentifier() else None
    _check(isinstance(cls, type) and dataclasses.is_dataclass(cls)
           and issubclass(cls, (descriptors.AOTInput, descriptors.AOTOutput)), f"unknown descriptor {name!r}")
    _check(type(fields) is dict and sorted(fields) == sorted(f.name for f in dataclasses.fields(cls)),
           f"descriptor {name}: wrong fields")
    values = {key: _decode_descriptor(item) if type(item) is dict else item for key, item in fields.items()}
    _check(all(v is None or type(v) in (bool, int, str) or isinstance(v, (descriptors.AOTInput,
                                                                          descriptors.AOTOutput))
               for v in values.values()), f"descriptor {name}: bad field")
    try:
        return cls(**values)
    except (TypeError, AssertionError) as exc:
        raise BadMetadata(f"descriptor {name}: {exc}") from None


DESCRIPTOR: Codec = (_encode_descriptor, _decode_descriptor)

# ---- the schema dataclasses ------------------------------------------------------------------------------

INPUT_INFO = _dataclass(InputAliasInfo, {name: BOOL for name in (
    "is_leaf", "mutates_data", "mutates_metadata", "mutations_hidden_from_autograd",
    "mutations_under_no_grad_or_inference_mode", "mutation_inductor_storage_resize", "mutates_storage_metadata",
    "requires_grad", "keep_input_mutations")})
OUTPUT_INFO = _dataclass(OutputAliasInfo, {
    "output_type": (_encode_output_type, _decode_output_type), "raw_type": TYPE, "base_idx": _optional(INT),
    "dynamic_dims": _optional(_int_set()), "requires_grad": BOOL, "requires_grad_for_backward": BOOL,
    "view_meta_sequence": _optional(VIEW_SEQUENCE),
})
MEMORY_FORMAT_META = _dataclass(MemoryFormatMeta, {
    "size": _optional(_list(INT, torch.Size)), "stride": _optional(_list(INT, tuple)),
    "memory_format": _optional(MEMORY_FORMAT),
})
PLAIN_TENSOR_META = _dataclass(PlainTensorMeta, {"unwrapped_idx": INT,
                                                 "memory_format": _optional(MEMORY_FORMAT_META)})
INTS, OPT_INT, OPT_BOOL = _list(INT), _optional(INT), _optional(BOOL)

#: Every attribute of a runtime-safe ViewAndMutationMeta (after make_runtime_safe), with its codec.
METADATA_FIELDS: dict[str, Codec] = {
    "input_info": _list(INPUT_INFO),
    "output_info": _list(OUTPUT_INFO),
    "num_intermediate_bases": INT,
    "keep_input_mutations": BOOL,
    "traced_tangents": _empty(list),  # emptied by make_runtime_safe
    "traced_tangents_descs": _list(DESCRIPTOR),
    "subclass_inp_meta": _list(PLAIN_TENSOR_META),  # a SubclassCreationMeta: a tensor subclass, unsupported
    "subclass_fw_graph_out_meta": _list(PLAIN_TENSOR_META),
    "subclass_tangent_meta": _list(PLAIN_TENSOR_META),
    "traced_tangent_metas": _optional(_list(_none_only("tangent subclass metadata"))),
    "num_symints_saved_for_bw": OPT_INT,
    "num_tensors_saved_with_no_vc_check": OPT_INT,
    "num_opaque_objects_saved_for_bw": _optional(_zero("opaque objects saved for backward")),
    "grad_enabled_mutation": OPT_BOOL,
    "deterministic": OPT_BOOL,
    "static_input_indices": INTS,
    "act_input_indices": _empty(list),  # async collective inputs
    "tokens": _empty(dict),  # effect tokens
    "indices_of_inputs_that_requires_grad_with_mutations_in_bw": INTS,
    "bw_donated_idxs": _optional(INTS),
    "num_backward_tokens": _zero("backward effect tokens"),
    "num_graphsafe_rng_states": _zero("graph-safe RNG states"),
    "graphsafe_rng_state_index": _none_only("graph-safe RNG state index"),
    "graphsafe_rng_device": _none_only("graph-safe RNG device"),
    "mutated_inp_stream_indices": _optional(_list(_none_only("a stream for a mutated input"))),
    "compile_id_str": _optional(STR),
    "tangent_source_stack_traces": _optional(_list(_optional(STR))),
    # derived by __post_init__ (and by the partitioner: num_*_saved_for_bw, dynamic_saved_tensors_idxs)
    "mutated_graph_handled_indices": INTS,
    "num_mutated_graph_handled_indices": INT,
    "mutated_graph_handled_indices_seen_by_autograd": INTS,
    "num_mutated_graph_handled_indices_seen_by_autograd": INT,
    "mutated_inp_runtime_indices": INTS,
    "num_mutated_inp_runtime_indices": INT,
    "aliased_out_indices": INTS,
    "unsafe_view_out_indices": INTS,
    "num_outputs": INT,
    "num_outputs_non_aliased": INT,
    "num_outputs_aliased_to_inputs": INT,
    "num_unsafe_view_outputs": INT,
    "num_outputs_aliased_to_intermediates": INT,
    "num_outputs_aliased": INT,
    "dynamic_outputs": BOOL,
    "dynamic_saved_tensors_idxs": _empty(dict),
    "output_types": _list(TYPE),
    "is_rng_op_functionalized": BOOL,
    "num_outputs_rng_offset": INT,
    "num_forward_returns": INT,
    "num_forward": INT,
}


def encode_metadata(meta: ViewAndMutationMeta) -> dict[str, Any]:
    """``meta`` (runtime-safe) as JSON data; :class:`UnsupportedMetadata` names what cannot be encoded."""
    if type(meta) is not ViewAndMutationMeta:
        raise UnsupportedMetadata(f"metadata of type {type(meta).__name__}")
    attributes = vars(meta)
    unknown = sorted(set(attributes) - set(METADATA_FIELDS))
    missing = sorted(set(METADATA_FIELDS) - set(attributes))
    if unknown or missing:
        raise UnsupportedMetadata(f"ViewAndMutationMeta attributes this neuroncc does not know: {unknown or missing}")
    encoded = {}
    for name, (encode, _) in METADATA_FIELDS.items():
        try:
            encoded[name] = encode(attributes[name])
        except UnsupportedMetadata as exc:
            raise UnsupportedMetadata(f"{name}: {exc}") from None
    if decode_and_encode(encoded) != encoded:  # every codec must round-trip exactly
        raise UnsupportedMetadata("the metadata does not round-trip through its JSON form")
    return encoded


def decode_and_encode(data: dict[str, Any]) -> dict[str, Any]:
    meta = decode_metadata(data)
    return {name: encode(vars(meta)[name]) for name, (encode, _) in METADATA_FIELDS.items()}


def decode_metadata(data: Any) -> ViewAndMutationMeta:
    """The ViewAndMutationMeta encoded in ``data``; :class:`BadMetadata` if it is not exactly that."""
    _check(type(data) is dict and sorted(data) == sorted(METADATA_FIELDS), "wrong set of metadata fields")
    meta = object.__new__(ViewAndMutationMeta)  # as unpickling does (PyTorch's own cache): no __post_init__
    for name, (_, decode) in METADATA_FIELDS.items():
        try:
            vars(meta)[name] = decode(data[name])
        except BadMetadata as exc:
            raise BadMetadata(f"{name}: {exc}") from None
    return meta
