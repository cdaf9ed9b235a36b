"""Elementwise ops on every special float value (NaN, +-inf, +-0, subnormals, huge) against PyTorch.

Hypothesis sprinkles special values into random operands; this test is the exhaustive, deterministic
complement: every float-accepting elementwise op on all special values (binary ops: on all pairs), in f32,
bf16 and f16, with NaN and inf positions required to match exactly.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from neuroncc.ir import REGISTRY, Category, DType, TensorType

from .cases_elementwise import MODERATE_SPECIALS, SPECS
from .support import FLOATS, SPECIALS, Case, as_tuple, assert_close_to_torch, one_op_graph, run_ir, to_torch
from neuroncc.ir.dtypes import to_storage

_ORDINARY = np.array([1.0, -1.0, 2.5, -0.75, 3.0, 1e-3], np.float32)


def _float_elementwise_ops() -> list[str]:
    names = []
    for opdef in REGISTRY.by_category(Category.ELEMENTWISE):
        if opdef.name in ("cast", "clamp", "where"):
            continue
        arity = opdef.arity[0]
        try:
            opdef.infer_types((TensorType((1,), DType.f32),) * arity, opdef.normalize_attrs({}))
        except Exception:
            continue  # not defined on floats
        names.append(opdef.name)
    return sorted(names)


FLOAT_OPS = _float_elementwise_ops()


def test_the_special_value_sweep_covers_the_float_ops():
    assert {"add", "div", "sign", "exp", "remainder", "fmod", "pow", "atan2", "maximum", "isnan"} <= set(FLOAT_OPS)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("name", FLOAT_OPS)
def test_special_values(name, dtype):
    arity = REGISTRY.get(name).arity[0]
    values = np.concatenate([MODERATE_SPECIALS if name == "gelu" else SPECIALS, _ORDINARY])
    columns = [np.array(c, np.float32) for c in zip(*itertools.product(values, repeat=arity))]
    modes = ["none", "floor", "trunc"] if name == "div" else [None]
    for mode in modes:
        attrs = {"rounding_mode": mode} if mode else {}
        operands = [(to_storage(c, dtype), TensorType(c.shape, dtype)) for c in columns]
        case = Case(operands, attrs)
        fn = one_op_graph(name, case)
        expected = as_tuple(SPECS[name].torch([to_torch(a, t.dtype) for a, t in operands], dict(fn.ops[0].attrs)))
        assert_close_to_torch(run_ir(fn, case), fn, expected, SPECS[name].tol)


def test_bf16_truncating_division_rounds_the_quotient_first():
    # a / b = -5.9915 rounds to -6.0 in bf16 before the trunc, as torch's vectorized kernel does for any tensor
    # of more than one element (a 1-element tensor takes a scalar path that truncates the f32 quotient: -5).
    a, b = np.full(40, 5.5, np.float32), np.full(40, -0.91796875, np.float32)
    fn = one_op_graph("div", Case([(a, TensorType((40,), DType.bf16)), (b, TensorType((40,), DType.bf16))],
                                  {"rounding_mode": "trunc"}))
    (out,) = run_ir(fn, Case([(a, None), (b, None)]))
    expected = torch.div(torch.tensor(a).bfloat16(), torch.tensor(b).bfloat16(), rounding_mode="trunc")
    assert (out == -6.0).all() and (expected == -6.0).all()