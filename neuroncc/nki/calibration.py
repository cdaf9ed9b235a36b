"""Calibration runs of the cost model: ``python -m neuroncc.nki.calibration`` prints the tables in
docs/nki.md (cost-only, about 15 seconds).

- The blocked bf16 matmul of AWS's NKI matmul tutorial, [4096, 8192] x [8192, 8192], whose published
  trn1 measurement is 6.97 ms, 85% of TensorE peak; and the tutorial's naive tiled kernel (11% of peak
  at that size on trn1) at [2048, 2048, 2048].
- Softmax, LayerNorm and RMSNorm on [4096, 1024], which should stay close to their DMA-bound time
  (bytes moved / DMA bandwidth).
"""

from __future__ import annotations

from dataclasses import dataclass

import neuroncc.nki as nki
import neuroncc.nki.language as nl
from neuroncc.nki import kernels
from neuroncc.nki.profile import KernelProfile
from neuroncc.nki.target import TARGETS


@dataclass(frozen=True)
class Case:
    """One calibration kernel launch."""

    name: str
    kernel: nki.Kernel
    args: tuple
    kwargs: tuple[tuple[str, object], ...] = ()

    def profile(self, target: str) -> KernelProfile:
        return nki.benchmark(self.kernel, target=target, execute=False)(*self.args, **dict(self.kwargs)).profile


def _spec(*shape: int, dtype: object = nl.float32) -> nki.TensorSpec:
    return nki.TensorSpec.of(shape, dtype)


MATMUL_CASES = (
    Case("blocked bf16 matmul 4096x8192x8192", kernels.matmul_blocked,
         (_spec(8192, 4096, dtype=nl.bfloat16), _spec(8192, 8192, dtype=nl.bfloat16))),
    Case("naive tiled bf16 matmul 2048^3", kernels.matmul_tiled,
         (_spec(2048, 2048, dtype=nl.bfloat16), _spec(2048, 2048, dtype=nl.bfloat16))),
)


def _norm_cases(dtype: object, label: str) -> tuple[Case, ...]:
    x, v = _spec(4096, 1024, dtype=dtype), _spec(1024, dtype=dtype)
    return (
        Case(f"softmax {label}", kernels.softmax, (x,)),
        Case(f"layernorm {label}", kernels.layernorm, (x, v, v)),
        Case(f"rmsnorm {label}", kernels.rmsnorm, (x, v)),
    )


DMA_CASES = _norm_cases(nl.float32, "fp32") + _norm_cases(nl.bfloat16, "bf16") + (
    Case("softmax bf16, 2 rows/partition", kernels.softmax, (_spec(4096, 1024, dtype=nl.bfloat16),),
         (("rows_per_partition", 2),)),
)


def matmul_table() -> str:
    lines = ["| kernel | target | estimate (ms) | % of bf16 TensorE peak | bound |", "|---|---|---|---|---|"]
    for case in MATMUL_CASES:
        for target in TARGETS:
            p = case.profile(target)
            lines.append(f"| {case.name} | {target} | {p.latency_us / 1000:.2f} | "
                         f"{100 * p.tensor_peak_fraction:.1f}% | {p.bound} |")
    return "\n".join(lines)


def dma_table() -> str:
    lines = ["| kernel [4096, 1024] | target | estimate (us) | DMA-bound (us) | ratio | bound |",
             "|---|---|---|---|---|---|"]
    for case in DMA_CASES:
        for target in TARGETS:
            p = case.profile(target)
            lines.append(f"| {case.name} | {target} | {p.latency_us:.1f} | {p.dma_bound_us:.1f} | "
                         f"{p.latency_us / p.dma_bound_us:.2f}x | {p.bound} |")
    return "\n".join(lines)


def main() -> None:
    print(matmul_table())
    print()
    print(dma_table())


if __name__ == "__main__":
    main()
