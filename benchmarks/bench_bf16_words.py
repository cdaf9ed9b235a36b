"""The bf16 rows' kernels with a bf16 code-generation switch of ``CpuTarget`` on and off (issue #19), in one process.
``--switch word-lanes`` (default): output words rounded in 16-bit lanes against 32-bit lanes
(``CpuTarget.rounds_bf16_in_word_lanes`` on, AVX-512 BW hosts' default, ``codegen/llvm/bf16_words.py``, and off: the
32-bit rounding every CPU had before). ``--switch op-results``: the roundings of ops with bf16 results without their
NaN case where ``nan_payloads.py`` allows it (``CpuTarget.rounds_bf16_op_results_without_nan_case``, AVX-512's and,
since session 24, AVX2's default) against with it (every CPU before session 18; AVX2 before session 24). ``--switch
widened-rows``: a bf16 row widened to float32 kept in a row cache by the first pass that reduces it
(``CpuTarget.caches_widened_bf16_rows``, AVX-512's default; bf16 LayerNorm) against widened again in every pass
(every CPU before session 19). ``--switch paired-sums``: the sum of row-cached terms computed over bf16 pairs in a
loop of its own (``CpuTarget.sums_paired_row_caches_apart``, AVX2's default; bf16 softmax) against in the loop
computing them (every CPU before session 20). ``--switch row-pass-bursts`` (not a bf16 switch; ``--rows c``): a
cheap row loop's next-row prefetches in a burst before each pass over the row
(``CpuTarget.bursts_before_each_row_pass``, AVX2's default; float32 LayerNorm) against a burst per stage (every CPU
before session 21). ``--switch widened-rows-exp``: bf16 softmax's row widened to float32 once, by its max pass, for
its exp pass (``CpuTarget.caches_widened_bf16_rows_for_exp``, AVX2's default since session 25) against widened
again there.
``--switch write-first``: softmax's delayed write group before each group's exponentials, not after them
(``CpuTarget.writes_delayed_group_before_the_exponentials``, AVX2's default since session 25; not a bf16 switch).
``--switch softmax25``: both of those at once. ``--switch tables``: bf16 unary math (gelu, sigmoid, ...) read from
65536-entry tables (``CpuTarget.looks_up_bf16_unary_math``, AVX2's default since session 25,
``codegen/llvm/bf16_tables.py``) against computed by its polynomial (every CPU before).
``--switch deviations`` (``--rows c16``): a variance's deviations stored by its deviation pass
into a row cache that the write pass loads (``CpuTarget.caches_variance_deviations``, AVX2's default; bf16 LayerNorm)
against x widened and the mean subtracted again in the write pass (every CPU before session 25). ``--switch
early-means`` (``--rows c16``): a row loop's variance's mean pass a row early, beside the previous row's write pass
(``CpuTarget.means_a_row_early``, AVX2's default; bf16 LayerNorm) against each row's passes in turn (every CPU before
session 25). ``--switch blended-lanes``: output words rounded in 16-bit lanes with AVX2's shifts and blends
(``CpuTarget.rounds_bf16_in_word_lanes_with_blends``, AVX2's default since session 25, ``bf16_words.py``) against
32-bit lanes. ``--switch stream-ahead`` (not a bf16 switch; ``--rows c'``): a streamed map stage's inputs prefetched
``CpuTarget.one_pass_stream_prefetch_lines`` lines ahead in its row loop's only pass over them (AVX2's default since
session 26; float32 x*w+b) against the hardware's prefetchers alone. ``--switch write-buffers`` (``--rows c16``): the
write pass's stack buffers placed at run time half a 2 KiB period past the output rows
(``CpuTarget.places_write_buffers_past_the_output``, AVX2's default since session 26; bf16 LayerNorm) against where
the stack frame puts them. ``--switch one-step-exp`` (``--rows a``; not a bf16 switch): sigmoid's and gelu_tanh's
e**w scaled in one product, sigmoid's -x folded into its constants (``CpuTarget.scales_one_plus_exp_in_one_step``,
AVX2's default since session 26, ``mathlib._exp_in_one_step``) against two products and 0 - x. ``--switch gelu-half`` (``--rows a``): gelu as
x (1/2 + erf/2) (``CpuTarget.halves_gelu_in_its_erf``, AVX2's default since session 26) against (x/2)(1 + erf).
``--switch split-math`` (``--rows a``): a row's independent polynomials but the last computed by loops of their own
into L1 buffers (``CpuTarget.splits_polynomial_math_loops``, AVX2's default since session 26) against one loop.
``--switch row-a-26``: the three at once. ``--switch exp-loop-write`` (``--rows b``): float32 softmax's delayed write in its exp loop, a
block of 32 outputs of the previous row stored beside each block of 32 exponentials
(``CpuTarget.writes_delayed_elements_in_the_exp_loop``, ``delayed_writes.DelayedGroups.fused``) against a loop of its
own in each group.
``--force``: the "on" builds with the switch on where the host's default is off. ``--output-offset N``: each build
called on its inputs' addresses into an output held between calls that starts N bytes past a 4 KiB boundary
(``AddressCall``; the allocator's placement otherwise: torch's first large tensors and the ``neuron`` device's large
blocks start 64 and 0 past one, the benchmarks' heap anywhere).

    /work/bin/heavy x python benchmarks/bench_bf16_words.py [--rows a16,b16,c16] [--threads 1,2] [--repeats 25]
        [--switch NAME (one of SWITCHES)] [--force] [--output-offset N]

Each row's graph is the one torch.compile hands the neuron backend (dumped through the ``dump_dir`` option, then
the cpu pipeline), built as an executable twice per variant in the order ABAB (later builds of one process ran
faster: session 12); the builds' bits must be equal (paired-sums' differing words are counted: its sums' partials
differ); then the four run interleaved in a shuffled order
(``common.interleaved``; 1 thread: the calling thread's CPU time, else wall clock). The table shows each build's
median and its ratio to the first build with the switch off ("off 1"; "on" is the host's default).
Building 1-thread executables and then 2-thread ones in one process can slow the 2-thread ones severalfold
(sessions 16-18): run each thread count in its own process when the 2-thread medians look off.
"""

from __future__ import annotations

import argparse
import inspect
import tempfile
import time
from pathlib import Path

from common import ensure_environment, interleaved, table

ensure_environment(threads=2)

import numpy as np  # noqa: E402
import torch  # noqa: E402

from kernel_cases import cases, in_graph_order  # noqa: E402
from neuroncc.executors.cpu.address_call import AddressCall  # noqa: E402
from neuroncc.executors.cpu.launcher import build_cpu_executable  # noqa: E402
from neuroncc.hardware.host import CpuTarget  # noqa: E402
from neuroncc.ir.parser import parse  # noqa: E402
from neuroncc.passes.manager import PassContext  # noqa: E402
from neuroncc.passes.pipeline import default_pipeline, run_pipeline  # noqa: E402

SWITCHES = {"word-lanes": "rounds_bf16_in_word_lanes", "op-results": "rounds_bf16_op_results_without_nan_case",
            "widened-rows": "caches_widened_bf16_rows", "paired-sums": "sums_paired_row_caches_apart",
            "row-pass-bursts": "bursts_before_each_row_pass", "widened-rows-exp": "caches_widened_bf16_rows_for_exp",
            "write-first": "writes_delayed_group_before_the_exponentials",
            "softmax25": ("caches_widened_bf16_rows_for_exp", "writes_delayed_group_before_the_exponentials"),
            "tables": "looks_up_bf16_unary_math", "lane-pairs": "reads_bf16_tables_by_lane_pairs",
            "deviations": "caches_variance_deviations", "early-means": "means_a_row_early",
            "blended-lanes": "rounds_bf16_in_word_lanes_with_blends",
            "stream-ahead": "one_pass_stream_prefetch_lines",
            "write-buffers": "places_write_buffers_past_the_output",
            "one-step-exp": "scales_one_plus_exp_in_one_step", "gelu-half": "halves_gelu_in_its_erf",
            "split-math": "splits_polynomial_math_loops",
            "row-a-26": ("splits_polynomial_math_loops", "scales_one_plus_exp_in_one_step", "halves_gelu_in_its_erf"),
            "exp-loop-write": "writes_delayed_elements_in_the_exp_loop"}
#: switches that change the order of a sum's terms (the bits may differ: counted, not asserted)
REORDERS = {"paired-sums"}


def backend_graph(case, inputs: list[torch.Tensor]):
    """The graph torch.compile hands the backend for ``case``, after the cpu pipeline."""
    with tempfile.TemporaryDirectory() as dump:
        torch._dynamo.reset()
        compiled = torch.compile(case.eager, backend="neuron", dynamic=False, options={"dump_dir": dump})
        compiled(*inputs)
        (path,) = Path(dump).glob("*.nir")
        return run_pipeline(default_pipeline("cpu"), parse(path.read_text()), PassContext())


def build(fn, threads: int, switch: str, on: bool, force: bool = False):
    """An executable of ``fn`` with ``switch`` off, or on (the host's default; ``force``: on whatever the host)."""
    names = SWITCHES[switch] if isinstance(SWITCHES[switch], tuple) else (SWITCHES[switch],)
    # (a decision of CpuTarget's base class, ``LoopChoices``, is shadowed on CpuTarget and the shadow removed after)
    defaults = {name: CpuTarget.__dict__.get(name) for name in names}
    for name in names:
        default = inspect.getattr_static(CpuTarget, name)
        setattr(CpuTarget, name, property(lambda self: True) if on and force else default if on
                else property(lambda self: False))
    try:
        return build_cpu_executable(fn, {"threads": threads})
    finally:
        for name, default in defaults.items():
            if default is None:
                delattr(CpuTarget, name)
            else:
                setattr(CpuTarget, name, default)


def graph_order(case, exe, inputs: list[torch.Tensor], arrays: list[np.ndarray]) -> list[np.ndarray]:
    """``arrays`` (``inputs`` as the executable takes them) in the order ``exe``'s graph takes them
    (``kernel_cases.in_graph_order``)."""
    expected = case.eager(*inputs)

    def run(order: list[np.ndarray]) -> torch.Tensor:
        got = torch.from_numpy(exe(*order)[0])
        return got.view(torch.bfloat16) if expected.dtype == torch.bfloat16 else got

    order = in_graph_order(arrays, len(exe.function.params), run, expected, case.tolerance)
    if order is None:
        raise SystemExit(f"{case.key}: no order of the row's inputs gives eager's result")
    return order


def placed_call(exe, arrays: list[np.ndarray], offset: int):
    """``call()``: ``exe`` on ``arrays``' addresses into outputs held between calls, each ``offset`` bytes past a
    4 KiB boundary; returns them."""
    outputs = []
    for made in exe(*arrays):  # (the outputs' shapes and dtypes; C order)
        raw = np.empty(made.nbytes + 8192, np.uint8)
        start = -raw.ctypes.data % 4096 + offset
        outputs.append(raw[start:start + made.nbytes].view(made.dtype).reshape(made.shape))
    call, inputs = AddressCall(exe), [a.ctypes.data for a in arrays]
    addresses = [o.ctypes.data for o in outputs]

    def run() -> list[np.ndarray]:
        call(inputs, addresses)
        return outputs

    return run


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", default="a16,b16,c16")
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--repeats", type=int, default=25)
    parser.add_argument("--switch", choices=sorted(SWITCHES), default="word-lanes",
                        help="the CpuTarget switch flipped between builds (see the module docstring)")
    parser.add_argument("--force", action="store_true",
                        help="the 'on' builds with the switch on whatever the host's default (AVX2's are off)")
    parser.add_argument("--output-offset", type=int, default=None,
                        help="call into held outputs starting this many bytes past a 4 KiB boundary")
    args = parser.parse_args()
    keys = args.rows.split(",")
    rows = []
    for threads in (int(t) for t in args.threads.split(",")):
        torch.set_num_threads(threads)
        clock = time.thread_time if threads == 1 else time.perf_counter
        for case in (c for c in cases() if c.key in keys):
            inputs = case.make(np.random.default_rng(0))
            fn = backend_graph(case, inputs)
            arrays = [t.view(torch.int16).numpy() if t.dtype == torch.bfloat16 else t.numpy() for t in inputs]
            builds = {}
            for name, on in (("off 1", False), ("on 1", True), ("off 2", False), ("on 2", True)):
                exe = build(fn, threads, args.switch, on, args.force)
                if not builds:  # (the graph's inputs in its own order: row (c')'s are b, x, w)
                    arrays = graph_order(case, exe, inputs, arrays)
                builds[name] = (lambda exe=exe: exe(*arrays)) if args.output_offset is None else \
                    placed_call(exe, arrays, args.output_offset)
            results = [call() for call in builds.values()]
            for other in results[1:]:
                for got, want in zip(other, results[0], strict=True):
                    if args.switch in REORDERS:  # (other partial sums: a row's sum may round otherwise)
                        print(f"{case.key}: {np.count_nonzero(got != want)} of {got.size} words differ", flush=True)
                    else:
                        np.testing.assert_array_equal(got, want)
            times = interleaved(builds, repeats=args.repeats, clock=clock)
            base = times["off 1"]
            rows.append([case.key, str(threads)] + [f"{times[n] * 1e3:.3f} ({times[n] / base:.3f})" for n in builds])
            print(" | ".join(rows[-1]), flush=True)
    print(table(rows, ["row", "threads", *builds]))


if __name__ == "__main__":
    main()
