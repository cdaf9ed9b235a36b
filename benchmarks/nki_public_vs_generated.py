"""Public-style NKI kernels against neuroncc's generated kernels of the same shapes, on the cost model.

    PYTHONPATH=. python benchmarks/nki_public_vs_generated.py [--target trn2] [--shape 2048,4096,2048]
        [--ops matmul,attention,norm] [--seqlen 2048] [--rows 4096 --cols 1024]

- matmul: the public matmul tutorial kernels (re-implemented in their style in
  tests/nki/public/kernels_nki02.py: tiled, hoisted loads, free-dimension blocking, fully blocked) and the
  matmul neuroncc generates for ``lhsT.T @ rhs`` with the same ``lhsT [K, M]`` / ``rhs [K, N]`` bf16 inputs
  (every generated graph goes through the nki pipeline first, as torch.compile's would);
- attention: the public attention tutorial's shape (``q, k, v [128, seqlen]`` bf16, ``softmax(q.T k) v.T``) as
  the fused public-style kernel of tests/nki/public/kernels_nki01.py against what neuroncc generates for the
  same graph (and, for reference, for the same graph with the scores scaled and masked as models write it);
- norm: public-style LayerNorm (bn_stats) and RMSNorm kernels against the generated LayerNorm / RMSNorm.

Cost-only (nothing computed); each kernel's estimate and its breakdown (per-engine busy time, DMA bytes,
the bound) side by side. The estimates are deterministic: one run is the measurement.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "nki", "public"))

import neuroncc.nki  # noqa: E402

neuroncc.nki.install_import_aliases()

import kernels_nki01 as public01  # noqa: E402
import kernels_nki02 as public  # noqa: E402

from neuroncc.executors.nki_sim.costs import estimate_costs  # noqa: E402
from neuroncc.ir import Builder, DType, TensorType  # noqa: E402
from neuroncc.passes import PassContext, default_pipeline, run_pipeline  # noqa: E402

ENGINES = ("TensorE", "VectorE", "ScalarE", "GpSimdE", "DMA")


def _public_profiles(k: int, m: int, n: int, target: str) -> list[tuple[str, object]]:
    spec = neuroncc.nki.TensorSpec.of
    args = (spec((k, m), "bfloat16"), spec((k, n), "bfloat16"))
    kernels = [("tutorial: tiled", public.mm_tiled, {}),
               ("tutorial: hoisted loads", public.mm_hoisted, {}),
               ("tutorial: free-dim blocks 2x2", public.mm_blocked_free, {}),
               ("tutorial: fully blocked 4x2x4", public.mm_blocked_all, {}),
               ("tutorial: fully blocked 16x2x8", public.mm_blocked_all,
                dict(blocks_m=16, blocks_n=2, blocks_k=8))]
    results = []
    for label, kernel, meta in kernels:
        if meta and (m % (128 * meta["blocks_m"]) or n % (512 * meta["blocks_n"]) or k % (128 * meta["blocks_k"])):
            continue
        bench = neuroncc.nki.benchmark(kernel, target=target, execute=False)(*args, **meta)
        results.append((label, bench.profile))
    return results


def compiled(fn, target: str):  # type: ignore[no-untyped-def]
    """``fn`` through the nki pipeline, as torch.compile hands it to the emitter. (A graph of views and
    matmuls alone already has the kernel form the emitter accepts: estimated as it is, the permute would stay
    a host step the estimate does not charge and the layout pass would not fold it into ``transpose_a``.)"""
    return run_pipeline(default_pipeline("nki").replace("target=trn2", f"target={target}"), fn, PassContext())


def _generated_profile(k: int, m: int, n: int, target: str) -> tuple[str, object]:
    b = Builder("mm_lhsT")
    lhs_t = b.param(TensorType((k, m), DType.bf16), "lhsT")
    rhs = b.param(TensorType((k, n), DType.bf16), "rhs")
    x = b.op("permute", lhs_t, dims=[1, 0])
    (kernel,) = estimate_costs(compiled(b.build([b.op("mm", x, rhs)]), target), target).kernels
    return "neuroncc generated (lhsT.T @ rhs)", kernel.profile


def _total_profile(fn, target: str):  # type: ignore[no-untyped-def]
    """The generated program's kernels as one row: latencies and engine times summed (run back to back)."""
    table = estimate_costs(compiled(fn, target), target)
    return table.kernels


def _attention_rows(seqlen: int, target: str) -> list[tuple[str, object]]:
    spec = neuroncc.nki.TensorSpec.of
    qkv = [spec((128, seqlen), "bfloat16") for _ in range(3)]
    rows = [("public-style: fused attention (par_dim PSUM blocks, exp+sum on ScalarE, delayed division)",
             neuroncc.nki.benchmark(public01.attention_blocked, target=target, execute=False)(*qkv).profile)]
    b = Builder("attention")
    q, k, v = (b.param(TensorType((128, seqlen), DType.bf16), name) for name in ("q", "k", "v"))
    scores = b.op("mm", b.op("permute", q, dims=[1, 0]), k)
    shifted = b.op("sub", scores, b.op("amax", scores, dims=(1,), keepdim=True))
    exps = b.op("exp", shifted)
    probs = b.op("div", exps, b.op("sum", exps, dims=(1,), keepdim=True))
    out = b.op("mm", probs, b.op("permute", v, dims=[1, 0]))
    for kernel in _total_profile(b.build([out]), target):
        rows.append((f"neuroncc generated: {kernel.name}", kernel.profile))
    # the form a model writes (no public kernel of it): scores scaled by 1/sqrt(d) plus an additive mask
    b = Builder("attention_scaled_masked")
    q, k, v = (b.param(TensorType((128, seqlen), DType.bf16), name) for name in ("q", "k", "v"))
    mask = b.param(TensorType((seqlen, seqlen), DType.bf16), "mask")
    scores = b.op("mm", b.op("permute", q, dims=[1, 0]), k)
    scaled = b.op("add", b.op("mul", scores, b.op("full", shape=(), dtype=DType.bf16, value=128 ** -0.5)), mask)
    exps = b.op("exp", b.op("sub", scaled, b.op("amax", scaled, dims=(1,), keepdim=True)))
    probs = b.op("div", exps, b.op("sum", exps, dims=(1,), keepdim=True))
    out = b.op("mm", probs, b.op("permute", v, dims=[1, 0]))
    for kernel in _total_profile(b.build([out]), target):
        rows.append((f"neuroncc generated, scaled + additive mask: {kernel.name}", kernel.profile))
    return rows


def _norm_rows(rows_n: int, cols: int, target: str) -> list[tuple[str, object]]:
    from neuroncc.testing.models import layer_norm_graph

    spec = neuroncc.nki.TensorSpec.of
    x, vec = spec((rows_n, cols), "float32"), spec((cols,), "float32")
    out = spec((rows_n, cols), "float32")
    result = [("public-style: LayerNorm (bn_stats/bn_aggr, fused shift+scale)",
               neuroncc.nki.benchmark(public01.layernorm_bn, target=target, execute=False)(x, 1e-5, vec, vec).profile),
              ("public-style: LayerNorm (nki.language)",
               neuroncc.nki.benchmark(public01.layernorm_nl, target=target, execute=False)(x, 1e-5, vec, vec).profile),
              ("public-style: RMSNorm (fused square+sum on ScalarE)",
               neuroncc.nki.benchmark(public01.rmsnorm_blocked, target=target, execute=False)(x, vec, out).profile)]
    for kernel in _total_profile(layer_norm_graph(rows_n, cols, DType.f32), target):
        result.append((f"neuroncc generated LayerNorm: {kernel.name}", kernel.profile))
    b = Builder("rms_norm")
    xv = b.param(TensorType((rows_n, cols), DType.f32), "x")
    g = b.param(TensorType((cols,), DType.f32), "weight")
    ms = b.op("mean", b.op("mul", xv, xv), dims=(1,), keepdim=True)
    eps = b.op("full", shape=(), dtype=DType.f32, value=1e-6)
    normed = b.op("mul", b.op("mul", xv, b.op("rsqrt", b.op("add", ms, eps))), g)
    for kernel in _total_profile(b.build([normed]), target):
        result.append((f"neuroncc generated RMSNorm: {kernel.name}", kernel.profile))
    return result


def _table(title: str, rows: list[tuple[str, object]]) -> None:
    print(f"\n{title}\n")
    print(f"| kernel | estimate | % bf16 peak | {' | '.join(f'{e} busy' for e in ENGINES)} | DMA MiB | bound |")
    print("|---|---|---|" + "---|" * len(ENGINES) + "---|---|")
    for label, profile in rows:
        print(_row(label, profile))


def _row(label: str, profile) -> str:  # type: ignore[no-untyped-def]
    busy = " | ".join(f"{profile.engine(e).busy_us:.1f}" for e in ENGINES)
    return (f"| {label} | {profile.latency_us:.1f} | {100 * profile.tensor_peak_fraction:.1f}% | {busy} | "
            f"{profile.dma_bytes / 2**20:.1f} | {profile.bound} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", default="trn2")
    parser.add_argument("--shape", default="2048,4096,2048", help="M,K,N")
    parser.add_argument("--ops", default="matmul,attention,norm")
    parser.add_argument("--seqlen", type=int, default=2048)
    parser.add_argument("--rows", type=int, default=4096)
    parser.add_argument("--cols", type=int, default=1024)
    args = parser.parse_args()
    ops = args.ops.split(",")
    start = time.perf_counter()
    if "matmul" in ops:
        m, k, n = (int(v) for v in args.shape.split(","))
        rows = _public_profiles(k, m, n, args.target) + [_generated_profile(k, m, n, args.target)]
        _table(f"bf16 matmul [{m}, {k}] x [{k}, {n}] on {args.target} (cost model, us)", rows)
        best_public = min(p.latency_us for label, p in rows if label.startswith("tutorial"))
        print(f"\ngenerated / best public-style: {rows[-1][1].latency_us / best_public:.3f}x")
    if "attention" in ops:
        rows = _attention_rows(args.seqlen, args.target)
        _table(f"attention, q/k/v [128, {args.seqlen}] bf16 on {args.target} (cost model, us)", rows)
        generated = sum(p.latency_us for label, p in rows if label.startswith("neuroncc generated:"))
        print(f"\ngenerated (all kernels) / public-style: {generated / rows[0][1].latency_us:.3f}x")
    if "norm" in ops:
        rows = _norm_rows(args.rows, args.cols, args.target)
        _table(f"normalization [{args.rows}, {args.cols}] fp32 on {args.target} (cost model, us)", rows)
    print(f"\n({time.perf_counter() - start:.1f} s)")


if __name__ == "__main__":
    main()
