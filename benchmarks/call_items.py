"""bench_call_path.py's ``--items`` (session 35 call35): a roofline row's ``torch.compile`` call itemized with each
call's own kernel time taken out. Every call of the row's executable here is made by a ``DirectCall`` whose kernel
launches stamp the clock (:class:`StampedCall`), so a call's time minus the time of the kernel inside it leaves the
call's path alone: the kernel's own spread (+-0.1-0.4 ms a call on 32 MiB rows here, which buried the path's
10-40 us pieces in earlier A/Bs that subtracted the kernel of another call in the same round) drops out.

The variants are swapped in per call and interleaved in a fresh random order each round, all writing the one
storage the row's output ring keeps (the ring's other entry dropped), in one process:

- the kernel alone (stamped: the stamp's own cost);
- the ``torch.compile`` call as built: the settled one-frame call (``CompiledGraph._fast``) replaced by the same
  code made anew with stamped launches;
- the same without ``DirectCall``'s ``TensorGuards`` check (a check that passes every call: its cost);
- the same with the ring's ``take`` as session 33 made it (``Tensor._make_subclass``) and as session 32 did
  (``torch.empty(0).set_``);
- TorchDynamo's part alone: the global its bytecode calls replaced by ``disable(f)`` where ``f`` launches the kernel
  and returns a held list (no check, no take: what neuroncc cannot take away);
- the one-frame call alone, outside TorchDynamo.

Per variant the call minus its own kernel (median, quartiles) and per round "as built minus this".
"""

from __future__ import annotations

import os
import random
import statistics
import time

import torch
from common import spread_us

import neuroncc.frontend.direct_call as direct_call
import neuroncc.frontend.output_reuse as output_reuse
from neuroncc.executors.cpu.address_call import AddressCall


class StampedCall(AddressCall):
    """The address call whose runner stamps each launch (seconds in :attr:`last`)."""

    last = [0.0]

    def runner(self):
        run, last, clock = super().runner(), StampedCall.last, time.perf_counter

        def stamped(inputs, outputs):
            start = clock()
            run(inputs, outputs)
            last[0] = clock() - start

        return stamped


def ring_of(call) -> output_reuse.OutputRing:
    """The output ring a one-frame call (``DirectCall.outputs_call``) takes its memory from."""
    return next(cell.cell_contents.__self__ for cell in call.__closure__
                if isinstance(getattr(cell.cell_contents, "__self__", None), output_reuse.OutputRing))


def stamped_direct(graph, ring_type: type = output_reuse.OutputRing):
    """A new ``DirectCall`` of ``graph``'s executable whose launches are stamped and whose ring is a ``ring_type``."""
    saved = direct_call.OutputRing, direct_call.AddressCall
    direct_call.AddressCall, direct_call.OutputRing = StampedCall, ring_type
    try:
        made = direct_call.DirectCall(graph.direct.executable, graph.graph, graph.outputs)
    finally:
        direct_call.OutputRing, direct_call.AddressCall = saved
    made._seen = graph.direct._seen
    return made


def _ring_making(make):
    class Ring(output_reuse.OutputRing):
        """The ring whose ``take`` makes its tensor by ``make(keeper)`` (outside inference mode, as the runs are)."""

        def take(self):
            kept = self._kept
            for _ in range(len(kept)):
                entry = kept.popleft()
                if output_reuse._USE_COUNT(entry.storage) != 1 or entry.keeper.data_ptr() != entry.address:
                    kept.append(entry)
                    continue
                if entry.inference or output_reuse._INFERENCE():
                    raise RuntimeError("the earlier takes are timed outside inference mode")
                out = make(entry.keeper)
                kept.append(entry)
                return out
            return None

    return Ring


#: session 33's take and session 32's (frontend/output_reuse.py)
EARLIER_TAKES = {
    "take by _make_subclass (session 33)": lambda keeper: torch.Tensor._make_subclass(torch.Tensor, keeper),
    "take by empty(0).set_ (session 32)": lambda keeper: torch.empty(0, dtype=keeper.dtype).set_(keeper),
}


class _Passes:
    """A ``TensorGuards`` stand-in whose check passes (the inputs are the row's own, checked once before)."""

    @staticmethod
    def check(*tensors) -> bool:
        return True


def compiled_graph_global(case, graph) -> tuple[dict, str]:
    """The globals of ``case``'s eager function and the name under which TorchDynamo's bytecode calls the backend's
    compiled ``graph`` (a ``__compiled_fn`` global whose wrapped closure holds it)."""
    names = case.eager.__globals__
    return names, next(n for n, value in names.items() if n.startswith("__compiled_fn")
                       and getattr(getattr(value, "__wrapped__", None), "__closure__", None)
                       and any(cell.cell_contents is graph for cell in value.__wrapped__.__closure__))


def dynamo_part_alone(compiled, names: dict, name: str, stand_in):
    """``compiled`` (the ``torch.compile`` call) with the global ``name`` TorchDynamo's bytecode calls replaced, for
    the call, by ``disable(stand_in)``: TorchDynamo's entry, guards, bytecode, wrapper and exit around ``stand_in``
    alone, nothing of the backend's."""
    built, floor = names[name], torch._dynamo.disable(stand_in)

    def call():
        names[name] = floor
        try:
            return compiled()
        finally:
            names[name] = built
    return call


def items(made: list, rows: list[str], threads: int, repeats: int = 301) -> None:
    import numpy as np

    from kernel_cases import cases, settled_calls

    torch.set_num_threads(threads)
    print(f"{threads} thread(s), wall time, {repeats} rounds, load "
          f"{', '.join(f'{x:.2f}' for x in os.getloadavg())}, {time.strftime('%H:%M UTC', time.gmtime())}")
    for case in (c for c in cases() if c.key in rows):
        inputs = case.make(np.random.default_rng(0))
        first = len(made)
        calls = settled_calls(case, inputs, threads, graphs=False)
        graph = made[first:][-1]
        compiled = calls["neuroncc"]
        names, name = compiled_graph_global(case, graph)
        built_fast = graph._fast
        if built_fast is None or built_fast is not graph.direct.outputs_call:
            print(f"{case.title}: not called by the one-frame call; skipped")
            continue
        arguments: list = []
        graph._fast = lambda args: arguments.append(list(args)) or built_fast(args)
        compiled()
        graph._fast = built_fast
        full = arguments[0]

        built = stamped_direct(graph)
        unchecked = stamped_direct(graph)
        unchecked._seen = _Passes()
        earlier = {label: stamped_direct(graph, _ring_making(make)) for label, make in EARLIER_TAKES.items()}
        for call in (built, unchecked, *earlier.values()):
            call.outputs_call(full)
        kept = ring_of(built.outputs_call)._kept
        while len(kept) > 1:
            kept.popleft()
        shared = kept[0]
        for call in (unchecked, *earlier.values()):  # every call writes the one kept storage
            ring = ring_of(call.outputs_call)
            ring._kept.clear()
            ring._kept.append(shared)
        tensors = built._tensors(full)
        addresses = [t.data_ptr() for t in (tensors if len(built.inputs) > 1 else (tensors,))]
        held = [torch.empty(0)]

        def through(fast):
            def call():
                graph._fast = fast
                try:
                    return compiled()
                finally:
                    graph._fast = built_fast
            return call

        def dynamo_only(*args):
            built.run(addresses, [shared.address])
            return held

        dynamo_part = dynamo_part_alone(compiled, names, name, dynamo_only)
        impls = {
            "kernel alone (stamped)": lambda: built.run(addresses, [shared.address]),
            "torch.compile call as built": through(built.outputs_call),
            "  without DirectCall's TensorGuards check": through(unchecked.outputs_call),
            **{f"  with the {label}": through(call.outputs_call) for label, call in earlier.items()},
            "TorchDynamo's part alone (+ the kernel)": dynamo_part,
            "one-frame call alone (as built)": lambda: built.outputs_call(full),
        }
        for _ in range(3):
            for impl in impls.values():
                impl()
        order, labels = random.Random(0x5EED), list(impls)
        rest: dict[str, list[float]] = {label: [] for label in impls}
        kernel: dict[str, list[float]] = {label: [] for label in impls}
        last, clock = StampedCall.last, time.perf_counter
        for _ in range(repeats):
            order.shuffle(labels)
            for label in labels:
                start = clock()
                impls[label]()
                rest[label].append(clock() - start - last[0])
                kernel[label].append(last[0])
        assert len(kept) == 1 and kept[0] is shared  # every call wrote the one storage
        print(f"{case.title}: load {os.getloadavg()[0]:.2f}; the call minus its own kernel, us (25-75%), and as built "
              f"minus this per round")
        reference = rest["torch.compile call as built"]
        for label in impls:
            saved = [a - b for a, b in zip(reference, rest[label])]
            print(f"  {label:48s} kernel {statistics.median(kernel[label]) * 1e3:6.3f} ms, rest "
                  f"{spread_us(rest[label])}, as built minus this {spread_us(saved)}", flush=True)
