"""Small batched float32 matmuls: MKL's sgemm_batch (blas.py's direct call) vs torch.bmm vs generated code.

    PYTHONPATH=. python benchmarks/bench_smallbmm.py [--threads 1,2] [--repeat 40] [--decision]

Each row is one bmm shape (batch x M x K x N) in one operand layout (``A@B``, ``A@B^T``, ``A^T@B``: the
forms attention's math produces), timed as interleaved medians of ``INNER`` back-to-back calls:

- ``sgemm_batch``: ``blas.prepare``'s prepared call (one ctypes call, MKL threads as torch's);
- ``torch.bmm``: ``torch.bmm(a, b, out=c)`` on the same memory (ATen's dispatch included);
- ``generated``: ``codegen/llvm/small_matmul.py``'s phase function over the batch, as the launcher runs it
  (1 thread: one call; 2 threads: the OpenMP team when the work is big enough, ``threads.py``).

The generated result is checked against float64 numpy first. ``x blas`` is generated / sgemm_batch: below 1
the generated kernel wins. With ``--decision`` the last column says what ``CpuTarget.small_bmm_max_macs``
decides for the shape (gen: generated code, blas: sgemm_batch).
"""

from __future__ import annotations

import argparse
import ctypes
import itertools
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bench_products import tile_variant  # noqa: E402
from common import ensure_environment, interleaved, table  # noqa: E402

#: calls per timed sample (a 16^3 x 128 bmm takes tens of microseconds)
INNER = 20
#: (batch, M, K, N): the classifier's heads (issue #18: 32 x 4 heads of 16 x 16, head size 16), then bigger
SHAPES = [(128, 16, 16, 16), (128, 8, 8, 8), (64, 32, 32, 32), (32, 64, 64, 64), (128, 16, 64, 16),
          (8, 128, 128, 128), (16, 96, 96, 96), (128, 24, 24, 24), (48, 48, 48, 48)]
FORMS = {"A@B": (False, False), "A@B^T": (False, True), "A^T@B": (True, False)}


def _operands(rng, batch, m, k, n, ta, tb):
    import numpy as np

    a = rng.standard_normal((batch, k, m) if ta else (batch, m, k)).astype(np.float32)
    b = rng.standard_normal((batch, n, k) if tb else (batch, k, n)).astype(np.float32)
    return a, b, np.zeros((batch, m, n), np.float32)


def _strides(array):
    return tuple(s // array.itemsize for s in array.strides)


def generated(a, b, c, ta, tb, threads, rule=None):
    """A call of the generated kernel over all batch items, as the launcher makes it; and the plan (its tiles
    by ``bench_products.tile_variant``'s ``rule``, None: the target's)."""
    from neuroncc.codegen.llvm import jit
    from neuroncc.codegen.llvm.small_matmul import emit_small_matmul, plan_small_matmul
    from neuroncc.codegen.llvm.views import Layout
    from neuroncc.executors.cpu.steps import PHASE_FN
    from neuroncc.executors.cpu.threads import get_team
    from neuroncc.hardware.host import host_cpu
    from neuroncc.ir import Builder, DType, TensorType

    builder = Builder("bmm")
    pa, pb = (builder.param(TensorType(x.shape, DType.f32)) for x in (a, b))
    op = builder.build([builder.op("bmm", pa, pb, transpose_a=ta, transpose_b=tb)]).ops[0]
    layouts = [Layout(slot, 0, x.shape, _strides(x), DType.f32) for slot, x in enumerate((a, b, c))]
    plan = plan_small_matmul(op, layouts[:2], layouts[2], host_cpu(), max_macs=1 << 40)
    if plan is None:  # a packed B bigger than small_matmul.MAX_PACKED_BYTES
        return None, None
    if rule is not None:
        plan = tile_variant(plan, rule)
    module = jit.compile_ir([emit_small_matmul(plan, "smm", 4)])
    address = module.address("smm")
    function = PHASE_FN(address)
    args = (ctypes.c_void_p * 4)(a.ctypes.data, b.ctypes.data, c.ctypes.data, 0)
    args_address = ctypes.addressof(args)
    team = get_team(threads)
    batch = c.shape[0]

    def run():
        if team is None:
            function(args_address, 0, batch)
        else:
            team.run(function, address, args_address, 0, batch, plan.work)
    run.keep = (module, args, function)
    return run, plan


def bench(threads: int, repeat: int, decision: bool, rules: list[str]) -> list[list[str]]:
    import numpy as np
    import torch

    from neuroncc.executors.cpu import blas
    from neuroncc.hardware.host import host_cpu

    rng = np.random.default_rng(0)
    rows = []
    for (batch, m, k, n), (form, (ta, tb)) in itertools.product(SHAPES, FORMS.items()):
        a, b, c = _operands(rng, batch, m, k, n, ta, tb)
        ref = np.matmul(a.transpose(0, 2, 1) if ta else a, b.transpose(0, 2, 1) if tb else b, dtype=np.float64)
        gen, plan = generated(a, b, c, ta, tb, threads)
        if gen is None:
            continue
        variants = {f"tiles {rule}": generated(a, b, c, ta, tb, threads, rule)[0] for rule in rules}
        bound = 2 * np.finfo(np.float32).eps * k * np.matmul(np.abs(a.transpose(0, 2, 1) if ta else a),
                                                             np.abs(b.transpose(0, 2, 1) if tb else b)).max()
        for label, call in {"generated": gen, **variants}.items():
            c.fill(0)
            call()
            assert np.abs(c - ref).max() <= bound, (batch, m, k, n, form, label)
        call = blas.prepare("bmm", {"transpose_a": ta, "transpose_b": tb}, [(a.shape, _strides(a)),
                            (b.shape, _strides(b))], (c.shape, _strides(c)), ["f32"] * 3)
        pointers = [a.ctypes.data, b.ctypes.data, c.ctypes.data]
        ta_t, tb_t, c_t = torch.from_numpy(a), torch.from_numpy(b), torch.from_numpy(c)
        la, lb = (ta_t.mT if ta else ta_t), (tb_t.mT if tb else tb_t)
        impls = {"generated": gen, "torch.bmm": lambda: torch.bmm(la, lb, out=c_t), **variants}
        if call is not None:  # below ATen's naive-loop bound blas.py does not call MKL
            impls["sgemm_batch"] = lambda: call(pointers)

        def repeated(fn):
            def run():
                for _ in range(INNER):
                    fn()
            return run
        times = interleaved({name: repeated(fn) for name, fn in impls.items()}, repeats=repeat, warmup=3)
        us = {name: t / INNER * 1e6 for name, t in times.items()}
        blas_us = us.get("sgemm_batch")
        gflops = 2 * batch * m * n * k / (us["generated"] * 1e3)
        row = [f"{batch}x{m}x{k}x{n}", form, f"{m * n * k}", f"{blas_us:.1f}" if blas_us else "-",
               f"{us['torch.bmm']:.1f}", f"{us['generated']:.1f}", f"{gflops:.0f}",
               f"{us['generated'] / blas_us:.2f}" if blas_us else "-"]
        row += [f"{us[f'tiles {rule}']:.1f}" for rule in rules]
        if decision:
            row.append("gen" if m * n * k <= host_cpu().small_bmm_max_macs else "blas")
        rows.append(row)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--repeat", type=int, default=40)
    parser.add_argument("--decision", action="store_true")
    parser.add_argument("--tiles", default="", help="comma-separated tile rules as more generated columns (us): "
                        "scored, wN (blocks of N vectors)")
    args = parser.parse_args()
    ensure_environment(1)
    import torch

    for threads in (int(t) for t in args.threads.split(",")):
        torch.set_num_threads(threads)
        rules = [rule for rule in args.tiles.split(",") if rule]
        rows = bench(threads, args.repeat, args.decision, rules)
        print(f"\nsmall bmm, {threads} thread(s), us per bmm (median of {INNER}-call samples), "
              f"load {', '.join(f'{x:.2f}' for x in os.getloadavg())}")
        header = ["batch x M x K x N", "form", "MACs/item", "sgemm_batch", "torch.bmm", "generated", "GFLOP/s",
                  "x blas"] + [f"tiles {rule}" for rule in rules] + (["decision"] if args.decision else [])
        print(table(rows, header))


if __name__ == "__main__":
    main()
