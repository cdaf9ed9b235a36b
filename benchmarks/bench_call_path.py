"""Where the compiled call path's extra time goes (issue #19): bf16 LayerNorm [8192, 1024] at 1 thread through
``torch.compile(backend="neuron")`` against the same compiled graph's executable called outside TorchDynamo on
the same input memory, as the boxed ``CompiledGraph`` call AOTAutograd makes, with fresh outputs (``DirectCall.launch``, what the compiled function runs), with an
output held between calls, and with outputs at chosen offsets past the input in memory of its own; then, on a tiny input, the
compiled call's fixed cost with warm caches and after a 64 MB stream (docs/performance-history.md, session 15
boundary: the gap is TorchDynamo's and AOTAutograd's path run on emptied caches).

Run: ``/work/bin/heavy x python benchmarks/bench_call_path.py`` (medians of interleaved calls, CPU time of the
calling thread). A diagnosis tool: it reaches into the front end's ``CompiledGraph`` to call its executable.

``--layers mlp|ln [--threads N]``: the compiled call's layers, each called on its own, outermost first
(bench_launch.py's breakdown style), on the tiny MLP's inference (8x64 -> 256 -> 10) or on the bf16 LayerNorm
above: eager; TorchDynamo's floor (``backend="eager"``); the neuroncc call as compiled (an inference graph
takes the lean call, frontend/lean_call.py); the same graph through AOTAutograd's runtime wrappers (the call
before the lean path, A/B in one process: the backend's callable swapped for its ``slow``); then the backend's
callable without TorchDynamo's frame, the lean call without the ``disable`` wrapper, AOTAutograd's runtime,
``CompiledGraph``, ``DirectCall`` (guard + launch), ``launch`` (outputs made) and the address call alone
(outputs held). Each row's difference from the next is that layer's cost. ``--layers rms|ln32|softmax``: the
same on float32 RMSNorm / LayerNorm / softmax [8192, 1024], with TorchDynamo's transformed code called on its
own (no eval-frame hook, no guards).

``--cold rms|ln32|softmax [--threads N]``: each layer on a [16, 1024] input right after the row's own [8192,
1024] kernel (the caches a roofline row's call starts with), with TorchDynamo's guard check and the bytecode it
runs before the graph (the accelerator's current stream, the runtime-overhead range) on their own.
``--stream-ab rms,c16,b16 [--threads N]``: frontend/accelerator_stream.py A/B in one process on roofline rows.
``--lean-ab rms,softmax,ln32 [--threads N]``: each row's call itemized against its kernel alone, and session
19's one-frame lean call against the call before it, interleaved in one process.
``--gap b,c,b16,c16 [--threads N] [--repeats R]`` and ``--entry-ab ...``: on roofline.py's own rows, every layer
of the call with the row's kernel in it, and session 24's one-frame lean entry A/B (call_path_rows.py).
``--row-gap a,b,c,rms [--threads N] [--repeats R]``: the layers interleaved with roofline.py's own calls of the row
(eager, Inductor, the memory roof's stream), as its table measures the gap (session 28).
``--split a,a16 [--threads N] [--repeats R]``: the row's call split where TorchDynamo calls the backend (its entry,
ours, its exit), beside the user's levers (``record_runtime_overhead``, the ``skip_guard_eval_unsafe`` stance,
``neuroncc.compile_program``) and a trivial graph through each backend, warm and after the kernel; ``--after``:
a tiny call's time after each kind of work; ``--serve-ab a,a16``: ``compile_program``'s one-frame call A/B
(call_split.py, session 29).
``--items c',rms [--threads N] [--repeats R]``: the row's call itemized with each call's own kernel time taken out
(its launches stamped): as built, without DirectCall's tensor check, with earlier takes of the output ring, and
TorchDynamo's part alone (call_items.py, session 35).
"""

from __future__ import annotations

import time

from common import ensure_environment, interleaved, record_compiled_graphs, settle_neuroncc

ensure_environment(threads=1)

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from call_path_rows import _fresh_function, dynamo_parts, entry_ab, gap, print_minus_kernel, row_gap  # noqa: E402


made = record_compiled_graphs()


def layernorm(x, w, b):
    return F.layer_norm(x, (x.shape[-1],), w, b)


def main() -> None:
    torch.manual_seed(0)
    xs = [torch.randn(s, dtype=torch.bfloat16) for s in [(8192, 1024), (1024,), (1024,)]]
    compiled = torch.compile(layernorm, backend="neuron", dynamic=False, options={"threads": 1})
    for _ in range(3):
        compiled(*xs)
    settle_neuroncc({"compiled": lambda: compiled(*xs)})
    direct = made[-1].direct
    addresses = [t.data_ptr() for t in xs]
    x0 = addresses[0]
    for name, pointer in [("compiled", compiled(*xs).data_ptr()), ("launch", direct.launch(addresses)[0].data_ptr())]:
        print(f"{name}: output - input = {pointer - x0} bytes ({(pointer - x0) % 4096} mod 4096)")
    raw = torch.empty(8192 * 1024 * 2 + 3 * 65536, dtype=torch.uint8)
    base = raw.data_ptr() + (-raw.data_ptr() % 65536)
    held = direct.launch(addresses)[0]

    def fresh_run():
        out = torch.empty(8192, 1024, dtype=torch.bfloat16)
        direct.run(addresses, [out.data_ptr()])
        return out  # kept until the kernel is done

    graph = made[-1]
    impls = {"compiled": lambda: compiled(*xs), "CompiledGraph([x, w, b])": lambda: graph(list(xs)),
             "launch (fresh output)": lambda: direct.launch(addresses),
             "run, output held": lambda: direct.run(addresses, [held.data_ptr()]), "run, torch.empty": fresh_run}
    for offset in (0, 4096 - 64):
        pointer = base + ((x0 + offset - base) % 65536)
        impls[f"run, own memory +{offset}"] = lambda p=pointer: direct.run(addresses, [p])
    times = interleaved(impls, repeats=21, clock=time.thread_time)
    for name, seconds in times.items():
        print(f"{name:28s} {seconds * 1e3:.3f} ms")

    cold_caches()


def cold_caches() -> None:
    """The same function on a tiny input ([16, 1024]), its compiled call and ``launch`` with the caches as the
    previous call left them and after a 64 MB ``fill_`` (what a roofline row's kernel does to them)."""
    import statistics

    made.clear()
    torch._dynamo.reset()
    xs = [torch.randn(s, dtype=torch.bfloat16) for s in [(16, 1024), (1024,), (1024,)]]
    compiled = torch.compile(layernorm, backend="neuron", dynamic=False, options={"threads": 1})
    for _ in range(3):
        compiled(*xs)
    direct = made[-1].direct
    addresses = [t.data_ptr() for t in xs]
    big = torch.empty(64 << 20, dtype=torch.uint8)
    calls = {"compiled": lambda: compiled(*xs), "launch": lambda: direct.launch(addresses)}
    samples: dict[str, list[float]] = {}
    for round_number in range(60):
        for name, call in calls.items():
            for state in ("warm", "after a 64 MB fill_"):
                if state != "warm":
                    big.fill_(round_number & 255)
                else:
                    call()
                start = time.thread_time()
                call()
                samples.setdefault(f"[16, 1024] {name}, caches {state}", []).append(time.thread_time() - start)
    for name, times in samples.items():
        print(f"{name:44s} {statistics.median(times) * 1e6:.1f} us")


#: ``--layers`` / ``--cold`` workloads: (function, input shapes, dtype); float32 rows at the roofline's size
#: (RMSNorm is a torch.compile row of roofline.py; softmax and LayerNorm run there as hand-built graphs, here
#: through torch.compile as a user meets them)
ROWS = {
    "rms": (lambda x, w: F.rms_norm(x, (x.shape[-1],), w, 1e-6), [(8192, 1024), (1024,)], torch.float32),
    "ln32": (lambda x, w, b: F.layer_norm(x, (x.shape[-1],), w, b, 1e-5), [(8192, 1024), (1024,), (1024,)],
             torch.float32),
    "softmax": (lambda x: torch.softmax(x, dim=-1), [(8192, 1024)], torch.float32),
    "ln": (layernorm, [(8192, 1024), (1024,), (1024,)], torch.bfloat16),
}


def layers(which: str, threads: int) -> None:
    """The per-layer breakdown (see the module docstring)."""
    import os
    import statistics

    from neuroncc.frontend.backend import neuron_backend

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    returned: dict = {}

    def recording(gm, example_inputs):
        fn = neuron_backend(gm, example_inputs, options={"threads": threads})
        returned["fn"] = fn

        def call(*args):
            returned.setdefault("args", args)
            return fn(*args)
        return call

    def neuron(gm, example_inputs):
        return neuron_backend(gm, example_inputs, options={"threads": threads})

    def through_aot_runtime(gm, example_inputs):  # the call before the lean path: AOTAutograd's runtime
        fn = neuron_backend(gm, example_inputs, options={"threads": threads})
        return getattr(fn, "slow", fn)

    if which == "mlp":
        model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10)).eval()
        inputs, repeats = (torch.randn(8, 64),), 1000
        variants = {name: model for name in ("floor", "neuroncc", "aot", "recorded")}
    else:
        model, shapes, dtype = ROWS[which]
        repeats = 61
        inputs = tuple(torch.randn(s, dtype=dtype) for s in shapes)
        variants = {name: _fresh_function(model) for name in ("floor", "neuroncc", "aot", "recorded")}
    clock = time.thread_time if threads == 1 else time.perf_counter
    compiled = {name: torch.compile(variants[name], backend=backend, dynamic=False)
                for name, backend in [("floor", "eager"), ("neuroncc", neuron), ("aot", through_aot_runtime),
                                      ("recorded", recording)]}
    with torch.no_grad():
        for _ in range(3):
            for fn in compiled.values():
                fn(*inputs)
        settle_neuroncc({name: (lambda fn=fn: fn(*inputs)) for name, fn in compiled.items()})
        fn, args = returned["fn"], returned["args"]
        lean = fn.__wrapped__  # TorchDynamo's disable wrapper around lean_call.lean_inference's callable
        slow = fn.slow
        graph = made[-1]
        full = list(args)  # TorchDynamo passes the module's parameters as graph inputs: none are prepended
        direct = graph.direct
        tensors = direct._tensors(full)
        tensors = (tensors,) if len(direct.inputs) == 1 else tensors
        addresses = [t.data_ptr() for t in tensors]
        held = direct.launch(addresses)
        pointers = [t.data_ptr() if t is not None else 0 for t in held]
        impls = {
            "eager": lambda: model(*inputs),
            "TorchDynamo floor (backend=eager)": lambda: compiled["floor"](*inputs),
            "neuroncc torch.compile (lean call)": lambda: compiled["neuroncc"](*inputs),
            "neuroncc torch.compile, AOTAutograd runtime": lambda: compiled["aot"](*inputs),
        }
        if which != "mlp":
            _, transformed = dynamo_parts(variants["neuroncc"], inputs)
            impls["transformed code (no eval frame, guards)"] = transformed
        impls.update({
            "backend's callable (no Dynamo frame)": lambda: fn(*args),
            "lean call, no disable wrapper": lambda: lean(*args),
            "AOTAutograd's runtime (disable + wrappers)": lambda: slow(*args),
            "CompiledGraph([inputs])": lambda: graph(list(full)),
            "CompiledGraph.lean_call(inputs)": lambda: graph.lean_call(full),
            "DirectCall(inputs)": lambda: direct(full),
            "launch(addresses): outputs made": lambda: direct.launch(addresses),
            "address call, outputs held": lambda: direct.run(addresses, pointers),
        })
        samples = {name: [] for name in impls}
        for _ in range(3):  # three interleaved runs, the median of their medians
            for name, seconds in interleaved(impls, repeats=repeats // 3 + 1, warmup=5, clock=clock).items():
                samples[name].append(seconds)
    eager = statistics.median(samples["eager"])
    unit, scale = ("us", 1e6)
    print(f"{which}, {threads} thread(s), {'CPU time' if threads == 1 else 'wall time'}, load "
          f"{', '.join(f'{x:.2f}' for x in os.getloadavg())}")
    for name, times in samples.items():
        t = statistics.median(times)
        print(f"{name:46s} {t * scale:9.1f} {unit}  {t / eager:5.2f}x eager")


def cold_layers(which: str, threads: int, rounds: int = 200) -> None:
    """Each layer of the compiled call on a tiny input ([16, 1024]: its kernel takes microseconds), timed
    right after the row's own large kernel ([8192, 1024], a held output) ran, untimed: the state a roofline
    row's compiled call starts in. Rows in a fresh random order each round; medians. A row's difference from
    the next is that layer's cost on caches the kernel emptied."""
    import os
    import random
    import statistics

    from neuroncc.frontend.backend import neuron_backend

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    function, shapes, dtype = ROWS[which]
    returned: dict = {}

    def recording(gm, example_inputs):
        fn = neuron_backend(gm, example_inputs, options={"threads": threads})
        returned["fn"] = fn
        return fn

    big_inputs = [torch.randn(s, dtype=dtype) for s in shapes]
    small_inputs = tuple(torch.randn((16, *s[1:]) if len(s) == 2 else s, dtype=dtype) for s in shapes)
    big_fn, small_fn = _fresh_function(function), _fresh_function(function)
    big = torch.compile(big_fn, backend=recording, dynamic=False)
    small = torch.compile(small_fn, backend=recording, dynamic=False)
    for _ in range(3):
        big(*big_inputs)
    for _ in range(3):
        small(*small_inputs)
    settle_neuroncc({"big": lambda: big(*big_inputs), "small": lambda: small(*small_inputs)})
    big_direct = made[-2].direct
    big_addresses = [t.data_ptr() for t in big_inputs]
    big_held = big_direct.launch(big_addresses)
    big_pointers = [t.data_ptr() for t in big_held]
    graph = made[-1]
    fn = returned["fn"]
    lean = fn.__wrapped__
    direct = graph.direct
    addresses = [t.data_ptr() for t in small_inputs]
    held = direct.launch(addresses)
    pointers = [t.data_ptr() for t in held]
    guard, transformed = dynamo_parts(small_fn, small_inputs)
    dynamo_global = next(value for name, value in small_fn.__globals__.items()
                         if name.startswith("__compiled_fn") and getattr(value, "__wrapped__", None) is lean)
    full = list(small_inputs)
    impls = {
        "torch.compile call": lambda: small(*small_inputs),
        "transformed code (no eval frame, guards)": transformed,
        "guard check alone": guard,
        "Dynamo's disable(our callable)": lambda: dynamo_global(*small_inputs),
        "lean call, no disable wrapper": lambda: lean(*small_inputs),
        "CompiledGraph.lean_call(inputs)": lambda: graph.lean_call(full),
        "  its call before session 19 (final-code checks, _direct_outputs)": lambda: (graph._take_final_code(),
                                                                                   graph._direct_outputs(full)),
        "DirectCall.outputs_call(inputs)": lambda: direct.outputs_call(full),
        "DirectCall(inputs)": lambda: direct(full),
        "launch(addresses): outputs made": lambda: direct.launch(addresses),
        "address call, outputs held": lambda: direct.run(addresses, pointers),
        "nothing (the clock)": lambda: None,
    }
    # the bytecode TorchDynamo puts before the graph's call (dis of the transformed code): the accelerator's
    # current stream stored for stream ops (emitted when torch.accelerator.is_available(): the neuron device)
    # and the runtime-overhead profiler range (config.record_runtime_overhead)
    from torch._dynamo import graph_bytecode_inputs, utils as dynamo_utils

    def stream_prelude():
        graph_bytecode_inputs.store_user_object_weakrefs(dynamo_utils.get_current_stream(torch.device("neuron", 0)))

    def overhead_range():
        dynamo_utils.record_pregraph_bytecode_exit(dynamo_utils.record_pregraph_bytecode_enter())

    if torch.accelerator.is_available():
        impls["prelude: current stream stored"] = stream_prelude
    impls["prelude: record_pregraph_bytecode enter/exit"] = overhead_range
    samples: dict[str, list[float]] = {name: [] for name in impls}
    names = list(impls)
    order = random.Random(0x5EED)
    clock = time.perf_counter
    for _ in range(rounds):
        order.shuffle(names)
        for name in names:
            call = impls[name]
            big_direct.run(big_addresses, big_pointers)
            start = clock()
            call()
            samples[name].append(clock() - start)
    if direct.outputs_call is None:
        del impls["DirectCall.outputs_call(inputs)"]
    print(f"{which} [16, ...] after its [8192, ...] kernel, {threads} thread(s), wall time, {rounds} rounds, load "
          f"{', '.join(f'{x:.2f}' for x in os.getloadavg())}")
    for name, times in samples.items():
        print(f"{name:66s} {statistics.median(times) * 1e6:9.1f} us")


def stream_ab(rows: list[str], threads: int, repeats: int = 41) -> None:
    """In-process A/B of frontend/accelerator_stream.py on roofline.py's rows that run through torch.compile:
    each row's function compiled twice (code objects of their own), once traced with TorchDynamo's own stream
    state (its compiled frame fetches and stores the neuron accelerator's current stream before every call: the
    code before the change) and once with the change; the two calls interleaved with eager, in a fresh random
    order each round (``common.interleaved_samples``). Both run the same executable (the graph cache's entry)."""
    import os
    import statistics

    import numpy as np
    from torch._dynamo.variables import streams

    import neuroncc.frontend.backend  # noqa: F401  (installs the change, as the backend's entry point does)
    from common import interleaved_samples
    from kernel_cases import cases

    torch.set_num_threads(threads)
    ours = streams.SymbolicStreamState.__init__
    clock = time.thread_time if threads == 1 else time.perf_counter
    print(f"{threads} thread(s), {'CPU time' if threads == 1 else 'wall time'}, {repeats} rounds, load "
          f"{', '.join(f'{x:.2f}' for x in os.getloadavg())}")
    for case in (c for c in cases() if c.key in rows):
        inputs = case.make(np.random.default_rng(0))
        compiled = {}
        for name, init in (("before (stream fetched per call)", ours.__wrapped__), ("after", ours)):
            streams.SymbolicStreamState.__init__ = init
            try:
                fn = torch.compile(_fresh_function(case.eager), backend="neuron", dynamic=False,
                                   options={"threads": threads})
                fn(*inputs)
            finally:
                streams.SymbolicStreamState.__init__ = ours
            compiled[name] = fn
        impls = {"eager": lambda: case.eager(*inputs)}
        impls.update({name: (lambda fn=fn: fn(*inputs)) for name, fn in compiled.items()})
        samples = interleaved_samples(impls, repeats=repeats, warmup=3, clock=clock)
        before, after = samples["before (stream fetched per call)"], samples["after"]
        ratio = statistics.median(b / a for b, a in zip(before, after))
        print(f"{case.title:45s} eager {statistics.median(samples['eager']) * 1e3:.3f} ms, before "
              f"{statistics.median(before) * 1e3:.3f} ms, after {statistics.median(after) * 1e3:.3f} ms, "
              f"median per-round before/after {ratio:.3f}, diff {statistics.median(b - a for b, a in zip(before, after)) * 1e6:.0f} us")


def lean_ab(rows: list[str], threads: int, repeats: int = 101) -> None:
    """A roofline row's call itemized, and session 19's lean call against the call before it, in one process:
    each row's [8192, 1024] function through torch.compile, then, interleaved (a fresh random order each round,
    ``common.interleaved_samples``): its kernel alone (the address call into a held output), ``launch`` (the
    output made and placed), the ``CompiledGraph`` lean call as committed and as it was before (the final-code
    checks, then ``_direct_outputs``: ``DirectCall.__call__`` and ``launch``), and the whole torch.compile call.
    Medians, and per round each call minus the kernel alone; the before/after pair as per-round differences."""
    import os
    import statistics

    from common import interleaved_samples
    from neuroncc.frontend.backend import neuron_backend

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    clock = time.thread_time if threads == 1 else time.perf_counter
    print(f"{threads} thread(s), {'CPU time' if threads == 1 else 'wall time'}, {repeats} rounds, load "
          f"{', '.join(f'{x:.2f}' for x in os.getloadavg())}")
    for which in rows:
        function, shapes, dtype = ROWS[which]
        inputs = [torch.randn(s, dtype=dtype) for s in shapes]
        fn = torch.compile(_fresh_function(function), backend=lambda gm, example: neuron_backend(
            gm, example, options={"threads": threads}), dynamic=False)
        for _ in range(3):
            fn(*inputs)
        settle_neuroncc({"fn": lambda: fn(*inputs)})
        graph = made[-1]
        direct = graph.direct
        addresses = [t.data_ptr() for t in inputs]
        held = direct.launch(addresses)
        pointers = [0 if t is None else t.data_ptr() for t in held]
        full = list(inputs)
        impls = {
            "kernel alone (output held)": lambda: direct.run(addresses, pointers),
            "launch: output made and placed": lambda: direct.launch(addresses),
            "lean call (after)": lambda: graph.lean_call(full),
            "lean call (before)": lambda: (graph._take_final_code(), graph._direct_outputs(full)),
            "torch.compile call": lambda: fn(*inputs),
        }
        samples = interleaved_samples(impls, repeats=repeats, warmup=3, clock=clock)
        print(f"{which} [8192, 1024] {dtype}: one-frame call {'on' if direct.outputs_call else 'off'}")
        print_minus_kernel(samples, 34)
        before, after = samples["lean call (before)"], samples["lean call (after)"]
        saved = statistics.median(b - a for b, a in zip(before, after))
        print(f"  lean call before - after, per round: {saved * 1e6:.1f} us; before/after "
              f"{statistics.median(b / a for b, a in zip(before, after)):.4f}")


if __name__ == "__main__":
    import sys

    def _value(flag: str) -> str:
        return sys.argv[sys.argv.index(flag) + 1]

    def _repeats(default: int) -> int:
        return int(_value("--repeats")) if "--repeats" in sys.argv else default

    threads = int(_value("--threads")) if "--threads" in sys.argv else 1
    if "--layers" in sys.argv:
        layers(_value("--layers"), threads)
    elif "--stream-ab" in sys.argv:
        stream_ab(_value("--stream-ab").split(","), threads)
    elif "--lean-ab" in sys.argv:
        lean_ab(_value("--lean-ab").split(","), threads)
    elif "--entry-ab" in sys.argv:
        entry_ab(made, _value("--entry-ab").split(","), threads, _repeats(201))
    elif "--row-gap" in sys.argv:
        row_gap(made, _value("--row-gap").split(","), threads, _repeats(101))
    elif "--gap" in sys.argv:
        gap(made, _value("--gap").split(","), threads, _repeats(61))
    elif "--split" in sys.argv:
        from call_split import split

        split(made, _value("--split").split(","), threads, _repeats(201))
    elif "--serve-ab" in sys.argv:
        from call_split import serve_ab

        serve_ab(made, _value("--serve-ab").split(","), threads, _repeats(301))
    elif "--items" in sys.argv:
        from call_items import items

        items(made, _value("--items").split(","), threads, _repeats(301))
    elif "--after" in sys.argv:
        from call_split import after

        after(threads, _repeats(61))
    elif "--cold" in sys.argv:
        cold_layers(_value("--cold"), threads)
    else:
        main()
