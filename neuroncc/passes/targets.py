"""The hardware facts the layout and tile passes plan against (numbers from docs/nki-reference.md)."""

from __future__ import annotations

from dataclasses import dataclass

KIB = 1024


@dataclass(frozen=True)
class NkiTarget:
    """A NeuronCore generation: on-chip memories are 128 partitions x a free dimension."""

    name: str
    sbuf_partition_bytes: int  # SBUF bytes per partition (usable space is a little below this)
    partitions: int = 128  # nl.tile_size.pmax
    psum_free_fp32: int = 512  # fp32 elements per partition in one 2 KiB PSUM bank (psum_fmax)
    stationary_free: int = 128  # matmul stationary operand free size (gemm_stationary_fmax)
    moving_free: int = 512  # matmul moving operand free size (gemm_moving_fmax)
    contraction: int = 128  # matmul contraction size on partitions


NKI_TARGETS: dict[str, NkiTarget] = {
    "trn1": NkiTarget("trn1", 192 * KIB),
    "trn2": NkiTarget("trn2", 224 * KIB),
    "trn3": NkiTarget("trn3", 256 * KIB),
}
