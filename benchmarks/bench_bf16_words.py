"""The kernels of issue #19's rows with one of ``CpuTarget``'s code-generation decisions on and off, in one process.

Each switch (:data:`SWITCHES`; ``--list-switches`` prints them with the first sentence of each property's docstring,
where what it does and what it measured are written once) flips one or more ``CpuTarget`` properties (their
defaults: the ``hardware/loop_choices/`` package), most of them bf16 decisions (word roundings, row caches, tables),
some float32 ones (``--rows`` names the rows each is meant for). "on" is the host's default; ``--force``: the "on"
builds with the switch on where the host's default is off; ``--value N``: a number switch's "on" builds with that
value (``stream-ahead``'s lines ahead; "off" is 0; ``piece-lines``' "off" is the host's default, 4). ``--output-offset
N``: each build called on its inputs' addresses into an output held between calls that starts N bytes past a 4 KiB
boundary (``AddressCall``; the allocator's placement otherwise: torch's first large tensors and the ``neuron``
device's large blocks start 64 and 0 past one, the benchmarks' heap anywhere). ``--masked F``: a fraction F of the
first input's rows, spread evenly, wholly -inf (softmax's fully masked attention rows: ``--switch max-rerun``);
``--masked-columns F``: the last F of every row -inf (zeros in softmax's output: ``--switch word-test``). ``--cold``:
64 MiB of other memory written before each call, untimed, so that each call reads its input from memory as
roofline.py's interleaved rounds do (without it a 16 MiB input stays in the L3 between the builds' calls: float32
softmax's 1-thread kernel 0.90-0.99 ms warm, 1.02-1.57 cold, session 40 sm40; 2-thread times are not usable with it:
the team sleeps through the write).

    /work/bin/heavy x python benchmarks/bench_bf16_words.py [--rows a16,b16,c16] [--threads 1,2] [--repeats 25]
        [--switch NAME] [--force] [--value N] [--output-offset N] [--masked F] [--masked-columns F] [--cold]
        [--list-switches]

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
import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

from common import ensure_environment, interleaved, table

ensure_environment(threads=2)

import numpy as np  # noqa: E402
import torch  # noqa: E402

from kernel_cases import Case, Work, _inputs, cases, in_graph_order, layernorm, rmsnorm  # noqa: E402
from neuroncc.executors.cpu.address_call import AddressCall  # noqa: E402
from neuroncc.executors.cpu.launcher import build_cpu_executable  # noqa: E402
from neuroncc.hardware.host import CpuTarget, target_cpu  # noqa: E402
from neuroncc.ir.parser import parse  # noqa: E402
from neuroncc.passes.manager import PassContext  # noqa: E402
from neuroncc.passes.pipeline import default_pipeline, run_pipeline  # noqa: E402

class Switch(NamedTuple):
    """The ``CpuTarget`` properties a switch flips together, and the rows (``kernel_cases``) it is meant for;
    ``unset``: properties the "on" builds turn off (the "off" builds keep the host's default), e.g. AVX2's split
    math loops where the pieces replace them."""

    properties: tuple[str, ...]
    rows: str
    unset: tuple[str, ...] = ()
    off_default: bool = False  # the "off" builds keep the host's default (a number switch: --value against it)


SWITCHES: dict[str, Switch] = {
    "word-lanes": Switch(("rounds_bf16_in_word_lanes",), "a16,b16,c16"),
    "pair-conversion": Switch(("rounds_bf16_pairs_by_conversion",), "a16,b16,c16"),
    "op-results": Switch(("rounds_bf16_op_results_without_nan_case",), "a16"),
    "widened-rows": Switch(("caches_widened_bf16_rows",), "c16"),
    "paired-sums": Switch(("sums_paired_row_caches_apart",), "b16"),
    "row-pass-bursts": Switch(("bursts_before_each_row_pass",), "c"),
    "widened-rows-exp": Switch(("caches_widened_bf16_rows_for_exp",), "b16"),
    "write-first": Switch(("writes_delayed_group_before_the_exponentials",), "b,b16"),
    "softmax25": Switch(("caches_widened_bf16_rows_for_exp", "writes_delayed_group_before_the_exponentials"), "b16"),
    "tables": Switch(("looks_up_bf16_unary_math",), "a16"),
    "lane-pairs": Switch(("reads_bf16_tables_by_lane_pairs",), "a16"),
    "tables-lane-pairs": Switch(("looks_up_bf16_unary_math", "reads_bf16_tables_by_lane_pairs"), "a16"),
    "deviations": Switch(("caches_variance_deviations",), "c16"),
    "early-means": Switch(("means_a_row_early",), "c16"),
    "blended-lanes": Switch(("rounds_bf16_in_word_lanes_with_blends",), "b16,c16"),
    "stream-ahead": Switch(("one_pass_stream_prefetch_lines",), "c'"),
    "touch-output": Switch(("touches_streamed_output_rows_ahead",), "b,c,rms"),
    "touch-one-pass": Switch(("touches_one_pass_rows",), "a,c'"),
    "touch-input": Switch(("touches_input_pages_rows_ahead",), "b,c,rms"),
    "touch-pages": Switch(("touches_input_pages_rows_ahead", "touches_streamed_output_rows_ahead"), "b,c,rms"),
    "write-buffers": Switch(("places_write_buffers_past_the_output",), "c16"),
    "word-write-buffers": Switch(("places_delayed_word_write_buffers_past_the_output",), "b16"),
    "partial-rows": Switch(("places_write_buffers_past_partial_period_rows",), "c16h"),
    "one-step-exp": Switch(("scales_one_plus_exp_in_one_step",), "a"),
    "gelu-half": Switch(("halves_gelu_in_its_erf",), "a"),
    "split-math": Switch(("splits_polynomial_math_loops",), "a"),
    "erf-division": Switch(("divides_gelu_erf_ratio",), "a"),
    "row-a-26": Switch(("splits_polynomial_math_loops", "scales_one_plus_exp_in_one_step", "halves_gelu_in_its_erf"),
                       "a"),
    "exp-loop-write": Switch(("writes_delayed_elements_in_the_exp_loop",), "b"),
    "nans-by-sum": Switch(("finds_row_nans_by_the_sum",), "b,b16"),
    "widen-again": Switch(("widens_bf16_rows_again_in_the_exp_pass",), "b16"),
    "bf16-nans-by-sum": Switch(("finds_bf16_row_nans_by_the_sum",), "b16"),
    "widen-again-nans": Switch(("widens_bf16_rows_again_in_the_exp_pass", "finds_bf16_row_nans_by_the_sum"), "b16"),
    "max-rerun": Switch(("reruns_the_exp_pass_only_for_another_max",), "b,b16"),
    "next-row-l2": Switch(("prefetches_the_next_row_into_l2_in_the_exp_pass",), "b"),
    "next-row-max": Switch(("takes_the_next_row_max_in_the_exp_loop",), "b"),
    "next-max-nans-by-sum": Switch(("finds_next_row_max_nans_by_the_sum",), "b"),
    "next-row-max-flagless": Switch(("takes_the_next_row_max_in_the_exp_loop", "finds_next_row_max_nans_by_the_sum"),
                                    "b"),
    "multiplied-widening": Switch(("widens_summed_bf16_by_multiplication",), "c16"),
    "function-pieces": Switch(("function_piece_lines",), "a"),
    "split-pairs": Switch(("bf16_pair_split_interleave",), "a16"),
    "one-pass-variance": Switch(("takes_the_variance_in_one_pass",), "c"),
    "parity-or": Switch(("rounds_bf16_parity_by_or",), "a16,b16,c16"),
    "word-test": Switch(("tests_converted_bf16_pairs_by_their_words",), "b16,c16"),
    "row-sum-lanes": Switch(("carries_the_row_sum_in_lanes_through_the_groups",), "b,b16"),
    "exp-degree-5": Switch(("evaluates_exp_for_bf16_results_in_degree_five",), "b16"),
    "table-loops": Switch(("bf16_table_loop_lanes",), "a16"),
    "packed-operands": Switch(("packs_computed_bf16_table_operands",), "a16"),
    "operands-ahead": Switch(("bf16_table_operand_vectors_ahead",), "a16"),
    "loaded-words": Switch(("reads_bf16_table_indices_from_loaded_words",), "a16"),
    "words-packed": Switch(("reads_bf16_table_indices_from_loaded_words", "packs_computed_bf16_table_operands"), "a16"),
    "team-guided": Switch(("team_guided_chunks",), "a,b,c,c',rms,a16,b16,c16"),
    "unsplit-pieces": Switch(("function_piece_lines",), "a", unset=("splits_polynomial_math_loops",)),
    "unsplit-pieces-division": Switch(("function_piece_lines", "divides_gelu_erf_ratio"), "a",
                                      unset=("splits_polynomial_math_loops",)),
    "division-guided": Switch(("divides_gelu_erf_ratio", "team_guided_chunks"), "a"),
    "unsplit-division": Switch(("divides_gelu_erf_ratio",), "a", unset=("splits_polynomial_math_loops",)),
    "piece-lines": Switch(("function_piece_lines",), "a", off_default=True),
    "piece-prefetch": Switch(("function_prefetch_lines",), "a"),
    "piece-interleave": Switch(("function_piece_interleave",), "a"),
    "aligned-spills": Switch(("aligns_vector_spill_slots",), "a"),
    "stream-footprint": Switch(("stream_footprint_bytes",), "b"),
    "dot-sums": Switch(("sums_bf16_rows_by_dot_products",), "c16,c16h"),
    "one-pass-row-lines": Switch(("one_pass_row_prefetch_lines",), "c"),
    "dot-variance": Switch(("takes_bf16_variance_by_dot_products",), "c16,c16h"),
    "word-copies": Switch(("copies_bf16_rows_for_the_write_pass",), "c16,c16h"),
    "sum-rows-core": Switch(("leaves_sum_rows_to_the_core_prefetchers",), "rms,c,c'"),
    "layer-norm-fma": Switch(("fuses_bf16_layer_norm_weight_and_bias",), "c16,c16h"),
    "wide-row-touches": Switch(("touches_wide_row_pages_up_to_bytes",), "rms8k,ln8k,rms4k,ln4k,rms,c"),
}
#: switches whose bits may differ (counted, not asserted): the order of a sum's terms, a division's rounding
REORDERS = {"paired-sums", "erf-division", "unsplit-pieces-division", "unsplit-division", "division-guided",
            "one-pass-variance", "row-sum-lanes", "exp-degree-5", "dot-sums", "stream-footprint",
            "exp-loop-write", "dot-variance", "layer-norm-fma"}


def bench_rows() -> list[Case]:
    """``kernel_cases.cases()`` and rows of this harness only: ``c16h``, bf16 LayerNorm over rows of 768 columns
    (1536 bytes: the output rows step through the multiples of 512 bytes modulo 4 KiB, ``--switch partial-rows``);
    the norm rows at the widths of LLaMA-style models, float32 RMSNorm and LayerNorm over rows of 4096 (7B:
    ``rms4k``, ``ln4k``, [2048, 4096]) and 8192 (70B: ``rms8k``, ``ln8k``, [1024, 8192]) floats, the roofline
    rows' 32 MiB (``--switch wide-row-touches``); bf16 LayerNorm over [16384, 512] (``c16q``) and [4096, 2048]
    (``c16w``), (c)'s bytes in rows of half and twice its length (session 42 bfrow42: what a row costs)."""
    n = 8192 * 768
    wide = [Case(f"{kind}{cols // 1024}k", f"{label} [{rows},{cols}]", _inputs((rows, cols), *weights), graph,
                 Work(4 * rows * cols + 4 * cols * len(weights), 4 * rows * cols, {}, flops * rows * cols))
            for rows, cols in ((2048, 4096), (1024, 8192))
            for kind, label, graph, weights, flops in (("rms", "RMSNorm", rmsnorm, [(cols,)], 4),
                                                       ("ln", "LayerNorm", layernorm, [(cols,), (cols,)], 8))]
    return cases() + [
        Case("c16h", "(c) bf16 LayerNorm [8192,768]", _inputs((8192, 768), (768,), (768,), dtype=torch.bfloat16),
             layernorm, Work(2 * n + 3072, 2 * n, {}, 8 * n, widened=n + 1536, rounded=n), tolerance=(1.6e-2, 1e-5)),
    ] + [Case(f"c16{key}", f"(c) bf16 LayerNorm [{rows},{cols}]", _inputs((rows, cols), (cols,), (cols,),
                                                                       dtype=torch.bfloat16),
              layernorm, Work(2 * rows * cols + 4 * cols, 2 * rows * cols, {}, 8 * rows * cols,
                              widened=rows * cols + 2 * cols, rounded=rows * cols), tolerance=(1.6e-2, 1e-5))
         for key, rows, cols in (("q", 16384, 512), ("w", 4096, 2048))] + wide


def backend_graph(case, inputs: list[torch.Tensor]):
    """The graph torch.compile hands the backend for ``case``, after the cpu pipeline."""
    with tempfile.TemporaryDirectory() as dump:
        torch._dynamo.reset()
        compiled = torch.compile(case.eager, backend="neuron", dynamic=False, options={"dump_dir": dump})
        compiled(*inputs)
        (path,) = Path(dump).glob("*.nir")
        return run_pipeline(default_pipeline("cpu"), parse(path.read_text()), PassContext())


def build(fn, threads: int, switch: str, on: bool, force: bool = False, value: int | None = None):
    """An executable of ``fn`` with ``switch`` off, or on (the host's default; ``force``: on whatever the host;
    ``value``: a number property's value in the "on" builds whatever the host, e.g. ``stream-ahead``'s lines; off
    is 0)."""
    names, unset = SWITCHES[switch].properties, SWITCHES[switch].unset
    off = None if SWITCHES[switch].off_default else property(lambda self: False)
    # (a decision of CpuTarget's base class, ``LoopChoices``, is shadowed on CpuTarget and the shadow removed after)
    defaults = {name: CpuTarget.__dict__.get(name) for name in names + unset}
    forced = value if value is not None else True
    for name in names:
        default = inspect.getattr_static(CpuTarget, name)
        setattr(CpuTarget, name, property(lambda self: forced) if on and (force or value is not None)
                else default if on or off is None else off)
    for name in unset:
        setattr(CpuTarget, name, property(lambda self: False) if on else inspect.getattr_static(CpuTarget, name))
    try:
        return build_cpu_executable(fn, {"threads": threads})
    finally:
        for name, default in defaults.items():
            if default is None:
                delattr(CpuTarget, name)
            else:
                setattr(CpuTarget, name, default)


def cold_interleaved(builds: dict, repeats: int, clock) -> dict[str, float]:
    """:func:`common.interleaved`'s medians with 64 MiB of other memory written before each call (not timed)."""
    other = np.zeros(16 << 20, dtype=np.float32)
    names, order = list(builds), random.Random(0x5EED)
    for fn in builds.values():
        fn()
    samples: dict[str, list[float]] = {name: [] for name in builds}
    for _ in range(repeats):
        order.shuffle(names)
        for name in names:
            other += 1.0
            start = clock()
            builds[name]()
            samples[name].append(clock() - start)
    return {name: statistics.median(times) for name, times in samples.items()}


def masked(arrays: list[np.ndarray], like: torch.Tensor, fraction: float) -> list[np.ndarray]:
    """``arrays`` with a ``fraction`` of the rows of those shaped as ``like`` (the row's first input), spread
    evenly, wholly -inf."""
    rows = np.arange(like.shape[0])
    chosen = np.floor((rows + 1) * fraction) > np.floor(rows * fraction)
    minus_inf = torch.full(like.shape[1:], -torch.inf, dtype=like.dtype)
    minus_inf = (minus_inf.view(torch.int16) if like.dtype == torch.bfloat16 else minus_inf).numpy()
    result = []
    for array in arrays:
        if fraction and array.shape == tuple(like.shape):
            array = array.copy()
            array[chosen] = minus_inf
        result.append(array)
    return result


def masked_columns(arrays: list[np.ndarray], like: torch.Tensor, fraction: float) -> list[np.ndarray]:
    """``arrays`` with the last ``fraction`` of each row of those shaped as ``like`` -inf (softmax rows under an
    attention mask: exact zeros in the output)."""
    if not fraction:
        return arrays
    cols = like.shape[-1]
    minus_inf = torch.tensor(-torch.inf, dtype=like.dtype)
    minus_inf = (minus_inf.view(torch.int16) if like.dtype == torch.bfloat16 else minus_inf).numpy()
    result = []
    for array in arrays:
        if array.shape == tuple(like.shape):
            array = array.copy()
            array[..., cols - int(round(cols * fraction)):] = minus_inf
        result.append(array)
    return result


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


def list_switches() -> None:
    """Each switch, its rows and its properties with the first sentence of each one's docstring."""
    for name, switch in SWITCHES.items():
        print(f"{name} (--rows {switch.rows}):")
        for prop in switch.properties:
            doc = " ".join((inspect.getattr_static(CpuTarget, prop).__doc__ or "").split())
            print(f"    CpuTarget.{prop}: {doc.split('. ')[0].rstrip('.')}.")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", default="a16,b16,c16")
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--repeats", type=int, default=25)
    parser.add_argument("--switch", choices=sorted(SWITCHES), default="word-lanes",
                        help="the CpuTarget switch flipped between builds (--list-switches)")
    parser.add_argument("--list-switches", action="store_true", help="print each switch and what it flips; no run")
    parser.add_argument("--force", action="store_true",
                        help="the 'on' builds with the switch on whatever the host's default (AVX2's are off)")
    parser.add_argument("--value", type=int, default=None,
                        help="a number switch's value in the 'on' builds (stream-ahead: lines ahead), "
                             "whatever the host")
    parser.add_argument("--output-offset", type=int, default=None,
                        help="call into held outputs starting this many bytes past a 4 KiB boundary")
    parser.add_argument("--masked", type=float, default=0.0,
                        help="this fraction of the first input's rows wholly -inf (masked softmax rows)")
    parser.add_argument("--cold", action="store_true",
                        help="each call after 64 MiB of other memory written (untimed): the row's input from memory, "
                             "as in roofline.py's rounds, not from the L3 the previous call left it in")
    parser.add_argument("--masked-columns", type=float, default=0.0,
                        help="this fraction of each row of the first input -inf, at its end (zeros in softmax's "
                             "output)")
    args = parser.parse_args()
    if args.list_switches:
        list_switches()
        return
    keys = args.rows.split(",")
    target = target_cpu()  # (the host's, or the one NEURONCC_CPU names: AVX2 code on an AVX-512 host)
    print(f"target cpu: {target.name}{' (named)' if target.named else ''}", flush=True)
    rows = []
    for threads in (int(t) for t in args.threads.split(",")):
        torch.set_num_threads(threads)
        clock = time.thread_time if threads == 1 else time.perf_counter
        for case in (c for c in bench_rows() if c.key in keys):
            inputs = case.make(np.random.default_rng(0))
            fn = backend_graph(case, inputs)
            arrays = [t.view(torch.int16).numpy() if t.dtype == torch.bfloat16 else t.numpy() for t in inputs]
            builds = {}
            for name, on in (("off 1", False), ("on 1", True), ("off 2", False), ("on 2", True)):
                exe = build(fn, threads, args.switch, on, args.force, args.value)
                if not builds:  # (the graph's inputs in its own order: row (c')'s are b, x, w)
                    arrays = masked(graph_order(case, exe, inputs, arrays), inputs[0], args.masked)
                    arrays = masked_columns(arrays, inputs[0], args.masked_columns)
                builds[name] = (lambda exe=exe: exe(*arrays)) if args.output_offset is None else \
                    placed_call(exe, arrays, args.output_offset)
            results = [call() for call in builds.values()]
            for other in results[1:]:
                for got, want in zip(other, results[0], strict=True):
                    if args.switch in REORDERS:  # (other partial sums: a row's sum may round otherwise)
                        print(f"{case.key}: {np.count_nonzero(got != want)} of {got.size} words differ", flush=True)
                    else:
                        np.testing.assert_array_equal(got, want)
            times = cold_interleaved(builds, args.repeats, clock) if args.cold else \
                interleaved(builds, repeats=args.repeats, clock=clock)
            base = times["off 1"]
            rows.append([case.key, str(threads)] + [f"{times[n] * 1e3:.3f} ({times[n] / base:.3f})" for n in builds])
            print(" | ".join(rows[-1]), flush=True)
    print(table(rows, ["row", "threads", *builds]))


if __name__ == "__main__":
    main()
