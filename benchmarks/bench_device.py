"""The neuron device against CPU eager: per-op overhead, a training step, compile times, warm processes.

    flock -x /work/heavy.lock env MALLOC_MMAP_THRESHOLD_=1073741824 MALLOC_TRIM_THRESHOLD_=4294967296 \\
        python benchmarks/bench_device.py [--rows overhead,mlp,amp,encoder,compile,processes,autoload,generate]
            [--repeat 30]

Rows (2 threads, interleaved medians, benchmarks/common.py; compare ratios within one run, the machine is
shared and the load average is printed):

* ``overhead``: small eager ops (16 elements) on CPU and on the device, microseconds per op (each sample
  times a loop of 200 calls). The device's number is its whole cost per op: dispatch, signature, kernel
  lookup, allocation, the kernel call. The device runs each op in float32, bfloat16 and float16
  (interleaved): a low-precision op should cost what a float32 one does (it cost 8x before session 28).
* ``mlp``: one training step (forward, backward, AdamW) of a 512-2048-512 MLP at batch 128: CPU eager, the
  device eager, and the device under ``torch.compile(backend="neuron")``.
* ``optim``: ``optimizer.step()`` alone (gradients fixed) over a small parameter set (a 64-64-8 MLP's 4
  tensors, 4.7K elements: per-op overhead) and a large one (a 4-layer d=256 transformer's 50 tensors, 3.7M
  elements: memory bandwidth), for SGD with momentum, Adam and AdamW in each form a user can ask for (the
  default, ``foreach=True``, ``foreach=False``, ``fused=True``): CPU eager against the device, interleaved, and
  each against CPU's fused kernel; then what runs beside the step every step (GradScaler's unscale,
  ``clip_grad_norm_``, ``zero_grad(set_to_none=False)``). ``--threads 1`` for the one-thread medians.
* ``amp``: the MLP step in float32 and under ``torch.autocast(device, dtype=torch.bfloat16)``, CPU eager, the
  device eager and compiled; compiled also with its bf16 products on float32 buffers (the pipeline without
  ``bf16-product-words``, as before session 47) and, on a host with native bf16 products, with them as float32
  products of the bf16 values (as before session 46: ``extern.aten_multiplies_bf16_natively`` off for its
  calls); and
  LayerNorm's forward on the device with a bfloat16 input and float32 weights (autocast's mix), as PyTorch's
  CompositeExplicitAutograd math kernel runs it (batch norm, mul, add: three device kernels) and as the device
  compiles it whole since session 27.
* ``encoder``: an eval-mode ``nn.TransformerEncoderLayer`` (batch_first, relu) under ``torch.no_grad()``, the
  inference call: CPU eager (PyTorch's fused fast path, ``aten._transformer_encoder_layer_fwd``), the device
  on the fast path (the fused op compiled as one program through the front end's decomposition; it ran on
  CPU as a fallback before session 14), and the device with the fast path off (one kernel per plain op).
* ``compile``: the first use of 24 ops of different kinds on a fresh compile cache (each a new signature),
  minus a warm call of the same op: milliseconds to compile one op (trace or build the one-op graph, import,
  pass pipeline, LLVM), median and spread.
* ``processes``: the MLP step in two fresh processes sharing a fresh cache: ops compiled in each (the second
  must compile none), the first step's time in each.
* ``autoload``: what the device's ``torch.backends`` hook adds to ``import torch`` (fresh processes,
  interleaved with the hook off).
* ``generate``: a tiny HF GPT-2 (2 layers, 64 wide, vocabulary 500; ``transformers``) greedily generating 20
  tokens for a [2, 7] prompt: every decoding step has a new sequence length, so every op touching the KV cache
  is a new signature. Each round runs two fresh processes per tree: ``cold`` (an empty compile cache) and
  ``warm disk`` (the cache the cold one filled: every kernel on disk, none in memory); the warm process then
  times ``steady`` (the same generate again: every signature met) against CPU eager, interleaved. It also
  itemizes the warm process's first generate: new entries (``device/entries.py make_entry``) and their
  seconds, the decomposed ops traced (``programs._traced_graph``), compile-cache loads (``driver/cache.py
  _load``) and CPU fallbacks. ``--trees name=DIR,...`` runs the rounds of several source trees interleaved
  (``DIR`` goes first on ``PYTHONPATH``; ``.`` is this one): an A/B of first-use costs.
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# this tree's neuroncc, not the one the venv was installed from (another work tree's copy of this script A/Bs)
sys.path.insert(1, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from common import ensure_environment, interleaved, interleaved_samples, table  # noqa: E402

LOOP = 200
ROWS = ("overhead", "mlp", "optim", "amp", "encoder", "compile", "processes", "autoload", "generate")


def load() -> str:
    return ", ".join(f"{x:.2f}" for x in os.getloadavg())


def bench_overhead(repeat: int) -> str:
    import torch

    cases = {
        "add": lambda x, y: x + y,
        "mul by a float": lambda x, y: x * 0.5,
        "relu": lambda x, y: x.relu(),
        "sum": lambda x, y: x.sum(),
        "in-place add_": lambda x, y: x.add_(y, alpha=1e-3),
        "add, alpha=0.5": lambda x, y: torch.add(x, y, alpha=0.5),
        "layer_norm (3 results)": lambda x, y: torch.nn.functional.layer_norm(x, (16,)),
        "view": lambda x, y: x.view(4, 4),
    }
    dtypes = {"float32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}
    rows = []
    for name, op in cases.items():
        cpu = (torch.randn(16), torch.randn(16))
        tensors = {"cpu": cpu}
        tensors.update({f"neuron {d}": tuple(t.to(dtype).to("neuron") for t in cpu) for d, dtype in dtypes.items()})

        def loop(device: str, op=op) -> None:
            x, y = tensors[device]
            for _ in range(LOOP):
                op(x, y)

        samples = interleaved_samples({d: (lambda d=d: loop(d)) for d in tensors}, repeats=repeat)
        us = {d: [t / LOOP * 1e6 for t in times] for d, times in samples.items()}
        median = {d: statistics.median(times) for d, times in us.items()}
        f32 = median["neuron float32"]
        rows.append([name, f"{median['cpu']:.2f}", f"{f32:.2f} ({min(us['neuron float32']):.1f}-"
                     f"{max(us['neuron float32']):.1f})", f"{f32 / median['cpu']:.1f}x"]
                    + [f"{median[f'neuron {d}']:.2f} ({min(us[f'neuron {d}']):.1f}-{max(us[f'neuron {d}']):.1f})"
                       f" {median[f'neuron {d}'] / f32:.2f}x" for d in ("bf16", "f16")])
    return table(rows, ["op (16 elements)", "CPU eager us", "neuron float32 us (min-max)", "vs CPU",
                        "neuron bf16 us, vs float32", "neuron f16 us, vs float32"])


def _mlp(device: str):
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(512, 2048), torch.nn.GELU(), torch.nn.Linear(2048, 512)).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.randn(128, 512).to(device)
    target = torch.randn(128, 512).to(device)
    return model, optimizer, x, target


def _step(model, optimizer, x, target) -> None:
    import torch

    loss = torch.nn.functional.mse_loss(model(x), target)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()


def bench_mlp(repeat: int) -> str:
    import torch

    setups = {"CPU eager": _mlp("cpu"), "neuron eager": _mlp("neuron"), "neuron compiled": _mlp("neuron")}
    model, optimizer, x, target = setups["neuron compiled"]
    compiled = torch.compile(model, backend="neuron", dynamic=False)
    setups["neuron compiled"] = (compiled, optimizer, x, target)
    for setup in setups.values():  # compile everything before timing
        for _ in range(2):
            _step(*setup)
    times = interleaved({name: (lambda s=s: _step(*s)) for name, s in setups.items()}, repeats=repeat)
    base = times["CPU eager"]
    rows = [[name, f"{t * 1e3:.2f}", f"{t / base:.2f}x"] for name, t in times.items()]
    return table(rows, ["MLP 512-2048-512, batch 128, AdamW step", "ms", "vs CPU eager"])


def _optim_shapes(which: str) -> list[tuple[int, ...]]:
    if which == "small":
        return [(64, 64), (64,), (8, 64), (8,)]
    d, ffn = 256, 1024
    shapes: list[tuple[int, ...]] = [(2048, d)]
    for _ in range(4):
        shapes += [(d,), (d,), (3 * d, d), (3 * d,), (d, d), (d,), (d,), (d,), (ffn, d), (ffn,), (d, ffn), (d,)]
    return shapes + [(d,)]


def _optim_step(device: str, which: str, optimizer: str, form: dict):
    """``optimizer.step`` over fresh parameters of set ``which`` on ``device``, their gradients fixed."""
    import torch

    generator = torch.Generator().manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(s, generator=generator).to(device)) for s in _optim_shapes(which)]
    for p in params:
        p.grad = (torch.randn(p.shape, generator=generator) * 1e-2).to(device)
    made = {"SGD momentum": lambda: torch.optim.SGD(params, lr=1e-3, momentum=0.9, **form),
            "Adam": lambda: torch.optim.Adam(params, lr=1e-3, **form),
            "AdamW": lambda: torch.optim.AdamW(params, lr=1e-3, weight_decay=1e-2, **form)}[optimizer]()
    for _ in range(3):  # the state made and every kernel compiled before timing
        made.step()
    return made.step


def _around_step(device: str, which: str) -> dict:
    """What runs every step beside the optimizer, over the parameters of set ``which`` on ``device``:
    GradScaler's unscale (``_amp_foreach_non_finite_check_and_unscale_``), ``clip_grad_norm_`` (Hugging Face's
    ``max_grad_norm=1.0``) and ``zero_grad(set_to_none=False)``."""
    import torch

    generator = torch.Generator().manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(s, generator=generator).to(device)) for s in _optim_shapes(which)]
    for p in params:
        p.grad = (torch.randn(p.shape, generator=generator) * 1e-2).to(device)
    grads = [p.grad for p in params]
    found_inf, inv_scale = torch.zeros(1, device=device), torch.ones(1, device=device)
    zeroed = [g.clone() for g in grads]
    return {"GradScaler unscale_": lambda: torch._amp_foreach_non_finite_check_and_unscale_(grads, found_inf,
                                                                                          inv_scale),
            "clip_grad_norm_(1e9)": lambda: torch.nn.utils.clip_grad_norm_(params, 1e9),
            "zero_grad(set_to_none=False)": lambda: torch._foreach_zero_(zeroed)}


def bench_optim(repeat: int) -> str:
    import warnings

    forms = {"default": {}, "foreach=True": {"foreach": True}, "foreach=False": {"foreach": False},
             "fused=True": {"fused": True}}
    rows, around = [], []
    for which in ("small", "large"):
        elements = sum(math.prod(s) for s in _optim_shapes(which))
        label = f"{which} ({len(_optim_shapes(which))} tensors, {elements / 1e3:.0f}K)"
        for optimizer in ("SGD momentum", "Adam", "AdamW"):
            steps = {}
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # a form that falls back warns once; the table shows its time
                for name, form in forms.items():
                    steps[f"cpu {name}"] = _optim_step("cpu", which, optimizer, form)
                    steps[f"neuron {name}"] = _optim_step("neuron", which, optimizer, form)
                samples = interleaved_samples(steps, repeats=repeat)
            us = {name: statistics.median(s) * 1e6 for name, s in samples.items()}
            for name in forms:
                cpu, dev = us[f"cpu {name}"], us[f"neuron {name}"]
                spread = samples[f"neuron {name}"]
                rows.append([f"{optimizer}, {label}", name, f"{cpu:.0f}",
                             f"{dev:.0f} ({min(spread) * 1e6:.0f}-{max(spread) * 1e6:.0f})", f"{dev / cpu:.2f}x",
                             f"{dev / us['cpu fused=True']:.2f}x"])
        cases = {f"{device} {name}": call for device in ("cpu", "neuron")
                 for name, call in _around_step(device, which).items()}
        for call in cases.values():  # every kernel compiled before timing
            call()
        samples = interleaved_samples(cases, repeats=repeat)
        us = {name: statistics.median(s) * 1e6 for name, s in samples.items()}
        for name in _around_step("cpu", "small"):
            cpu, dev, spread = us[f"cpu {name}"], us[f"neuron {name}"], samples[f"neuron {name}"]
            around.append([f"{name}, {label}", f"{cpu:.0f}", f"{dev:.0f} ({min(spread) * 1e6:.0f}-"
                           f"{max(spread) * 1e6:.0f})", f"{dev / cpu:.2f}x"])
    return "\n".join([
        table(rows, ["optimizer.step() alone", "form", "CPU eager us", "neuron us (min-max)", "vs CPU",
                     "vs CPU fused"]),
        table(around, ["beside the step", "CPU eager us", "neuron us (min-max)", "vs CPU"])])


def _autocast_step(device: str, setup, dtype) -> None:
    import torch

    with torch.autocast(device, dtype=dtype, enabled=dtype is not None):
        loss = torch.nn.functional.mse_loss(setup[0](setup[2]), setup[3])
    setup[1].zero_grad(set_to_none=True)
    loss.backward()
    setup[1].step()


def bench_amp(repeat: int) -> str:
    import torch
    from neuroncc.executors.cpu import extern
    from neuroncc.passes import default_pipeline

    bf16 = torch.bfloat16
    float32_products = "neuron compiled autocast bf16, float32 products (before session 46)"
    runs = {"CPU eager float32": ("cpu", None), "CPU eager autocast bf16": ("cpu", bf16),
            "neuron eager float32": ("neuron", None), "neuron eager autocast bf16": ("neuron", bf16),
            "neuron compiled autocast bf16": ("neuron", bf16)}
    float32_buffers = "neuron compiled autocast bf16, float32 buffers (before session 47)"
    runs[float32_buffers] = ("neuron", bf16)
    if extern.aten_multiplies_bf16_natively():  # the compiled graphs' bf16 products as float32 products, as before
        runs[float32_products] = ("neuron", bf16)
    setups = {name: _mlp(device) for name, (device, _) in runs.items()}
    # before session 47 the bf16 products read and wrote float32 buffers (the pipeline without bf16-product-words)
    pipelines = {float32_buffers: default_pipeline("cpu").replace("bf16-product-words,", "")}
    for name in ("neuron compiled autocast bf16", float32_buffers, float32_products):
        if name in setups:
            model, optimizer, x, target = setups[name]
            options = {"pipeline": pipelines[name]} if name in pipelines else {}
            setups[name] = (torch.compile(model, backend="neuron", dynamic=False, options=options), optimizer, x,
                            target)

    def step(name: str, device: str, dtype: Any) -> None:
        if name != float32_products:
            _autocast_step(device, setups[name], dtype)
            return
        native, extern._NATIVE_BF16 = extern._NATIVE_BF16, False  # (read by each compiled graph's extern step)
        try:
            _autocast_step(device, setups[name], dtype)
        finally:
            extern._NATIVE_BF16 = native

    calls = {name: (lambda n=name, d=device, t=dtype: step(n, d, t)) for name, (device, dtype) in runs.items()}
    for call in calls.values():
        call(), call()
    times = interleaved(calls, repeats=repeat)
    base = times["CPU eager float32"]
    steps = table([[name, f"{t * 1e3:.2f}", f"{t / base:.2f}x"] for name, t in times.items()],
                  ["MLP 512-2048-512, batch 128, AdamW step", "ms", "vs CPU eager float32"])

    op = torch.ops.aten.native_layer_norm.default
    math_kernel = torch._C.DispatchKeySet(torch._C.DispatchKey.CompositeExplicitAutograd)
    x, weight = torch.randn(128, 8, 512, dtype=bf16, device="neuron"), torch.randn(512, device="neuron")
    norms = {"ATen's math kernel (3 device kernels)": lambda: op.redispatch(math_kernel, x, [512], weight, weight, 1e-5),
             "the device's kernel (one program)": lambda: op(x, [512], weight, weight, 1e-5)}
    with torch.no_grad():
        for norm in norms.values():
            norm(), norm()
        norm_times = interleaved(norms, repeats=repeat)
    norm_rows = [[name, f"{t * 1e3:.3f}"] for name, t in norm_times.items()]
    return steps + "\n" + table(norm_rows, ["LayerNorm [128, 8, 512] bf16, float32 weights, on the device", "ms"])


def bench_encoder(repeat: int) -> str:
    import torch

    rows = []
    for d_model, heads, feedforward, batch, length in ((64, 4, 256, 32, 16), (256, 8, 1024, 8, 128)):
        torch.manual_seed(0)
        layer = torch.nn.TransformerEncoderLayer(d_model, heads, feedforward, batch_first=True).eval()
        x = torch.randn(batch, length, d_model)
        on_device = copy.deepcopy(layer).to("neuron"), x.to("neuron")

        def call(model, inputs, fast_path):
            torch.backends.mha.set_fastpath_enabled(fast_path)
            try:
                with torch.no_grad():
                    return model(inputs)
            finally:
                torch.backends.mha.set_fastpath_enabled(True)

        cases = {"CPU eager (fused kernel)": lambda: call(layer, x, True),
                 "neuron, fast path": lambda: call(*on_device, True),
                 "neuron, fast path off": lambda: call(*on_device, False)}
        for case in cases.values():  # compile everything before timing
            case()
        times = interleaved(cases, repeats=repeat)
        base = times["CPU eager (fused kernel)"]
        label = f"d={d_model} h={heads} ffn={feedforward}, [{batch}, {length}]"
        rows += [[label, name, f"{t * 1e3:.3f}", f"{t / base:.2f}x"] for name, t in times.items()]
    return table(rows, ["TransformerEncoderLayer inference", "run", "ms", "vs CPU eager"])


def bench_compile() -> str:
    saved_cache_dir = os.environ.get("NEURONCC_CACHE_DIR")
    os.environ["NEURONCC_CACHE_DIR"] = tempfile.mkdtemp(prefix="bench-device-cache-")  # nothing seen before
    try:
        return _bench_compile()
    finally:  # later rows (autoload's processes) must not inherit this cache of first uses
        if saved_cache_dir is None:
            os.environ.pop("NEURONCC_CACHE_DIR", None)
        else:
            os.environ["NEURONCC_CACHE_DIR"] = saved_cache_dir


def _bench_compile() -> str:
    import torch

    import neuroncc

    x, y = torch.randn(4, 8, device="neuron"), torch.randn(4, 8, device="neuron")
    (x + y).exp()  # LLVM and the front end loaded before timing
    ops = [
        lambda n: x[:, :n] * y[:, :n], lambda n: x[:, :n].exp(), lambda n: x[:, :n].sum(1),
        lambda n: x[:, :n].amax(0), lambda n: torch.tanh(x[:, :n]), lambda n: x[:, :n].sigmoid() + 1.5,
        lambda n: torch.where(x[:, :n] > 0, x[:, :n], y[:, :n]), lambda n: x[:, :n].softmax(-1),
        lambda n: torch.nn.functional.gelu(x[:, :n]), lambda n: x[:, :n] @ y[:, :n].t(),
        lambda n: torch.nn.functional.layer_norm(x[:, :n], (n,)), lambda n: x[:, :n].mean(0, keepdim=True),
        lambda n: torch.clamp(x[:, :n], -0.5, 0.5), lambda n: x[:, :n].pow(3), lambda n: x[:, :n].abs().sqrt(),
        lambda n: torch.cat([x[:, :n], y[:, :n]]), lambda n: x[:, :n].t().contiguous(),
        lambda n: torch.addcmul(x[:, :n], x[:, :n], y[:, :n], value=0.1), lambda n: x[:, :n].log_softmax(1),
        lambda n: (x[:, :n] > y[:, :n]).float(), lambda n: torch.maximum(x[:, :n], y[:, :n]),
        lambda n: x[:, :n].cumsum(1), lambda n: torch.erf(x[:, :n]), lambda n: x[:, :n].var(1),
    ]
    seconds = []
    for index, op in enumerate(ops):
        n = 3 + index % 5  # a signature no earlier op used
        before = neuroncc.stats()["eager_kernels_compiled"]
        start = time.perf_counter()
        op(n)
        first = time.perf_counter() - start
        start = time.perf_counter()
        op(n)
        warm = time.perf_counter() - start
        if neuroncc.stats()["eager_kernels_compiled"] > before:
            seconds.append((first - warm) / (neuroncc.stats()["eager_kernels_compiled"] - before))
    ms = sorted(s * 1e3 for s in seconds)
    quartiles = statistics.quantiles(ms, n=4)
    rows = [[len(ms), f"{statistics.median(ms):.1f}", f"{quartiles[0]:.1f}", f"{quartiles[2]:.1f}", f"{ms[-1]:.1f}"]]
    return table(rows, ["ops compiled", "median ms", "p25", "p75", "max"])


_PROCESS_SCRIPT = """
import json, time, torch, neuroncc
torch.set_num_threads(2)
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(512, 2048), torch.nn.GELU(), torch.nn.Linear(2048, 512)).to("neuron")
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
x, target = torch.randn(128, 512, device="neuron"), torch.randn(128, 512, device="neuron")
start = time.perf_counter()
loss = torch.nn.functional.mse_loss(model(x), target)
optimizer.zero_grad(); loss.backward(); optimizer.step()
first = time.perf_counter() - start
s = neuroncc.stats()
print(json.dumps({"compiled": s["eager_kernels_compiled"], "loaded": s["eager_kernels_loaded"], "first_s": first}))
"""


def bench_processes() -> str:
    rows = []
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, NEURONCC_CACHE_DIR=cache)
        for name in ("first process", "second process"):
            out = subprocess.run([sys.executable, "-c", _PROCESS_SCRIPT], env=env, capture_output=True, text=True,
                                 check=True, timeout=900)
            result = json.loads(out.stdout.strip().splitlines()[-1])
            rows.append([name, result["compiled"], result["loaded"], f"{result['first_s']:.2f}"])
    return table(rows, ["MLP step in", "ops compiled", "loaded from the cache", "first step s"])


_IMPORT_SCRIPT = "import time; t = time.perf_counter(); import torch; print(time.perf_counter() - t)"
#: the hook alone (what autoload runs inside ``import torch``), then the first op, each timed in-process
#: and then a model's first few ops (a number, a matrix product, a reduction, softmax's traced decomposition),
#: and whether they imported TorchDynamo (1 or 0)
_HOOK_SCRIPT = ("import os, sys, time; os.environ['TORCH_DEVICE_BACKEND_AUTOLOAD'] = '0'; import torch; "
                "t = time.perf_counter(); import neuroncc; neuroncc._autoload_device(); h = time.perf_counter() - t; "
                "t = time.perf_counter(); x = torch.ones(64, 64, device='neuron'); o = time.perf_counter() - t; "
                "t = time.perf_counter(); y = ((x * 2 + 1).relu() @ x).softmax(-1).sum(); "
                "print(h, o, time.perf_counter() - t, int('torch._dynamo' in sys.modules))")


def bench_autoload(repeat: int) -> str:
    """``import torch`` with the hook off and on (fresh processes, interleaved), and in-process: the hook alone
    and the first op after it. The processes share one compile cache filled beforehand, so the first op loads
    its kernel instead of compiling it (first use is the ``compile`` row)."""
    cache = tempfile.mkdtemp(prefix="bench-device-autoload-")

    def run(script: str, autoload: str) -> list[float]:
        env = dict(os.environ, TORCH_DEVICE_BACKEND_AUTOLOAD=autoload, NEURONCC_CACHE_DIR=cache)
        out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True)
        return [float(v) for v in out.stdout.strip().splitlines()[-1].split()]

    run(_HOOK_SCRIPT, "0")  # fills the cache with the first op's kernel
    with_hook, without, hook, first_op, first_ops, dynamo = [], [], [], [], [], []
    for _ in range(max(repeat // 3, 5)):
        without += run(_IMPORT_SCRIPT, "0")
        with_hook += run(_IMPORT_SCRIPT, "1")
        alone, op, ops, imported = run(_HOOK_SCRIPT, "0")
        hook.append(alone)
        first_op.append(op)
        first_ops.append(ops)
        dynamo.append(imported)

    def ms(values: list[float]) -> str:
        return f"{statistics.median(values) * 1e3:.1f} (min {min(values) * 1e3:.1f})"

    rows = [[ms(without), ms(with_hook), f"{(statistics.median(with_hook) - statistics.median(without)) * 1e3:.0f}",
             ms(hook), ms(first_op), ms(first_ops), f"{sum(dynamo):.0f} of {len(dynamo)}"]]
    return table(rows, ["import torch, hook off (ms)", "hook on (ms)", "difference (ms)",
                        "the hook alone, in-process (ms)", "then the first op (ms)", "then 6 more ops (ms)",
                        "processes that imported TorchDynamo"])


_GENERATE_SCRIPT = r"""
import copy, json, statistics, sys, time, warnings
warnings.filterwarnings("ignore")
import torch
torch.set_num_threads(2)
from transformers import GPT2Config, GPT2LMHeadModel
from transformers.utils import logging
logging.set_verbosity_error()
import neuroncc
from neuroncc.device import entries, fallback, programs
from neuroncc.driver import cache

spent = {}  # name -> [calls, seconds] (inclusive; the wrapped functions do not call each other recursively)


def timed(owner, name, label):
    original = getattr(owner, name, None)
    if original is None:
        return
    record = spent.setdefault(label, [0, 0.0])

    def wrapper(*args, **kwargs):
        start = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            record[0] += 1
            record[1] += time.perf_counter() - start

    setattr(owner, name, wrapper)


timed(entries, "make_entry", "new entries")
timed(entries, "build_program", "programs built")
timed(programs, "_traced_graph", "decomposed ops traced")
timed(entries, "compile_kernel", "kernels (compile_kernel)")
timed(cache.CompileCache, "_load", "compile-cache loads")
timed(fallback, "run_on_host", "CPU fallback calls")
torch.manual_seed(0)
config = GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=500, n_positions=128, bos_token_id=0, eos_token_id=0)
model = GPT2LMHeadModel(config).eval()
ids = torch.randint(0, 500, (2, 7))


def generate(m, x):
    return m.generate(x, max_new_tokens=20, do_sample=False, pad_token_id=0)


reference = generate(model, ids)
on_device, device_ids = copy.deepcopy(model).to("neuron"), ids.to("neuron")
start = time.perf_counter()
out = generate(on_device, device_ids)
first = time.perf_counter() - start
same = torch.equal(out.cpu(), reference)
itemized = {k: list(v) for k, v in spent.items()}  # the first generate's (the steady runs go on counting)
stats = neuroncc.stats()
result = {"first_s": first, "same": same, "spent": itemized, "compiled": stats["eager_kernels_compiled"],
          "loaded": stats["eager_kernels_loaded"], "fallbacks": neuroncc.get_fallback_ops()}
if sys.argv[1] == "warm":
    steady, cpu = [], []
    for _ in range(int(sys.argv[2])):
        for which, m, x, times in ((0, on_device, device_ids, steady), (1, model, ids, cpu))[::1 - 2 * (_ % 2)]:
            start = time.perf_counter()
            generate(m, x)
            times.append(time.perf_counter() - start)
    result["steady_s"], result["cpu_s"] = statistics.median(steady), statistics.median(cpu)
print(json.dumps(result))
"""


def bench_generate(repeat: int, trees: str) -> str:
    """Cold and warm-disk fresh processes of each tree, round by round (see the module docstring)."""
    named = [item.partition("=")[::2] for item in trees.split(",")]
    runs: dict[str, dict[str, list[dict]]] = {name: {"cold": [], "warm": []} for name, _ in named}
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    rounds = max(repeat // 6, 3)
    for _ in range(rounds):
        for name, tree in named:
            root = os.path.abspath(here if tree in ("", ".") else tree)
            cache = tempfile.mkdtemp(prefix="bench-device-generate-")
            env = dict(os.environ, NEURONCC_CACHE_DIR=cache,
                       PYTHONPATH=os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p))
            for kind in ("cold", "warm"):
                out = subprocess.run([sys.executable, "-c", _GENERATE_SCRIPT, kind, "5"], env=env, cwd="/",
                                     capture_output=True, text=True, timeout=900)
                if out.returncode:
                    raise SystemExit(f"generate ({name}, {kind}) failed:\n{out.stderr[-3000:]}")
                runs[name][kind].append(json.loads(out.stdout.strip().splitlines()[-1]))
            subprocess.run(["rm", "-rf", cache], check=False)

    def med(values: list[float]) -> str:
        return f"{statistics.median(values):.2f}" + (f" ({min(values):.2f}-{max(values):.2f})" if len(values) > 1 else "")

    rows, items = [], []
    for name, _ in named:
        cold, warm = runs[name]["cold"], runs[name]["warm"]
        rows.append([name, med([r["first_s"] for r in cold]), med([r["first_s"] for r in warm]),
                     f"{statistics.median(r['steady_s'] for r in warm) * 1e3:.0f}",
                     f"{statistics.median(r['cpu_s'] for r in warm) * 1e3:.0f}",
                     f"{warm[-1]['compiled']}/{warm[-1]['loaded']}",
                     "yes" if all(r["same"] for r in cold + warm) else "NO", warm[-1]["fallbacks"] or "-"])
        for label in warm[-1]["spent"]:
            calls = warm[-1]["spent"][label][0]
            seconds = statistics.median(r["spent"].get(label, [0, 0.0])[1] for r in warm)
            items.append([name, label, calls, f"{seconds:.2f}", f"{seconds / calls * 1e3:.1f}" if calls else "-"])
    return "\n".join([
        table(rows, ["GPT-2 tiny, generate 20 tokens", "cold s (min-max)", "warm disk s", "steady ms", "CPU eager ms",
                     "warm: compiled/loaded", "same tokens", "fallbacks (warm)"]),
        table(items, ["warm disk, first generate", "what (inclusive)", "calls", "s (median)", "ms each"])])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", default=",".join(ROWS))
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--trees", default="this=.", help="generate row: name=DIR,... source trees to A/B")
    args = parser.parse_args()
    ensure_environment(args.threads)
    import torch

    print(f"torch {torch.__version__}, {args.threads} threads, load average {load()}")
    for row in args.rows.split(","):
        if row == "overhead":
            print(bench_overhead(args.repeat))
        elif row == "mlp":
            print(bench_mlp(args.repeat))
        elif row == "optim":
            print(bench_optim(args.repeat))
        elif row == "amp":
            print(bench_amp(args.repeat))
        elif row == "encoder":
            print(bench_encoder(args.repeat))
        elif row == "compile":
            print(bench_compile())
        elif row == "processes":
            print(bench_processes())
        elif row == "autoload":
            print(bench_autoload(args.repeat))
        elif row == "generate":
            print(bench_generate(args.repeat, args.trees))
        else:
            raise SystemExit(f"unknown row {row!r} (known: {', '.join(ROWS)})")
        print(f"load average {load()}", flush=True)


if __name__ == "__main__":
    main()
