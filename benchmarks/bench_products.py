"""float32 mm/addmm on MKL against oneDNN and generated code: the measurements behind ``CpuTarget.onednn_takes``
and ``CpuTarget.small_mm_max_macs``.

    PYTHONPATH=. python benchmarks/bench_products.py [--threads 1,2] [--big | --mid]

Per product, interleaved medians in one process: ATen's ``torch.mm``/``addmm`` (MKL's sgemm), the same sgemm
called directly as the cpu launcher calls it (``executors/cpu/blas.py``), oneDNN's linear
(``torch.ops.mkldnn._linear_pointwise``) with its fresh tensor kept ("adopted", as the launcher does) and copied
into an output, and ``codegen/llvm/small_matmul.py``'s register tiles (rows as the batch) called as the launcher
calls a phase (the OpenMP team from its work on). Ratios to ATen's time, and GFLOP/s. The default shapes are
issue #18's classifier's (d=64, 512 tokens: its forward products ``x @ W^T`` (B transposed), data gradients
``dY @ W`` and weight gradients ``dY^T @ X``); ``--mid`` products of 8M-33M multiply-adds around the generated
code's bound; ``--big`` the products around oneDNN's threshold and above it.
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import ensure_environment, interleaved, table  # noqa: E402

#: (M, K, N, bias, form): "linear" x @ W^T (W [N, K] stored), "data" dY @ W (B [K, N] stored), "weight"
#: dY^T @ X (A stored [K, M], B [K, N])
SMALL = [(512, 64, 192, False, "linear"), (512, 64, 64, True, "linear"), (512, 64, 128, True, "linear"),
         (512, 128, 64, True, "linear"), (512, 192, 64, False, "data"), (512, 64, 128, False, "data"),
         (512, 128, 64, False, "data"), (512, 64, 64, False, "data"), (192, 512, 64, False, "weight"),
         (64, 512, 128, False, "weight"), (128, 512, 64, False, "weight"), (64, 512, 64, False, "weight")]
MID = [(512, 64, 256, True, "linear"), (1024, 64, 256, True, "linear"), (512, 128, 128, True, "linear"),
       (2048, 64, 128, True, "linear"), (512, 256, 256, False, "data"), (1024, 256, 128, False, "data"),
       (2048, 128, 128, False, "data"), (256, 1024, 128, False, "weight"), (256, 512, 256, False, "weight"),
       (1024, 512, 64, False, "data")]
BIG = [(512, 256, 256, True, "linear"), (1024, 256, 512, True, "linear"), (512, 512, 512, False, "linear"),
       (2048, 256, 256, True, "linear"), (2048, 512, 512, True, "linear"), (256, 1024, 4096, True, "linear"),
       (4096, 256, 1024, False, "linear")]


def tile_variant(plan, rule: str):
    """``plan`` with its register tiles by ``rule``: "wN" column blocks of N vectors (rows by ``tile_rows``),
    "scored" the width doing the most multiply-adds per load (``SmallMatmul.tile_vectors``,
    ``CpuTarget.matmul_tile_vectors``)."""
    import dataclasses

    return dataclasses.replace(plan, tile_vectors=0 if rule == "scored" else int(rule.lstrip("w")))


def generated_call(name: str, layouts, pointers, threads: int, rule: str | None = None):
    """The generated product (``small_matmul.py``'s phase over its row items, forced whatever the bound; its
    tiles by :func:`tile_variant`'s ``rule``, None: the target's) as a call, or None where its plan refuses
    the layouts (a packed B past MAX_SHARED_PACKED_BYTES)."""
    import ctypes

    from neuroncc.codegen.llvm import jit
    from neuroncc.codegen.llvm.small_matmul import emit_small_matmul, plan_small_matmul
    from neuroncc.executors.cpu.steps import PHASE_FN
    from neuroncc.executors.cpu.threads import get_team
    from neuroncc.hardware.host import host_cpu
    from neuroncc.ir import Builder, DType, TensorType

    builder = Builder(name)
    params = [builder.param(TensorType(layout.shape, DType.f32)) for layout in layouts[:-1]]
    attrs = {"alpha": 1, "beta": 1} if name == "addmm" else {}
    op = builder.build([builder.op(name, *params, **attrs)]).ops[0]
    plan = plan_small_matmul(op, layouts[:-1], layouts[-1], host_cpu(), max_macs=1 << 40)
    if plan is None:
        return None
    if rule is not None:
        plan = tile_variant(plan, rule)
    module = jit.compile_ir([emit_small_matmul(plan, "gmm", len(layouts) + 1)])
    address = module.address("gmm")
    function = PHASE_FN(address)
    args = (ctypes.c_void_p * (len(layouts) + 1))(*pointers, 0)
    args_address = ctypes.addressof(args)
    team = get_team(threads)

    def run():
        if team is None:
            function(args_address, 0, plan.batch)
        else:
            team.run(function, address, args_address, 0, plan.batch, plan.work)
    run.keep = (module, args, function)
    return run


def product_rows(shapes, repeat: int, threads: int, rules: list[str], onednn: bool = True) -> list[list[str]]:
    import torch

    from neuroncc.codegen.llvm.views import Layout
    from neuroncc.executors.cpu import blas
    from neuroncc.ir import DType

    rows = []
    for m, k, n, has_bias, form in shapes:
        stored_a = torch.randn(k, m) if form == "weight" else torch.randn(m, k)
        a = stored_a.t() if form == "weight" else stored_a
        w, bias, out = torch.randn(n, k) if form == "linear" else torch.randn(k, n), torch.randn(n), torch.empty(m, n)
        b = w.t() if form == "linear" else w  # [K, N]: a linear's weight transposed, or stored so
        operands = [((m, k), tuple(a.stride())), ((k, n), tuple(b.stride()))]
        layouts = [Layout(slot, 0, shape, strides, DType.f32) for slot, (shape, strides) in
                   enumerate(([((n,), (1,))] if has_bias else []) + operands + [((m, n), (n, 1))])]
        generated_out = torch.empty(m, n)
        generated_pointers = ([bias.data_ptr()] if has_bias else []) + [a.data_ptr(), b.data_ptr(),
                                                                         generated_out.data_ptr()]
        generated = generated_call("addmm" if has_bias else "mm", layouts, generated_pointers, threads)
        variants = {f"tiles {rule}": generated_call("addmm" if has_bias else "mm", layouts, generated_pointers,
                                                    threads, rule) for rule in rules}
        if has_bias:
            aten = lambda: torch.addmm(bias, a, b, out=out)  # noqa: E731
            prepared = blas.prepare("addmm", {"alpha": 1, "beta": 1}, [((n,), (1,)), *operands], ((m, n), (n, 1)),
                                    ["f32"] * 4)
            pointers = [bias.data_ptr(), a.data_ptr(), b.data_ptr(), out.data_ptr()]
        else:
            aten = lambda: torch.mm(a, b, out=out)  # noqa: E731
            prepared = blas.prepare("mm", {}, operands, ((m, n), (n, 1)), ["f32"] * 3)
            pointers = [a.data_ptr(), b.data_ptr(), out.data_ptr()]
        assert prepared is not None
        linear_bias = bias if has_bias else None
        weight = b.t()  # oneDNN's linear takes [N, K]
        adopted = lambda: torch.ops.mkldnn._linear_pointwise(a, weight, linear_bias, "none", [], "")  # noqa: E731
        impls = {"aten (MKL)": aten, "direct sgemm": lambda: prepared(pointers)}
        if onednn:
            impls.update({"oneDNN adopted": adopted, "oneDNN + copy": lambda: out.copy_(adopted())})
        if generated is not None:
            expected = (torch.addmm(bias, a, b) if has_bias else torch.mm(a, b)).double()
            bound = k * 2 * torch.finfo(torch.float32).eps * (a.abs().double() @ b.abs().double()).max()
            for label, call in {"generated": generated, **variants}.items():
                generated_out.zero_()
                call()
                assert (generated_out.double() - expected).abs().max() <= bound, (m, k, n, form, label)
            impls["generated"] = generated
            impls.update(variants)
        times = interleaved(impls, repeats=repeat, warmup=10)
        base, flops = times["aten (MKL)"], 2 * m * k * n
        rows.append([f"{m} x {k} x {n}{' + bias' if has_bias else ''} {form}", f"{m * k * n / 1e6:.1f}M",
                     f"{base * 1e6:.1f}"] + [f"{t / base:.2f} ({flops / t / 1e9:.0f})" for t in times.values()]
                    + ([] if generated is not None else ["-"] * (1 + len(rules))))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--big", action="store_true", help="the products around oneDNN's threshold and above")
    parser.add_argument("--mid", action="store_true", help="the products around the generated code's bound")
    parser.add_argument("--repeat", type=int, default=None)
    parser.add_argument("--tiles", default="", help="comma-separated tile rules as more generated columns: "
                        "scored, wN (blocks of N vectors)")
    parser.add_argument("--no-onednn", action="store_true", help="leave oneDNN's columns out")
    args = parser.parse_args()
    ensure_environment(1)
    import torch

    from neuroncc.executors.cpu.extern import _onednn_available

    if not _onednn_available(torch):
        sys.exit("this torch has no oneDNN linear")
    for threads in (int(t) for t in args.threads.split(",")):
        torch.set_num_threads(threads)
        shapes = BIG if args.big else MID if args.mid else SMALL
        rules = [rule for rule in args.tiles.split(",") if rule]
        rows = product_rows(shapes, args.repeat or (40 if args.big else 100 if args.mid else 300), threads, rules,
                            onednn=not args.no_onednn)
        print(f"\n{threads} thread(s), load {', '.join(f'{x:.2f}' for x in os.getloadavg())}; x ATen's time "
              "(GFLOP/s)")
        print(table(rows, ["product", "MACs", "aten us", "aten (MKL)", "direct sgemm"]
                    + ([] if args.no_onednn else ["oneDNN adopted", "oneDNN + copy"])
                    + ["generated"] + [f"tiles {rule}" for rule in rules]))


if __name__ == "__main__":
    main()
