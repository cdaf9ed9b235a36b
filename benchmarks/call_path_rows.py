"""bench_call_path.py's workloads on roofline.py's own rows (kernel_cases: (b) softmax, (c) LayerNorm and their bf16
forms), issue #19's gap between a row's ``torch.compile`` call and its kernel alone: ``--gap`` (every layer of
the call, with the row's kernel in each) and ``--entry-ab`` (session 24's one-frame lean entry A/B). Run through
bench_call_path.py, which sets the environment and records the compiled graphs (``made``)."""

from __future__ import annotations

import time

import torch


def _fresh_function(function):
    """``function`` with a code object of its own: TorchDynamo keeps its cache entries (and checks their guards
    in turn) per code object, so each compiled variant here gets exactly one."""
    import types

    return types.FunctionType(function.__code__.replace(), function.__globals__, function.__name__,
                              function.__defaults__, function.__closure__)


def dynamo_parts(function, inputs):
    """What TorchDynamo runs for a call of ``torch.compile(function)`` that hits its cache entry: the entry's
    guard check (on the frame's locals) and its transformed code (the graph's callable called from bytecode),
    each callable on its own, outside the eval-frame hook."""
    import inspect
    import types

    entries = torch._dynamo.eval_frame._debug_get_cache_entry_list(function.__code__)
    assert len(entries) == 1, f"{len(entries)} cache entries"
    entry = entries[0]
    names = list(inspect.signature(function).parameters)
    frame_locals = dict(zip(names, inputs))
    guard = entry.guard_manager
    assert guard.check(frame_locals)
    transformed = types.FunctionType(entry.code, function.__globals__)
    return (lambda: guard.check(frame_locals)), (lambda: transformed(*inputs))


def print_minus_kernel(samples: dict, width: int) -> None:
    """Each call's median and its median per-round time beyond ``samples``' "kernel alone (output held)"."""
    import statistics

    kernel = samples["kernel alone (output held)"]
    for name, times in samples.items():
        extra = statistics.median(t - k for t, k in zip(times, kernel))
        print(f"  {name:{width}s} {statistics.median(times) * 1e3:7.3f} ms, per round minus the kernel "
              f"{extra * 1e6:7.1f} us")


def gap(made: list, rows: list[str], threads: int, repeats: int = 61) -> None:
    """Issue #19's call gap on roofline.py's own rows (kernel_cases: (b) softmax [4096, 1024], (c) LayerNorm
    [8192, 1024], their bf16 forms), every layer of the ``torch.compile`` call with the row's kernel in it,
    interleaved in a fresh random order each round: the kernel alone (address call into a held output), the
    kernel into a fresh ``torch.empty_strided`` output, our one-frame call (``outputs_call``: TensorGuards,
    the output made and placed), ``CompiledGraph`` lean call, lean_call.py's wrapper, TorchDynamo's ``disable``
    around it (the global its bytecode calls), the transformed code (no eval-frame hook, no guards), the whole
    call; beside them the kernel followed by TorchDynamo's guard check, and AOTAutograd's runtime wrappers in
    place of the lean call. Per round each minus the kernel alone (medians); then minor page faults per call
    (``getrusage``) of the kernel alone, the fresh-output kernel and the whole call."""
    import os
    import resource

    import numpy as np

    from common import interleaved_samples, settle_neuroncc
    from kernel_cases import cases
    from neuroncc.frontend.backend import neuron_backend

    torch.set_num_threads(threads)
    clock = time.thread_time if threads == 1 else time.perf_counter
    print(f"{threads} thread(s), {'CPU time' if threads == 1 else 'wall time'}, {repeats} rounds, load "
          f"{', '.join(f'{x:.2f}' for x in os.getloadavg())}")
    for case in (c for c in cases() if c.key in rows):
        inputs = case.make(np.random.default_rng(0))
        returned: dict = {}

        def recording(gm, example_inputs):
            returned["fn"] = neuron_backend(gm, example_inputs, options={"threads": threads})
            return returned["fn"]

        function = _fresh_function(case.eager)
        compiled = torch.compile(function, backend=recording, dynamic=False)
        for _ in range(3):
            compiled(*inputs)
        settle_neuroncc({"compiled": lambda: compiled(*inputs)})
        graph, fn = made[-1], returned["fn"]
        lean, slow = fn.__wrapped__, fn.slow
        direct = graph.direct
        full = list(inputs)
        addresses = [t.data_ptr() for t in inputs]
        held = direct.launch(addresses)
        pointers = [t.data_ptr() for t in held]
        shape, strides, dtype = direct.results[0]
        guard, transformed = dynamo_parts(function, inputs)
        dynamo_global = next(value for name, value in function.__globals__.items()
                             if name.startswith("__compiled_fn") and getattr(value, "__wrapped__", None) is lean)

        def fresh_output():
            out = torch.empty_strided(shape, strides, dtype=dtype)
            direct.run(addresses, [out.data_ptr()])
            return out

        impls = {
            "kernel alone (output held)": lambda: direct.run(addresses, pointers),
            "kernel + torch.empty_strided output": fresh_output,
            "one-frame call (outputs_call)": lambda: direct.outputs_call(full),
            "CompiledGraph.lean_call": lambda: graph.lean_call(full),
            "lean_call.py wrapper, no disable": lambda: lean(*inputs),
            "Dynamo's disable(lean), its global": lambda: dynamo_global(*inputs),
            "transformed code (no eval frame, guards)": transformed,
            "torch.compile call": lambda: compiled(*inputs),
            "kernel alone, then guard check": lambda: (direct.run(addresses, pointers), guard()),
            "AOTAutograd runtime (slow) instead": lambda: slow(*inputs),
        }
        samples = interleaved_samples(impls, repeats=repeats, warmup=3, clock=clock)
        print(f"{case.title}: one-frame call {'on' if direct.outputs_call else 'off'}")
        print_minus_kernel(samples, 42)
        for name in ("kernel alone (output held)", "kernel + torch.empty_strided output", "torch.compile call"):
            before = resource.getrusage(resource.RUSAGE_SELF)
            for _ in range(20):
                impls[name]()
            after = resource.getrusage(resource.RUSAGE_SELF)
            print(f"  {name:42s} minor faults per call {(after.ru_minflt - before.ru_minflt) / 20:.1f}, "
                  f"system time {(after.ru_stime - before.ru_stime) / 20 * 1e6:.0f} us")


def entry_ab(made: list, rows: list[str], threads: int, repeats: int = 201) -> None:
    """Session 24's one-frame lean entry (``CompiledGraph.lean_entry``) against the lean wrapper before it (the
    wrapper's frame, then ``CompiledGraph._lean``'s), in one process on roofline.py's rows: each row's function
    compiled twice (code objects of their own), the backend returning the committed callable or the one before
    (rebuilt here exactly as lean_call.py had it), interleaved with the kernel alone in a fresh random order each
    round. Medians, per-round before - after, and the share of rounds the entry was faster."""
    import os
    import statistics

    import numpy as np

    from common import interleaved_samples, settle_neuroncc
    from kernel_cases import cases
    from neuroncc.frontend.backend import neuron_backend

    torch.set_num_threads(threads)
    clock = time.thread_time if threads == 1 else time.perf_counter
    print(f"{threads} thread(s), {'CPU time' if threads == 1 else 'wall time'}, {repeats} rounds, load "
          f"{', '.join(f'{x:.2f}' for x in os.getloadavg())}")

    def after(gm, example_inputs):
        return neuron_backend(gm, example_inputs, options={"threads": threads})

    def before(gm, example_inputs):
        fn = neuron_backend(gm, example_inputs, options={"threads": threads})
        slow, lean_call = fn.slow, made[-1].lean_call
        assert not module_params(gm), "the rows' graphs take no parameters"

        def lean(*args):
            outputs = lean_call(args)
            return slow(*args) if outputs is None else outputs
        return torch._dynamo.disable(lean, reason="do not trace AOT-compiled graph")

    from neuroncc.frontend.lean_call import module_params_buffers as module_params

    for case in (c for c in cases() if c.key in rows):
        inputs = case.make(np.random.default_rng(0))
        compiled = {name: torch.compile(_fresh_function(case.eager), backend=backend, dynamic=False)
                    for name, backend in (("before", before), ("after", after))}
        for _ in range(3):
            for fn in compiled.values():
                fn(*inputs)
        settle_neuroncc({name: (lambda fn=fn: fn(*inputs)) for name, fn in compiled.items()})
        graph = made[-1]
        direct = graph.direct
        addresses = [t.data_ptr() for t in inputs]
        held = direct.launch(addresses)
        pointers = [t.data_ptr() for t in held]
        impls = {"kernel alone (output held)": lambda: direct.run(addresses, pointers),
                 "torch.compile call, before (two frames)": lambda: compiled["before"](*inputs),
                 "torch.compile call, after (lean_entry)": lambda: compiled["after"](*inputs)}
        samples = interleaved_samples(impls, repeats=repeats, warmup=3, clock=clock)
        print(f"{case.title}:")
        print_minus_kernel(samples, 42)
        b, a = samples["torch.compile call, before (two frames)"], samples["torch.compile call, after (lean_entry)"]
        diffs = [x - y for x, y in zip(b, a)]
        print(f"  before - after per round: median {statistics.median(diffs) * 1e6:.1f} us, faster in "
              f"{sum(d > 0 for d in diffs)}/{len(diffs)} rounds, before/after {statistics.median(x / y for x, y in zip(b, a)):.4f}")


def row_gap(made: list, rows: list[str], threads: int, repeats: int = 101) -> None:
    """Issue #19's gap as roofline.py measures it (``--row-gap``, session 28): the row's calls there (eager, Inductor,
    the neuroncc ``torch.compile`` call, the memory roof's stream into a fresh tensor) interleaved in one process
    with its kernel alone (held output), the kernel into a second held output (another buffer's pages), into the
    memory the row's call writes (the storage its output ring keeps once the caller dropped the output: since
    session 33, so that the call's layers are told apart from the page lottery between two buffers), into a
    fresh unplaced ``torch.empty_strided`` output, the one-frame call (the output placed), TorchDynamo's
    ``disable`` wrapper around our callable (the global its bytecode calls), and the row's function compiled again
    with a code object of its own (roofline.py compiles Inductor and neuroncc from one function: two cache entries
    on its code) and again with ``dynamic=False`` (as roofline.py called both before session 28), so each layer is
    timed on the caches and allocator state the row's neighbours leave. Per round each call minus the kernel alone
    (the median, and the 25th-75th percentiles), and the outputs' addresses. The layers below TorchDynamo take the
    inputs in the graph's own order (``kernel_cases.in_graph_order``; before session 33 row (c') failed here)."""
    import os
    import statistics
    from types import SimpleNamespace

    import numpy as np

    import microkernels as mk
    from common import interleaved_samples, settle_neuroncc
    from kernel_cases import cases, in_graph_order, settled_calls
    from neuroncc.frontend.output_reuse import OutputRing

    torch.set_num_threads(threads)
    clock = time.thread_time if threads == 1 else time.perf_counter
    print(f"{threads} thread(s), {'CPU time' if threads == 1 else 'wall time'}, {repeats} rounds, load "
          f"{', '.join(f'{x:.2f}' for x in os.getloadavg())}, {time.strftime('%H:%M UTC', time.gmtime())}")
    machine = SimpleNamespace(stream_kernels=(mk.compile_kernel(mk.stream_module(False), "stream"),
                                              mk.compile_kernel(mk.stream_module(True), "stream")))
    for case in (c for c in cases() if c.key in rows):
        inputs = case.make(np.random.default_rng(0))
        first = len(made)
        calls = settled_calls(case, inputs, threads, graphs=False)  # (as roofline.py)
        graph = made[first:][-1]
        direct = graph.direct
        # the graph's own order of the inputs (row (c')'s graph takes b, x, w: kernel_cases.in_graph_order)
        expected = case.eager(*inputs)
        order = in_graph_order(inputs, max(position for position, *_ in direct.inputs) + 1,
                               lambda order: (direct([*order]) or [None])[0], expected, case.tolerance) or inputs
        addresses = [t.data_ptr() for t in order]
        held = direct.launch(addresses)
        pointers = [t.data_ptr() for t in held]
        held2 = direct.launch(addresses)
        pointers2 = [t.data_ptr() for t in held2]
        shape, strides, dtype = direct.results[0]
        full = list(order)
        compiled = calls["neuroncc"]
        seen = {"held": pointers[0], "held 2": pointers2[0]}
        for name in ("eager", "inductor", "neuroncc", "eager", "neuroncc", "neuroncc"):
            seen[f"{name} output"] = calls[name]().data_ptr()
        function = case.eager
        stream = mk.Stream(*machine.stream_kernels, case.work.reads, case.work.writes,
                           (inputs[0].data_ptr(), inputs[0].numel() * inputs[0].element_size()))

        def fresh():
            out = torch.empty(stream.write_bytes, dtype=torch.uint8)
            return out.data_ptr(), out

        def fresh_output():
            out = torch.empty_strided(shape, strides, dtype=dtype)
            direct.run(addresses, [out.data_ptr()])
            return out

        own = torch.compile(_fresh_function(function), backend="neuron", options={"threads": threads})
        static = torch.compile(_fresh_function(function), backend="neuron", dynamic=False, options={"threads": threads})
        for _ in range(3):
            own(*inputs)
            static(*inputs)
        settle_neuroncc({"own": lambda: own(*inputs), "static": lambda: static(*inputs)})
        lean = next(value for name, value in function.__globals__.items() if name.startswith("__compiled_fn")
                    and hasattr(getattr(value, "__wrapped__", None), "slow"))
        entries = torch._dynamo.eval_frame._debug_get_cache_entry_list(function.__code__)
        # the memory the row's call writes: the storage its output ring keeps (frontend/output_reuse.py), once
        # the caller dropped the output (as roofline.py's calls do)
        ring = next((cell.cell_contents.__self__ for cell in (direct.outputs_call.__closure__ or ())
                     if isinstance(getattr(cell.cell_contents, "__self__", None), OutputRing)), None) \
            if direct.outputs_call is not None else None
        compiled()
        kept = [entry.address for entry in ring._kept] if ring is not None else []
        seen.update({f"kept {number}": address for number, address in enumerate(kept)})
        impls = {
            "kernel alone (output held)": lambda: direct.run(addresses, pointers),
            "kernel into another held output": lambda: direct.run(addresses, pointers2),
            **{f"kernel into the call's kept output {number}":
               (lambda address=address: direct.run(addresses, [address])) for number, address in enumerate(kept)},
            "kernel + torch.empty_strided output": fresh_output,
            "one-frame call (outputs_call)": lambda: direct.outputs_call(full),
            "Dynamo's disable(lean), its global": lambda: lean(*order),
            "torch.compile call (the row)": compiled,
            "torch.compile call, a code object of its own": lambda: own(*inputs),
            "the same, dynamic=False (roofline.py before)": lambda: static(*inputs),
            "eager": calls["eager"],
            "inductor": calls["inductor"],
            "memory roof (streaming stores, fresh)": stream.runner("streaming", threads, fresh),
        }
        samples = interleaved_samples(impls, repeats=repeats, warmup=3, clock=clock)
        kernel = samples["kernel alone (output held)"]
        print(f"{case.title}: one-frame call {'on' if direct.outputs_call else 'off'}; {len(entries)} cache "
              f"entries on its code; inputs mod 4096 "
              f"{[a % 4096 for a in addresses]}")
        print("  addresses (mod 4096): " + ", ".join(f"{name} {address:#x} ({address % 4096})"
                                                   for name, address in seen.items()))
        for name, times in samples.items():
            extra = sorted(t - k for t, k in zip(times, kernel))
            q = lambda f: extra[int(f * (len(extra) - 1))]  # noqa: E731
            print(f"  {name:42s} {statistics.median(times) * 1e3:7.3f} ms, minus the kernel per round "
                  f"{statistics.median(extra) * 1e6:7.1f} us (25-75%: {q(.25) * 1e6:6.1f} .. {q(.75) * 1e6:6.1f})")
