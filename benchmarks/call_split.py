"""bench_call_path.py's ``--split`` and ``--after`` (session 29 dyncall29): what a roofline row's ``torch.compile`` call
spends beyond its kernel, split where TorchDynamo hands over to the backend, and what a tiny call costs after
each kind of work (the caches a call starts with). Run through bench_call_path.py, which sets the environment and
records the compiled graphs (``made``)."""

from __future__ import annotations

import os
import random
import statistics
import time

import torch

from call_path_rows import _fresh_function, dynamo_parts


def _stamping(inner, stamps: list):
    """A backend that wraps ``inner``'s callable in one that stamps the clock on entry and exit (TorchDynamo's
    entry side: ``compile_wrapper``, the eval-frame hook, the guards, the transformed code and the ``disable``
    wrapper around the backend's callable; the backend's own call; Dynamo's exit side)."""
    def backend(gm, example_inputs):
        fn = inner(gm, example_inputs)
        target = getattr(fn, "__wrapped__", fn)

        def stamped(*args):
            stamps.append(time.perf_counter_ns())
            result = target(*args)
            stamps.append(time.perf_counter_ns())
            return result
        return torch._dynamo.disable(stamped, reason="stamped")
    return backend


def _plus1(x):
    return x + 1


def _quartiles(values: list[float]) -> str:
    ordered = sorted(values)
    q = lambda f: ordered[int(f * (len(ordered) - 1))] / 1e3  # noqa: E731
    return f"{statistics.median(ordered) / 1e3:7.1f} us ({q(.25):6.1f} .. {q(.75):6.1f})"


def split(made: list, rows: list[str], threads: int, repeats: int = 201) -> None:
    """Each row's call, in one interleave (a fresh random order each round, wall clock at both thread counts:
    the stamps are wall times): the kernel alone (held output); the kernel into a fresh ``torch.empty_strided``
    output; the one-frame call (``outputs_call``); the ``torch.compile(backend="neuron")`` call as users make it,
    and again stamped where Dynamo calls the backend (entry / ours / exit); with
    ``torch._dynamo.config.record_runtime_overhead=False`` (no "Pregraph bytecode" calls in the transformed
    code), with ``torch.compiler.set_stance(skip_guard_eval_unsafe=True)`` (set and reset outside the timed
    call), with both; the same program served by ``neuroncc.compile_program`` (no TorchDynamo); Inductor's call;
    TorchDynamo's guard check alone after the kernel. Per round minus the kernel alone: median (25-75%). Then a
    trivial graph (``x + 1`` on 16 elements) through each backend, warm (called twice, the second timed) and
    right after the row's kernel, stamped likewise for neuron and ``backend="eager"``."""
    import numpy as np

    import neuroncc
    from common import settle_neuroncc
    from kernel_cases import cases
    from neuroncc.frontend.backend import neuron_backend

    torch.set_num_threads(threads)
    clock = time.perf_counter_ns
    options = {"threads": threads}
    stamps: list[int] = []
    neuron = _stamping(lambda gm, example: neuron_backend(gm, example, options=options), stamps)
    eager_backend = _stamping(lambda gm, example: gm.forward, stamps)
    print(f"{threads} thread(s), wall time, {repeats} rounds, load {os.getloadavg()[0]:.2f}, "
          f"{time.strftime('%H:%M UTC', time.gmtime())}")
    for case in (c for c in cases() if c.key in rows):
        inputs = case.make(np.random.default_rng(0))
        first = len(made)
        row = torch.compile(_fresh_function(case.eager), backend="neuron", options=options)
        row(*inputs)
        graph = made[first]
        stamped = torch.compile(_fresh_function(case.eager), backend=neuron)
        with torch._dynamo.config.patch(record_runtime_overhead=False):
            unrecorded = torch.compile(_fresh_function(case.eager), backend="neuron", options=options)
            unrecorded(*inputs)
        inductor = torch.compile(_fresh_function(case.eager))

        class Program(torch.nn.Module):
            def forward(self, *args):
                return case.eager(*args)
        served = neuroncc.compile_program(torch.export.export(Program(), tuple(inputs)), options=options)
        tiny = torch.randn(16)
        tiny_stamped = {"neuron": torch.compile(_fresh_function(_plus1), backend=neuron),
                        "eager backend": torch.compile(_fresh_function(_plus1), backend=eager_backend)}
        tiny_plain = {"neuron": torch.compile(_fresh_function(_plus1), backend="neuron", options=options),
                      "inductor": torch.compile(_fresh_function(_plus1)),
                      "eager backend": torch.compile(_fresh_function(_plus1), backend="eager"),
                      "no TorchDynamo (eager x + 1)": _plus1}
        calls = [lambda: row(*inputs), lambda: stamped(*inputs), lambda: unrecorded(*inputs),
                 lambda: inductor(*inputs), lambda: served(*inputs),
                 *[(lambda f=f: f(tiny)) for f in (*tiny_stamped.values(), *tiny_plain.values())]]
        for _ in range(3):
            for call in calls:
                call()
        settle_neuroncc({str(n): call for n, call in enumerate(calls)})
        direct = graph.direct
        addresses = [t.data_ptr() for t in inputs]
        held_outputs = direct.launch(addresses)  # held by the kernel alone's closure
        pointers = [t.data_ptr() for t in held_outputs]
        shape, strides, dtype = direct.results[0]
        full = list(inputs)
        guard, _ = dynamo_parts(row._torchdynamo_orig_callable, inputs)
        kernel = lambda held=held_outputs: direct.run(addresses, pointers)  # noqa: E731

        def fresh_output():
            out = torch.empty_strided(shape, strides, dtype=dtype)
            direct.run(addresses, [out.data_ptr()])
            return out

        skip = lambda: torch.compiler.set_stance(skip_guard_eval_unsafe=True)  # noqa: E731
        default = lambda: torch.compiler.set_stance("default")  # noqa: E731
        timed = {  # name -> (before, the timed call, after, kernel first)
            "kernel alone (output held)": (None, kernel, None, False),
            "kernel + torch.empty_strided output": (None, fresh_output, None, False),
            "one-frame call (outputs_call)": (None, lambda: direct.outputs_call(full), None, False),
            "torch.compile(backend='neuron')": (None, lambda: row(*inputs), None, False),
            "  record_runtime_overhead=False": (None, lambda: unrecorded(*inputs), None, False),
            "  skip_guard_eval_unsafe stance": (skip, lambda: row(*inputs), default, False),
            "  both": (skip, lambda: unrecorded(*inputs), default, False),
            "neuroncc.compile_program (no Dynamo)": (None, lambda: served(*inputs), None, False),
            "torch.compile inductor": (None, lambda: inductor(*inputs), None, False),
            "Dynamo's guard check, after the kernel": (None, guard, None, True),
        }
        for name, fn in tiny_plain.items():
            timed[f"x+1 {name}, warm"] = (lambda fn=fn: fn(tiny), lambda fn=fn: fn(tiny), None, False)
            timed[f"x+1 {name}, after the kernel"] = (None, lambda fn=fn: fn(tiny), None, True)
        split_calls = {"row, stamped": (None, lambda: stamped(*inputs), False)}  # (before, call, kernel first)
        for name, fn in tiny_stamped.items():
            split_calls[f"x+1 {name} stamped, warm"] = (lambda fn=fn: fn(tiny), lambda fn=fn: fn(tiny), False)
            split_calls[f"x+1 {name} stamped, after the kernel"] = (None, lambda fn=fn: fn(tiny), True)
        samples: dict[str, list] = {name: [] for name in (*timed, *split_calls)}
        names, order, kept = list(samples), random.Random(0x5EED), []
        for _ in range(repeats):
            order.shuffle(names)
            for name in names:
                if name in timed:
                    before, call, after, kernel_first = timed[name]
                    if before is not None:
                        before()
                    if kernel_first:
                        kernel()
                    start = clock()
                    kept.append(call())  # freed after the clock stops
                    samples[name].append(clock() - start)
                    kept.clear()
                    if after is not None:
                        after()
                else:
                    before, call, kernel_first = split_calls[name]
                    if before is not None:
                        before()
                    if kernel_first:
                        kernel()
                    stamps.clear()
                    start = clock()
                    kept.append(call())
                    end = clock()
                    kept.clear()
                    samples[name].append((stamps[-2] - start, stamps[-1] - stamps[-2], end - stamps[-1]))
        held = samples["kernel alone (output held)"]
        print(f"{case.title}: kernel alone {statistics.median(held) / 1e6:.3f} ms")
        for name in timed:
            times = samples[name]
            if timed[name][3] or name.startswith("x+1"):
                print(f"  {name:42s} {_quartiles(times)}")
            else:
                print(f"  {name:42s} {statistics.median(times) / 1e6:7.3f} ms, minus the kernel per round "
                      f"{_quartiles([t - k for t, k in zip(times, held)])}")
        for name in split_calls:
            entry, ours, exit_ = zip(*samples[name])
            ours_text = (f"ours minus the kernel {_quartiles([t - k for t, k in zip(ours, held)])}"
                         if name.startswith("row") else f"ours {_quartiles(list(ours))}")
            print(f"  {name:42s} Dynamo's entry {_quartiles(list(entry))}, {ours_text}, Dynamo's exit "
                  f"{_quartiles(list(exit_))}")


def after(threads: int, repeats: int = 61) -> None:
    """A tiny call's time right after each kind of work, interleaved: eager ``x + 1`` on 16 elements, the same
    through ``torch.compile`` with ``backend="eager"`` (TorchDynamo's floor) and ``backend="neuron"``, and 200
    additions in the interpreter; after nothing more (the previous pair, in a shuffled order, ran last), row (a)'s
    kernel at 2 and 1 threads, 2 ms of the interpreter spinning, a 2 ms sleep, 32 MB read (``numpy.sum``), 32 MB
    written (``fill``), 4 MB and 512 KB read. Medians (25-75%), wall clock."""
    import numpy as np

    from common import settle_neuroncc
    from kernel_cases import cases

    made_kernels = {}
    case = next(c for c in cases() if c.key == "a")
    inputs = case.make(np.random.default_rng(0))
    from neuroncc.frontend.compiled import CompiledGraph

    for count in (2, 1):
        torch.set_num_threads(count)
        graphs: list = []
        original = CompiledGraph.__init__

        def recording(self, *args, **kwargs):
            original(self, *args, **kwargs)
            graphs.append(self)
        CompiledGraph.__init__ = recording
        try:
            fn = torch.compile(_fresh_function(case.eager), backend="neuron", options={"threads": count})
            fn(*inputs)
        finally:
            CompiledGraph.__init__ = original
        settle_neuroncc({"fn": lambda fn=fn: fn(*inputs)})
        direct = graphs[0].direct
        addresses = [t.data_ptr() for t in inputs]
        held = direct.launch(addresses)
        pointers = [t.data_ptr() for t in held]
        made_kernels[count] = (lambda direct=direct, addresses=addresses, pointers=pointers, held=held:
                               direct.run(addresses, pointers))
    torch.set_num_threads(threads)
    tiny = torch.randn(16)

    def interpreter(_):
        total = 0
        for i in range(200):
            total += i
        return total
    calls = {"eager x+1": _plus1, "Dynamo, eager backend": torch.compile(_fresh_function(_plus1), backend="eager"),
             "Dynamo, neuron backend": torch.compile(_fresh_function(_plus1), backend="neuron"),
             "200 interpreter additions": interpreter}
    for _ in range(3):
        for fn in calls.values():
            fn(tiny)
    large, middle, l2 = (np.ones(n, dtype=np.float32) for n in (8 << 20, 1 << 20, 128 << 10))
    written = np.empty(8 << 20, dtype=np.float32)

    def spin(seconds=0.002):
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            pass
    work = {"nothing (the previous pair ran last)": lambda: None, "row (a)'s kernel, 2 threads": made_kernels[2],
            "row (a)'s kernel, 1 thread": made_kernels[1], "2 ms interpreter spin": spin,
            "2 ms sleep": lambda: time.sleep(0.002), "32 MB read": large.sum,
            "32 MB written": lambda: written.fill(1.0),
            "4 MB read": middle.sum, "512 KB read": l2.sum}
    pairs = [(w, c) for w in work for c in calls]
    samples: dict = {pair: [] for pair in pairs}
    order = random.Random(7)
    for _ in range(repeats):
        order.shuffle(pairs)
        for w, c in pairs:
            work[w]()
            fn = calls[c]
            start = time.perf_counter_ns()
            fn(tiny)
            samples[(w, c)].append(time.perf_counter_ns() - start)
    print(f"{threads} thread(s) for the tiny calls, {repeats} rounds, load {os.getloadavg()[0]:.2f}, "
          f"{time.strftime('%H:%M UTC', time.gmtime())}; us, median (25-75%)")
    print(f"{'before the call':30s}" + "".join(f"{c:>30s}" for c in calls))
    for w in work:
        print(f"{w:30s}" + "".join(f"{_quartiles(samples[(w, c)]):>30s}" for c in calls))


def serve_ab(made: list, rows: list[str], threads: int, repeats: int = 301) -> None:
    """``neuroncc.compile_program``'s call on roofline.py's rows: the one-frame call (session 29) against the launch
    path before it (the same program compiled twice, the second with ``_one`` cleared: its calls take
    ``_DirectProgram`` and ``DirectCall.launch`` as before), interleaved with the kernel alone and the row's
    ``torch.compile`` call in a fresh random order each round; wall clock. Per round minus the kernel alone, and
    before - after."""
    import numpy as np

    import neuroncc
    from common import settle_neuroncc
    from kernel_cases import cases

    torch.set_num_threads(threads)
    clock = time.perf_counter_ns
    options = {"threads": threads}
    print(f"{threads} thread(s), wall time, {repeats} rounds, load {os.getloadavg()[0]:.2f}, "
          f"{time.strftime('%H:%M UTC', time.gmtime())}")
    for case in (c for c in cases() if c.key in rows):
        inputs = case.make(np.random.default_rng(0))

        class Program(torch.nn.Module):
            def forward(self, *args):
                return case.eager(*args)
        program = torch.export.export(Program(), tuple(inputs))
        first = len(made)
        after_ = neuroncc.compile_program(program, options=options)
        before = neuroncc.compile_program(program, options=options)
        assert after_._one is not None, "the program does not take the one-frame call"
        before._one = None
        row = torch.compile(_fresh_function(case.eager), backend="neuron", options=options)
        calls = {"compile_program, launch path (before)": lambda: before(*inputs),
                 "compile_program, one-frame call (after)": lambda: after_(*inputs),
                 "torch.compile(backend='neuron')": lambda: row(*inputs)}
        for _ in range(3):
            for call in calls.values():
                call()
        settle_neuroncc(calls)
        assert torch.equal(before(*inputs), after_(*inputs)), "the two paths' bits differ"
        direct = made[first].direct
        addresses = [t.data_ptr() for t in inputs]
        held = direct.launch(addresses)
        pointers = [t.data_ptr() for t in held]
        timed = {"kernel alone (output held)": lambda: direct.run(addresses, pointers), **calls}
        samples: dict[str, list] = {name: [] for name in timed}
        names, order, kept = list(timed), random.Random(0x5EED), []
        for _ in range(repeats):
            order.shuffle(names)
            for name in names:
                start = clock()
                kept.append(timed[name]())
                samples[name].append(clock() - start)
                kept.clear()
        kernel = samples["kernel alone (output held)"]
        print(f"{case.title}: kernel alone {statistics.median(kernel) / 1e6:.3f} ms")
        for name in calls:
            print(f"  {name:42s} {statistics.median(samples[name]) / 1e6:7.3f} ms, minus the kernel per round "
                  f"{_quartiles([t - k for t, k in zip(samples[name], kernel)])}")
        b, a = samples["compile_program, launch path (before)"], samples["compile_program, one-frame call (after)"]
        print(f"  before - after per round {_quartiles([x - y for x, y in zip(b, a)])}, faster in "
              f"{sum(x > y for x, y in zip(b, a))}/{len(b)} rounds, before/after "
              f"{statistics.median(x / y for x, y in zip(b, a)):.4f}")
