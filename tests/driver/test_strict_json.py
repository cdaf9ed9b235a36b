"""The records of the driver's on-disk formats (driver/strict_json.py): decoded with exact JSON types, each
problem named by its path; encoded back to the same data."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import pytest

from neuroncc.driver.strict_json import SchemaError, decode, encode, minimum, pattern


@dataclass(frozen=True, slots=True)
class Part:
    name: str
    size: int = field(metadata=minimum(0))


@dataclass(frozen=True, slots=True)
class Whole:
    key: str = field(metadata=pattern(r"[0-9a-f]{4}"))
    ready: bool
    ratio: float
    parts: list[Part]
    by_name: dict[str, Part]
    extra: dict[str, Any]


GOOD = {"key": "00af", "ready": True, "ratio": 2, "parts": [{"name": "a", "size": 0}],
        "by_name": {"b": {"name": "b", "size": 3}}, "extra": {"nested": [1, {"x": None}]}}


def test_a_record_decodes_and_encodes_back_to_the_same_data():
    whole = decode(Whole, GOOD)
    assert whole.parts == [Part("a", 0)] and whole.by_name["b"].size == 3 and whole.ratio == 2
    assert json.dumps(encode(whole)) == json.dumps(GOOD)  # same keys in the same order, an int stays an int


@pytest.mark.parametrize("change, where, message", [
    ({"surprise": 1}, "surprise", "unexpected field"),
    ({"ready": None}, "ready", "expected a boolean, got null"),
    ({"ready": 1}, "ready", "expected a boolean"),
    ({"ratio": "2"}, "ratio", "expected a number, got a string"),
    ({"key": "00AF"}, "key", "does not match"),
    ({"key": "00af\n"}, "key", "does not match"),
    ({"parts": {}}, "parts", "expected an array"),
    ({"parts": [{"name": "a", "size": -1}]}, "parts.0.size", "less than 0"),
    ({"parts": [{"name": "a", "size": True}]}, "parts.0.size", "expected an integer, got a boolean"),
    ({"parts": [{"name": "a", "size": 1.0}]}, "parts.0.size", "expected an integer, got a number"),
    ({"by_name": {"b": {"name": "b"}}}, "by_name.b.size", "missing field"),
    ({"by_name": []}, "by_name", "expected an object"),
])
def test_every_problem_is_named_by_its_path(change, where, message):
    with pytest.raises(SchemaError) as caught:
        decode(Whole, GOOD | change)
    assert caught.value.where == where and message in caught.value.message


def test_a_missing_field_and_a_non_object():
    with pytest.raises(SchemaError, match="ready: missing field"):
        decode(Whole, {k: v for k, v in GOOD.items() if k != "ready"})
    with pytest.raises(SchemaError, match=r"\(top\): expected an object, got an array"):
        decode(Whole, [])
