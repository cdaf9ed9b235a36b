"""The 4K-aliasing window through ``torch.compile``: Zen 3's 1-255 bytes against the host's
(``host.aliased_distances``: 1-511 on Zen 4), the rows as a user calls them, one process, interleaved medians.

Each window is its own compiled function (its own one-frame call and output ring) with its own copy of the row's
largest input x; for each D of ``--distances``, each copy is put where its ring's output starts D bytes past it
modulo 4 KiB (as the allocator may have put it): the old window keeps an output 256 or more past, the host's places
it past its own window. D outside both windows (2048) runs both as placed alike: the page lottery's noise.

Run: ``/work/bin/heavy x python benchmarks/bench_alias_window.py [--threads 1] [--rows b,c] [--repeats 25]
[--distances 64,256,384,2048]``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import ensure_environment, interleaved  # noqa: E402

ensure_environment(threads=2)

import numpy as np  # noqa: E402
import torch  # noqa: E402

import kernel_cases as kc  # noqa: E402
from neuroncc.hardware import host  # noqa: E402

PERIOD = host.ALIAS_PERIOD_BYTES
WINDOWS = {"old": range(1, 256), "new": host.aliased_distances()}


def compiled_with(eager, window: range, threads: int):
    """``eager`` through torch.compile with ``window`` as the host's aliased distances (read when the one-frame
    call is made, and by ``placement_shift`` on each call: set before each)."""
    # a code object of its own per window: TorchDynamo keeps compiled frames per code object
    wrapper = eval(f"lambda eager: lambda *a: eager(*a)  # {window}")  # noqa: S307
    fn = torch.compile(wrapper(eager), backend="neuron", dynamic=False,
                       options={"threads": threads, "graph_cache": False})

    def call(*args):
        host.aliased_distances = lambda: window
        return fn(*args)

    return call


def measure(case, threads: int, repeats: int, clock, distances: list[int]) -> None:
    inputs = case.make(np.random.default_rng(0))
    big = max(range(len(inputs)), key=lambda i: inputs[i].nbytes)
    x = inputs[big]
    nbytes = x.numel() * x.element_size()
    expected = case.eager(*inputs)
    fns = {name: compiled_with(case.eager, window, threads) for name, window in WINDOWS.items()}
    memory = {name: torch.empty(nbytes + 2 * PERIOD, dtype=torch.uint8) for name in fns}
    for _ in range(3):
        for fn in fns.values():
            fn(*inputs)  # each output dropped at once: one storage in each ring
    for d in distances:
        call_args, seen = {}, {name: set() for name in fns}
        for name, fn in fns.items():
            ring_output = fn(*inputs).data_ptr()
            start = (ring_output - d - memory[name].data_ptr()) % PERIOD
            moved = memory[name][start:start + nbytes].view(x.dtype).view(x.shape)
            moved.copy_(x)
            call_args[name] = args = list(inputs)
            args[big] = moved
            for _ in range(3):
                torch.testing.assert_close(fn(*args), expected, rtol=2e-2, atol=1e-4)

        def timed(name):
            fn, args, past, address = fns[name], call_args[name], seen[name], call_args[name][big].data_ptr()
            return lambda: past.add((fn(*args).data_ptr() - address) % PERIOD)

        times = interleaved({name: timed(name) for name in fns}, repeats=repeats, clock=clock)
        print(f"{case.key} | t{threads} | D {d} | out past x: old {sorted(seen['old'])}, new {sorted(seen['new'])} | "
              f"old {times['old'] * 1e3:.3f} new {times['new'] * 1e3:.3f} ms | new/old "
              f"{times['new'] / times['old']:.3f}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default="b,c,rms,c',b16,c16,a")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=25)
    parser.add_argument("--distances", default="64,256,384,2048")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    clock = time.thread_time if args.threads == 1 else time.perf_counter
    print(time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
          f"load {os.getloadavg()[0]:.2f}, threads {args.threads}, windows",
          WINDOWS, flush=True)
    for case in (c for c in kc.cases() if c.key in args.rows.split(",")):
        measure(case, args.threads, args.repeats, clock, [int(d) for d in args.distances.split(",")])


if __name__ == "__main__":
    main()
