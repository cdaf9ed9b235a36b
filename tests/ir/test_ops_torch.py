"""Every op against PyTorch: type inference, the numpy reference, and the text round trip of its graph.

For each registered op, hypothesis draws valid operands and attributes (0-dim, size-0 and broadcast shapes,
several dtypes, special float values) from the op's entry in ``ops_table``; the one-op graph's inferred
result types must equal the shapes and dtypes torch's equivalent returns, the reference interpreter's
results must match torch's within per-op tolerances (NaN and inf positions equal), and the graph must
survive print -> parse -> print unchanged.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from neuroncc.ir import REGISTRY, interpret

from .ops_table import SPECS, TESTED_SEPARATELY
from .support import (
    as_tuple, assert_close_to_torch, assert_types_match, fuzz_settings, one_op_graph, round_trip, to_torch,
)


def test_op_table_covers_the_registry():
    registered = set(REGISTRY.names())
    missing = registered - set(SPECS) - TESTED_SEPARATELY
    assert not missing, f"ops without a test entry in tests/ir/cases_*.py: {sorted(missing)}"
    unknown = set(SPECS) - registered
    assert not unknown, f"test entries for ops that are not registered: {sorted(unknown)}"


@pytest.mark.parametrize("name", sorted(SPECS))
@fuzz_settings(30)
@given(data=st.data())
def test_op_matches_torch(name, data):
    spec = SPECS[name]
    case = data.draw(spec.cases(), label="case")
    fn = one_op_graph(name, case)
    attrs = dict(fn.ops[0].attrs)
    expected = as_tuple(spec.torch([to_torch(a, t.dtype) for a, t in case.operands], attrs))
    assert_types_match(fn, expected)
    ours = interpret(fn, case.arrays)
    if spec.canonical is not None:
        ours = [a.numpy() for a in spec.canonical(tuple(to_torch(o, v.type.dtype) for o, v in zip(ours, fn.outputs)))]
        expected = spec.canonical(expected)
    assert_close_to_torch(ours, fn, expected, spec.tol)
    round_trip(fn)
