"""Runs of native steps executed by one native call: the launcher's per-step Python loop, in machine code.

A call of a cpu executable walks its steps in Python. For a small graph that walk is most of the time: each
native kernel step patches its per-call argument slots and makes one ctypes call per phase, and each BLAS
step builds its pointer list, checks torch's matmul precision and makes a 13-argument ctypes call (~6-8 us a
step in all, against well under a microsecond of arithmetic for a [8, 16] @ [16, 16] matmul).

Consecutive steps that need nothing from Python on their common path (native kernels without a non-BLAS
extern or a run-time check, whose phases run on the calling thread or on the OpenMP team; float32 BLAS matmuls,
bias copy included) are encoded into one program of 64-bit words, and a small interpreter compiled once per
process runs it:

    SET    dst, buffer, offset              *dst = addresses[buffer] + offset (a kernel's per-call slot)
    CALL   fn, args, n_outer                fn(args, 0, n_outer)               (a kernel phase)
    TEAM   gomp_parallel, entry, task, threads                                 (a kernel phase split on the team)
                                            task->next = 0; gomp_parallel(entry, task, threads, 0)
    GEMM   fn, ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc            (BLAS sgemm_, Fortran ABI)
    ROWS   source, target, row_bytes, rows, source_row_stride                  (addmm's bias into its result)

where A, B, C, source and target are references of three words: (0, buffer, offset) is
``addresses[buffer] + offset`` and (1, slot address, offset) is ``*slot + offset`` (a pointer a SET of the
same program wrote). Every other word is an address or a count fixed when the executable was built; the
objects behind those addresses (argument arrays, BLAS parameters) belong to the step runners, which the
sequence keeps alive. The only per-call Python work is copying the call's buffer addresses into an array.
A TEAM's task (``team_entry.TEAM_TASK_FIELDS``: the phase, its argument array, its range, chunk length and the
shared chunk counter, reset before each run) is made once, with the chunking the Python runner
(``threads.OpenMPTeam.run``) would use. Without TEAM every kernel split on the team left the sequence for a
Python step call: issue #18's classifier at 2 threads ran its forward's 13 steps as 11 calls and its backward's
25 as 21, and its AdamW step took 1.04-1.11x the time it takes with TEAM (2 calls each; docs/performance-history.md,
session 21 clsfr21).

The decisions stay with the runners: a BLAS step that would decline (a matmul precision other than "highest"
set after the build) is checked once per call for the whole sequence, which then runs its steps one by one
in Python, as without it.
"""

from __future__ import annotations

import ctypes
import functools
from typing import Any

from neuroncc.codegen.llvm.team_entry import TEAM_TASK_FIELDS
from neuroncc.executors.cpu import blas
from neuroncc.executors.cpu.helpers import SEQUENCE, helper_module
from neuroncc.executors.cpu.steps import BlasStep, NativeKernel
from neuroncc.executors.cpu.threads import team_entry

SET, CALL, GEMM, ROWS, TEAM = 0, 1, 2, 3, 4
BUFFER, SLOT = 0, 1  # the two kinds of reference
#: words of each instruction, opcode included
WIDTH = {SET: 4, CALL: 4, GEMM: 21, ROWS: 10, TEAM: 5}
#: the shortest run worth a sequence (one step is one ctypes call already)
MIN_STEPS = 2

_SEQUENCE_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p)


def interpreter_ir() -> str:
    """The interpreter's LLVM IR: ``neuroncc_run_sequence(ptr program, i64 words, ptr addresses)``."""
    lines: list[str] = []
    emit = lines.append
    counter = iter(range(1 << 30))

    def word(pc: str, index: int) -> str:
        name = f"%w{next(counter)}"
        at = f"%a{next(counter)}"
        emit(f"  {at} = add i64 {pc}, {index}")
        emit(f"  {name}.p = getelementptr i64, ptr %program, i64 {at}")
        emit(f"  {name} = load i64, ptr {name}.p")
        return name

    def pointer(value: str) -> str:
        name = f"%p{next(counter)}"
        emit(f"  {name} = inttoptr i64 {value} to ptr")
        return name

    def reference(pc: str, index: int) -> str:
        """A three-word reference at ``pc + index``, resolved to an address (branch-free)."""
        kind, x, offset = word(pc, index), word(pc, index + 1), word(pc, index + 2)
        n = next(counter)
        emit(f"  %buf{n}.p = getelementptr i64, ptr %addresses, i64 {x}")
        emit(f"  %is_slot{n} = icmp eq i64 {kind}, {SLOT}")
        emit(f"  %slot{n}.p = inttoptr i64 {x} to ptr")
        emit(f"  %src{n}.p = select i1 %is_slot{n}, ptr %slot{n}.p, ptr %buf{n}.p")
        emit(f"  %base{n} = load i64, ptr %src{n}.p")
        emit(f"  %ref{n} = add i64 %base{n}, {offset}")
        return f"%ref{n}"

    emit("declare void @llvm.memmove.p0.p0.i64(ptr, ptr, i64, i1)")
    emit("")
    emit("define void @neuroncc_run_sequence(ptr %program, i64 %words, ptr %addresses) {")
    emit("entry:")
    emit("  br label %loop")
    emit("loop:")
    emit("  %pc = phi i64 [0, %entry], [%pc.set, %set], [%pc.call, %call], [%pc.gemm, %gemm], [%pc.rows, %rows.done], "
         "[%pc.team, %team]")
    emit("  %more = icmp slt i64 %pc, %words")
    emit("  br i1 %more, label %dispatch, label %exit")
    emit("dispatch:")
    opcode = word("%pc", 0)
    emit(f"  switch i64 {opcode}, label %exit [ i64 {SET}, label %set  i64 {CALL}, label %call  "
         f"i64 {GEMM}, label %gemm  i64 {ROWS}, label %rows  i64 {TEAM}, label %team ]")

    emit("set:")
    dst, buffer, offset = word("%pc", 1), word("%pc", 2), word("%pc", 3)
    emit(f"  %set.bp = getelementptr i64, ptr %addresses, i64 {buffer}")
    emit("  %set.base = load i64, ptr %set.bp")
    emit(f"  %set.value = add i64 %set.base, {offset}")
    emit(f"  store i64 %set.value, ptr {pointer(dst)}")
    emit(f"  %pc.set = add i64 %pc, {WIDTH[SET]}")
    emit("  br label %loop")

    emit("call:")
    fn, args, n_outer = word("%pc", 1), word("%pc", 2), word("%pc", 3)
    emit(f"  call void {pointer(fn)}(ptr {pointer(args)}, i64 0, i64 {n_outer})")
    emit(f"  %pc.call = add i64 %pc, {WIDTH[CALL]}")
    emit("  br label %loop")

    emit("team:")
    parallel, entry, task, threads = word("%pc", 1), word("%pc", 2), word("%pc", 3), word("%pc", 4)
    emit(f"  %team.next = getelementptr i64, ptr {pointer(task)}, i64 {TEAM_TASK_FIELDS.index('next')}")
    emit("  store i64 0, ptr %team.next")
    emit(f"  %team.threads = trunc i64 {threads} to i32")
    emit(f"  call void {pointer(parallel)}(ptr {pointer(entry)}, ptr {pointer(task)}, i32 %team.threads, i32 0)")
    emit(f"  %pc.team = add i64 %pc, {WIDTH[TEAM]}")
    emit("  br label %loop")

    emit("gemm:")
    fn = word("%pc", 1)
    fixed = [pointer(word("%pc", i)) for i in range(2, 8)]  # ta, tb, m, n, k, alpha
    a, lda = pointer(reference("%pc", 8)), pointer(word("%pc", 11))
    b, ldb = pointer(reference("%pc", 12)), pointer(word("%pc", 15))
    beta = pointer(word("%pc", 16))
    c, ldc = pointer(reference("%pc", 17)), pointer(word("%pc", 20))
    operands = ", ".join(f"ptr {p}" for p in (*fixed, a, lda, b, ldb, beta, c, ldc))
    emit(f"  call void {pointer(fn)}({operands})")
    emit(f"  %pc.gemm = add i64 %pc, {WIDTH[GEMM]}")
    emit("  br label %loop")

    emit("rows:")
    source, target = pointer(reference("%pc", 1)), reference("%pc", 4)
    target_p = pointer(target)
    row_bytes, rows, stride = word("%pc", 7), word("%pc", 8), word("%pc", 9)
    emit(f"  %rows.whole = icmp ne i64 {stride}, 0")
    emit("  br i1 %rows.whole, label %rows.all, label %rows.first")
    emit("rows.all:")  # the bias is the whole [rows, N] matrix: one copy
    emit(f"  %rows.all.bytes = mul i64 {row_bytes}, {rows}")
    emit(f"  call void @llvm.memmove.p0.p0.i64(ptr {target_p}, ptr {source}, i64 %rows.all.bytes, i1 false)")
    emit("  br label %rows.done")
    emit("rows.first:")  # one row, then doubling copies of the rows already written (log2(rows) copies)
    emit(f"  call void @llvm.memmove.p0.p0.i64(ptr {target_p}, ptr {source}, i64 {row_bytes}, i1 false)")
    emit("  br label %rows.loop")
    emit("rows.loop:")
    emit("  %done = phi i64 [1, %rows.first], [%done.next, %rows.copy]")
    emit(f"  %rows.more = icmp slt i64 %done, {rows}")
    emit("  br i1 %rows.more, label %rows.copy, label %rows.done")
    emit("rows.copy:")
    emit(f"  %left = sub i64 {rows}, %done")
    emit("  %fewer = icmp slt i64 %left, %done")
    emit("  %step = select i1 %fewer, i64 %left, i64 %done")
    emit(f"  %at.bytes = mul i64 %done, {row_bytes}")
    emit(f"  %at = add i64 {target}, %at.bytes")
    emit("  %at.p = inttoptr i64 %at to ptr")
    emit(f"  %step.bytes = mul i64 %step, {row_bytes}")
    emit(f"  call void @llvm.memmove.p0.p0.i64(ptr %at.p, ptr {target_p}, i64 %step.bytes, i1 false)")
    emit("  %done.next = add i64 %done, %step")
    emit("  br label %rows.loop")
    emit("rows.done:")
    emit(f"  %pc.rows = add i64 %pc, {WIDTH[ROWS]}")
    emit("  br label %loop")

    emit("exit:")
    emit("  ret void")
    emit("}")
    return "\n".join(lines) + "\n"


@functools.cache
def interpreter() -> Any:
    """The compiled interpreter as a ctypes function, built on first use (one small LLVM module per process,
    compiled or taken from a loaded artifact: helpers.py). The cache keeps its JitModule alive with it."""
    module = helper_module(SEQUENCE, interpreter_ir)
    function = _SEQUENCE_FN(module.address("neuroncc_run_sequence"))
    function.module = module  # the code stays mapped while the function is reachable
    return function


def kernel_words(kernel: Any, tasks: list[Any]) -> list[int] | None:
    """The program of a :class:`~neuroncc.executors.cpu.steps.NativeKernel` step, or None when its common path
    needs Python (row blocks, a run-time check, a non-BLAS or batched extern, phases on the Python thread pool).
    The TEAM tasks it makes are appended to ``tasks`` (the sequence keeps them)."""
    if kernel.row_block or kernel.step.may_fail:
        return None
    gemm = kernel.blas
    if kernel.step.extern is not None and (gemm is None or gemm.native is None):
        return None
    phases = phase_words(kernel, tasks)
    if phases is None:
        return None
    words: list[int] = []
    for slot, buffer, byte_offset in kernel.dynamic:
        words += [SET, kernel.args_address + 8 * slot, buffer, byte_offset]
    if gemm is not None:
        words += gemm_words(gemm, [(SLOT, kernel.args_address + 8 * slot, offset)
                                   for slot, offset in kernel.blas_places])
    return words + phases


def phase_words(kernel: Any, tasks: list[Any]) -> list[int] | None:
    """A kernel's phases as CALLs (on the calling thread: serial, too small to split, or one thread) and TEAMs
    (split on the OpenMP team as ``OpenMPTeam.run`` splits them), or None when one would split on the Python
    thread pool. New TEAM tasks go to ``tasks``."""
    team = kernel.exe.team
    runner = team or kernel.exe.pool
    words: list[int] = []
    for _, address, n_outer, work, serial in kernel.phases:
        if n_outer <= 0:
            continue
        if serial or runner.runs_inline(n_outer, work):
            words += [CALL, address, kernel.args_address, n_outer]
        elif team is None:
            return None
        else:
            chunk, threads, spread = team.split(n_outer, work, kernel.exe.team_guided_chunks)
            task = (ctypes.c_int64 * len(TEAM_TASK_FIELDS))(address, kernel.args_address, 0, n_outer, chunk, 0, spread)
            tasks.append(task)
            words += [TEAM, team.gomp_parallel_address, team_entry(), ctypes.addressof(task), threads]
    return words


def blas_step_words(step: Any) -> list[int] | None:
    """The program of a :class:`~neuroncc.executors.cpu.steps.BlasStep`, or None (a batched matmul)."""
    if step.blas.native is None:
        return None
    return gemm_words(step.blas, [(BUFFER, buffer, offset) for buffer, offset in step.places])


def gemm_words(gemm: Any, pointers: list[tuple[int, int, int]]) -> list[int]:
    """A prepared BLAS matmul (``blas.BlasMatmul`` with a ``native`` form) on ``pointers``: the references of
    its operands in op order, then its result."""
    native = gemm.native
    words: list[int] = []
    if native.bias is not None:
        row_bytes, rows, source_row_stride = native.bias
        words += [ROWS, *pointers[0], *pointers[-1], row_bytes, rows, source_row_stride]
    ta, tb, m, n, k, alpha, lda, ldb, beta, ldc = native.parameters
    words += [GEMM, native.function, ta, tb, m, n, k, alpha, *pointers[native.a], lda, *pointers[native.b], ldb,
              beta, *pointers[-1], ldc]
    return words


class NativeSequence:
    """Consecutive native steps run by one call of the interpreter; a launcher step call like any other."""

    def __init__(self, runners: list[Any], words: list[int], step_calls: list[Any], buffers: int,
                 precision: Any, tasks: list[Any] = ()) -> None:
        self.runners = runners  # they own the memory the program's addresses point into
        self.tasks = list(tasks)  # the TEAM instructions' tasks, which the program points into
        self.step_calls = step_calls  # the steps' own calls: the path when a BLAS step would decline
        self.program = (ctypes.c_int64 * len(words))(*words)
        self.words = len(words)
        self.addresses = (ctypes.c_int64 * max(buffers, 1))()
        self.precision = precision  # torch's float32 matmul precision getter, when a GEMM is in the program
        self.run = interpreter()

    def __call__(self, flats: list[Any], addresses: list[int]) -> None:
        if self.precision is not None and self.precision() != "highest":
            for call in self.step_calls:
                call(flats, addresses)
            return
        self.addresses[:len(addresses)] = addresses
        self.run(self.program, self.words, self.addresses)


def sequence_calls(runners: list[Any], calls: list[Any], buffers: int) -> list[Any]:
    """``calls`` (one per step of ``runners``) with each run of at least :data:`MIN_STEPS` steps that a
    program can express replaced by one :class:`NativeSequence`. ``buffers``: the plan's buffer count."""
    result: list[Any] = []
    run: list[tuple[Any, Any, list[int]]] = []
    tasks: list[Any] = []

    def close() -> None:
        if len(run) >= MIN_STEPS:
            has_gemm = any(getattr(runner, "blas", None) is not None for runner, _, _ in run)
            result.append(NativeSequence([r for r, _, _ in run], [w for _, _, words in run for w in words],
                                         [c for _, c, _ in run], buffers,
                                         blas.library().precision if has_gemm else None, tasks))
        else:
            result.extend(c for _, c, _ in run)
        run.clear()
        tasks.clear()

    for runner, call in zip(runners, calls, strict=True):
        words = None
        if isinstance(runner, NativeKernel):
            words = kernel_words(runner, tasks)
        elif isinstance(runner, BlasStep):
            words = blas_step_words(runner)
        if words is None:
            close()
            result.append(call)
        else:
            run.append((runner, call, words))
    close()
    return result


__all__ = ["NativeSequence", "blas_step_words", "gemm_words", "kernel_words", "sequence_calls"]
