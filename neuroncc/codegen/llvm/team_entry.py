"""The OpenMP team's entry, ``neuroncc_team``, as LLVM IR text: one function per process for every phase.

A module of its own, free of llvmlite: a process that loads cached executables generates this text to check the
helper code an artifact offers against it (``executors/cpu/helpers.py``) without importing LLVM's bindings.
"""

from __future__ import annotations

#: The team entry's symbol, and its task's fields (64-bit words): what the thread runner fills in.
TEAM_ENTRY = "neuroncc_team"
TEAM_TASK_FIELDS = ("phase", "args", "start", "end", "chunk", "next", "spread")


def team_entry_ir() -> str:
    """``void neuroncc_team(ptr task)``: the body an OpenMP team runs (GOMP_parallel) for any phase.

    ``task`` is {ptr phase, ptr args, i64 start, i64 end, i64 chunk, i64 next, i64 spread}; every thread of the team
    takes chunks of [start, end) from the shared offset ``next`` (0 at the call) until none is left (a dynamic
    schedule) and runs ``phase(args, lo, hi)`` on each. ``spread`` 0: chunks of ``chunk`` items; ``spread`` s > 0
    (a guided schedule): each take is the items left over s, rounded up, and at least ``chunk``, so the chunks
    shrink toward the end and the threads finish within a small chunk of each other.
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
  %spread.field = getelementptr i64, ptr %task, i64 {field["spread"]}
  %spread = load i64, ptr %spread.field
  %guided = icmp sgt i64 %spread, 0
  %divisor = select i1 %guided, i64 %spread, i64 1
  %next.field = getelementptr i64, ptr %task, i64 {field["next"]}
  br label %next
next:
  %seen = load atomic i64, ptr %next.field monotonic, align 8
  br label %take
take:
  %offset = phi i64 [ %seen, %next ], [ %current, %take.again ]
  %lo = add i64 %start, %offset
  %more = icmp slt i64 %lo, %end
  br i1 %more, label %length, label %done
length:
  %left = sub i64 %end, %lo
  %left.up = add i64 %left, %divisor
  %left.up1 = sub i64 %left.up, 1
  %share = udiv i64 %left.up1, %divisor
  %share.guided = select i1 %guided, i64 %share, i64 0
  %longer = icmp sgt i64 %share.guided, %chunk
  %take.length = select i1 %longer, i64 %share.guided, i64 %chunk
  %offset.next = add i64 %offset, %take.length
  %swap = cmpxchg ptr %next.field, i64 %offset, i64 %offset.next monotonic monotonic
  %current = extractvalue {{ i64, i1 }} %swap, 0
  %taken = extractvalue {{ i64, i1 }} %swap, 1
  br i1 %taken, label %work, label %take.again
take.again:
  br label %take
work:
  %lo.next = add i64 %start, %offset.next
  %short = icmp slt i64 %lo.next, %end
  %hi = select i1 %short, i64 %lo.next, i64 %end
  call void %phase(ptr %args, i64 %lo, i64 %hi)
  br label %next
done:
  ret void
}}
"""
