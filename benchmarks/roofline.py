"""Every kernel row as a fraction of this machine's own roofline, next to eager PyTorch and Inductor.

The machine's limits are measured at run time with microkernels compiled for this CPU (``microkernels.py``):

- FMA peak: independent vector FMA chains in registers (FLOP/s, 1 and 2 threads);
- each polynomial function neuroncc's math library emits (exp, erf, tanh, sigmoid, log, gelu, ...): elements
  per second on L1-resident data, and the vector instructions per element of its loop;
- both compute limits are the fastest of several back-to-back runs: a limit is what the machine reaches, and
  on a shared host another process taking a core only ever slows a run; since session 28 the limits a row's
  compute time rests on are measured again just before and just after its interleaved calls, since session 30
  once more after every row has run, and each is the fastest of all of the run's measurements
  (``Machine.remeasure``: a disturbance outside the benchmark lock can last longer than one back-to-back
  measurement);
- memory: for each row, a stream kernel that reads and writes exactly the row's unavoidable bytes (inputs
  once, outputs once, at the user's dtype), timed *interleaved* with the implementations, so that it sees the
  same cache state and the same machine noise; it reads the row's own largest input when that holds all the
  reads (so an input that stays in L3 between the implementations' calls does for it too), with plain and
  with non-temporal stores (the faster counts), into the same kind of buffer as the calls it is the roof of
  (below; a row that updates its inputs in place, the AdamW step, since session 30 also streams in place, over the
  lines it reads: the faster counts). One sample of each per round, as of every implementation, over
  45 rounds by default (session 19: 15 before, a roof that moved by 5-20% between measurements of the same row on
  this noisy VM; three samples of each stream kernel per round were tried and dropped: a stream then more often
  follows a stream, which leaves its input in the L3, and the roof came out 4-7% faster: another meaning).

The memory roof's buffer (session 26). A row's "memory roof" is the stream into a fresh torch tensor each call,
as eager's, Inductor's and neuroncc's calls each make their output (the same allocator, size and lifetime: it
lands in the chunks their outputs land in); the "kernel alone" column's roof is the stream into that column's own
held output (the very pages the kernel alone writes). Before, the stream wrote a numpy buffer of its own: one
measurement found it 6-7% faster to copy into than the kernels' buffers (session 26 stream26), three more
(``--roof-buffers``, 61-101 rounds, rows a, b, c, c', RMSNorm, bf16 b and c at 1 and 2 threads) 0.89-1.05x the
held output's time and 0.87-1.07x the fresh tensor's: a buffer's physical pages (4 KiB: huge pages under 3 of
85 buffers, though numpy asks for them) move a copy by up to ~10% either way, a lottery in every row's fraction (the
kernel alone's of (c') and RMSNorm at 1 thread 0.84 / 0.82 of the numpy roof, 0.91 / 0.89 of its own buffer's).
Since session 32 a row's call may write its output into the memory of one its caller dropped
(``frontend/output_reuse.py``), as the kernel alone writes its held output: the call's memory roof is the faster of
the two streams (into a fresh tensor, into the held output; before, the fresh tensor's alone, which the call then
beat: softmax at 2 threads 102% of it). A fresh tensor costs the copy and the kernel alike (2 threads: the copy
1.02-1.13x its time into the held output, the kernel alone 1.00-1.09x), so each column's roof is measured where
its call writes. The non-temporal
stream stays the roof: the fastest copy measured at every row's size and both thread counts, ahead of plain
stores, torch's ``copy_`` (1.1-1.8x its time; 0.99x once, bf16 softmax's 8 MB at 2 threads) and numpy's
``copyto`` (1.65-1.85x at 1 thread, 1.7-3.4x at 2: it runs on one). ``--roof-buffers`` prints, per row, those
copies, the stream into each kind of buffer and the kernel alone into each.

neuroncc's call: every row is the row's Python function through ``torch.compile(backend="neuron")``, the way a
user calls it and the way Inductor's row runs (since session 28 with torch.compile's default ``dynamic``, as a user
calls it: ``dynamic=False`` cost both backends' calls 20-45 us of TorchDynamo's config patch each;
``bench_call_path.py --row-gap``) (session 19: rows (a)-(c') ran a hand-built graph through the
executable's numpy path and the others torch.compile, so the rows' fractions held different call costs;
``--numpy-path`` restores that for comparison). The "kernel alone" column is the same compiled graph's kernels
on the row's inputs into an output held between calls (the direct call's address call: no TorchDynamo, no
output made), interleaved with the rest: the row's time minus it is the call's cost (``-`` for a row of several
graphs or with state: cross-entropy's forward and backward, AdamW). A graph whose inputs TorchDynamo met in another
order than the function's (row (c'), ``torch.addcmul(b, x, w)``: b, x, w) gets the row's inputs in its own order,
the one whose result is eager's (``kernel_cases.in_graph_order``; since session 26: before, (c') had no kernel alone).
The "served" column (session 44) is the row as a user serves it without TorchDynamo: the row's function as a module's
forward, ``torch.export.export`` on the row's inputs, ``neuroncc.compile_program`` of it (the row's threads as an
option, as the torch.compile call's; ``kernel_cases.served_program``), called on the same tensors, checked against
eager like the others and interleaved in the same rounds; its fraction is of the call's roof (a fresh output each
call, or the memory of one dropped). ``-`` for the training steps (cross-entropy, AdamW), which have no inference
program to export; ``--no-served`` leaves the column out.

A row's roofline time (since session 30) is the sum over its phases (a graph that must finish before the next
starts: cross-entropy's forward and backward; every other row is one phase) of max(the phase's memory time, its
compute time). The compute time is the phase's **necessary element work measured** (``roofline_work.py``): the
operations any correct implementation does per element (each op of the row's definition once, a reduction's
accumulate as one op, its polynomial functions as neuroncc's math library evaluates them, its bf16 conversions at
the fewest integer instructions known), run as one loop over L1-resident data (``microkernels.element_module``,
interleave counts 1, 2 and 4: the fastest), and the faster of two forms: every operation in that one loop
("fused"), or the loop without the polynomial functions plus each function at its own loop's rate ("split": the
functions in loops of their own, as row (a)'s gelu is). Where the CPU reads bf16 unary math from tables
(``CpuTarget.looks_up_bf16_unary_math``, session 25) each evaluation is a table read at
``microkernels.lookup_throughput``'s rate, added (its rounding is in the table). Each phase's memory time is its
own bytes' stream (a row of several phases streams them one after the other in one call, each timed apart).

Before session 30 the compute time was the sum over the polynomial functions of evaluations / throughput plus the
other operations as flops and the conversions' instructions as flops at the FMA peak (2 FMAs of 2 flops per lane a
cycle: a ``vsubps`` a quarter of a cycle per vector), and memory and compute combined as max over the whole row.
That undercounted: on Zen 3 an add-pipe operation beside the exponential costs ~3x the quarter cycle (session 29
xent29: one ``vsubps`` per 8 elements 12% of ``exp_nonpositive``'s time), and cross-entropy's compute-bound forward
and memory-bound backward cannot overlap. The table prints both (``compute roof before s30 ms``, ``of roofline
before s30``: the old count on the same run's measurements). The fraction is roofline time / neuroncc's time (100%
= at the machine's limit). 2 threads: wall-clock medians; 1 thread: the calling thread's CPU time.

bf16 conversions (the count before session 30; since, ``roofline_work.CONVERSIONS`` as instructions in the
element loop): a CPU without bf16 conversion instructions (AVX2) widens and rounds with integer vector
instructions, work the bf16 dtype asks for as surely as its flops (``kernel_cases.Work``: each input element
widened once, each output rounded once, and each intermediate result of a bf16 op rounded, as eager rounds
after every op). They count at the fewest instructions known (:data:`CONVERSION_INSTRUCTIONS`), each
instruction per vector of elements as one flop per element: a vector instruction takes one of the core's 4
vector pipes for a cycle, where the FMA peak counts 2 FMAs of 2 flops per lane (Zen 3 and Zen 4; Intel's cores
have 3 vector ALU ports, so there the count is less than their time; shifts run on 2 of Zen 3's 4 pipes, not
counted either). Without them bf16 LayerNorm [8192, 1024]'s roof was its memory time alone, below what the
fewest known instructions reach: 8 flops and 5.5 conversion instructions per element, on Zen 3 at 1 thread 0.7
ms of flops and 0.5 ms of conversions, against 0.8-1.5 ms of memory.

Run: ``python benchmarks/roofline.py [--rows a,b,c] [--threads 2,1] [--repeats 45] [--numpy-path] [--no-served]
[--roof-spread N] [--roof-buffers]``. ``--roof-spread N``: no table; for each row N trials of its interleaved
measurement with 15 rounds (the roof as before session 19) alternating with N with ``--repeats`` rounds, and the
spread of each roof estimate over its trials.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (ensure_environment, interleaved_samples, record_compiled_graphs,  # noqa: E402
                    table)

ensure_environment(threads=2)

import numpy as np  # noqa: E402
import torch  # noqa: E402

import microkernels as mk  # noqa: E402
import roofline_work  # noqa: E402
from kernel_cases import Case, cases, in_graph_order, settled_calls  # noqa: E402
from neuroncc.codegen.llvm import jit  # noqa: E402
from neuroncc.codegen.llvm.mathlib import POLYNOMIAL  # noqa: E402

#: Vector instructions per vector of elements that bf16 conversions take without bf16 conversion instructions
#: (AVX2), the fewest known: widening one (a pair of elements is one 32-bit word: a shift gives the even one,
#: clearing the low half the odd one); rounding to nearest even and packing a result for the output 4.5 (9 per
#: pair of vectors in 16-bit lanes: the high and low halves apart, 2 shifts and 2 blends; the parity or'ed into
#: the low half, and, or; the carry out of the low half, vpavgw with 0x7FFE and a shift; its add); rounding a
#: result kept as float32 5 (a shift and an and for the parity, two adds, the clearing of the low half). NaNs are
#: left out (they cost 3 more per rounding where an op's NaN payload is not known to be quiet).
CONVERSION_INSTRUCTIONS = {"widened": 1.0, "rounded": 4.5, "rounded_kept": 5.0}
#: The same with AVX-512 (F and BW: mask registers, word compares and two-table word permutes), the fewest known:
#: widening 1 (as above); rounding and packing 2.5 (5 per pair of vectors: the high and the low halves apart,
#: two vpermt2w; the parity or'ed into the low half, one vpternlogd; the carry, low half > 0x8000, one vpcmpuw
#: into a mask; the high half + 1 under it, one masked vpaddw); rounding a result kept as float32 4 (the parity
#: shifted down, or'ed into the low half with its and in one vpternlogd, the add of 0x7FFF, the clearing of the
#: low half: the code's since session 36, ``CpuTarget.rounds_bf16_parity_by_or``). AVX-512 BF16's
#: vcvtne2ps2bf16 (half an instruction per vector) does not count: it treats subnormal inputs as zero where torch
#: rounds them, and making it exact (a subnormal test, a masked or before it and a masked subtract after it)
#: takes more instructions than the integer sequences (``scalars.round_to``; session 15).
CONVERSION_INSTRUCTIONS_AVX512 = {"widened": 1.0, "rounded": 2.5, "rounded_kept": 4.0}

clock_for = roofline_work.clock_for


class Machine(roofline_work.ElementRoof):
    """The limits measured on this machine (see the module docstring)."""

    def __init__(self, threads: list[int]):
        self.target = jit.host_target()
        self.peak = {t: mk.fma_peak(self.target, t, clock_for(t)) for t in threads}
        self.math = {name: {t: mk.math_throughput(name, self.target, t, clock_for(t)) for t in threads}
                     for name in POLYNOMIAL}
        self.instructions = {name: mk.loop_instructions(name, self.target) for name in POLYNOMIAL}
        # bf16 unary math read from tables (``CpuTarget.looks_up_bf16_unary_math``): a table read per evaluation
        self.lookup = {t: mk.lookup_throughput(self.target, t, clock_for(t)) for t in threads} \
            if self.target.looks_up_bf16_unary_math else {}
        plain, streaming = mk.compile_kernel(mk.stream_module(False), "stream"), \
            mk.compile_kernel(mk.stream_module(True), "stream")
        self.stream_kernels = (plain, streaming)
        #: (row key, phase, form, bf16 conversions) -> (compiled kernels at each interleave count, functions used)
        self.element_kernels: dict[tuple, tuple[list, list[str]]] = {}
        #: the same key -> {threads: the fastest elements per second measured, over the interleave counts}
        self.element_rates: dict[tuple, dict[int, float]] = {}

    def remeasure(self, work, threads: int) -> str:
        """The limits ``work``'s compute time rests on, at ``threads``, measured again, each kept at the faster of
        this and every earlier measurement of the run (the limit is what the machine reaches: a process outside
        the benchmark lock that takes a core for a second or two slows every sample of the startup measurement;
        session 28 rowgap28 saw a 14:26 run whose 2-thread gelu, erf and tanh read 1.52-1.56x their 1-thread rates
        against 1.91-1.97x in undisturbed runs, which put row (a)'s 2-thread compute roof at 2.35 ms, its kernel
        alone at 116% of it). Returns what rose, for the log."""
        rose = []
        clock = clock_for(threads)
        peak = mk.fma_peak(self.target, threads, clock)
        if peak > self.peak[threads] * 1.02:
            rose.append(f"FMA peak {self.peak[threads] / 1e9:.1f} -> {peak / 1e9:.1f} GFLOP/s")
        self.peak[threads] = max(self.peak[threads], peak)
        if self._looks_up(work):
            rate = mk.lookup_throughput(self.target, threads, clock)
            if rate > self.lookup[threads] * 1.02:
                rose.append(f"bf16 table read {self.lookup[threads] / 1e9:.2f} -> {rate / 1e9:.2f} Gelem/s")
            self.lookup[threads] = max(self.lookup[threads], rate)
            return ", ".join(rose)
        for name in work.math:
            rate = mk.math_throughput(name, self.target, threads, clock)
            if rate > self.math[name][threads] * 1.02:
                rose.append(f"{name} {self.math[name][threads] / 1e9:.2f} -> {rate / 1e9:.2f} Gelem/s")
            self.math[name][threads] = max(self.math[name][threads], rate)
        return ", ".join(rose)

    def compute_seconds_before(self, work, threads: int) -> float:
        """The compute roof before session 30: each polynomial function at its own loop's rate, plus the row's other
        operations as flops and its bf16 conversions' instructions as flops, at the FMA peak (see the module
        docstring)."""
        seconds = (work.flops + self.conversion_flops(work)) / self.peak[threads]
        for name, count in work.math.items():
            seconds += count / (self.lookup[threads] if self._looks_up(work) else self.math[name][threads])
        return seconds

    def _looks_up(self, work) -> bool:
        return work.bf16_math and bool(self.lookup)

    def conversion_flops(self, work) -> float:
        """``work``'s bf16 conversions as flops at the FMA peak's rate (see the module docstring)."""
        counts = CONVERSION_INSTRUCTIONS_AVX512 if self.target.has("avx512bw") else CONVERSION_INSTRUCTIONS
        looked_up = sum(work.math.values()) if self._looks_up(work) else 0  # (their roundings: in the tables)
        return sum((getattr(work, kind) - (looked_up if kind == "rounded_kept" else 0)) * instructions
                   for kind, instructions in counts.items())

    def describe(self) -> str:
        lines = [f"CPU: {cpu_model()} ({self.target.name} to LLVM); vector width used: {self.target.vector_bits} "
                 f"bits; FMA: {'yes' if self.target.has('fma') else 'no'}; AVX-512: "
                 f"{'yes' if self.target.has('avx512f') else 'no'}; {cache_sizes()}"]
        lines.append("FMA peak: " + ", ".join(f"{t} thread{'s' if t > 1 else ''} {p / 1e9:.1f} GFLOP/s"
                                              for t, p in self.peak.items()))
        rows = []
        one = min(self.peak)
        for name, by_threads in self.math.items():
            count, elements = self.instructions[name]
            slots = self.peak[one] / 2 / by_threads[one]
            rows.append([name] + [f"{by_threads[t] / 1e9:.2f}" for t in self.peak] +
                        [f"{1e9 / by_threads[one]:.3f}", f"{count / elements:.1f}", f"{slots:.1f}"])
        header = ["function"] + [f"Gelem/s {t}T" for t in self.peak] + \
            [f"ns/elem {one}T", "vector instr/elem", f"time in FMAs/elem ({one}T)"]
        lines.append(table(rows, header))
        if self.lookup:
            lines.append("bf16 table read (CpuTarget.looks_up_bf16_unary_math): " + ", ".join(
                f"{t} thread{'s' if t > 1 else ''} {rate / 1e9:.2f} Gelem/s" for t, rate in self.lookup.items()))
        return "\n".join(lines)


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


def cache_sizes() -> str:
    sizes = {}
    for index in sorted(Path("/sys/devices/system/cpu/cpu0/cache").glob("index*")):
        try:
            level = (index / "level").read_text().strip()
            kind = (index / "type").read_text().strip()
            size = (index / "size").read_text().strip()
        except OSError:
            continue
        if kind != "Instruction":
            sizes[f"L{level}"] = size
    return ", ".join(f"{k} {v}" for k, v in sizes.items()) + " (per core for L1/L2)"


MADE = record_compiled_graphs()  # each CompiledGraph the neuron backend makes (a row's kernel alone is its graph's)


def run_rows(machine: Machine, selected: list[Case], threads: int, repeats: int,
             numpy_path: bool, served: bool = True) -> list[tuple]:
    """Each row's interleaved calls at ``threads``: (case, threads, path, medians, memory per phase, the kernel
    alone's memory per phase or None, the whole row's stream), for :func:`table_row` once every row has run."""
    torch.set_num_threads(threads)
    rng = np.random.default_rng(0)
    measured = []
    for case in selected:
        inputs = case.make(rng)
        calls, memory_calls, path = row_calls(machine, case, inputs, threads, numpy_path, served=served)
        rose = [machine.remeasure(case.work, threads)]  # the compute limits around the row too (``remeasure``)
        machine.measure_elements(case, threads)
        samples = interleaved_samples({**calls, **memory_calls}, repeats=repeats, clock=clock_for(threads))
        rose.append(machine.remeasure(case.work, threads))
        machine.measure_elements(case, threads)
        if any(rose):
            print(f"  {case.title}, {threads} thread(s): limits measured faster around the row: "
                  + "; ".join(r for r in rose if r), flush=True)
        times = {name: statistics.median(values) for name, values in samples.items()}
        memories = phase_memory(samples, memory_calls, "", repeats)
        held = phase_memory(samples, memory_calls, " held", repeats) \
            if "memory held (streaming stores)" in samples else None
        whole = memory_roof(samples, memory_calls, " whole") if len(memories) > 1 else sum(memories)
        measured.append((case, threads, path, times, memories, held, whole))
        print(f"  {case.title}, {threads} thread(s): neuroncc {times['neuroncc'] * 1e3:.2f} ms, " + "".join(
                  f"{name[len('neuroncc '):]} {times[name] * 1e3:.2f} ms, " for name in ("neuroncc kernel alone",
                  "neuroncc served") if name in times) + "memory "
              f"{' + '.join(f'{m * 1e3:.2f}' for m in memories)} ms (" + ", ".join(
                  f"{name[len('memory'):].strip()} {times[name] * 1e3:.2f}" for name in memory_calls) + ")", flush=True)
    return measured


def table_row(machine: Machine, case: Case, threads: int, path: str, times: dict, memories: list[float],
              held: list[float] | None, whole: float) -> list[str]:
    """The table's row of one measured row (:func:`run_rows`), with the compute limits as measured by then."""
    computes = [machine.phase_compute(case, i, threads) for i in range(len(memories))]
    without = [machine.phase_compute(case, i, threads, conversions=False)[0] for i in range(len(memories))]
    compute = sum(seconds for seconds, _ in computes)
    conversions = compute - sum(without)
    if held is not None:  # the call may write memory it kept (output_reuse.py, session 32): the faster stream
        memories = [min(fresh, kept) for fresh, kept in zip(memories, held)]
    memory = sum(memories)
    roof = sum(max(m, c) for m, (c, _) in zip(memories, computes))  # phases add (``roofline_work``)
    before = machine.compute_seconds_before(case.work, threads)
    roof_before = max(whole, before)
    ours = times["neuroncc"]
    kernel = times.get("neuroncc kernel alone")
    served = times.get("neuroncc served")
    kernel_roof = None if held is None else sum(max(m, c) for m, (c, _) in zip(held, computes))
    kernel_roof_before = None if held is None else max(sum(held), before)
    bound = "+".join(("memory" if m >= c else f"compute ({form})") for m, (c, form) in zip(memories, computes))
    row = [case.title, str(threads), path, f"{times['eager'] * 1e3:.2f}", f"{times['inductor'] * 1e3:.2f}",
           f"{ours * 1e3:.2f}", "-" if kernel is None else f"{kernel * 1e3:.2f}",
           "-" if served is None else f"{served * 1e3:.2f}",
           f"{times['eager'] / ours:.2f}x", f"{times['inductor'] / ours:.2f}x",
           f"{memory * 1e3:.2f}", "-" if held is None else f"{sum(held) * 1e3:.2f}",
           f"{compute * 1e3:.2f}", f"{conversions * 1e3:.2f}", f"{before * 1e3:.2f}", bound,
           f"{(case.work.reads + case.work.writes) / memory / 1e9:.1f}", f"{roof / ours:.0%}",
           "-" if kernel is None else f"{kernel_roof / kernel:.0%}", "-" if served is None else f"{roof / served:.0%}",
           f"{roof_before / ours:.0%}",
           "-" if kernel is None else f"{kernel_roof_before / kernel:.0%}"]
    print(" | ".join(row), flush=True)
    print("  " + machine.describe_work(case, threads) + (
        f"; memory per phase {' + '.join(f'{m * 1e3:.2f}' for m in memories)} ms, the row's bytes in one stream "
        f"{whole * 1e3:.2f} ms (the roof before s30)" if len(memories) > 1 else ""), flush=True)
    return row


def phase_memory(samples: dict[str, list[float]], memory_calls: dict, where: str, repeats: int) -> list[float]:
    """Each phase's memory time: a row of one phase, :func:`memory_roof`; a row of several, the faster store kind's
    median of each phase's stream within the calls that stream the phases one after the other (``Phases``)."""
    names = [name for name in memory_calls if name.startswith(f"memory{where} (")]
    parts = [getattr(memory_calls[name], "parts", None) for name in names]
    if parts[0] is None:
        return [memory_roof(samples, memory_calls, where)]
    return [min(statistics.median(kind[i][-repeats:]) for kind in parts) for i in range(len(parts[0]))]


def row_calls(machine: Machine, case: Case, inputs: list[torch.Tensor], threads: int,
              numpy_path: bool, buffers: bool = False, served: bool = False) -> tuple[dict, dict, str]:
    """The row's calls (eager, Inductor, neuroncc, and neuroncc's kernel alone where the row is one graph), its
    stream kernels' calls, and how neuroncc is called. Settled first: the optimized builds taken, so that the
    kernel alone runs the code the row's call runs. A row of several phases (``roofline_work``) streams each
    phase's bytes, one phase after the other, in one call per store kind (each phase's time kept apart)."""
    first = len(MADE)
    calls = settled_calls(case, inputs, threads, graphs=numpy_path, served=served)
    program = getattr(calls.get("neuroncc served"), "program", None)  # (its graph is not the torch.compile call's)
    graphs = [graph for graph in MADE[first:] if program is None or graph is not program._compiled]
    path = "executable (numpy path)" if numpy_path and case.graph is not None else "torch.compile"
    alone = kernel_alone(graphs, inputs, case) if path == "torch.compile" and case.setup is None else None
    if alone is not None:
        calls["neuroncc kernel alone"] = alone[0]
    largest = max(inputs, key=lambda t: t.numel() * t.element_size())
    source = (largest.data_ptr(), largest.numel() * largest.element_size())
    stream = mk.Stream(*machine.stream_kernels, case.work.reads, case.work.writes, source)
    row_calls.last_held, row_calls.last_stream = (alone[1] if alone else None), stream  # (--roof-buffers)
    memory_calls = {}
    phases = roofline_work.phases(case.key)
    if len(phases) > 1:
        streams = [mk.Stream(*machine.stream_kernels, phase.reads, phase.writes, source) for phase in phases]
        for stores in ("plain", "streaming"):
            memory_calls[f"memory ({stores} stores)"] = Phases(streams, stores, threads)
            # (the whole row's bytes in one stream: the memory roof before session 30)
            memory_calls[f"memory whole ({stores} stores)"] = stream.runner(stores, threads,
                                                                           destinations(stream, None, False)[""])
        return calls, memory_calls, path
    for where, destination in destinations(stream, alone, buffers).items():
        for stores in ("plain", "streaming"):
            memory_calls[f"memory{where} ({stores} stores)"] = stream.runner(stores, threads, destination)
    if phases[0].in_place:  # (session 30: an update in place writes back lines it has just read, no fresh pages)
        for stores in ("plain", "streaming"):
            memory_calls[f"memory (in place, {stores} stores)"] = stream.runner(
                stores, threads, lambda: (stream.args[0], None))
    return calls, memory_calls, path


class Phases:
    """A call streaming each phase's bytes in turn (each into a fresh tensor, as the row's calls write), each phase's
    time appended to ``parts[phase]`` (the warm-up calls' too: the last ``repeats`` are the rounds')."""

    def __init__(self, streams: list[mk.Stream], stores: str, threads: int):
        self.runners = [stream.runner(stores, threads, destinations(stream, None, False)[""]) for stream in streams]
        self.parts: list[list[float]] = [[] for _ in streams]
        self.clock = clock_for(threads)

    def __call__(self) -> list:
        kept = []
        for runner, times in zip(self.runners, self.parts):
            begin = self.clock()
            kept.append(runner())
            times.append(self.clock() - begin)
        return kept


def huge_page_kb(address: int) -> int | None:
    """AnonHugePages (kB) of the mapping holding ``address`` (``/proc/self/smaps``), None if not found."""
    inside = False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        first = line.split()[0]
        if "-" in first and ":" not in first:
            lo, hi = (int(x, 16) for x in first.split("-"))
            inside = lo <= address < hi
        elif inside and first == "AnonHugePages:":
            return int(line.split()[1])
    return None


def destinations(stream: mk.Stream, alone: tuple | None, buffers: bool) -> dict[str, object]:
    """Where the stream kernels write: name suffix -> ``Stream.runner``'s destination."""
    size = stream.write_bytes

    def fresh() -> tuple[int, torch.Tensor]:  # a new torch tensor each call, as each implementation's output
        out = torch.empty(size, dtype=torch.uint8)
        return out.data_ptr(), out

    found = {"": fresh}
    if buffers:
        found[" own numpy"] = None  # (the stream's own buffer: numpy's, the roof before session 26)
    if alone is not None and alone[1] is not None and alone[1].numel() * alone[1].element_size() >= size:
        held = alone[1]  # the kernel alone's output: the same pages
        found[" held"] = lambda: (held.data_ptr(), held)
    return found


def kernel_alone(graphs: list, inputs: list[torch.Tensor], case: Case):
    """``(run, output)``: ``run()`` is the row's one compiled graph's kernels on ``inputs`` into outputs held
    between calls (its direct call's address call) and ``output`` the tensor it writes, or None (several graphs,
    no direct call, or no result that is eager's). The row's inputs go in the graph's own order
    (``kernel_cases.in_graph_order``: row (c')'s graph takes b, x, w)."""
    if len(graphs) != 1 or graphs[0].direct is None or graphs[0].graph.mutations:
        return None
    direct = graphs[0].direct
    expected = [t for t in (case.eager(*inputs),) if isinstance(t, torch.Tensor)]
    if len(expected) != 1 or not direct.inputs:
        return None

    def run(order: list[torch.Tensor]) -> torch.Tensor | None:
        held = direct(order)  # None unless each parameter's tensor has the dtype, shape and strides it takes
        return held[0] if held is not None and len(held) == 1 else None

    order = in_graph_order(inputs, max(position for position, *_ in direct.inputs) + 1, run, expected[0],
                           case.tolerance)
    if order is None:
        return None
    held = direct(order)
    addresses = [order[position].data_ptr() for position, *_ in direct.inputs]
    pointers = [0 if tensor is None else tensor.data_ptr() for tensor in held]
    # (held: the outputs live as long as the call)
    run_held = lambda held=held: direct.run(addresses, pointers)  # noqa: E731

    def into(destination):  # (--roof-buffers) the kernel into destination()'s memory, kept alive for the call
        def call():
            address, keep = destination()
            direct.run(addresses, [address])
            return keep
        return call

    run_held.into = into
    return run_held, (held[0] if len(held) == 1 else None)


def memory_roof(samples: dict[str, list[float]], memory_calls: dict, where: str = "") -> float:
    """The faster store kind's median of the stream kernels into the buffer ``where`` names (``destinations``:
    "" a fresh tensor each call, " held" the kernel alone's output)."""
    return min(statistics.median(samples[name]) for name in memory_calls if name.startswith(f"memory{where} ("))


#: rounds per row before session 19 (``--roof-spread``'s "before")
OLD_REPEATS = 15


def roof_spread(machine: Machine, selected: list[Case], threads: int, repeats: int, trials: int,
                numpy_path: bool) -> None:
    """For each row, ``trials`` measurements of :data:`OLD_REPEATS` rounds (the roof before session 19)
    alternating with ``trials`` of ``repeats``; each roof estimate's spread over its trials."""
    torch.set_num_threads(threads)
    rng = np.random.default_rng(0)
    for case in selected:
        inputs = case.make(rng)
        calls, memory_calls, _ = row_calls(machine, case, inputs, threads, numpy_path)
        roofs: dict[int, list[float]] = {OLD_REPEATS: [], repeats: []}
        for _ in range(trials):
            for rounds in roofs:
                samples = interleaved_samples({**calls, **memory_calls}, repeats=rounds, clock=clock_for(threads))
                roofs[rounds].append(memory_roof(samples, memory_calls))
        for rounds, values in roofs.items():
            middle = statistics.median(values)
            print(f"{case.title} | {threads} | {rounds} rounds | roof ms over {trials} trials: "
                  f"min {min(values) * 1e3:.3f}, median {middle * 1e3:.3f}, max {max(values) * 1e3:.3f}, "
                  f"(max-min)/median {(max(values) - min(values)) / middle:.1%}, "
                  f"stdev/median {statistics.stdev(values) / middle:.1%}", flush=True)


def roof_buffers(machine: Machine, selected: list[Case], threads: int, repeats: int) -> None:
    """For each row, the stream kernels into three kinds of buffer (a fresh torch tensor each call, as every
    implementation's output; the stream's own numpy buffer, the roof before session 26; the kernel alone's held
    output) and torch's ``copy_`` and numpy's ``copyto`` of the row's largest input into a fresh tensor (where it
    is the row's bytes), interleaved with the row's calls: medians, and per-round ratios of each to the kernel
    alone and to neuroncc's call."""
    torch.set_num_threads(threads)
    rng = np.random.default_rng(0)
    for case in selected:
        inputs = case.make(rng)
        calls, memory_calls, _ = row_calls(machine, case, inputs, threads, False, buffers=True)
        largest = max(inputs, key=lambda t: t.numel() * t.element_size())
        copies = {}
        if largest.numel() * largest.element_size() == case.work.writes:
            flat = largest.view(torch.int16) if largest.dtype == torch.bfloat16 else largest
            copies["torch copy_"] = lambda: torch.empty_like(largest).copy_(largest)
            copies["numpy copyto"] = lambda: np.copyto((out := torch.empty_like(flat)).numpy(), flat.numpy()) or out
        if "neuroncc kernel alone" in calls:  # the kernel alone into the stream's other buffers too
            into = calls["neuroncc kernel alone"].into
            stream = row_calls.last_stream
            copies["kernel alone into own numpy"] = into(lambda: (stream.dst.ctypes.data, None))
            copies["kernel alone into fresh"] = into(destinations(stream, None, False)[""])
        samples = interleaved_samples({**calls, **memory_calls, **copies}, repeats=repeats, clock=clock_for(threads))
        references = [name for name in ("neuroncc kernel alone", "neuroncc") if name in samples]
        held = row_calls.last_held
        buffers = {"input": largest.data_ptr(), "fresh output": calls["neuroncc"]().data_ptr(),
                   "fresh output again": torch.empty(int(case.work.writes), dtype=torch.uint8).data_ptr(),
                   "held": held.data_ptr() if held is not None else 0,
                   "own numpy": row_calls.last_stream.dst.ctypes.data}
        print(f"\n{case.title}, {threads} thread(s), {repeats} rounds; buffers (address, its mapping's huge pages): "
              + ", ".join(f"{k} {v:#x} {huge_page_kb(v)} kB" for k, v in buffers.items()))
        for name, values in samples.items():
            ratios = [f"{statistics.median(a / b for a, b in zip(values, samples[ref])):.3f}" for ref in references]
            print(f"  {name:34s} {statistics.median(values) * 1e3:7.3f} ms  / " + " / ".join(ratios), flush=True)


HEADER = ["kernel", "threads", "neuroncc call", "eager ms", "Inductor ms", "neuroncc ms", "kernel alone ms",
          "served ms", "vs eager", "vs Inductor", "memory roof ms", "kernel alone's memory roof ms", "compute roof ms",
          "of it bf16 conversions ms", "compute roof before s30 ms", "bound", "roof GB/s", "of roofline",
          "kernel alone of roofline", "served of roofline", "of roofline before s30", "kernel alone before s30"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default="", help="comma-separated row keys (default: all): "
                        + ", ".join(c.key for c in cases()))
    parser.add_argument("--threads", default="2,1")
    parser.add_argument("--repeats", type=int, default=45,
                        help="interleaved rounds per row (default 45; 15 before session 19)")
    parser.add_argument("--numpy-path", action="store_true",
                        help="rows (a)-(c') through their hand-built graph's numpy path (before session 19)")
    parser.add_argument("--served", action=argparse.BooleanOptionalAction, default=True,
                        help="the served column: each inference row also through neuroncc.compile_program on "
                             "torch.export.export of its function as a module, interleaved (default: on)")
    parser.add_argument("--roof-spread", type=int, default=0, metavar="N",
                        help="no table: N trials per row of the memory roof with 15 rounds (before session 19) "
                             "alternating with N with --repeats rounds, and each estimate's spread")
    parser.add_argument("--roof-buffers", action="store_true",
                        help="no table: each row's copies into three kinds of buffer and by torch and numpy")
    args = parser.parse_args()
    threads = [int(t) for t in args.threads.split(",")]
    keys = [k for k in args.rows.split(",") if k]
    selected = [c for c in cases() if not keys or c.key in keys]
    with open("/proc/loadavg") as f:
        load = f.read().split()[0]
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    machine = Machine(sorted(set(threads) | {1}))
    print(f"{started}, load average {load} at start")
    print(machine.describe(), flush=True)
    if args.roof_buffers:
        for t in threads:
            roof_buffers(machine, selected, t, args.repeats)
        return
    if args.roof_spread:
        for t in threads:
            roof_spread(machine, selected, t, args.repeats, args.roof_spread, args.numpy_path)
        return
    measured = []
    for t in threads:
        measured += run_rows(machine, selected, t, args.repeats, args.numpy_path, args.served)
    # the compute limits once more, minutes after the rows' own measurements: a limit is the fastest reading, and a
    # process outside the benchmark lock that takes a core for the seconds around a row spoils both of its readings
    # (session 30: row (a)'s 2-thread loop without its functions read 12.3 Gelem/s around the row, 44-45 in other runs)
    print("\nthe compute limits measured again; the rows:", flush=True)
    for case, t, *_ in measured:
        torch.set_num_threads(t)
        rose = machine.remeasure(case.work, t)
        machine.measure_elements(case, t)
        if rose:
            print(f"  {case.title}, {t} thread(s): limits measured faster at the end: {rose}", flush=True)
    rows = [table_row(machine, *record) for record in measured]
    with open("/proc/loadavg") as f:
        load_end = f.read().split()[0]
    print(f"\nload average {load} at start, {load_end} at the end; {len(threads)} thread setting(s), medians of "
          f"{args.repeats} interleaved calls (2 threads: wall clock; 1 thread: CPU time of the calling thread); "
          f"neuroncc called as the column says")
    print(table(rows, HEADER))


if __name__ == "__main__":
    main()
