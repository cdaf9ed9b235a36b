"""The OpenMP team's entry, ``neuroncc_team``, as LLVM IR text: one function per process for every phase.

A module of its own, free of llvmlite: a process that loads cached executables generates this text to check the
helper code an artifact offers against it (``executors/cpu/helpers.py``) without importing LLVM's bindings.
"""

from __future__ import annotations

#: The team entry's symbol, and its task's fields (64-bit words): what the thread runner fills in.
TEAM_ENTRY = "neuroncc_team"
TEAM_TASK_FIELDS = ("phase", "args", "start", "end", "chunk", "next")


def team_entry_ir() -> str:
    """``void neuroncc_team(ptr task)``: the body an OpenMP team runs (GOMP_parallel) for any phase.

    ``task`` is {ptr phase, ptr args, i64 start, i64 end, i64 chunk, i64 next}; every thread of the team takes
    chunks of [start, end) from the shared counter ``next`` until none is left (dynamic schedule) and runs
    ``phase(args, lo, hi)`` on each.
    """
    field = {name: index for index, name in enumerate(TEAM_TASK_FIELDS)}
    return f"""define void @"{TEAM_ENTRY}"(ptr %task)
{{
entry:
  %phase.field = getelementptr ptr, ptr %task, i64 {field["phase"]}
  %phase = load ptr, ptr %phase.field
  %args.field = getelementptr ptr, ptr %task, i64 {field["args"]}
  %args = load ptr, ptr %args.field
  %start.field = getelementptr i64, ptr %task, i64 {field["start"]}
  %start = load i64, ptr %start.field
  %end.field = getelementptr i64, ptr %task, i64 {field["end"]}
  %end = load i64, ptr %end.field
  %chunk.field = getelementptr i64, ptr %task, i64 {field["chunk"]}
  %chunk = load i64, ptr %chunk.field
  br label %next
next:
  %next.field = getelementptr i64, ptr %task, i64 {field["next"]}
  %taken = atomicrmw add ptr %next.field, i64 1 monotonic
  %offset = mul i64 %taken, %chunk
  %lo = add i64 %start, %offset
  %more = icmp slt i64 %lo, %end
  br i1 %more, label %work, label %done
work:
  %lo.next = add i64 %lo, %chunk
  %short = icmp slt i64 %lo.next, %end
  %hi = select i1 %short, i64 %lo.next, i64 %end
  call void %phase(ptr %args, i64 %lo, i64 %hi)
  br label %next
done:
  ret void
}}
"""
