"""bitwise_left_shift / bitwise_right_shift through the LLVM path: every amount (negative, 0..width - 1, the width
and beyond, which LLVM's shifts leave as poison) against the reference and torch on CPU, and loops that vectorize
with selects, not per-element branches."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch

from neuroncc.ir import Builder, DType, TensorType

from codegen_helpers import run_both

INTEGERS = [DType.u8, DType.i8, DType.i16, DType.i32, DType.i64]
TORCH_SHIFTS = {"bitwise_left_shift": torch.bitwise_left_shift, "bitwise_right_shift": torch.bitwise_right_shift}


def _edge_operands(dtype: DType) -> tuple[np.ndarray, np.ndarray]:
    """Values (a column: the extremes, 0, +-1, odd numbers) and amounts (a row: every amount of an 8-bit type,
    else -width - 3 .. 2 * width + 3 and the extremes), broadcast against each other."""
    info = np.iinfo(dtype.numpy)
    bits = info.bits
    values = np.array(sorted({info.min, info.min + 1, info.max, info.max - 2, 0, 1, 5, 0x5A, info.max // 3} |
                             ({-1, -5, -0x5A} if info.min < 0 else set())), np.int64).astype(dtype.numpy)
    if bits == 8:
        amounts = np.arange(256).astype(dtype.numpy)  # u8 255 is -1 read unsigned; i8's negatives likewise
    else:
        amounts = np.array(list(range(-bits - 3, 2 * bits + 4)) + [info.min, info.max], np.int64).astype(dtype.numpy)
    return values.reshape(-1, 1), amounts


@pytest.mark.parametrize("dtype", INTEGERS, ids=str)
def test_shifts_by_every_edge_amount_match_the_reference_and_torch(dtype):
    values, amounts = _edge_operands(dtype)
    b = Builder("shifts")
    x = b.param(TensorType(values.shape, dtype), "x")
    s = b.param(TensorType(amounts.shape, dtype), "s")
    scalar = b.op("full", shape=(), dtype=dtype, value=3)
    names = list(TORCH_SHIFTS)
    outs = [b.op(name, x, s, hint=name) for name in names] + [b.op(name, x, scalar) for name in names]
    _, got = run_both(b.build(outs), [values, amounts])
    tx, ts = torch.from_numpy(values), torch.from_numpy(amounts)
    for position, name in enumerate(names):
        np.testing.assert_array_equal(got[position], TORCH_SHIFTS[name](tx, ts).numpy(), err_msg=name)
        np.testing.assert_array_equal(got[position + 2], TORCH_SHIFTS[name](tx, 3).numpy(), err_msg=f"{name} 3")


def _loop_assembly(dtype: DType, name: str) -> str:
    from neuroncc.codegen.llvm import jit
    from neuroncc.codegen.llvm.emit import emit_kernel
    from neuroncc.codegen.llvm.schedule import plan_kernel
    from neuroncc.codegen.llvm.views import Layout

    b = Builder("shift")
    x = b.param(TensorType((64, 256), dtype), "x")
    s = b.param(TensorType((256,), dtype), "s")
    fn = b.build([b.op(name, x, s)])
    plan = plan_kernel(fn, [Layout.of(0, x.type), Layout.of(1, s.type)], [Layout.of(2, fn.outputs[0].type)])
    texts, _ = emit_kernel(plan, "shift")
    return jit.assembly(texts)


@pytest.mark.parametrize("name", list(TORCH_SHIFTS))
@pytest.mark.parametrize("dtype", INTEGERS, ids=str)
def test_shift_loops_vectorize_with_selects_not_branches(dtype, name):
    asm = _loop_assembly(dtype, name)
    assert re.search(r"\tvps(ll|ra|rl)v[wdq]\t.*[yz]mm", asm), "no vector variable shift"
    # the function's entry check and its two loops' back edges: no branch per element (the range checks are
    # selects, masks on AVX-512)
    branches = re.findall(r"^\tj(?!mp)[a-z]+\t", asm, re.MULTILINE)
    assert len(branches) <= 3, asm
