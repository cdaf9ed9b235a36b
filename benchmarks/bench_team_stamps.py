"""Where a row's 2-thread kernel spends its time, thread by thread (session 40 a40; session 37 team37's scratch
probe, made a benchmark).

Every launch of the row's compiled graph on the OpenMP team runs a stamped copy of the team entry behind a stamped
``GOMP_parallel`` (``team_probe.py``): each thread's arrival, each chunk's rows and its start and end (``rdtscp``:
time stamp and CPU), each thread's exit. The row's calls run as ``roofline.py`` runs them, in a shuffled order each
round: eager, Inductor, the ``torch.compile`` call, the kernel alone (its graph's kernels into a held output),
"solo": the kernel alone's team task run by a team of one (the other core idle: the rate the two threads should
each keep), and the solo's work on 64 rows in L2 called 64 times (the rate without memory). Each call's wall time;
per kind of stamped call, medians with the 10th and 90th percentiles of: the launch (``GOMP_parallel`` entered to
returned), the Python path around it, each thread's arrival (the wake), busy time, rows and ns a row, ns a row of
every chunk by CPU, the threads' end imbalance and idle thread-us. Around the rounds: each thread's time run and
time waited runnable (``/proc/self/task/*/schedstat``: another task on its core), the machine's ``/proc/stat``
ticks (steal: the host), the other processes that ran and this process's page faults. ``--clock``: instead, the
cores' clock by a dependent add chain and by 512-bit FMA chains, on one core alone and on both at once.

    /work/bin/heavy x python benchmarks/bench_team_stamps.py [--rows a] [--threads 2] [--rounds 61] [--clock]
"""

from __future__ import annotations

import argparse
import ctypes
import os
import random
import resource
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import roofline  # noqa: E402  (ensures the environment; records each CompiledGraph the backend makes)
import numpy as np  # noqa: E402
import torch  # noqa: E402

import neuroncc.executors.cpu.native_sequence as native_sequence  # noqa: E402
import neuroncc.executors.cpu.threads as threads_module  # noqa: E402
from kernel_cases import cases, settled_calls  # noqa: E402
from team_probe import (ARRIVAL, CHUNK_END, CHUNK_START, CLOCK, EXIT, FMA, LAUNCH, MARK, MARK_END,  # noqa: E402
                        PROBE_CYCLES, RETURN, TeamProbe, tsc_hz)

PARALLEL = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint, ctypes.c_uint)
PHASE = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64)
#: "solo on L2 rows": the kernel's phase called on its first rows, again and again (as many rows as the row)
RESIDENT_ROWS, RESIDENT_REPEATS = 64, 64
#: the stamped calls' marks
STAMPED = {"neuroncc call": 1, "kernel alone": 2, "solo (team of 1)": 3}


def stamped_team(threads: int, probes: bool = False) -> tuple:
    """(the team, its probe): every team launch from now on (native sequences built later, ``OpenMPTeam.run``) goes
    through the probe's stamped entry and ``GOMP_parallel``; the team tasks native sequences make are collected."""
    team = threads_module.get_team(threads)
    probe = TeamProbe(team.gomp_parallel_address, probes)
    native_sequence.team_entry = threads_module.team_entry = lambda: probe.entry
    team.gomp_parallel_address = probe.parallel
    team._gomp_parallel = PARALLEL(probe.parallel)
    tasks = []
    words = native_sequence.phase_words

    def collecting(kernel, made):
        result = words(kernel, made)
        tasks.extend(made)
        return result

    native_sequence.phase_words = collecting
    return team, probe, tasks


def quantiles(values: list[float]) -> str:
    ordered = sorted(values)
    at = lambda q: ordered[min(len(ordered) - 1, int(q * len(ordered)))]  # noqa: E731
    return f"median {statistics.median(ordered):9.2f}  p10 {at(0.1):9.2f}  p90 {at(0.9):9.2f}  max {ordered[-1]:9.2f}"


def clock(rounds: int) -> None:
    """The cores' clock (GHz: the probe's cycles over its time stamps) alone and with both cores running."""
    team, probe, _ = stamped_team(2, probes=True)
    hz, iterations, results = tsc_hz(), 2_000_000, {}
    for _ in range(rounds):
        for name, kind in (("clock", CLOCK), ("fma", FMA)):
            address, args = probe.probes[name], (ctypes.c_int64 * 2)(iterations, 0)
            for mode in ("alone", "both"):
                probe.reset()
                if mode == "alone":
                    PHASE(address)(ctypes.addressof(args), 0, 1)
                else:
                    team.run(PHASE(address), address, ctypes.addressof(args), 0, 2, 1 << 30)
                records = probe.taken()
                starts = {(int(r[1]) >> 16, int(r[3])): int(r[0]) for r in records if r[2] == kind}
                for r in records[records[:, 2] == kind + 1]:
                    seconds = (int(r[0]) - starts[(int(r[1]) >> 16, int(r[3]))]) / hz
                    ghz = PROBE_CYCLES[name] * iterations / seconds / 1e9
                    results.setdefault(f"{name} {mode} cpu{int(r[1]) & 0xfff}", []).append(ghz)
    for key, values in sorted(results.items()):
        print(f"{key:18s} GHz {quantiles(values)}  n={len(values)}")


def schedstat() -> dict[int, tuple[str, int, int]]:
    """Each thread of this process: (name, ns run, ns waited runnable)."""
    found = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            run, wait, _ = map(int, Path(f"/proc/self/task/{tid}/schedstat").read_text().split())
            found[int(tid)] = (Path(f"/proc/self/task/{tid}/comm").read_text().strip(), run, wait)
        except OSError:
            continue
    return found


def process_ticks() -> dict[int, tuple[str, int]]:
    """Every process's (name, user + system ticks)."""
    found = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            text = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        name, fields = text[text.index("(") + 1:text.rindex(")")], text[text.rindex(")") + 2:].split()
        found[int(pid)] = (name, int(fields[11]) + int(fields[12]))
    return found


def machine_ticks() -> list[int]:
    """The machine's ``/proc/stat`` ticks (user ... steal) and this process's minor and major page faults."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:9]] + \
        [usage.ru_minflt, usage.ru_majflt]


def report_neighbours(before: tuple, after: tuple, seconds: float) -> None:
    threads0, machine0, processes0 = before
    threads1, machine1, processes1 = after
    names = "user nice system idle iowait irq softirq steal".split() + ["(this process's) minor faults", "major faults"]
    print(f"rounds: {seconds:.2f} s; machine ticks (1/100 s, both CPUs):",
          ", ".join(f"{n} {b - a}" for n, a, b in zip(names, machine0, machine1)))
    for tid, (name, run, wait) in sorted(threads1.items()):
        if tid in threads0 and run - threads0[tid][1] > 1e7:
            print(f"  thread {tid} ({name}): ran {(run - threads0[tid][1]) / 1e6:.1f} ms, waited runnable "
                  f"{(wait - threads0[tid][2]) / 1e6:.1f} ms")
    others = sorted(((ticks - processes0[pid][1], name, pid) for pid, (name, ticks) in processes1.items()
                     if pid in processes0 and pid != os.getpid()), reverse=True)
    print("  other processes that ran (ticks):", ", ".join(f"{n} {p}: {t}" for t, n, p in others[:6] if t > 0)
          or "none")


def launches(records: np.ndarray) -> dict[int, list[dict]]:
    """The stamped calls' launches by mark: each {mark0, mark1, launch, return, threads: {number: ...}}."""
    found: dict[int, list[dict]] = {mark: [] for mark in STAMPED.values()}
    begin = None
    for index, record in enumerate(records):
        if record[2] == MARK:
            begin = index
        elif record[2] == MARK_END and begin is not None and int(record[3]) in found:
            found[int(record[3])].append(_launch(records[begin:index + 1]))
    return found


def _launch(span: np.ndarray) -> dict:
    call = {"mark0": int(span[0][0]), "mark1": int(span[-1][0]), "threads": {}}
    for time_stamp, who, kind, value in (map(int, r) for r in span[1:-1]):
        if kind in (LAUNCH, RETURN):
            call.setdefault(kind, time_stamp)
            continue
        thread = call["threads"].setdefault(who >> 16, {"chunks": [], "open": None})
        if kind == ARRIVAL:
            thread["arrival"] = time_stamp
        elif kind == CHUNK_START:
            thread["open"] = (value, time_stamp, who & 0xfff)
        elif kind == CHUNK_END:
            lo, start, cpu = thread["open"]
            thread["chunks"].append((lo, value, start, time_stamp, cpu))
        elif kind == EXIT:
            thread["exit"] = time_stamp
    return call


def summarize(calls: list[dict], hz: float) -> dict[str, list[float]]:
    us = lambda ticks: ticks / hz * 1e6  # noqa: E731
    stats: dict[str, list[float]] = {}
    add = lambda key, value: stats.setdefault(key, []).append(value)  # noqa: E731
    for call in calls:
        if LAUNCH not in call or RETURN not in call:
            continue
        launch, done = call[LAUNCH], call[RETURN]
        add("launch us", us(done - launch))
        add("path before launch us", us(launch - call["mark0"]))
        add("path after return us", us(call["mark1"] - done))
        ends, busy = [], 0
        for number, thread in sorted(call["threads"].items()):
            chunks = thread["chunks"]
            add(f"t{number} arrival us", us(thread["arrival"] - launch))
            rows = sum(hi - lo for lo, hi, *_ in chunks)
            work = sum(end - start for _, _, start, end, _ in chunks)
            add(f"t{number} busy us", us(work))
            add(f"t{number} rows", rows)
            if rows:
                add(f"t{number} ns/row", us(work) * 1e3 / rows)
                ends.append(chunks[-1][3])
            for lo, hi, start, end, cpu in chunks:
                add(f"chunk ns/row on cpu{cpu}", us(end - start) * 1e3 / (hi - lo))
            busy += work
        if len(call["threads"]) > 1:
            add("end imbalance us", us(max(ends) - min(ends)) if len(ends) > 1 else us(done - launch))
            add("idle thread-us", us(len(call["threads"]) * (done - launch) - busy))
    return stats


def stamps(key: str, threads: int, rounds: int) -> None:
    team, probe, tasks = stamped_team(threads)
    torch.set_num_threads(threads)
    case = next(c for c in cases() if c.key == key)
    inputs = case.make(np.random.default_rng(0))
    first = len(roofline.MADE)
    calls = settled_calls(case, inputs, threads, graphs=False)
    alone = roofline.kernel_alone(roofline.MADE[first:], inputs, case)
    if alone is None or not tasks:
        raise SystemExit(f"{key}: no kernel alone on the team to stamp")
    task, parallel = tasks[-1], PARALLEL(probe.parallel)

    def solo() -> None:  # (the task's shared offset back to 0, as a native sequence's TEAM does)
        task[5] = 0
        parallel(probe.entry, ctypes.addressof(task), 1, 0)

    phase, args = PHASE(task[0]), task[1]

    def resident() -> None:  # the solo's work on rows that stay in L2: 64 rows (512 KiB), 64 times
        for _ in range(RESIDENT_REPEATS):
            phase(args, 0, RESIDENT_ROWS)

    runs = {"eager": calls["eager"], "inductor": calls["inductor"], "neuroncc call": calls["neuroncc"],
            "kernel alone": alone[0], "solo (team of 1)": solo, "solo on L2 rows": resident}
    for run in runs.values():
        run()
    order, wall = list(runs), {name: [] for name in runs}
    before, begin = (schedstat(), machine_ticks(), process_ticks()), time.perf_counter()
    probe.reset()
    for _ in range(rounds):
        random.shuffle(order)
        for name in order:
            mark = STAMPED.get(name, 0)
            probe.mark(MARK, mark)
            start = time.perf_counter()
            runs[name]()
            wall[name].append(time.perf_counter() - start)
            probe.mark(MARK_END, mark)
    seconds = time.perf_counter() - begin
    records = probe.taken()
    report_neighbours(before, (schedstat(), machine_ticks(), process_ticks()), seconds)
    print(f"{case.title}, {threads} threads, {rounds} rounds; each call's wall time, us:")
    for name, values in wall.items():
        print(f"  {name:24s} {quantiles([v * 1e6 for v in values])}")
    hz = tsc_hz()
    for mark, calls_of in sorted(launches(records).items(), key=lambda item: -item[0]):
        name = next(n for n, m in STAMPED.items() if m == mark)
        print(f"\n{name}: {len(calls_of)} launches")
        for item, values in summarize(calls_of, hz).items():
            print(f"  {item:24s} {quantiles(values)}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", default="a", help="kernel_cases keys, each run in turn")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=61)
    parser.add_argument("--clock", action="store_true", help="the cores' clock alone and together; no rows")
    args = parser.parse_args()
    if args.clock:
        clock(args.rounds)
        return
    for key in args.rows.split(","):
        stamps(key, args.threads, args.rounds)


if __name__ == "__main__":
    main()
