"""Where the compiled call path's extra time goes (issue #19): bf16 LayerNorm [8192, 1024] at 1 thread through
``torch.compile(backend="neuron")`` against the same compiled graph's executable called outside TorchDynamo on
the same input memory, as the boxed ``CompiledGraph`` call AOTAutograd makes, with fresh outputs (``DirectCall.launch``, what the compiled function runs), with an
output held between calls, and with outputs at chosen offsets past the input in memory of its own; then, on a tiny input, the
compiled call's fixed cost with warm caches and after a 64 MB stream (docs/performance-history.md, session 15
boundary: the gap is TorchDynamo's and AOTAutograd's path run on emptied caches).

Run: ``/work/bin/heavy x python benchmarks/bench_call_path.py`` (medians of interleaved calls, CPU time of the
calling thread). A diagnosis tool: it reaches into the front end's ``CompiledGraph`` to call its executable.
"""

from __future__ import annotations

import time

from common import ensure_environment, interleaved

ensure_environment(threads=1)

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import neuroncc.frontend.compiled as compiled_module  # noqa: E402

made: list = []
_original_init = compiled_module.CompiledGraph.__init__


def _recording_init(self, *args, **kwargs):
    _original_init(self, *args, **kwargs)
    made.append(self)


compiled_module.CompiledGraph.__init__ = _recording_init


def layernorm(x, w, b):
    return F.layer_norm(x, (x.shape[-1],), w, b)


def main() -> None:
    torch.manual_seed(0)
    xs = [torch.randn(s, dtype=torch.bfloat16) for s in [(8192, 1024), (1024,), (1024,)]]
    compiled = torch.compile(layernorm, backend="neuron", dynamic=False, options={"threads": 1})
    for _ in range(3):
        compiled(*xs)
    import neuroncc.executors.cpu.tiers as tiers

    tiers.OPTIMIZER.wait()
    compiled(*xs)
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


if __name__ == "__main__":
    main()
