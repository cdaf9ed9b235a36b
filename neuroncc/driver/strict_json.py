"""Frozen dataclasses read from JSON data with exact types: the schema of the driver's on-disk formats (the
artifact manifest, the bundle head).

    decode(cls, data) -> cls instance   or SchemaError("where: what") for a missing or unexpected key, a value
                                        of another JSON type, a string that does not match its pattern, an
                                        int below its minimum
    encode(record) -> JSON data         the fields in declaration order (nested records, lists, dicts copied)

Field types: ``str``, ``int``, ``float`` (a JSON int is accepted and kept as it is, so a record re-encodes to
the same bytes), ``bool``, ``Any`` (any JSON value), ``list[T]``, ``dict[str, T]`` and another such
dataclass. Constraints are field metadata: ``pattern`` (a regular expression the whole string must match) and
``ge`` (an int's minimum). Records are not validated when built in Python, only when decoded.

This replaces pydantic for these few records: importing it and building its models cost ~0.1 s of every
process that loads an artifact, a warm start's first call included.
"""

from __future__ import annotations

import dataclasses
import functools
import re
import typing
from collections.abc import Callable, Mapping
from typing import Any

#: ``decode(data, where)``: ``where`` is the value's place, a :data:`Where` (made into a dotted path only for an
#: error: building the path of every field cost a third of a manifest's decode, which every cache hit pays)
Decoder = Callable[[Any, "Where"], Any]
#: a place in the data: ``""`` (the top), a dotted path, or (the parent's place, a key or index)
Where = str | tuple[Any, Any]


def _path(where: Where) -> str:
    if type(where) is str:
        return where
    parent, name = where
    parent_path = _path(parent)
    return f"{parent_path}.{name}" if parent_path else str(name)


class SchemaError(ValueError):
    """JSON data that is not the record it should be: ``where`` (a dotted path) and what is wrong."""

    def __init__(self, where: Where, message: str):
        path = _path(where)
        super().__init__(f"{path or '(top)'}: {message}")
        self.where, self.message = path or "(top)", message


def pattern(regex: str) -> Mapping[str, Any]:
    """Field metadata: the whole string must match ``regex``."""
    return {"pattern": re.compile(regex)}


def minimum(value: int) -> Mapping[str, Any]:
    """Field metadata: an int of at least ``value``."""
    return {"ge": value}


def decode(cls: type, data: Any, where: Where = "") -> Any:
    """``cls`` (a dataclass) from JSON data, every field checked; raises :class:`SchemaError`."""
    return _record_decoder(cls)(data, where)


def encode(value: Any) -> Any:
    """JSON data of a record (or of a list, dict or scalar holding records)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: encode(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, (list, tuple)):
        return [encode(v) for v in value]
    if isinstance(value, dict):
        return {k: encode(v) for k, v in value.items()}
    return value


def _json_type(value: Any) -> str:
    names = {dict: "an object", list: "an array", str: "a string", bool: "a boolean", int: "an integer",
             float: "a number", type(None): "null"}
    return names.get(type(value), type(value).__name__)


@functools.cache
def _record_decoder(cls: type) -> Decoder:
    hints = typing.get_type_hints(cls)
    fields = [(f.name, _decoder(hints[f.name], f.metadata)) for f in dataclasses.fields(cls)]
    names = {name for name, _ in fields}

    def decode_record(data: Any, where: Where) -> Any:
        if type(data) is not dict:
            raise SchemaError(where, f"expected an object, got {_json_type(data)}")
        if data.keys() != names:  # one set comparison; the field to name only when they differ
            unexpected = sorted(set(data) - names)
            if unexpected:
                raise SchemaError((where, unexpected[0]), "unexpected field")
            missing = [name for name, _ in fields if name not in data]
            raise SchemaError((where, missing[0]), "missing field")
        return cls(**{name: field(data[name], (where, name)) for name, field in fields})

    return decode_record


def _exact(kinds: tuple[type, ...], what: str) -> Decoder:
    def decode_scalar(data: Any, where: Where) -> Any:
        if type(data) not in kinds:
            raise SchemaError(where, f"expected {what}, got {_json_type(data)}")
        return data

    return decode_scalar


def _decoder(hint: Any, metadata: Mapping[str, Any]) -> Decoder:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any:
        return lambda data, where: data
    if hint is str:
        return _constrained(_exact((str,), "a string"), metadata.get("pattern"), None)
    if hint is int:
        return _constrained(_exact((int,), "an integer"), None, metadata.get("ge"))
    if hint is float:
        return _exact((int, float), "a number")
    if hint is bool:
        return _exact((bool,), "a boolean")
    if origin is list:
        item = _decoder(args[0], {})

        def decode_list(data: Any, where: Where) -> Any:
            if type(data) is not list:
                raise SchemaError(where, f"expected an array, got {_json_type(data)}")
            return [item(v, (where, i)) for i, v in enumerate(data)]

        return decode_list
    if origin is dict and args[0] is str:
        value = _decoder(args[1], {})

        def decode_dict(data: Any, where: Where) -> Any:
            if type(data) is not dict:
                raise SchemaError(where, f"expected an object, got {_json_type(data)}")
            return {k: value(v, (where, k)) for k, v in data.items()}

        return decode_dict
    if dataclasses.is_dataclass(hint):
        made: list[Decoder] = []  # the record's decoder, made at its first value (a record may nest itself)

        def decode_nested(data: Any, where: Where) -> Any:
            if not made:
                made.append(_record_decoder(hint))
            return made[0](data, where)

        return decode_nested
    raise TypeError(f"strict_json: no decoder for {hint!r}")


def _constrained(base: Decoder, regex: re.Pattern[str] | None, ge: int | None) -> Decoder:
    if regex is None and ge is None:
        return base

    def decode_constrained(data: Any, where: Where) -> Any:
        value = base(data, where)
        if regex is not None and not regex.fullmatch(value):
            raise SchemaError(where, f"does not match {regex.pattern}")
        if ge is not None and value < ge:
            raise SchemaError(where, f"less than {ge}")
        return value

    return decode_constrained
