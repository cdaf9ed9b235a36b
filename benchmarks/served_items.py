"""What roofline.py's served call (``neuroncc.compile_program``, session 44) spends beyond its kernel, itemized inside
the row's own interleave: roofline.py's calls of the row (eager, Inductor, the torch.compile call, its kernel alone,
the served call, the memory streams) plus the served program's layers, each timed in the same rounds with the same
clock (1 thread: the calling thread's CPU time; 2: wall), per round minus the kernel alone:

- the served program's own kernel into an output held between calls (its executable may be another build than the
  torch.compile graph's: compiled by ``compile_program``);
- that kernel into a fresh ``torch.empty_strided`` output each call;
- the served program's one-frame call (``DirectCall.outputs_call`` on state and inputs: no program layer);
- the served call as a user makes it.

``--renew-ab``: instead of the layers, the same program compiled again with its one-frame call's renewal of heap
memory in huge pages turned off (before session 44) in the same interleave, and per round before / after.

Run: ``python benchmarks/served_items.py [--rows b,rms] [--threads 1] [--repeats 45] [--renew-ab]``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import roofline  # noqa: E402  (sets the benchmark environment first)
from common import interleaved_samples  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402

from kernel_cases import cases, served_program  # noqa: E402


def _closure(call) -> dict:
    return dict(zip(call.__code__.co_freevars, call.__closure__))


def unrenewed(case, inputs: list[torch.Tensor], threads: int) -> dict:
    """The row's served program compiled again, its one-frame call's renewal in huge pages turned off."""
    program = served_program(case, inputs, threads)
    _closure(program._one)["renew"].cell_contents = lambda address, nbytes: False
    return {"served unrenewed (before)": lambda: program(*inputs)}


def program_layers(program, inputs: list[torch.Tensor]) -> dict:
    """The served program's layers as calls (see the module docstring)."""
    direct = program._direct
    one = program._one
    prefix = program._state_prefix
    addresses = direct.addresses.copy()
    for number, index in direct.user_params:
        addresses[number] = inputs[index].data_ptr()
    held = direct.launch(addresses)
    pointers = [0 if t is None else t.data_ptr() for t in held]
    run = program._compiled.direct.run
    shape, strides, dtype = program._compiled.direct.results[0]

    def fresh():
        out = torch.empty_strided(shape, strides, dtype=dtype)
        run(addresses, [out.data_ptr()])
        return out

    layers = {"served kernel alone": lambda held=held: run(addresses, pointers), "served kernel, fresh output": fresh}
    if one is not None:
        layers["served one-frame call"] = lambda: one((*prefix, *inputs))
    return layers


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default="b,rms")
    parser.add_argument("--threads", default="1")
    parser.add_argument("--repeats", type=int, default=45)
    parser.add_argument("--renew-ab", action="store_true", help="the one-frame call's renewal A/B (see above)")
    args = parser.parse_args()
    keys = args.rows.split(",")
    threads = [int(t) for t in args.threads.split(",")]
    machine = roofline.Machine(sorted(set(threads) | {1}))
    for count in threads:
        torch.set_num_threads(count)
        rng = np.random.default_rng(0)
        for case in (c for c in cases() if c.key in keys):
            inputs = case.make(rng)
            calls, memory_calls, _ = roofline.row_calls(machine, case, inputs, count, False, served=True)
            program = calls["neuroncc served"].program
            layers = unrenewed(case, inputs, count) if args.renew_ab else program_layers(program, inputs)
            samples = interleaved_samples({**calls, **memory_calls, **layers}, repeats=args.repeats,
                                          clock=roofline.clock_for(count))
            kernel = samples["neuroncc kernel alone"]
            print(f"{case.title}, {count} thread(s), {args.repeats} rounds: kernel alone "
                  f"{statistics.median(kernel) * 1e3:.3f} ms; one-frame call "
                  f"{'on' if program._one is not None else 'off'}")
            for name in ("neuroncc", "neuroncc served", *layers, *memory_calls):
                values = samples[name]
                minus = sorted((a - b) * 1e6 for a, b in zip(values, kernel))
                q = lambda f: minus[int(f * (len(minus) - 1))]  # noqa: E731
                print(f"  {name:36s} {statistics.median(values) * 1e3:7.3f} ms, minus the kernel alone per round "
                      f"{statistics.median(minus):7.1f} us ({q(.25):7.1f} .. {q(.75):7.1f})", flush=True)
            if args.renew_ab:
                before, after = samples["served unrenewed (before)"], samples["neuroncc served"]
                print(f"  before/after per round {statistics.median(b / a for b, a in zip(before, after)):.4f}, "
                      f"after faster in {sum(b > a for b, a in zip(before, after))}/{len(after)} rounds; renewals "
                      f"{_closure(program._one)['ring'].cell_contents.renewals}", flush=True)


if __name__ == "__main__":
    main()
