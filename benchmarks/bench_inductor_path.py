"""A roofline row's call beyond its kernel, Inductor's against neuroncc's, and the two kernels into the same memory
(issue #19; session 40 call40).

roofline.py's "neuroncc ms" and "Inductor ms" are both ``torch.compile`` calls: TorchDynamo's frame around each
backend's compiled graph and a fresh (Inductor) or ring-kept (neuroncc) output. Its "kernel alone" column has no
Inductor counterpart, and each kernel alone writes its own held buffer, whose physical pages alone move a 32 MiB
row by up to 10-15% at 1 thread (session 34 mem34's page lottery). Here, per row, in one process, interleaved in
a fresh random order each round (medians; 1 thread: the calling thread's CPU time, as roofline.py):

- eager, the Inductor call, the neuroncc call (roofline.py's three calls);
- Inductor's generated module's ``call`` without TorchDynamo (its output code: the input size asserts, fresh
  buffers by ``empty_strided_cpu``, its C++ kernels);
- Inductor's kernels alone: that ``call`` with its buffers held between calls (``empty_strided_cpu`` swapped in
  the module for the held ones);
- neuroncc's kernel alone into its held output (roofline.py's column) and into Inductor's held output, and
  Inductor's kernels with their output in neuroncc's held one: each kernel in both buffers, so the kernels'
  ratio is read on the same pages.

Run: ``/work/bin/heavy x python benchmarks/bench_inductor_path.py --rows "rms,c,c'" --threads 1 [--repeats 61]``.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import roofline  # noqa: E402  (its environment, its compiled-graph record, its kernel alone)
import torch  # noqa: E402

from call_items import StampedCall, compiled_graph_global, dynamo_part_alone, stamped_direct  # noqa: E402
from kernel_cases import cases, in_graph_order, settled_calls  # noqa: E402


def inductor_module(first: int):
    """The newest Inductor output module loaded after ``first`` modules (the row's compiled graph)."""
    from torch._inductor.codecache import PyCodeCache

    found = [module for module in PyCodeCache.modules[first:] if hasattr(module, "call")]
    if len(found) != 1:
        raise RuntimeError(f"expected one Inductor module for the row, found {len(found)}")
    return found[0]


def stamp_kernels(module, last: list[float]) -> None:
    """Every C++ kernel the module's ``call`` runs (its ``cpp_fused_*`` globals) adds its time to ``last[0]``."""
    for name in [name for name in vars(module) if name.startswith("cpp_fused")]:
        kernel = getattr(module, name)

        def stamped(*args, kernel=kernel):
            start = time.perf_counter()
            kernel(*args)
            last[0] += time.perf_counter() - start

        setattr(module, name, stamped)


def held_inductor(module, order: list[torch.Tensor]):
    """``(run, output, into)``: ``run()`` is the module's ``call`` on ``order`` with every buffer it allocates
    held between calls, ``output`` the held tensor it returns, ``into(tensor)`` the same with that output in
    ``tensor``'s memory instead."""
    allocate = module.empty_strided_cpu
    held: list[torch.Tensor] = []

    def recording(*args, **kwargs):
        held.append(allocate(*args, **kwargs))
        return held[-1]

    module.empty_strided_cpu = recording
    try:
        (output,) = module.call(list(order))
    finally:
        module.empty_strided_cpu = allocate
    slot = next(i for i, tensor in enumerate(held) if tensor.data_ptr() == output.data_ptr())

    def run_with(buffers: list[torch.Tensor]):
        def run():
            supply = iter(buffers)
            module.empty_strided_cpu = lambda *args, **kwargs: next(supply)
            try:
                return module.call(list(order))
            finally:
                module.empty_strided_cpu = allocate
        return run

    def into(tensor: torch.Tensor):
        return run_with([tensor if i == slot else buffer for i, buffer in enumerate(held)])

    return run_with(held), output, into


def dynamo_alone(case, compiled, graph, stamped, order: list[torch.Tensor], ring: int, check: torch.Tensor,
                 expected: torch.Tensor):
    """The row's ``torch.compile`` call with the compiled graph TorchDynamo's bytecode calls replaced by
    ``disable(f)``, ``f`` the stamped kernel into the ring's storage returning a held list: TorchDynamo's entry,
    guards, bytecode, wrapper and exit, nothing of neuroncc's (call_items.py's "TorchDynamo's part alone")."""
    names, name = compiled_graph_global(case, graph)
    held = [torch.empty(0)]
    addresses = [order[position].data_ptr() for position, *_ in stamped.inputs]
    check.zero_()
    stamped.run(addresses, [check.data_ptr()])
    torch.testing.assert_close(check, expected, rtol=case.tolerance[0], atol=case.tolerance[1])
    return dynamo_part_alone(compiled, names, name, lambda *args: stamped.run(addresses, [ring]) or held)


def measure(case, threads: int, repeats: int) -> None:
    from torch._inductor.codecache import PyCodeCache

    inputs = case.make(roofline.np.random.default_rng(0))
    first_graph, first_module = len(roofline.MADE), len(PyCodeCache.modules)
    calls = settled_calls(case, inputs, threads, graphs=False)
    ours = roofline.kernel_alone(roofline.MADE[first_graph:], inputs, case)
    if ours is None:
        print(f"{case.title}: no kernel alone of neuroncc's")
        return
    ours_run, ours_out = ours
    module = inductor_module(first_module)
    expected = case.eager(*inputs)

    def module_result(order):
        try:
            (result,) = module.call(list(order))
        except AssertionError:  # (its input asserts: not the graph's order)
            return None
        return result

    order = in_graph_order(inputs, len(inputs), module_result, expected, case.tolerance)
    if order is None:
        raise RuntimeError(f"{case.title}: Inductor's module gives no eager result in any input order")
    theirs_run, theirs_out, theirs_into = held_inductor(module, order)
    # each call's own kernel time: Inductor's C++ kernels wrapped (one Python frame each), neuroncc's one-frame call
    # made anew on a launch that stamps the clock (call_items.py); the kernels alone below stay unstamped
    inductor_kernels, ours_kernel = [0.0], StampedCall.last
    stamp_kernels(module, inductor_kernels)
    graph = roofline.MADE[first_graph:][-1]
    if graph._fast is not graph.direct.outputs_call:
        raise RuntimeError(f"{case.title}: not called by the one-frame call")
    stamped = stamped_direct(graph)
    graph._fast = stamped.outputs_call
    # (C) the storage the call's output ring hands back once its caller has dropped the result: its address only
    # (a tensor held over it would keep the ring from handing it back); the ring keeps it alive
    ring = calls["neuroncc"]().data_ptr()
    if calls["neuroncc"]().data_ptr() != ring:
        raise RuntimeError(f"{case.title}: the call's output ring did not hand its storage back")
    variants = {
        "neuroncc call, TorchDynamo's part alone": dynamo_alone(case, calls["neuroncc"], graph, stamped, order, ring,
                                                                 ours_out, expected),
        "eager": calls["eager"],
        "Inductor call": calls["inductor"],
        "Inductor module call, no TorchDynamo": lambda: module.call(list(order)),
        "Inductor kernels, held buffers (A)": theirs_run,
        "Inductor kernels, output in B": theirs_into(ours_out),
        "neuroncc call": calls["neuroncc"],
        "neuroncc kernel alone, held output (B)": ours_run,
        "neuroncc kernel, output in A": ours_run.into(lambda: (theirs_out.data_ptr(), theirs_out)),
        "neuroncc kernel, output in C": ours_run.into(lambda: (ring, None)),
    }
    for name in ("Inductor kernels, output in B", "neuroncc kernel, output in A"):
        theirs_out.zero_()
        ours_out.zero_()
        variants[name]()
        torch.testing.assert_close(theirs_out if "in A" in name else ours_out, expected,
                                   rtol=case.tolerance[0], atol=case.tolerance[1])
    clock = roofline.clock_for(threads)
    samples = {name: [] for name in variants}
    own_kernel = {"Inductor call": [], "neuroncc call": [], "neuroncc call, TorchDynamo's part alone": []}
    wall = {name: [] for name in own_kernel}  # (the stamps are wall time)
    names = list(variants)
    shuffle = random.Random(0x5EED)
    for _ in range(3):
        for run in variants.values():
            run()
    for _ in range(repeats):
        shuffle.shuffle(names)
        for name in names:
            inductor_kernels[0], ours_kernel[0] = 0.0, 0.0
            begin, wall_begin = clock(), time.perf_counter()
            result = variants[name]()
            wall_end, end = time.perf_counter(), clock()
            samples[name].append(end - begin)
            del result
            if name in own_kernel:
                wall[name].append(wall_end - wall_begin)
                own_kernel[name].append(inductor_kernels[0] if name == "Inductor call" else ours_kernel[0])
    if calls["neuroncc"]().data_ptr() != ring:
        raise RuntimeError(f"{case.title}: the call's output ring did not hand its storage back")
    median = {name: statistics.median(values) for name, values in samples.items()}

    def paired(a: str, b: str) -> float:  # us, the per-round difference's median
        return statistics.median((x - y) * 1e6 for x, y in zip(samples[a], samples[b]))

    print(f"{case.title}, {threads} thread(s), {repeats} rounds, load {os.getloadavg()[0]:.2f}")
    for name in variants:
        print(f"  {name:42s} {median[name] * 1e3:7.3f} ms")
    print(f"  Inductor call - its kernels held (A):   "
          f"{paired('Inductor call', 'Inductor kernels, held buffers (A)'):+7.0f} us"
          f"; of it TorchDynamo's (call - module call): "
          f"{paired('Inductor call', 'Inductor module call, no TorchDynamo'):+.0f} us")
    print(f"  neuroncc call - its kernel held (B):    "
          f"{paired('neuroncc call', 'neuroncc kernel alone, held output (B)'):+7.0f} us")
    print(f"  neuroncc call - its kernel in C:        "
          f"{paired('neuroncc call', 'neuroncc kernel, output in C'):+7.0f} us (the call's own storage "
          f"kept throughout)")
    rests = {}
    for name, kernels in own_kernel.items():
        rests[name] = [(total - kernel) * 1e6 for total, kernel in zip(wall[name], kernels)]
        print(f"  {name} minus its own kernels (stamped, wall): {statistics.median(rests[name]):7.0f} us; its "
              f"kernels {statistics.median(kernels) * 1e3:.3f} ms")
    ours_part = [a - b for a, b in zip(rests["neuroncc call"], rests["neuroncc call, TorchDynamo's part alone"])]
    print(f"  neuroncc's part (the call minus TorchDynamo's part alone, per round): "
          f"{statistics.median(ours_part):.0f} us")
    print(f"  neuroncc call - Inductor call:          {paired('neuroncc call', 'Inductor call'):+7.0f} us")
    for where, a, b in (("A", "neuroncc kernel, output in A", "Inductor kernels, held buffers (A)"),
                        ("B", "neuroncc kernel alone, held output (B)", "Inductor kernels, output in B")):
        print(f"  kernels into {where}: neuroncc / Inductor {median[a] / median[b]:.3f} "
              f"({paired(a, b):+.0f} us per round)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", default="rms,c,c'")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=61)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    wanted = args.rows.split(",")
    for case in [case for key in wanted for case in cases() if case.key == key]:
        measure(case, args.threads, args.repeats)


if __name__ == "__main__":
    main()
