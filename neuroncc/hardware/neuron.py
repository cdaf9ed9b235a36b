"""NeuronCore generations: the numbers the passes, the NKI emitter, the simulator and its cost model share.

The numbers come from AWS's public Neuron documentation (docs/nki.md and /work/shared/docs/nki-reference.md
list the sources and what is uncertain). Limits that every generation shares are module constants (NKI's
``nl.tile_size`` spells some of them); what differs per generation is a field of :class:`NeuronCore`.

Engine "lanes" are elements per partition per cycle relative to NC-v2, which processes one element per
partition per cycle on every engine: the published NC-v2 cycle formulas divide their data-proportional term
by these lanes on later generations.
"""

from __future__ import annotations

from dataclasses import dataclass

KIB = 1024

# ---- on-chip memories (every generation) ------------------------------------------------------------------

#: SBUF and PSUM partitions (``nl.tile_size.pmax``): dim 0 of every on-chip tile is at most this.
PARTITIONS = 128
#: PSUM bytes per partition, in banks of ``PSUM_PARTITION_BYTES // PSUM_BANKS`` (2 KiB: 512 fp32 elements).
PSUM_PARTITION_BYTES = 16 * KIB
PSUM_BANKS = 8
#: fp32 elements per partition in one PSUM bank (``nl.tile_size.psum_fmax``).
PSUM_FMAX = PSUM_PARTITION_BYTES // PSUM_BANKS // 4
#: SBUF bytes per partition the NKI compiler keeps for itself (out of reach of direct allocation).
SBUF_COMPILER_RESERVED = 16 * KIB
#: SBUF tiles start at multiples of this many bytes per partition (as the NKI compiler allocates them), PSUM
#: tiles at multiples of this many (``nl.tile_size.sbuf_min_align`` / ``psum_min_align``).
SBUF_ALIGNMENT = 64
PSUM_MIN_ALIGNMENT = 4

#: Partition-start alignment of engine accesses (DMA has none): an access of more than ``ALIGN_WHOLE``
#: partitions starts at partition 0, of more than ``ALIGN_HALF`` at 0 or ``ALIGN_WHOLE``, of fewer at a
#: multiple of ``ALIGN_HALF``.
ALIGN_WHOLE = 64
ALIGN_HALF = 32


def allowed_partition_starts(partitions: int) -> tuple[int, ...]:
    """The partitions an engine access of ``partitions`` partitions may start at."""
    if partitions > ALIGN_WHOLE:
        return (0,)
    return tuple(range(0, PARTITIONS, ALIGN_WHOLE if partitions > ALIGN_HALF else ALIGN_HALF))

# ---- TensorE --------------------------------------------------------------------------------------------

#: ``nc_matmul(stationary[K, M], moving[K, N])``: M <= this (``gemm_stationary_fmax``) ...
GEMM_STATIONARY_FMAX = 128
#: ... N <= this (``gemm_moving_fmax``: one fp32 PSUM bank) ...
GEMM_MOVING_FMAX = 512
#: ... and K (on partitions) <= this.
GEMM_CONTRACTION_MAX = PARTITIONS
#: ``nc_matmul_mx`` (NC-v4): the moving free size by destination dtype.
MX_MOVING_FMAX = {"float32": 4096, "bfloat16": 8192}
#: TensorE runs fp32 operands at a quarter of its bf16 rate.
FP32_MATMUL_SLOWDOWN = 4
#: ``nc_transpose`` on TensorE turns up to 128 x 128; on VectorE up to 32 x 32.
TENSOR_TRANSPOSE_MAX = PARTITIONS
VECTOR_TRANSPOSE_MAX = 32
#: ``bn_stats`` free size limit (``nl.tile_size.bn_stats_fmax``).
BN_STATS_FMAX = 512

# ---- engines and DMA ------------------------------------------------------------------------------------

#: Minimum instruction issue interval, engine cycles: no instruction occupies its engine for less.
MIN_ISSUE_CYCLES = 64
#: Contiguous bytes per DMA descriptor (per partition) for the full DMA bandwidth ...
DMA_FULL_RATE_BYTES = 4096
#: ... and for ``DMA_EFFICIENT_SHARE`` of it; shorter runs fall off linearly, floored at ``DMA_MIN_RUN_BYTES``.
DMA_EFFICIENT_BYTES = 2048
DMA_EFFICIENT_SHARE = 0.75
DMA_MIN_RUN_BYTES = 64


def dma_efficiency(contiguous_bytes: int) -> float:
    """Fraction of the DMA bandwidth a transfer gets, from its contiguous run per descriptor.

    Published guidance: transfers need >= 2 KiB per partition to be efficient and >= 4 KiB to reach full
    bandwidth. The curve between those points (75% at 2 KiB, linear below, floored at 64-byte runs) is our
    assumption.
    """
    if contiguous_bytes >= DMA_FULL_RATE_BYTES:
        return 1.0
    if contiguous_bytes >= DMA_EFFICIENT_BYTES:
        rising = (contiguous_bytes - DMA_EFFICIENT_BYTES) / (DMA_FULL_RATE_BYTES - DMA_EFFICIENT_BYTES)
        return DMA_EFFICIENT_SHARE + (1.0 - DMA_EFFICIENT_SHARE) * rising
    return DMA_EFFICIENT_SHARE * max(contiguous_bytes, DMA_MIN_RUN_BYTES) / DMA_EFFICIENT_BYTES


@dataclass(frozen=True, slots=True)
class NeuronCore:
    """One NeuronCore generation: clocks, engine widths, on-chip memory sizes, matmul limits, DMA."""

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
    sbuf_partition_bytes: int  # SBUF bytes per partition (usable space is a little below this)
    dma_gbytes_per_s: float  # aggregate DMA bandwidth of one core, GB/s (1e9 bytes)
    matmul_dst_dtypes: tuple[str, ...]  # dtypes nc_matmul may write into PSUM
    psum_partition_bytes: int = PSUM_PARTITION_BYTES
    psum_banks: int = PSUM_BANKS
    partitions: int = PARTITIONS
    stationary_free: int = GEMM_STATIONARY_FMAX  # matmul M
    moving_free: int = GEMM_MOVING_FMAX  # matmul N
    contraction: int = GEMM_CONTRACTION_MAX  # matmul K
    dma_queues: int = 16  # transfers that can be in flight at once
    dma_fixed_us: float = 1.3  # fixed cost of each DMA transfer (descriptor processing and completion)
    sync_ns: float = 60.0  # semaphore hand-off when an instruction waits on another engine (~100 cycles)

    @property
    def psum_bank_bytes(self) -> int:
        return self.psum_partition_bytes // self.psum_banks

    @property
    def psum_free_fp32(self) -> int:
        """fp32 elements per partition in one PSUM bank (``nl.tile_size.psum_fmax``)."""
        return self.psum_bank_bytes // 4

    @property
    def dma_bytes_per_ns(self) -> float:
        return self.dma_gbytes_per_s  # GB/s == bytes/ns

    @property
    def tensor_peak_flops_bf16(self) -> float:
        """128 x 128 MACs per cycle, two flops each."""
        return 2.0 * self.partitions * self.partitions * self.tensor_ghz * 1e9


#: Every generation by name.
NEURON_CORES: dict[str, NeuronCore] = {
    "trn1": NeuronCore(
        name="trn1", core="NC-v2", tensor_ghz=2.8,
        vector_ghz=1.12, vector_lanes_fp32=1, vector_lanes_16bit=1,
        scalar_ghz=1.4, scalar_lanes_fp32=1, scalar_lanes_16bit=1,
        gpsimd_ghz=1.4, sbuf_partition_bytes=192 * KIB, dma_gbytes_per_s=272.0,
        matmul_dst_dtypes=("float32",),
    ),
    "trn2": NeuronCore(
        name="trn2", core="NC-v3", tensor_ghz=2.4,
        vector_ghz=0.96, vector_lanes_fp32=2, vector_lanes_16bit=4,
        scalar_ghz=1.2, scalar_lanes_fp32=1, scalar_lanes_16bit=1,
        gpsimd_ghz=1.2, sbuf_partition_bytes=224 * KIB, dma_gbytes_per_s=368.0,
        matmul_dst_dtypes=("float32",),
    ),
    "trn3": NeuronCore(
        name="trn3", core="NC-v4", tensor_ghz=2.4,
        vector_ghz=1.2, vector_lanes_fp32=2, vector_lanes_16bit=4,
        scalar_ghz=1.2, scalar_lanes_fp32=1, scalar_lanes_16bit=2,
        gpsimd_ghz=1.2, sbuf_partition_bytes=256 * KIB, dma_gbytes_per_s=528.0,
        matmul_dst_dtypes=("float32", "bfloat16"),
    ),
}

#: The generation compiled for when none is named.
DEFAULT_NEURON_CORE = "trn2"
