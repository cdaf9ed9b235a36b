"""``tile{target=cpu|trn1|trn2|trn3 ...}``: annotate every kernel with the blocks its loops work on.

Attributes written on each ``kernel`` op (they never change results; see docs/passes.md):

* ``target``, ``domain`` (the iteration space, :func:`neuroncc.passes.kernels.kernel_domain`) and ``tile``:
  the block of the domain one loop iteration handles, one entry per domain dim. Dims reduced by a
  reduction the kernel reads again (a softmax's max, a LayerNorm's mean) are never split (one-pass
  reductions); dims only terminal reductions reduce are split and their partial results accumulated.
* NKI: ``partition_dim`` (from the layout pass, or chosen here), the partition block is at most 128; free
  blocks are chosen so that the region's live tiles fit the SBUF per partition (trn1 192 KiB, trn2 224 KiB,
  trn3 256 KiB); ``sbuf_bytes`` records the estimate. A matmul kernel gets ``matmul_tile = [m, n, k]`` with
  m <= 128 (stationary), n <= 512 (moving; one fp32 PSUM bank), k <= 128 (contraction on partitions).
* CPU: row blocks sized so a block's live rows fit L1 (L2 when one row is bigger than L1),
  ``vector_width`` lanes (8 f32 for AVX2, 16 for AVX-512), and for a matmul kernel the row block of the
  output its epilogue processes while it is in cache (``matmul_tile = [rows, n, k]``).

``tile=[a,b]`` fixes the blocks instead of choosing them: ``a`` for the partition (NKI) or row (CPU)
dim and ``b`` for the innermost free dim; a fixed tile that does not fit is a :class:`PassError`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar, Literal

from neuroncc.errors import PassError
from neuroncc.ir import Category, Function, Op, Value
from neuroncc.passes.kernels import contraction_size, kernel_domain, reduced_domain_dims, region_matmul
from neuroncc.passes.layout import choose_partition_dim
from neuroncc.passes.manager import Pass, PassContext
from neuroncc.passes.targets import NKI_TARGETS, NkiTarget

#: The largest free block the NKI tiler picks on its own (elements); fixed tiles may be larger.
NKI_MAX_FREE_TILE = 2048


@dataclass(frozen=True)
class Tile(Pass):
    """Choose tile sizes for every kernel of a fused function."""

    name: ClassVar[str] = "tile"
    target: Literal["cpu", "trn1", "trn2", "trn3"] = "cpu"
    tile: tuple[int, ...] = ()
    vector_width: int = 8
    l1_bytes: int = 32 * 1024
    l2_bytes: int = 1024 * 1024

    def __post_init__(self) -> None:
        if self.tile and (len(self.tile) != 2 or min(self.tile) < 1):
            raise ValueError(f"tile must be two positive sizes [partition-or-rows, free], got {list(self.tile)}")
        if self.vector_width < 1:
            raise ValueError(f"vector_width must be positive, got {self.vector_width}")

    def apply(self, fn: Function, ctx: PassContext) -> Function:
        return fn.with_ops(self.tile_kernel(op) if op.opdef.category is Category.KERNEL else op
                           for op in fn.ops)

    def tile_kernel(self, kernel: Op) -> Op:
        (region,) = kernel.regions
        if self.target in NKI_TARGETS:
            attrs = _NkiTiler(NKI_TARGETS[self.target], self.tile, kernel).choose()
        else:
            attrs = _CpuTiler(self, kernel).choose()
        return Op(kernel.name, kernel.operands, kernel.results,
                  kernel.attrs.replace(target=self.target, **attrs), kernel.regions)


# ---- the live-tile model shared by both targets -------------------------------------------------------


def live_tile_bytes(region: Function, domain: tuple[int, ...], tile: tuple[int, ...],
                    partition_dim: int | None) -> int:
    """Peak bytes (per partition when ``partition_dim`` is set) of the region's values live at once, each
    holding one tile's worth of elements. Values that line up with the domain (right-aligned) take the tile's
    block of their own dims; others (reshaped values) are charged in proportion to their size."""
    domain_numel = max(math.prod(domain), 1)
    block = math.prod(t for d, t in enumerate(tile) if d != partition_dim) if tile else 1

    def bytes_of(value: Value) -> int:
        shape, lead = value.type.shape, len(domain) - value.type.rank
        if lead >= 0 and all(s in (1, domain[lead + i]) for i, s in enumerate(shape)):
            elems = math.prod(min(tile[lead + i], s) for i, s in enumerate(shape) if lead + i != partition_dim)
        else:
            elems = max(1, math.ceil(block * value.type.numel / domain_numel))
        return elems * value.type.dtype.itemsize

    last_use: dict[Value, int] = {}
    for index, op in enumerate(region.ops):
        for v in op.operands:
            last_use[v] = index
    end = len(region.ops)
    for v in region.outputs:
        last_use[v] = end
    live = {v: bytes_of(v) for v in region.params if v in last_use}
    peak = sum(live.values())
    for index, op in enumerate(region.ops):
        for r in op.results:
            live[r] = bytes_of(r)
        peak = max(peak, sum(live.values()))
        for v in [v for v in live if last_use.get(v, -1) <= index]:
            del live[v]
    return peak


def _with(tile: list[int], dim: int, size: int) -> list[int]:
    return tile[:dim] + [size] + tile[dim + 1:]


def _largest_power_of_two_at_most(n: int) -> int:
    return 1 << (max(n, 1).bit_length() - 1)


# ---- NKI ------------------------------------------------------------------------------------------------


class _NkiTiler:
    def __init__(self, hw: NkiTarget, fixed: tuple[int, ...], kernel: Op):
        self.hw, self.fixed, self.kernel = hw, fixed, kernel
        self.region = kernel.regions[0]
        self.name = kernel.attrs["name"]
        self.domain = kernel_domain(self.region)
        if kernel.attrs["domain"] == self.domain and kernel.attrs["partition_dim"] is not None:
            self.partition_dim: int | None = kernel.attrs["partition_dim"]
        else:
            self.partition_dim = choose_partition_dim(self.region)

    def fail(self, message: str) -> PassError:
        return PassError(f"tile{{target={self.hw.name}}}: kernel '{self.name}': {message}")

    def choose(self) -> dict:
        if self.fixed and self.fixed[0] > self.hw.partitions:
            raise self.fail(f"partition tile {self.fixed[0]} exceeds the {self.hw.partitions} partitions")
        matmul = region_matmul(self.region)
        return self.choose_matmul(matmul) if matmul is not None else self.choose_vector()

    def check_budget(self, sbuf: int, what: str) -> None:
        if sbuf > self.hw.sbuf_partition_bytes:
            raise self.fail(f"{what} needs {sbuf} bytes of SBUF per partition; {self.hw.name} has "
                            f"{self.hw.sbuf_partition_bytes}")

    def choose_vector(self) -> dict:
        domain, p = self.domain, self.partition_dim
        whole = reduced_domain_dims(self.region, domain).whole
        tile = [d_size if d in whole else 1 for d, d_size in enumerate(domain)]
        if p is not None:
            tile[p] = min(self.fixed[0] if self.fixed else self.hw.partitions, max(domain[p], 1))
        free = [d for d in range(len(domain)) if d != p and d not in whole]
        inner = free[-1] if free else None
        if inner is not None:
            extent = max(domain[inner], 1)
            if self.fixed:
                tile[inner] = self.fixed[1]
            else:
                tile[inner] = min(extent, NKI_MAX_FREE_TILE)
                while tile[inner] > 1 and self.sbuf(tile) > self.hw.sbuf_partition_bytes:
                    tile[inner] = _largest_power_of_two_at_most(tile[inner] - 1)
        tile = [max(t, 1) for t in tile]
        sbuf = self.sbuf(tile)
        self.check_budget(sbuf, f"tile {tile} of domain {list(domain)}")
        return {"domain": domain, "partition_dim": p, "tile": tuple(tile), "sbuf_bytes": sbuf}

    def sbuf(self, tile: list[int]) -> int:
        return live_tile_bytes(self.region, self.domain, tuple(tile), self.partition_dim)

    def choose_matmul(self, matmul: Op) -> dict:
        domain = self.domain
        m, n = domain[-2], domain[-1]
        k = contraction_size(matmul)
        tm = min(self.fixed[0] if self.fixed else self.hw.stationary_free, max(m, 1))
        tn = self.fixed[1] if self.fixed else min(self.hw.moving_free, max(n, 1))
        tk = min(self.hw.contraction, max(k, 1))
        if tn > self.hw.psum_free_fp32:
            raise self.fail(f"matmul free tile {tn} exceeds one PSUM bank ({self.hw.psum_free_fp32} fp32)")
        itemsize = matmul.operands[0].type.dtype.itemsize
        tile = [1] * (len(domain) - 2) + [tm, tn]
        while True:
            # stationary [tk, tm] and moving [tk, tn] tiles, plus the epilogue's live [tm, tn] tiles
            sbuf = itemsize * (tm + tn) + self.sbuf(tile)
            if self.fixed or tn == 1 or sbuf <= self.hw.sbuf_partition_bytes:
                break
            tn = _largest_power_of_two_at_most(tn - 1)
            tile[-1] = tn
        self.check_budget(sbuf, f"matmul tile [{tm}, {tn}, {tk}]")
        return {"domain": domain, "partition_dim": len(domain) - 2, "tile": tuple(tile),
                "matmul_tile": (tm, tn, tk), "sbuf_bytes": sbuf}


# ---- CPU ------------------------------------------------------------------------------------------------


class _CpuTiler:
    def __init__(self, options: Tile, kernel: Op):
        self.options, self.kernel = options, kernel
        self.region = kernel.regions[0]
        self.name = kernel.attrs["name"]
        self.domain = kernel_domain(self.region)

    def row_bytes(self, tile: list[int]) -> int:
        return live_tile_bytes(self.region, self.domain, tuple(tile), None)

    def choose(self) -> dict:
        domain, o = self.domain, self.options
        attrs: dict = {"domain": domain, "vector_width": o.vector_width}
        if not domain:
            return {**attrs, "tile": ()}
        matmul = region_matmul(self.region)
        whole = reduced_domain_dims(self.region, domain).whole
        inner_start = min(whole) if whole and matmul is None else len(domain) - 1
        row_dim = inner_start - 1 if inner_start > 0 else None
        tile = [1] * inner_start + [max(s, 1) for s in domain[inner_start:]]
        if o.tile:
            tile[-1] = o.tile[1]
            if row_dim is not None:
                tile[row_dim] = o.tile[0]
            working = self.row_bytes(tile)
            if working > o.l2_bytes:
                raise PassError(f"tile{{target=cpu}}: kernel '{self.name}': tile {tile} of domain {list(domain)} "
                                f"keeps {working} bytes live, more than the L2 budget {o.l2_bytes}")
        elif row_dim is not None:
            budget = o.l1_bytes if self.row_bytes(tile) <= o.l1_bytes else o.l2_bytes
            extent = max(domain[row_dim], 1)
            while tile[row_dim] * 2 <= extent and self.row_bytes(_with(tile, row_dim, tile[row_dim] * 2)) <= budget:
                tile[row_dim] *= 2
        if matmul is not None:
            attrs["matmul_tile"] = (tile[-2] if len(tile) >= 2 else 1, tile[-1], contraction_size(matmul))
        return {**attrs, "tile": tuple(tile)}
