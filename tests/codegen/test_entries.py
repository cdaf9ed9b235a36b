"""A phase's entry points, written as LLVM IR text (codegen/llvm/entries.py), are valid IR beside an llvmlite body."""

from __future__ import annotations

import pytest
from llvmlite import ir

from neuroncc.codegen.llvm import jit
from neuroncc.codegen.llvm.entries import add_phase_entry, add_team_entry
from neuroncc.codegen.llvm.scalars import I64, PTR, VOID


@pytest.mark.parametrize("n_args", [0, 1, 3])
def test_the_entry_points_verify_and_pass_the_pointers_in_slot_order(n_args):
    module = ir.Module(name="k0_p0")
    body = ir.Function(module, ir.FunctionType(VOID, [PTR] * n_args + [I64, I64]), "k0_p0.body")
    body.linkage = "internal"
    ir.IRBuilder(body.append_basic_block("entry")).ret_void()
    add_phase_entry(module, "k0_p0", n_args)
    add_team_entry(module, "k0_p0")
    text = str(module)
    linked = jit.parse_and_link([text])  # raises CodegenError if LLVM does not verify it
    assert {"k0_p0", "k0_p0_team", "k0_p0.body"} <= {f.name for f in linked.functions}
    pointers = "".join(f"ptr %arg{i}, " for i in range(n_args))
    assert f'call void @"k0_p0.body"({pointers}i64 %start, i64 %end)' in text
    assert 'call void @"k0_p0"(ptr %args, i64 %lo, i64 %hi)' in text
