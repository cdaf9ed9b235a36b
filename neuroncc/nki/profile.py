"""The per-kernel cost report: latency, engine utilisation, the bound, work done, % of TensorE peak."""

from __future__ import annotations

from dataclasses import dataclass

from neuroncc.nki import trace as tr
from neuroncc.nki.scheduler import Schedule, schedule
from neuroncc.nki.target import Target
from neuroncc.nki.trace import Engine

ENGINE_LABELS = {
    Engine.TENSOR: "TensorE",
    Engine.VECTOR: "VectorE",
    Engine.SCALAR: "ScalarE",
    Engine.GPSIMD: "GpSimdE",
    Engine.DMA: "DMA",
}
BOUND_THRESHOLD = 0.5  # below this busiest-engine utilisation the kernel is latency (dependency) bound


@dataclass(frozen=True, slots=True)
class EngineUsage:
    """One engine's share of a kernel's estimated run."""

    engine: str  # "TensorE", "VectorE", "ScalarE", "GpSimdE", "DMA"
    instructions: int
    busy_us: float  # for DMA: time the core's DMA bandwidth was in use
    utilisation: float  # busy / latency


@dataclass(frozen=True, slots=True)
class KernelProfile:
    """The cost model's estimate for one kernel launch on one target."""

    target: str
    latency_us: float
    engines: tuple[EngineUsage, ...]
    bound: str  # the busiest engine's label, or "latency" when no engine is busy half the time
    tensor_flops: int
    elementwise_ops: int
    dma_bytes: int
    dma_bound_us: float  # dma_bytes / peak DMA bandwidth: the floor for any kernel moving these bytes
    tensor_peak_fraction: float  # achieved TensorE flop rate over the bf16 peak
    instruction_count: int
    peak_sbuf_bytes_per_partition: int
    peak_psum_bytes_per_partition: int

    def engine(self, label: str) -> EngineUsage:
        for usage in self.engines:
            if usage.engine == label:
                return usage
        raise KeyError(label)

    def report(self) -> str:
        """A readable table of the estimate."""
        lines = [
            f"NKI cost-model estimate on {self.target}",
            f"  latency        {self.latency_us:12.2f} us   bound: {self.bound}",
            f"  TensorE        {self.tensor_flops / 1e9:12.3f} GFLOP  {100 * self.tensor_peak_fraction:5.1f}% of bf16 peak",
            f"  DMA            {self.dma_bytes / 2**20:12.2f} MiB    DMA-bound time {self.dma_bound_us:.2f} us "
            f"(latency is {self.latency_us / self.dma_bound_us:.2f}x)" if self.dma_bound_us else
            f"  DMA            {self.dma_bytes / 2**20:12.2f} MiB",
            f"  elementwise    {self.elementwise_ops:12d} elements on VectorE/ScalarE/GpSimdE",
            f"  on-chip peak   SBUF {self.peak_sbuf_bytes_per_partition} B/partition, "
            f"PSUM {self.peak_psum_bytes_per_partition} B/partition",
            "",
            f"  {'engine':8s} {'instrs':>8s} {'busy (us)':>12s} {'util':>7s}",
        ]
        for usage in self.engines:
            lines.append(f"  {usage.engine:8s} {usage.instructions:8d} {usage.busy_us:12.2f} "
                         f"{100 * usage.utilisation:6.1f}%")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.report()


def build_profile(events: list[tr.Event] | tuple[tr.Event, ...], target: Target,
                  timeline: Schedule | None = None) -> KernelProfile:
    """Schedule a trace on ``target`` and summarise it."""
    timeline = timeline if timeline is not None else schedule(events, target)
    latency_ns = timeline.makespan_ns
    engines = tuple(
        EngineUsage(ENGINE_LABELS[e], timeline.counts[e], timeline.busy_ns[e] / 1000.0,
                    timeline.busy_ns[e] / latency_ns if latency_ns else 0.0)
        for e in Engine
    )
    busiest = max(engines, key=lambda usage: usage.busy_us)
    bound = busiest.engine if busiest.utilisation >= BOUND_THRESHOLD else "latency"
    peak_flops = target.tensor_peak_flops_bf16
    return KernelProfile(
        target=target.name,
        latency_us=latency_ns / 1000.0,
        engines=engines,
        bound=bound,
        tensor_flops=timeline.tensor_flops,
        elementwise_ops=timeline.elements,
        dma_bytes=timeline.dma_bytes,
        dma_bound_us=timeline.dma_bytes / target.dma_gbytes_per_s / 1000.0,
        tensor_peak_fraction=(timeline.tensor_flops / (latency_ns * 1e-9) / peak_flops) if latency_ns else 0.0,
        instruction_count=sum(timeline.counts.values()),
        peak_sbuf_bytes_per_partition=timeline.peak_sbuf_bytes,
        peak_psum_bytes_per_partition=timeline.peak_psum_bytes,
    )
