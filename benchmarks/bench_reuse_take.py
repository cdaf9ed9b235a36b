"""A/B of how a compiled graph's kept output memory comes back as a tensor (``frontend/output_reuse.py``,
``OutputRing.take``): as built (``keeper.detach()``, session 35 call35) against an earlier form, on roofline.py's
rows: ``--against subclass`` (the default), session 33's one call ``Tensor._make_subclass(Tensor, keeper)``;
``--against two-calls``, the two ATen calls from Python before it (``torch.empty(0).set_(keeper)``, session 32).

Both are the row's one-frame call (``DirectCall.outputs_call``) of the same executable, made anew here with each
kernel launch stamped; the second gets a ring whose ``take`` is the earlier form's, and both rings hold one shared
kept entry, so both calls write the same memory (buffers differ in speed by up to +-0.25 ms on 32 MiB here: the page
lottery, session 32 call32) and only the take differs. Beside them the kernel alone into that memory. Interleaved in
a fresh random order each round; each call's time minus its own kernel's (the kernel's spread drops out, session
35), and per round the earlier form minus built.

Run: ``/work/bin/heavy x python benchmarks/bench_reuse_take.py --rows b,c,c',rms --threads 1,2``.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import time

from common import ensure_environment, record_compiled_graphs

ensure_environment(threads=1)

import numpy as np  # noqa: E402
import torch  # noqa: E402

import neuroncc.frontend.direct_call as direct_call  # noqa: E402
import neuroncc.frontend.output_reuse as output_reuse  # noqa: E402
from call_items import StampedCall  # noqa: E402
from kernel_cases import cases, in_graph_order, settled_calls  # noqa: E402

MADE = record_compiled_graphs()
#: the earlier form's tensor over the kept storage, by ``--against``
FORMS = {"subclass": lambda keeper: torch.Tensor._make_subclass(torch.Tensor, keeper),
         "two-calls": lambda keeper: torch.empty(0, dtype=keeper.dtype).set_(keeper)}
MAKE = [FORMS["subclass"]]


class EarlierRing(output_reuse.OutputRing):
    """The ring with an earlier take: :data:`MAKE` over the kept entry."""

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
            out = MAKE[0](entry.keeper)
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
    # two new direct calls of the executable, each kernel launch stamped (:class:`StampedCall`): built's take and
    # the earlier one's
    saved = direct_call.OutputRing, direct_call.AddressCall
    direct_call.AddressCall = StampedCall
    try:
        built = direct_call.DirectCall(built.executable, graph.graph, graph.outputs)
        direct_call.OutputRing = EarlierRing
        earlier = direct_call.DirectCall(built.executable, graph.graph, graph.outputs)
    finally:
        direct_call.OutputRing, direct_call.AddressCall = saved
    built._seen = graph.direct._seen
    for _ in range(3):
        built.outputs_call(order)
    earlier._seen = built._seen
    ring, earlier_ring = _ring(built.outputs_call), _ring(earlier.outputs_call)
    while len(ring._kept) > 1:
        ring._kept.popleft()
    shared = ring._kept[0]
    earlier_ring._kept.clear()
    earlier_ring._kept.append(shared)
    for call in (built.outputs_call, earlier.outputs_call):
        out = call(order)[0]
        assert out.data_ptr() == shared.address and out._base is None
        torch.testing.assert_close(out.float(), expected.float(), rtol=case.tolerance[0], atol=case.tolerance[1])
        del out
    impls = {
        "kernel into the kept memory": lambda: built.run(addresses, [shared.address]),
        "one-frame call, take as built": lambda: built.outputs_call(order),
        "one-frame call, take earlier": lambda: earlier.outputs_call(order),
    }
    for _ in range(3):
        for impl in impls.values():
            impl()
    # each call's time minus its own kernel's (stamped around the launch inside the call: the kernel's own spread,
    # +-0.1 ms here, drops out), interleaved in a fresh random order each round
    names, order_of = list(impls), random.Random(0x5EED)
    samples: dict[str, list[float]] = {name: [] for name in impls}
    kernels: dict[str, list[float]] = {name: [] for name in impls}
    for _ in range(repeats):
        order_of.shuffle(names)
        for name in names:
            start = time.perf_counter()
            impls[name]()
            samples[name].append(time.perf_counter() - start - StampedCall.last[0])
            kernels[name].append(StampedCall.last[0])
    print(f"{case.title}, {threads} thread(s), {repeats} rounds, load {os.getloadavg()[0]:.2f}", flush=True)
    for name, extra in samples.items():
        extra = sorted(extra)
        print(f"  {name:32s} kernel {statistics.median(kernels[name]) * 1e3:7.3f} ms, the call minus its kernel "
              f"{statistics.median(extra) * 1e6:6.1f} us ({extra[len(extra) // 4] * 1e6:6.1f} .. "
              f"{extra[3 * len(extra) // 4] * 1e6:6.1f})", flush=True)
    gain = sorted(m - b for m, b in zip(samples["one-frame call, take earlier"],
                                        samples["one-frame call, take as built"]))
    print(f"  earlier minus built per round: {statistics.median(gain) * 1e6:.1f} us "
          f"({gain[len(gain) // 4] * 1e6:.1f} .. {gain[3 * len(gain) // 4] * 1e6:.1f})", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", default="b,c,c',rms")
    parser.add_argument("--threads", default="1")
    parser.add_argument("--repeats", type=int, default=101)
    parser.add_argument("--against", choices=sorted(FORMS), default="subclass")
    args = parser.parse_args()
    MAKE[0] = FORMS[args.against]
    print(f"built take against {args.against}")
    print(f"{time.strftime('%H:%M UTC', time.gmtime())}, load {', '.join(f'{x:.2f}' for x in os.getloadavg())}")
    for threads in (int(t) for t in args.threads.split(",")):
        torch.set_num_threads(threads)
        for case in (c for c in cases() if c.key in args.rows.split(",")):
            row(case, threads, args.repeats)


if __name__ == "__main__":
    main()
