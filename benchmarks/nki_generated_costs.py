"""Cost-model estimates of the NKI kernels neuroncc generates (the tables in docs/nki.md, "Emission").

    PYTHONPATH=. python benchmarks/nki_generated_costs.py [--targets trn1,trn2,trn3] [--skip-matmul]

Cost-only (nothing is computed): a generated bf16 matmul [4096, 8192] x [8192, 8192] (~10 s per target)
and generated softmax / LayerNorm over [4096, 1024] in fp32 and bf16, each against its DMA-bound time. The
estimates are deterministic, so one run is the measurement; the wall time of the emitter is printed too.
"""

from __future__ import annotations

import argparse
import time

from neuroncc.ir import Builder, DType, TensorType
from neuroncc.executors.nki_sim.costs import estimate_costs
from neuroncc.testing.models import layer_norm_graph, softmax_graph


def _matmul_graph():
    b = Builder("mm")
    x = b.param(TensorType((4096, 8192), DType.bf16), "x")
    w = b.param(TensorType((8192, 8192), DType.bf16), "w")
    return b.build([b.op("mm", x, w)])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--targets", default="trn1,trn2,trn3")
    parser.add_argument("--skip-matmul", action="store_true")
    args = parser.parse_args()
    targets = args.targets.split(",")
    if not args.skip_matmul:
        print("| generated kernel | target | estimate (ms) | % of bf16 TensorE peak | bound | emit+estimate (s) |")
        print("|---|---|---|---|---|---|")
        for target in targets:
            start = time.perf_counter()
            (kernel,) = estimate_costs(_matmul_graph(), target).kernels
            print(f"| mm bf16 [4096, 8192] x [8192, 8192] | {target} | {kernel.latency_us / 1000:.2f} | "
                  f"{100 * kernel.tensor_peak_fraction:.1f}% | {kernel.bound} | {time.perf_counter() - start:.1f} |")
        print()
    print("| generated kernel [4096, 1024] | target | estimate (us) | DMA-bound (us) | ratio | bound |")
    print("|---|---|---|---|---|---|")
    for dtype in (DType.f32, DType.bf16):
        for make, label in ((softmax_graph, "softmax"), (layer_norm_graph, "layernorm")):
            for target in targets:
                (kernel,) = estimate_costs(make(4096, 1024, dtype), target).kernels
                print(f"| {label} {dtype.value} | {target} | {kernel.latency_us:.1f} | {kernel.dma_bound_us:.1f} | "
                      f"{kernel.latency_us / kernel.dma_bound_us:.2f}x | {kernel.bound} |")


if __name__ == "__main__":
    main()
