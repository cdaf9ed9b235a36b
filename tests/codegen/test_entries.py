"""The entry points written as LLVM IR text (codegen/llvm/entries.py): a phase's, valid IR beside an llvmlite
body, and the process's OpenMP team entry, which runs any phase in chunks on ATen's team."""

from __future__ import annotations

import pytest
from llvmlite import ir

from neuroncc.codegen.llvm import jit
from neuroncc.codegen.llvm.entries import add_phase_entry
from neuroncc.codegen.llvm.team_entry import TEAM_ENTRY, team_entry_ir
from neuroncc.codegen.llvm.scalars import I64, PTR, VOID


@pytest.mark.parametrize("n_args", [0, 1, 3])
def test_the_entry_points_verify_and_pass_the_pointers_in_slot_order(n_args):
    module = ir.Module(name="k0_p0")
    body = ir.Function(module, ir.FunctionType(VOID, [PTR] * n_args + [I64, I64]), "k0_p0.body")
    body.linkage = "internal"
    ir.IRBuilder(body.append_basic_block("entry")).ret_void()
    add_phase_entry(module, "k0_p0", n_args)
    text = str(module)
    linked = jit.parse_and_link([text])  # raises CodegenError if LLVM does not verify it
    assert {"k0_p0", "k0_p0.body"} <= {f.name for f in linked.functions}
    pointers = "".join(f"ptr %arg{i}, " for i in range(n_args))
    assert f'call void @"k0_p0.body"({pointers}i64 %start, i64 %end)' in text
    assert "team" not in text  # one team entry per process, not one per phase


def test_the_team_entry_is_compiled_once_per_process():
    """neuroncc_team(task): one entry for every phase, compiled once. That it runs each row of a phase exactly once,
    through the phase pointer in the task, whatever the rows and threads: tests/executors/test_team_schedule.py."""
    from neuroncc.executors.cpu.threads import get_team, team_entry

    if get_team(2) is None:
        pytest.skip("libgomp (bundled with torch) not found")
    assert team_entry() == team_entry()  # compiled once
    assert f'define void @"{TEAM_ENTRY}"(ptr %task)' in team_entry_ir()
