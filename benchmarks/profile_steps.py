"""Per-launcher-step profile of issue #18's classifier AdamW step (``bench_launch.py --profile``).

Three tables per thread count:

1. neuroncc: every step of the compiled forward and backward graphs (kernels, extern matmuls, host copies),
   timed by a :class:`~neuroncc.executors.tracing.TimelineRecorder` over ``repeat`` training steps (median
   per call, microseconds). Bytes are the step's operands plus its results (shapes from the launch plan);
   ``copy`` is the least time numpy needs to copy that many bytes (half read, half written, measured here at
   the same size, one thread, warm caches: these working sets stay in L2), and ``% copy`` the kernel's fraction of
   that roofline (100%: as fast as a copy of its bytes). ``team``: the step's phases that split across the
   OpenMP team (of all its phases; blank: every phase runs on the calling thread). With the recorder installed
   every executable runs its steps one by one from Python (the traced path), so the graph totals include ~1 us
   per step that the native launch sequence does not pay; the step times themselves are the kernels'.
2. eager: the same step's ATen ops under ``torch.profiler`` (self CPU time per step, by op and input shapes):
   what eager pays for the work the kernels above do.
2b. Inductor: the same step compiled by Inductor under ``torch.profiler`` with its C++ kernels recorded
   (``cpp.enable_kernel_profile``) and its wrapper calls marked: self CPU time per step of each kernel and ATen
   op, the counterpart of table 1 (the profiler's own cost included, ~1-2 us per event).
3. kernels head to head: the step's hot kernels as standalone graphs (the backward's transposing
   concatenation of dq/dk/dv, GELU forward and backward at the MLP's shape) against the ATen ops eager runs
   for them, interleaved medians.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable

from common import interleaved, settle_neuroncc, table

ITEMSIZE = {"f32": 4, "bf16": 2, "f16": 2, "i64": 8, "i32": 4, "i16": 2, "i8": 1, "u8": 1, "bool": 1}


def _bytes(described: tuple) -> int:
    return sum(math.prod(shape) * ITEMSIZE.get(dtype, 4) for shape, _, dtype in described)


def copy_seconds(nbytes: int, repeats: int = 200) -> float:
    """Least seconds numpy takes to copy ``nbytes // 2`` bytes (``nbytes`` moved: read + write), warm: the
    roofline is a bound, so the best of ``repeats`` copies."""
    import numpy as np

    src = np.ones(max(nbytes // 8, 1), dtype=np.float32)
    dst = np.empty_like(src)
    for _ in range(10):
        np.copyto(dst, src)
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        np.copyto(dst, src)
        samples.append(time.perf_counter() - start)
    return min(samples)


def _classifier_step(backend: str | None) -> Callable[[], None]:
    import torch

    from bench_launch import ISSUE_CLASSIFIER_SHAPE
    from neuroncc.examples.classifier import ClassifierConfig, build_example, make_batch

    config = ClassifierConfig(**ISSUE_CLASSIFIER_SHAPE)
    tokens, labels = make_batch(config, torch.Generator().manual_seed(1))
    model = build_example(0, config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    run = model if backend is None else torch.compile(model, backend=backend, dynamic=False)

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        run(tokens, labels).backward()
        optimizer.step()
    return step


def neuroncc_steps(repeat: int) -> list[list[str]]:
    """Table 1 (see the module docstring) at torch's current thread count."""
    from neuroncc.executors import tracing

    step = _classifier_step("neuron")
    for _ in range(5):
        step()
    settle_neuroncc({"neuroncc": step})
    recorder = tracing.TimelineRecorder()
    with tracing.installed(recorder):
        for _ in range(repeat):
            step()
    samples: dict[tuple[str, str], list[float]] = {}
    infos = {}
    for timed in recorder.steps:
        key = (timed.info.graph, timed.info.name)
        samples.setdefault(key, []).append(timed.duration_us)
        infos[key] = timed.info
    copies: dict[int, float] = {}
    teams = team_splits()
    rows = []
    for key, durations in samples.items():
        info, us = infos[key], statistics.median(durations)
        calls = len(durations) / repeat
        if info.kind == "graph":
            rows.append([info.graph, "(graph total)", "", f"{us:.1f}", "", "", "", ""])
            continue
        nbytes = _bytes(info.operands) + _bytes(info.results)
        if nbytes not in copies:
            copies[nbytes] = copy_seconds(nbytes) * 1e6
        share = f"{copies[nbytes] / us:.0%}" if info.kind == "kernel" else ""
        count = "" if calls == 1 else f" (x{calls:g})"
        rows.append([info.graph, info.name + count, info.kind, f"{us:.1f}", f"{nbytes / 1024:.0f}",
                     f"{copies[nbytes]:.1f}", share, teams.get(key, "")])
    return rows


def team_splits() -> dict[tuple[str, str], str]:
    """(graph, step name) -> "split of all" phases that run across the OpenMP team, for every cpu executable
    alive (the step's own runner decides: ``threads.OpenMPTeam.runs_inline``)."""
    import gc

    from neuroncc.executors.cpu.launcher import CpuExecutable
    from neuroncc.executors.cpu.step_names import step_infos

    found = {}
    for exe in [o for o in gc.get_objects() if type(o) is CpuExecutable]:  # (type: weak proxies raise)
        if exe.team is None:
            continue
        for info, step in zip(step_infos(exe.function, exe.plan), exe.plan.steps):
            split = sum(not p.serial and not exe.team.runs_inline(p.n_outer, p.work) for p in step.phases)
            if split:
                found[(info.graph, info.name)] = f"{split}/{len(step.phases)}"
    return found


def inductor_ops(repeat: int, count: int = 30) -> list[list[str]]:
    """Table 2b: Inductor's kernels and ATen ops for the step, by self CPU time per step."""
    import torch
    from torch._inductor import config

    with config.patch({"cpp.enable_kernel_profile": True, "profiler_mark_wrapper_call": True}):
        step = _classifier_step("inductor")
        for _ in range(5):
            step()
    with torch.profiler.profile() as prof:
        for _ in range(repeat):
            step()
    events = sorted(prof.key_averages(), key=lambda e: -e.self_cpu_time_total)
    return [[e.key[:60], f"{e.count / repeat:g}", f"{e.self_cpu_time_total / repeat:.1f}",
             f"{e.cpu_time_total / repeat:.1f}"] for e in events[:count]]


def top_steps(rows: list[list[str]], count: int = 8) -> list[list[str]]:
    steps = [r for r in rows if r[2]]
    return sorted(steps, key=lambda r: -float(r[3]))[:count]


def eager_ops(repeat: int, count: int = 15) -> list[list[str]]:
    """Table 2: eager's ATen ops by self CPU time per step (input shapes kept apart)."""
    import torch

    step = _classifier_step(None)
    for _ in range(5):
        step()
    with torch.profiler.profile(record_shapes=True) as prof:
        for _ in range(repeat):
            step()
    events = [e for e in prof.key_averages(group_by_input_shape=True) if e.key.startswith("aten::")]
    events.sort(key=lambda e: -e.self_cpu_time_total)
    return [[e.key, f"{e.count / repeat:g}", f"{e.self_cpu_time_total / repeat:.1f}",
             str([s for s in e.input_shapes if s])[:70]] for e in events[:count]]


def _concat_graph():
    """The backward's dq/dk/dv [B*H, L, E] (dq, dk scaled) -> [B, L, 3 * H * E]: fused_7_mul_cat."""
    from neuroncc.ir import Builder, DType, TensorType

    b = Builder("qkv_grad_cat")
    pieces = []
    for k in range(3):
        x = b.param(TensorType((128, 16, 16), DType.f32), f"g{k}")
        if k < 2:
            x = b.op("mul", x, b.op("full", dtype=DType.f32, shape=(), value=0.25))
        x = b.op("reshape", b.op("permute", b.op("reshape", x, shape=(32, 4, 16, 16)), dims=(0, 2, 1, 3)),
                 shape=(32, 16, 64))
        pieces.append(x)
    return b.build([b.op("cat", *pieces, dim=2)])


def _gelu_graph():
    from neuroncc.ir import Builder, DType, TensorType

    b = Builder("gelu")
    x = b.param(TensorType((512, 128), DType.f32), "x")
    return b.build([b.op("gelu", x)])


def _gelu_backward_graph():
    """fused_2_mul_erf_add: gelu's gradient as the backward graph decomposes it, and its column sum."""
    from neuroncc.ir import Builder, DType, TensorType

    b = Builder("gelu_backward")
    x = b.param(TensorType((512, 128), DType.f32), "x")
    g = b.param(TensorType((512, 128), DType.f32), "g")

    def c(value: float):
        return b.op("full", dtype=DType.f32, shape=(), value=value)

    cdf = b.op("mul", b.op("add", b.op("erf", b.op("mul", x, c(math.sqrt(0.5)))), c(1.0)), c(0.5))
    pdf = b.op("mul", b.op("exp", b.op("mul", b.op("mul", x, x), c(-0.5))), c(1 / math.sqrt(2 * math.pi)))
    grad = b.op("mul", g, b.op("add", cdf, b.op("mul", x, pdf)))
    return b.build([grad, b.op("sum", grad, dims=(0,), keepdim=True)])


def kernels_head_to_head(threads: int, repeat: int) -> list[list[str]]:
    """Table 3: each hot kernel as a one-kernel graph vs the ATen calls eager makes for it."""
    import numpy as np
    import torch

    from neuroncc.codegen.llvm.regions import fuse_whole_function
    from neuroncc.executors.cpu.launcher import build_cpu_executable

    rng = np.random.default_rng(0)
    grads = [rng.standard_normal((128, 16, 16)).astype(np.float32) for _ in range(3)]
    x, g = (rng.standard_normal((512, 128)).astype(np.float32) for _ in range(2))
    tg, tx, tgrad = [torch.from_numpy(a) for a in grads], torch.from_numpy(x), torch.from_numpy(g)

    def eager_cat():
        parts = [(t * 0.25 if k < 2 else t).view(32, 4, 16, 16).transpose(1, 2).reshape(32, 16, 64)
                 for k, t in enumerate(tg)]
        return torch.cat(parts, 2)

    def eager_gelu_backward():
        grad = torch.ops.aten.gelu_backward(tgrad, tx)
        return grad, grad.sum(0, keepdim=True)

    cases = [("dq/dk/dv transposing cat [32,16,192]", _concat_graph(), grads, eager_cat, 2 * 3 * 32768 * 4),
             ("gelu [512,128]", _gelu_graph(), [x], lambda: torch.nn.functional.gelu(tx), 2 * 65536 * 4),
             ("gelu backward + column sum [512,128]", _gelu_backward_graph(), [x, g], eager_gelu_backward,
              3 * 65536 * 4)]
    rows = []
    for title, fn, inputs, eager, nbytes in cases:
        exe = build_cpu_executable(fuse_whole_function(fn), {"threads": threads})  # one kernel, as in the step
        assert exe.stats["interpreted_kernels"] == 0
        want = eager()
        want = want if isinstance(want, tuple) else (want,)
        for got, expected in zip(exe(*inputs), want):
            np.testing.assert_allclose(got, expected.numpy(), rtol=1e-5, atol=1e-5)
        times = interleaved({"eager": eager, "neuroncc": lambda exe=exe, inputs=inputs: exe(*inputs)},
                            repeats=repeat, warmup=20)
        copy = copy_seconds(nbytes)
        rows.append([title, f"{times['eager'] * 1e6:.1f}", f"{times['neuroncc'] * 1e6:.1f}",
                     f"{times['neuroncc'] / times['eager']:.2f}", f"{nbytes / 1024:.0f}", f"{copy * 1e6:.1f}",
                     f"{copy / times['neuroncc']:.0%}"])
    return rows


def profile(threads_list: list[int], repeat: int, load: Callable[[], str]) -> None:
    import torch

    for threads in threads_list:
        torch.set_num_threads(threads)
        torch._dynamo.reset()
        rows = neuroncc_steps(repeat)
        print(f"\nneuroncc per launcher step, classifier AdamW step (issue #18 shape), {threads} thread(s), "
              f"median of {repeat} steps, load {load()}")
        header = ["graph", "step", "kind", "us", "KiB", "copy us", "% copy", "team"]
        print(table(rows, header))
        print("\ntop steps by time")
        print(table(top_steps(rows), header))
        print(f"\neager ATen ops, same step, {threads} thread(s), self CPU time per step, load {load()}")
        print(table(eager_ops(max(repeat // 2, 10)), ["op", "calls", "us / step", "input shapes"]))
        print(f"\nInductor's kernels and ATen ops, same step, {threads} thread(s), per step, load {load()}")
        print(table(inductor_ops(max(repeat // 2, 10)), ["event", "calls", "self us / step", "total us / step"]))
        print(f"\nhot kernels head to head, {threads} thread(s), interleaved medians, load {load()}")
        print(table(kernels_head_to_head(threads, repeat * 5),
                    ["kernel", "eager us", "neuroncc us", "x eager", "KiB", "copy us", "% copy"]))
