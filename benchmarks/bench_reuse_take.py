"""A/B of how a compiled graph's kept output memory comes back as a tensor (``frontend/output_reuse.py``,
``OutputRing.take``; session 33 call33): in one call (``Tensor._make_subclass`` over the kept storage, as built)
against main's two ATen calls from Python before it (``torch.empty(0).set_(keeper)``), on roofline.py's rows.

Both are the row's one-frame call (``DirectCall.outputs_call``) of the same executable; the second ``DirectCall``
gets a ring whose ``take`` is main's, and both rings hold one shared kept entry, so both calls write the same
memory (buffers differ in speed by up to +-0.25 ms on 32 MiB here: the page lottery, session 32 call32) and only
the take differs. Beside them the kernel alone into that memory. Interleaved in a fresh random order each round;
per round each call minus the kernel, and main minus built.

Run: ``/work/bin/heavy x python benchmarks/bench_reuse_take.py --rows b,c,c',rms --threads 1``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

from common import ensure_environment, interleaved_samples, record_compiled_graphs

ensure_environment(threads=1)

import numpy as np  # noqa: E402
import torch  # noqa: E402

import neuroncc.frontend.direct_call as direct_call  # noqa: E402
import neuroncc.frontend.output_reuse as output_reuse  # noqa: E402
from kernel_cases import cases, in_graph_order, settled_calls  # noqa: E402

MADE = record_compiled_graphs()


class MainRing(output_reuse.OutputRing):
    """The ring with main's take (before session 33): ``empty(0, dtype).set_(keeper)``."""

    def take(self):
        kept = self._kept
        for _ in range(len(kept)):
            try:
                entry = kept.popleft()
            except IndexError:
                return None
            if entry.given_up:
                continue
            if output_reuse._USE_COUNT(entry.storage) != 1 or entry.keeper.data_ptr() != entry.address:
                kept.append(entry)
                continue
            out = torch.empty(0, dtype=entry.keeper.dtype).set_(entry.keeper)
            kept.append(entry)
            return out
        return None


def _ring(call) -> output_reuse.OutputRing:
    return next(cell.cell_contents.__self__ for cell in call.__closure__
                if isinstance(getattr(cell.cell_contents, "__self__", None), output_reuse.OutputRing))


def row(case, threads: int, repeats: int) -> None:
    inputs = case.make(np.random.default_rng(0))
    first = len(MADE)
    settled_calls(case, inputs, threads, graphs=False)
    graph = MADE[first:][-1]
    built = graph.direct
    expected = case.eager(*inputs)
    order = in_graph_order(inputs, max(position for position, *_ in built.inputs) + 1,
                           lambda order: (built([*order]) or [None])[0], expected, case.tolerance)
    addresses = [t.data_ptr() for t in order]
    for _ in range(3):
        built.outputs_call(order)
    saved = direct_call.OutputRing
    direct_call.OutputRing = MainRing
    try:
        main = direct_call.DirectCall(built.executable, graph.graph, graph.outputs)
    finally:
        direct_call.OutputRing = saved
    main._seen = built._seen
    ring, main_ring = _ring(built.outputs_call), _ring(main.outputs_call)
    while len(ring._kept) > 1:
        ring._kept.popleft()
    shared = ring._kept[0]
    main_ring._kept.clear()
    main_ring._kept.append(shared)
    for call in (built.outputs_call, main.outputs_call):
        out = call(order)[0]
        assert out.data_ptr() == shared.address and out._base is None
        torch.testing.assert_close(out.float(), expected.float(), rtol=case.tolerance[0], atol=case.tolerance[1])
        del out
    impls = {
        "kernel into the kept memory": lambda: built.run(addresses, [shared.address]),
        "one-frame call, take as built": lambda: built.outputs_call(order),
        "one-frame call, take as main": lambda: main.outputs_call(order),
    }
    clock = time.thread_time if threads == 1 else time.perf_counter
    samples = interleaved_samples(impls, repeats=repeats, clock=clock)
    kernel = samples["kernel into the kept memory"]
    print(f"{case.title}, {threads} thread(s), {repeats} rounds", flush=True)
    for name, times in samples.items():
        extra = sorted(t - k for t, k in zip(times, kernel))
        print(f"  {name:32s} {statistics.median(times) * 1e3:7.3f} ms, minus the kernel "
              f"{statistics.median(extra) * 1e6:6.1f} us ({extra[len(extra) // 4] * 1e6:6.1f} .. "
              f"{extra[3 * len(extra) // 4] * 1e6:6.1f})", flush=True)
    gain = sorted(m - b for m, b in zip(samples["one-frame call, take as main"],
                                        samples["one-frame call, take as built"]))
    print(f"  main minus built per round: {statistics.median(gain) * 1e6:.1f} us "
          f"({gain[len(gain) // 4] * 1e6:.1f} .. {gain[3 * len(gain) // 4] * 1e6:.1f})", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", default="b,c,c',rms")
    parser.add_argument("--threads", default="1")
    parser.add_argument("--repeats", type=int, default=101)
    args = parser.parse_args()
    print(f"{time.strftime('%H:%M UTC', time.gmtime())}, load {', '.join(f'{x:.2f}' for x in os.getloadavg())}")
    for threads in (int(t) for t in args.threads.split(",")):
        torch.set_num_threads(threads)
        for case in (c for c in cases() if c.key in args.rows.split(",")):
            row(case, threads, args.repeats)


if __name__ == "__main__":
    main()
