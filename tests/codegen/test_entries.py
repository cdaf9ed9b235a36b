"""The entry points written as LLVM IR text (codegen/llvm/entries.py): a phase's, valid IR beside an llvmlite
body, and the process's OpenMP team entry, which runs any phase in chunks on ATen's team."""

from __future__ import annotations

import ctypes

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


def test_the_team_entry_runs_every_chunk_of_any_phase_once():
    """neuroncc_team(task) on 2 OpenMP threads: each outer iteration [start, end) is run exactly once, through
    the phase pointer in the task, in chunks of ``chunk``."""
    from neuroncc.executors.cpu.steps import PHASE_FN
    from neuroncc.executors.cpu.threads import get_team, team_entry

    hits = (ctypes.c_int64 * 100)()
    phase_ir = """define void @"mark"(ptr %args, i64 %start, i64 %end) {
entry:
  br label %loop
loop:
  %i = phi i64 [%start, %entry], [%next, %body]
  %more = icmp slt i64 %i, %end
  br i1 %more, label %body, label %done
body:
  %slot = getelementptr i64, ptr %args, i64 %i
  %old = atomicrmw add ptr %slot, i64 1 monotonic
  %next = add i64 %i, 1
  br label %loop
done:
  ret void
}
"""
    module = jit.compile_ir([phase_ir])
    address = module.address("mark")
    team = get_team(2)
    if team is None:
        pytest.skip("libgomp (bundled with torch) not found")
    team.run(PHASE_FN(address), address, ctypes.addressof(hits), 3, 97, work_per_item=1 << 20)  # on the team
    assert list(hits) == [0] * 3 + [1] * 94 + [0] * 3
    assert team_entry() == team_entry()  # compiled once
    assert f'define void @"{TEAM_ENTRY}"(ptr %task)' in team_entry_ir()
