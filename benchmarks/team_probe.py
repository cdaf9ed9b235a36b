"""Native probes of the OpenMP team for ``bench_team_stamps.py`` (session 40 a40).

- A stamped copy of the team entry (``codegen/llvm/team_entry.py``'s text with a stamp at each thread's arrival,
  around each chunk and at its exit) and a stamped ``GOMP_parallel`` wrapper: each stamp records ``rdtscp``'s time
  stamp and CPU, the OpenMP thread number, a kind and a value (a chunk's first or last row) into a ring of records.
- ``clock`` and ``fma``: phase-style loops of 20 dependent integer adds (one cycle each) and of 12 independent
  512-bit FMA chains (Zen 4: one 512-bit FMA a cycle), each iteration stamped: the core's clock, alone or with the
  other core running the same loop.
"""

from __future__ import annotations

import ctypes

import llvmlite.binding as llvm
import numpy as np

from neuroncc.codegen.llvm import jit
from neuroncc.codegen.llvm.team_entry import TEAM_ENTRY, team_entry_ir
from neuroncc.executors.cpu.threads import find_libgomp

#: the record ring: (time stamp, cpu | thread << 16, kind, value) per stamp
SLOTS = 1 << 20
#: stamp kinds: a team thread's arrival, a chunk's start and end, its exit; GOMP_parallel entered and returned;
#: the Python side's marks (a call's start and end); the probes' iterations (start, end)
ARRIVAL, CHUNK_START, CHUNK_END, EXIT, LAUNCH, RETURN, MARK, MARK_END, CLOCK, FMA = 0, 1, 2, 3, 8, 9, 10, 11, 20, 30
NEWLINE = "\\0A"  # (a newline inside an LLVM inline-asm string)


def tsc_hz() -> float:
    """The time stamp counter's rate: the kernel's ``tsc_known_freq`` clock (its "tsc:" line), else BogoMIPS / 2."""
    for line in open("/proc/cpuinfo"):
        if line.startswith("bogomips"):
            return float(line.split(":")[1]) / 2 * 1e6
    raise RuntimeError("no bogomips in /proc/cpuinfo")


def _stamp_ir(buffer: int, count: int, thread_number: int) -> str:
    return f"""
declare {{i64, i32}} @llvm.x86.rdtscp()
define void @stamp(i64 %kind, i64 %value) {{
  %r = call {{i64, i32}} @llvm.x86.rdtscp()
  %t = extractvalue {{i64, i32}} %r, 0
  %cpu32 = extractvalue {{i64, i32}} %r, 1
  %cpu = zext i32 %cpu32 to i64
  %number.fn = inttoptr i64 {thread_number} to ptr
  %number32 = call i32 %number.fn()
  %number = zext i32 %number32 to i64
  %number.high = shl i64 %number, 16
  %who = or i64 %cpu, %number.high
  %count = inttoptr i64 {count} to ptr
  %i = atomicrmw add ptr %count, i64 1 monotonic
  %slot = and i64 %i, {SLOTS - 1}
  %base = inttoptr i64 {buffer} to ptr
  %s0 = getelementptr [4 x i64], ptr %base, i64 %slot, i64 0
  store i64 %t, ptr %s0
  %s1 = getelementptr [4 x i64], ptr %base, i64 %slot, i64 1
  store i64 %who, ptr %s1
  %s2 = getelementptr [4 x i64], ptr %base, i64 %slot, i64 2
  store i64 %kind, ptr %s2
  %s3 = getelementptr [4 x i64], ptr %base, i64 %slot, i64 3
  store i64 %value, ptr %s3
  ret void
}}
"""


def _stamped_entry_ir(gomp_parallel: int) -> str:
    text = team_entry_ir().replace(f'@"{TEAM_ENTRY}"', '@"stamped_team"')
    text = text.replace("entry:\n", f"entry:\n  call void @stamp(i64 {ARRIVAL}, i64 0)\n", 1)
    text = text.replace("  call void %phase(ptr %args, i64 %lo, i64 %hi)\n",
                        f"  call void @stamp(i64 {CHUNK_START}, i64 %lo)\n"
                        "  call void %phase(ptr %args, i64 %lo, i64 %hi)\n"
                        f"  call void @stamp(i64 {CHUNK_END}, i64 %hi)\n")
    text = text.replace("done:\n  ret void", f"done:\n  call void @stamp(i64 {EXIT}, i64 0)\n  ret void")
    return text + f"""
define void @stamped_parallel(ptr %fn, ptr %data, i32 %n, i32 %flags) {{
  %threads = zext i32 %n to i64
  call void @stamp(i64 {LAUNCH}, i64 %threads)
  %gomp = inttoptr i64 {gomp_parallel} to ptr
  call void %gomp(ptr %fn, ptr %data, i32 %n, i32 %flags)
  call void @stamp(i64 {RETURN}, i64 %threads)
  ret void
}}
define void @mark(i64 %kind, i64 %value) {{
  call void @stamp(i64 %kind, i64 %value)
  ret void
}}
"""


def _probe_loop(name: str, kind: int, asm: str, clobbers: list[str]) -> str:
    constraints = ",".join(["r"] + [f"~{{{c}}}" for c in clobbers])
    return f"""
define void @{name}(ptr %args, i64 %start, i64 %end) {{
entry:
  %n = load i64, ptr %args
  br label %loop
loop:
  %k = phi i64 [%start, %entry], [%k1, %loop]
  call void @stamp(i64 {kind}, i64 %k)
  call void asm sideeffect "{asm}", "{constraints}"(i64 %n)
  call void @stamp(i64 {kind + 1}, i64 %k)
  %k1 = add i64 %k, 1
  %more = icmp slt i64 %k1, %end
  br i1 %more, label %loop, label %out
out:
  ret void
}}
"""


#: cycles per iteration of each probe's inner loop (20 dependent adds; 12 FMAs at one a cycle)
PROBE_CYCLES = {"clock": 20, "fma": 12}


def _probe_ir() -> str:
    adds = ("add $$1, %rax" + NEWLINE) * PROBE_CYCLES["clock"]
    clock = f"mov $0, %rcx{NEWLINE}1:{NEWLINE}{adds}dec %rcx{NEWLINE}jnz 1b"
    vectors = list(range(12)) + [20, 21, 22, 23]
    zeros = "".join(f"vpxord %zmm{k}, %zmm{k}, %zmm{k}{NEWLINE}" for k in vectors)
    fmas = "".join(f"vfmadd231ps %zmm{20 + k % 2}, %zmm{22 + k % 2}, %zmm{k}{NEWLINE}" for k in range(12))
    fma = f"{zeros}mov $0, %rcx{NEWLINE}1:{NEWLINE}{fmas}dec %rcx{NEWLINE}jnz 1b"
    return (_probe_loop("clock", CLOCK, clock, ["rax", "rcx", "cc"])
            + _probe_loop("fma", FMA, fma, ["rcx", "cc"] + [f"zmm{k}" for k in vectors]))


class TeamProbe:
    """The stamped team entry and launch, the Python side's mark, the clock probes, and their record ring."""

    def __init__(self, gomp_parallel: int, probes: bool = False):
        self.records = np.zeros((SLOTS, 4), np.int64)
        self.count = np.zeros(8, np.int64)
        gomp = ctypes.CDLL(find_libgomp())
        number = ctypes.cast(gomp.omp_get_thread_num, ctypes.c_void_p).value
        text = _stamp_ir(self.records.ctypes.data, self.count.ctypes.data, number) + \
            _stamped_entry_ir(gomp_parallel)
        if probes:
            llvm.initialize_native_asmparser()  # (inline asm)
            text += _probe_ir()
        self.module = jit.compile_ir([text])
        self.entry = self.module.address("stamped_team")
        self.parallel = self.module.address("stamped_parallel")
        self.mark = ctypes.CFUNCTYPE(None, ctypes.c_int64, ctypes.c_int64)(self.module.address("mark"))
        self.probes = {name: self.module.address(name) for name in PROBE_CYCLES} if probes else {}

    def reset(self) -> None:
        self.count[0] = 0

    def taken(self) -> np.ndarray:
        """The records stamped since :meth:`reset`, in the order taken."""
        return self.records[:min(int(self.count[0]), SLOTS)].copy()
