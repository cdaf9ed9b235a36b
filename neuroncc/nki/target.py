"""Per-generation hardware numbers for one NeuronCore, and choosing the target.

The numbers come from AWS's public Neuron documentation (see docs/nki.md for sources and what is
uncertain). Engine "lanes" are elements per partition per cycle relative to NC-v2, which processes one
element per partition per cycle on every engine; the published NC-v2 cycle formulas divide their
data-proportional term by these lanes on later generations.

The target is resolved once, at the API boundary (``nki.simulate`` / ``nki.benchmark``), from an explicit
argument or the ``NEURON_PLATFORM_TARGET_OVERRIDE`` environment variable; the core only ever sees a
``Target`` value.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from neuroncc.nki.errors import NKISimulationError

TARGET_ENV_VAR = "NEURON_PLATFORM_TARGET_OVERRIDE"
DEFAULT_TARGET = "trn2"

KIB = 1024


@dataclass(frozen=True, slots=True)
class Target:
    """One NeuronCore generation: clocks, engine widths, on-chip memory sizes and DMA bandwidth."""

    name: str  # "trn1" | "trn2" | "trn3"
    core: str  # "NC-v2" | "NC-v3" | "NC-v4"
    tensor_ghz: float
    vector_ghz: float
    vector_lanes_fp32: int
    vector_lanes_16bit: int
    scalar_ghz: float
    scalar_lanes_fp32: int
    scalar_lanes_16bit: int
    gpsimd_ghz: float
    sbuf_partition_bytes: int
    dma_gbytes_per_s: float  # aggregate DMA bandwidth of one core, GB/s (1e9 bytes)
    matmul_dst_dtypes: tuple[str, ...]  # dtypes nc_matmul may write into PSUM
    psum_partition_bytes: int = 16 * KIB
    psum_banks: int = 8
    partitions: int = 128
    dma_queues: int = 16  # transfers that can be in flight at once
    dma_fixed_us: float = 1.3  # fixed cost of each DMA transfer (descriptor processing and completion)
    sync_ns: float = 60.0  # semaphore hand-off when an instruction waits on another engine (~100 cycles)

    @property
    def psum_bank_bytes(self) -> int:
        return self.psum_partition_bytes // self.psum_banks

    @property
    def tensor_peak_flops_bf16(self) -> float:
        """128 x 128 MACs per cycle, two flops each."""
        return 2.0 * self.partitions * self.partitions * self.tensor_ghz * 1e9


TARGETS: dict[str, Target] = {
    "trn1": Target(
        name="trn1", core="NC-v2", tensor_ghz=2.8,
        vector_ghz=1.12, vector_lanes_fp32=1, vector_lanes_16bit=1,
        scalar_ghz=1.4, scalar_lanes_fp32=1, scalar_lanes_16bit=1,
        gpsimd_ghz=1.4, sbuf_partition_bytes=192 * KIB, dma_gbytes_per_s=272.0,
        matmul_dst_dtypes=("float32",),
    ),
    "trn2": Target(
        name="trn2", core="NC-v3", tensor_ghz=2.4,
        vector_ghz=0.96, vector_lanes_fp32=2, vector_lanes_16bit=4,
        scalar_ghz=1.2, scalar_lanes_fp32=1, scalar_lanes_16bit=1,
        gpsimd_ghz=1.2, sbuf_partition_bytes=224 * KIB, dma_gbytes_per_s=368.0,
        matmul_dst_dtypes=("float32",),
    ),
    "trn3": Target(
        name="trn3", core="NC-v4", tensor_ghz=2.4,
        vector_ghz=1.2, vector_lanes_fp32=2, vector_lanes_16bit=4,
        scalar_ghz=1.2, scalar_lanes_fp32=1, scalar_lanes_16bit=2,
        gpsimd_ghz=1.2, sbuf_partition_bytes=256 * KIB, dma_gbytes_per_s=528.0,
        matmul_dst_dtypes=("float32", "bfloat16"),
    ),
}


def resolve_target(explicit: str | Target | None, environ: Mapping[str, str]) -> Target:
    """The target named explicitly, else by ``NEURON_PLATFORM_TARGET_OVERRIDE`` in ``environ``, else trn2."""
    if isinstance(explicit, Target):
        return explicit
    name = explicit if explicit is not None else environ.get(TARGET_ENV_VAR, DEFAULT_TARGET)
    key = name.strip().lower()
    if key not in TARGETS:
        source = "target argument" if explicit is not None else TARGET_ENV_VAR
        raise NKISimulationError(f"unknown NKI target {name!r} from {source}; expected one of {', '.join(TARGETS)}")
    return TARGETS[key]
