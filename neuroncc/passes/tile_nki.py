"""The ``tile`` pass's decisions for NKI targets (trn1, trn2, trn3); the NKI emitter reads them.

A kernel without a matmul gets

* ``tile = [partitions, free]``: each loop nest of the kernel lays at most ``partitions`` rows on the
  partitions per block (all 128 by default), and its loop nest over the kernel's domain holds ``free``
  elements of its innermost free dim per tile: the whole dim when the tiles of one iteration fit the SBUF
  budget, else the largest power of two that does (0: the kernel has no such dim). Reduced dims always stay
  whole in the free axes (NKI reduces along free axes, in one pass).
* ``sbuf_budget``: the SBUF bytes per partition one loop iteration's tiles may take (half the SBUF: the rest
  lets the next iteration's loads run ahead). One iteration's footprint is estimated as every operand and
  result of the kernel's compute ops held at once, as float32.

A kernel whose region holds ``mm`` / ``bmm`` / ``addmm`` gets ``matmul_tile = [m, n, k]`` (the TensorE tile:
stationary free size, moving free size, contraction; at most 128, 512, 128) and ``matmul_blocks = [tiles_m,
tiles_n, tiles_k]``: the loop nest of AWS's matmul tutorial computes output blocks of ``[tiles_m * m, tiles_n
* n]`` and loads K blocks of ``tiles_k * k`` once into SBUF for every tile pair of the block. The blocks are
those with the lowest estimated time (:func:`estimate_matmul_ns`: the busiest of TensorE, VectorE and DMA,
with the generation's clocks and DMA bandwidth) whose double-buffered operand blocks and accumulator fit in
``MATMUL_SBUF_SHARE`` of the SBUF.

``matmul_k_group`` (``g``; 0 or 1: K in order): both operands are stored K-major (``lhsT [K, M]``,
``rhs [K, N]``: K is the slower-moving dim, so K lands on the partitions with no TensorE transpose) and each
group of ``g`` K tiles (``128 g`` K rows) is laid partition-major: element ``p * g + j`` of the group sits
on partition ``p`` of the group's K tile ``j``. The sum over K does not care which K index meets which
partition as long as both operands agree, and this order makes each partition's share of a group ``g``
consecutive HBM rows: one DMA per group whose per-partition run is ``g`` rows long instead of one row (a
512-wide bf16 row is 1 KiB, a quarter of the 4 KiB the DMA engines need for full bandwidth; see
:func:`~neuroncc.hardware.neuron.dma_efficiency`). ``g`` is the smallest that brings the runs of operand
blocks spanning whole rows to ``DMA_FULL_RATE_BYTES`` (larger groups only make TensorE wait longer for its
first tile), and is used when the estimate says it is faster; it needs K to divide into whole blocks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from neuroncc.hardware.neuron import (
    DEFAULT_NEURON_CORE, DMA_FULL_RATE_BYTES, FP32_MATMUL_SLOWDOWN, MIN_ISSUE_CYCLES, NEURON_CORES, PARTITIONS, PSUM_FMAX, NeuronCore,
    dma_efficiency,
)
from neuroncc.errors import PassError
from neuroncc.ir import Function, Op, Value
from neuroncc.passes.kernels import contraction_size, is_free, reduced_domain_dims, region_matmul
from neuroncc.ir.view_windows import StridedView, view_chain_layout

#: Share of the SBUF one loop iteration's tiles may take (the rest lets the next iteration's loads run ahead).
SBUF_SHARE = 0.5
#: Share of the SBUF a matmul's operand blocks (two iterations in flight) and its accumulator may take.
MATMUL_SBUF_SHARE = 0.85
#: Bytes per element of a tile in the footprint estimate (engines compute in float32).
TILE_ITEMSIZE = 4
#: 128 x 128 transposes gathered in one PSUM tile (one bank of fp32) before one copy back to SBUF.
TRANSPOSES_PER_COPY = PSUM_FMAX // PARTITIONS
#: Share of the first operand blocks' load time the matmul estimate counts as exposed (TensorE starts on the
#: first K tiles while the rest of the block arrives). Chosen on the simulator's cost model over mm shapes from
#: [128, 512, 512] to [2048, 4096, 2048], bf16 and fp32, both operand layouts: with 0.5 no shape got slower
#: blocks than with the fill left out, with 1.0 some did (a 1024^3 bf16 matmul 20% slower).
FILL_EXPOSED = 0.5
#: The blocks tried per dim: tiles per output block along M, N, and per K block.
BLOCK_CHOICES_M, BLOCK_CHOICES_N, BLOCK_CHOICES_K = (1, 2, 4, 8, 16), (1, 2, 4, 8), (1, 2, 4, 8, 16)
#: VectorE lanes in the matmul estimate: the default generation's on every target (the estimate compares
#: block choices; per-generation lanes would change trn1 / trn3 kernels, an open item in docs/nki.md).
ESTIMATE_CORE = NEURON_CORES[DEFAULT_NEURON_CORE]


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _halve(size: int) -> int:
    """The largest power of two below ``size``."""
    return 1 << ((size - 1).bit_length() - 1)


# ---- kernels without a matmul --------------------------------------------------------------------------


def loop_tiles(region: Function) -> int:
    """Tiles one loop iteration holds, as the emitter counts them: each compute op's result and operands (a
    matmul's run on its own tiles)."""
    matmul = region_matmul(region)
    compute = [op for op in region.ops if not is_free(op) and op is not matmul]
    return len(compute) + sum(len(op.operands) for op in compute)


def footprint(tiles: int, free_elements: int) -> int:
    """SBUF bytes per partition of ``tiles`` tiles of ``free_elements`` elements each."""
    return tiles * free_elements * TILE_ITEMSIZE


def fit_free_block(extent: int, whole: int, tiles: int, budget: int) -> int:
    """The free block of a dim of ``extent`` elements next to ``whole`` elements of whole (reduced) dims per
    tile: the whole dim, halved to a power of two until ``tiles`` tiles fit ``budget``."""
    block = extent
    while block > 1 and footprint(tiles, block * whole) > budget:
        block = _halve(block)
    return block


def innermost_free_dim(domain: tuple[int, ...], partition: int | None, reduced: frozenset[int]) -> int | None:
    """The domain dim the emitter splits in the free axes: the innermost kept (non-reduced, size > 1) dim
    other than the partition dim, when it comes after the partition dim (a dim before it is looped)."""
    kept = [d for d, n in enumerate(domain) if n > 1 and d != partition and d not in reduced]
    return kept[-1] if kept and (partition is None or kept[-1] > partition) else None


def vector_tiles(core: NeuronCore, region: Function, domain: tuple[int, ...], partition: int | None,
                 fixed: tuple[int, ...]) -> dict:
    """``tile`` and ``sbuf_budget`` of a kernel without a matmul (see the module docstring)."""
    reduced = reduced_domain_dims(region, domain).all
    inner = innermost_free_dim(domain, partition, reduced)
    budget = int(core.sbuf_partition_bytes * SBUF_SHARE)
    free = 0
    if inner is not None:
        whole = math.prod(n for d, n in enumerate(domain) if d in reduced and d != partition and n > 1)
        free = fixed[1] if fixed else fit_free_block(domain[inner], whole, loop_tiles(region), budget)
    return {"tile": (fixed[0] if fixed else core.partitions, free), "sbuf_budget": budget}


# ---- matmul kernels ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MatmulBlocks:
    """A TensorE tile ``[tm, tn, tk]`` and the tiles per SBUF block along M, N and K."""

    tm: int
    tn: int
    tk: int
    tiles_m: int
    tiles_n: int
    tiles_k: int
    k_group: int = 1  # K tiles per partition-major group (1: K in order; see the module docstring)

    @property
    def block_m(self) -> int:
        return self.tm * self.tiles_m

    @property
    def block_n(self) -> int:
        return self.tn * self.tiles_n

    @property
    def block_k(self) -> int:
        return self.tk * self.tiles_k

    @property
    def tile(self) -> tuple[int, int, int]:
        return self.tm, self.tn, self.tk

    @property
    def blocks(self) -> tuple[int, int, int]:
        return self.tiles_m, self.tiles_n, self.tiles_k


def operand_run_bytes(extent: int, block: int, k_outer: bool, blocks: MatmulBlocks, itemsize: int) -> int:
    """Contiguous bytes per partition of one DMA loading an operand block (``block`` of the operand's
    ``extent`` along M or N): K-major, one row of the block per K tile, or ``tiles_k`` whole rows when the
    K block is interleaved and the block spans the full row; rows-major, the K block of one row."""
    if not k_outer:
        return blocks.block_k * itemsize
    rows = blocks.k_group if block >= extent else 1
    return rows * block * itemsize


def can_group_k(k: int, a_k_outer: bool, b_k_outer: bool, blocks: MatmulBlocks) -> bool:
    """Whether the K blocks may be laid partition-major in groups: both operands K-major (a transposed
    operand's K tiles come out of TensorE in K order), K a whole number of full blocks, and the groups
    dividing the block."""
    return (a_k_outer and b_k_outer and blocks.tk == PARTITIONS and k % blocks.block_k == 0
            and blocks.k_group >= 1 and blocks.tiles_k % blocks.k_group == 0)


def full_rate_k_group(m: int, n: int, itemsize: int, blocks: MatmulBlocks) -> int:
    """The smallest group of K tiles (a divisor of ``tiles_k``) that brings every operand block spanning
    whole rows to full-rate DMA runs (1 when no block spans whole rows: grouping lengthens no run)."""
    rows = [block * itemsize for block, extent in ((blocks.block_m, m), (blocks.block_n, n)) if block >= extent]
    if not rows:
        return 1
    for group in range(1, blocks.tiles_k + 1):
        if blocks.tiles_k % group == 0 and all(group * row >= DMA_FULL_RATE_BYTES for row in rows):
            return group
    return blocks.tiles_k


def estimate_matmul_ns(m: int, n: int, k: int, itemsize: int, a_k_outer: bool, b_k_outer: bool,
                       blocks: MatmulBlocks, core: NeuronCore) -> float:
    """Estimated time of the blocked loop nest: the busiest of TensorE, VectorE and DMA.

    ``a_k_outer`` / ``b_k_outer``: the operand is stored with K as its slower-moving dim, so it loads with K on
    the partitions directly; otherwise every block of it is turned by TensorE transposes."""
    if blocks.k_group > 1 and not can_group_k(k, a_k_outer, b_k_outer, blocks):
        raise PassError(f"matmul K blocks of {blocks.block_k} cannot be laid in groups of {blocks.k_group} "
                        f"K tiles for K = {k}")
    tiles_m, tiles_n, tiles_k = _ceil_div(m, blocks.tm), _ceil_div(n, blocks.tn), _ceil_div(k, blocks.tk)
    m_blocks, n_blocks = _ceil_div(m, blocks.block_m), _ceil_div(n, blocks.block_n)
    k_blocks = _ceil_div(k, blocks.block_k)
    issue = MIN_ISSUE_CYCLES
    slowdown = FP32_MATMUL_SLOWDOWN if itemsize == 4 else 1
    tensor = tiles_m * tiles_n * tiles_k * max(issue, blocks.tn) * slowdown
    vector = 0.0
    lanes = ESTIMATE_CORE.vector_lanes_fp32 if itemsize == 4 else ESTIMATE_CORE.vector_lanes_16bit
    piece = PARTITIONS  # rows of one transposed piece
    copy = max(issue, TRANSPOSES_PER_COPY * piece / lanes)  # one copy of a PSUM tile of pieces back to SBUF
    if not a_k_outer:  # A re-transposed for every block of N
        pieces = n_blocks * tiles_m * tiles_k
        tensor += pieces * piece
        vector += pieces / TRANSPOSES_PER_COPY * copy
    if not b_k_outer:
        pieces = m_blocks * _ceil_div(n, piece) * tiles_k
        tensor += pieces * piece
        vector += pieces / TRANSPOSES_PER_COPY * copy
    if k_blocks > 1:  # accumulate each K block's PSUM tile into SBUF
        vector += tiles_m * tiles_n * k_blocks * max(issue, blocks.tn / 2)
    vector += tiles_m * tiles_n * max(issue, blocks.tn / 2)  # the epilogue's copy out of PSUM
    a_run = operand_run_bytes(m, blocks.block_m, a_k_outer, blocks, itemsize)
    b_run = operand_run_bytes(n, blocks.block_n, b_k_outer, blocks, itemsize)
    dma = (m * k * itemsize * n_blocks / dma_efficiency(a_run) + k * n * itemsize * m_blocks / dma_efficiency(b_run)
           + m * n * itemsize / dma_efficiency(blocks.tn * itemsize))
    # Every transfer also pays the fixed descriptor cost, spread over the DMA queues: per operand block, one
    # per group of K tiles or, transposed, one per 128-row piece; one per output tile.
    k_major_loads = blocks.tiles_k // blocks.k_group
    a_loads = k_major_loads if a_k_outer else _ceil_div(blocks.block_m, piece)
    b_loads = k_major_loads if b_k_outer else _ceil_div(blocks.block_n, piece)
    transfers = m_blocks * n_blocks * k_blocks * (a_loads + b_loads) + tiles_m * tiles_n
    tensor_ns, vector_ns = tensor / core.tensor_ghz, vector / core.vector_ghz
    dma_ns = dma / core.dma_bytes_per_ns + transfers * core.dma_fixed_us * 1e3 / core.dma_queues
    # TensorE waits for the first block of both operands: the first K tiles (or groups) let it start, the
    # first output tile completes when the whole block is in (FILL_EXPOSED of that load is not hidden).
    fill = (min(m, blocks.block_m) * min(k, blocks.block_k) * itemsize / dma_efficiency(a_run)
            + min(k, blocks.block_k) * min(n, blocks.block_n) * itemsize / dma_efficiency(b_run))
    fill_ns = fill / core.dma_bytes_per_ns
    # The busiest engine sets the pace; work hidden behind it still costs some (PSUM tiles wait for their
    # accumulation, DMA queues contend), which breaks ties towards less of it.
    return max(tensor_ns, vector_ns, dma_ns) + FILL_EXPOSED * fill_ns + 0.2 * vector_ns + 0.05 * dma_ns


def choose_matmul_blocks(m: int, n: int, k: int, itemsize: int, a_k_outer: bool, b_k_outer: bool,
                         core: NeuronCore, tile: tuple[int, int, int] | None = None) -> MatmulBlocks:
    """The blocks with the lowest :func:`estimate_matmul_ns` whose working set fits ``MATMUL_SBUF_SHARE`` of
    the SBUF (two iterations of the operand blocks in flight, so the next block loads while TensorE works on
    this one). ``tile`` fixes the TensorE tile (default: the largest, at most the extents)."""
    tm, tn, tk = tile or (min(core.stationary_free, m), min(core.moving_free, n), min(core.contraction, k))
    best: tuple[float, MatmulBlocks] | None = None
    for tiles_m in BLOCK_CHOICES_M:
        for tiles_n in BLOCK_CHOICES_N:
            for tiles_k in BLOCK_CHOICES_K:
                blocks = MatmulBlocks(tm, tn, tk, min(tiles_m, _ceil_div(m, tm)), min(tiles_n, _ceil_div(n, tn)),
                                      min(tiles_k, _ceil_div(k, tk)))
                acc = 4 * blocks.tiles_m * blocks.block_n if _ceil_div(k, blocks.block_k) > 1 else 0
                operands = itemsize * blocks.tiles_k * (blocks.block_m + blocks.block_n)
                staging = itemsize * TRANSPOSES_PER_COPY * blocks.block_k * ((not a_k_outer) + (not b_k_outer))
                if acc + 2 * (operands + staging) > core.sbuf_partition_bytes * MATMUL_SBUF_SHARE:
                    continue
                options = [blocks]
                grouped = replace(blocks, k_group=full_rate_k_group(m, n, itemsize, blocks))
                if grouped.k_group > 1 and can_group_k(k, a_k_outer, b_k_outer, grouped):
                    options.append(grouped)
                for option in options:  # grouped K only when strictly faster (ties keep K in order)
                    score = estimate_matmul_ns(m, n, k, itemsize, a_k_outer, b_k_outer, option, core) * \
                        (1 + 1e-3 * (tiles_m + tiles_n + tiles_k) + 1e-6 * (option.k_group > 1))
                    if best is None or score < best[0]:
                        best = (score, option)
    if best is None:
        raise PassError(f"no matmul block of tile [{tm}, {tn}, {tk}] fits {core.name}'s SBUF")
    return best[1]


def _window(value: Value, producers: dict[Value, Op]) -> StridedView:
    """The window a matmul operand reads of its root tensor (kernel arguments are contiguous in HBM; a view
    chain that cannot read in place is copied first, so it reads a contiguous copy)."""
    found = view_chain_layout(value, producers, contiguous_root=True)
    return found[1] if found is not None else StridedView.contiguous(value.type.shape)


def k_outer(matmul: Op, position: int, producers: dict[Value, Op]) -> bool:
    """Whether operand A (``position`` of the first matrix) or B (the next) is stored with K as its
    slower-moving dim."""
    first = len(matmul.operands) - 2  # the first factor (a bias comes before the factors)
    moving = position == first + 1
    transposed = matmul.attrs["transpose_b" if moving else "transpose_a"]
    strides = _window(matmul.operands[position], producers).strides
    rows, cols = strides[-2], strides[-1]
    k_is_rows = transposed != moving  # A: K is the column dim unless transposed; B: the row dim unless transposed
    outer, k = (cols, rows) if k_is_rows else (rows, cols)
    return k > outer


def matmul_tiles(core: NeuronCore, region: Function, fixed: tuple[int, ...]) -> dict:
    """``matmul_tile`` and ``matmul_blocks`` of a kernel whose region holds an mm / bmm / addmm."""
    matmul = region_matmul(region)
    assert matmul is not None
    m, n = matmul.result.type.shape[-2:]
    k = contraction_size(matmul)
    tile = None
    if fixed:
        if fixed[0] > core.stationary_free:
            raise PassError(f"matmul stationary tile {fixed[0]} exceeds {core.stationary_free}")
        if fixed[1] > core.psum_free_fp32:
            raise PassError(f"matmul free tile {fixed[1]} exceeds one PSUM bank ({core.psum_free_fp32} fp32)")
        tile = (min(fixed[0], max(m, 1)), min(fixed[1], max(n, 1)), min(core.contraction, max(k, 1)))
    if m * n * k == 0:  # nothing to multiply: the emitter runs it on the host
        return {}
    first = len(matmul.operands) - 2  # the first factor (a bias comes before the factors)
    producers = region.producers()
    blocks = choose_matmul_blocks(m, n, k, matmul.operands[first].type.dtype.itemsize,
                                  k_outer(matmul, first, producers), k_outer(matmul, first + 1, producers), core, tile)
    grouped = {"matmul_k_group": blocks.k_group} if blocks.k_group > 1 else {}  # default 0: K in order
    return {"matmul_tile": blocks.tile, "matmul_blocks": blocks.blocks, **grouped}


__all__ = ["MATMUL_SBUF_SHARE", "MatmulBlocks", "SBUF_SHARE", "TRANSPOSES_PER_COPY", "can_group_k",
           "choose_matmul_blocks", "estimate_matmul_ns", "fit_free_block", "footprint", "full_rate_k_group",
           "innermost_free_dim", "k_outer", "loop_tiles", "matmul_tiles", "operand_run_bytes", "vector_tiles"]
