"""``tile{target=cpu|trn1|trn2|trn3 ...}``: decide the blocks each kernel's loops work on; code generators obey.

This pass is the one place tiling is decided (docs/passes.md, "tile"). It writes attributes on each
``kernel`` op, from the hardware facts of :mod:`neuroncc.hardware`; the code generators read them and never
choose again (a kernel compiled without them, or for another target, is tiled by :func:`tile_kernel` first).
Every attribute is a scheduling choice: none changes a result.

* All targets: ``target`` and ``domain`` (the iteration space, :func:`neuroncc.passes.kernels.kernel_domain`).
* NKI (:mod:`neuroncc.passes.tile_nki`): ``partition_dim`` (from the layout pass, or chosen here), ``tile =
  [partitions, free]`` and ``sbuf_budget``; matmul kernels ``matmul_tile = [m, n, k]`` and ``matmul_blocks``.
  Read by ``neuroncc.codegen.nki``.
* CPU: ``vector_width`` (the widest float32 vectors the loop vectorizer may use: the host's by default),
  ``inner_block`` (map loops over a longer innermost dim run it in blocks of this many elements, one block per
  parallel iteration) and, for an ``mm`` / ``addmm`` kernel, ``matmul_tile = [rows, n, k]``: the matmul and
  its epilogue run block of ``rows`` output rows by block while the block is in cache (``rows`` = all of
  them: one block). Read by ``neuroncc.codegen.llvm``.

``tile=[a,b]`` fixes an NKI kernel's partitions ``a`` and free block ``b`` (a matmul kernel's stationary and
moving tile); ``vector_width=`` and ``inner_block=`` fix the CPU choices. A fixed tile beyond a hardware limit
is a :class:`PassError`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Literal

from neuroncc.errors import PassError
from neuroncc.hardware import neuron_core
from neuroncc.hardware.host import target_cpu
from neuroncc.ir import REGISTRY, Category, Function, Op, Trait
from neuroncc.passes.kernels import contraction_size, kernel_domain, region_matmul
from neuroncc.passes.layout import choose_partition_dim
from neuroncc.passes.manager import Pass, PassContext

if TYPE_CHECKING:
    from neuroncc.hardware.neuron import NeuronCore

#: CPU map loops over an innermost dim longer than this run it in blocks of this many elements, one block per
#: parallel iteration (a long 1-d loop still spreads over the threads).
CPU_INNER_BLOCK = 16384
#: CPU matrix-product kernels of rank 2 (mm / addmm: the launcher runs them through BLAS block by block) run their epilogue on
#: blocks of output rows of about this many float32 bytes (at least ``MIN_ROW_BLOCK`` rows) while the block
#: is in cache; only when a block has at least K rows: each block re-reads (and BLAS re-packs) the whole
#: [K, N] weight and a short-M GEMM runs below peak, while blocking saves about two passes over the block's
#: output (1024-4096-1024 MLP: 32-row blocks made the GEMM 3x slower). Small outputs stay one block.
ROW_BLOCK_BYTES = 1 << 19
MIN_ROW_BLOCK = 8

#: The attributes this pass writes (cleared before a kernel is tiled again, e.g. for another target).
TILE_ATTRS = ("target", "domain", "tile", "sbuf_budget", "matmul_tile", "matmul_blocks", "matmul_k_group",
              "vector_width", "inner_block")


@dataclass(frozen=True)
class Tile(Pass):
    """Decide tile sizes for every kernel of a fused function (the code generators obey them)."""

    name: ClassVar[str] = "tile"
    target: Literal["cpu", "trn1", "trn2", "trn3"] = "cpu"
    tile: tuple[int, ...] = ()
    vector_width: int = 0
    inner_block: int = 0

    def __post_init__(self) -> None:
        if self.tile and (len(self.tile) != 2 or min(self.tile) < 1):
            raise ValueError(f"tile must be two positive sizes [partitions, free], got {list(self.tile)}")
        if self.tile and self.target == "cpu":
            raise ValueError("tile=[a,b] fixes NKI tiles; on cpu use vector_width= and inner_block=")
        if self.vector_width < 0 or self.inner_block < 0:
            raise ValueError("vector_width and inner_block must be positive (0: the default)")

    def apply(self, fn: Function, ctx: PassContext) -> Function:
        return fn.with_ops(self.tile_kernel(op) if op.opdef.category is Category.KERNEL else op
                           for op in fn.ops)

    def tile_kernel(self, kernel: Op) -> Op:
        """``kernel`` with this pass's decisions (any earlier ones replaced)."""
        (region,) = kernel.regions
        name = kernel.attrs["name"]
        try:
            core = neuron_core(self.target)
            if core is not None:
                attrs = _nki_attrs(core, kernel, self.tile)
            else:
                attrs = _cpu_attrs(region, self.vector_width, self.inner_block)
        except PassError as error:
            raise PassError(f"tile{{target={self.target}}}: kernel '{name}': {error}") from None
        specs = REGISTRY.get("kernel").attrs
        cleared = {key: specs[key].default for key in TILE_ATTRS}
        return Op(kernel.name, kernel.operands, kernel.results,
                  kernel.attrs.replace(**{**cleared, "target": self.target, **attrs}), kernel.regions)


#: The decisions a kernel tiled for a target must carry (a matmul's blocks are also decided for NKI).
REQUIRED = {"cpu": ("vector_width", "inner_block"), "nki": ("tile", "sbuf_budget")}


def tile_kernel(kernel: Op, target: str) -> Op:
    """``kernel`` tiled for ``target`` unless the ``tile`` pass already did (the code generators call this for
    kernels compiled without the pass, tiled for another target, or missing a decision)."""
    a = kernel.attrs
    required = REQUIRED["cpu" if neuron_core(target) is None else "nki"]
    if a["target"] == target and all(a[key] for key in required):
        return kernel
    return Tile(target=target).tile_kernel(kernel)  # type: ignore[arg-type]


# ---- NKI ------------------------------------------------------------------------------------------------


def _nki_attrs(core: NeuronCore, kernel: Op, fixed: tuple[int, ...]) -> dict:
    # the NKI tiling rules and the NeuronCore tables they read only for an NKI target (a cpu compile: neither)
    from neuroncc.passes.tile_nki import matmul_tiles, vector_tiles

    region = kernel.regions[0]
    domain = kernel_domain(region)
    if kernel.attrs["domain"] == domain and kernel.attrs["partition_dim"] is not None:
        partition = kernel.attrs["partition_dim"]  # the layout pass's choice
    else:
        partition = choose_partition_dim(region)
    if fixed and fixed[0] > core.partitions:
        raise PassError(f"partition tile {fixed[0]} exceeds the {core.partitions} partitions")
    attrs: dict = {"domain": domain, "partition_dim": partition}
    matmul = region_matmul(region)
    if matmul is not None and matmul.has(Trait.MATRIX_PRODUCT):
        attrs.update(matmul_tiles(core, region, fixed))  # its epilogue runs on the matmul's tiles
        fixed = ()  # the free tile of other loop nests (an epilogue reading the product transposed) is chosen
    return {**attrs, **vector_tiles(core, region, domain, partition, fixed)}


# ---- CPU ------------------------------------------------------------------------------------------------


def _cpu_attrs(region: Function, vector_width: int, inner_block: int) -> dict:
    attrs: dict = {"domain": kernel_domain(region), "vector_width": vector_width or target_cpu().f32_lanes,
                   "inner_block": inner_block or CPU_INNER_BLOCK}
    matmul = region_matmul(region)
    if matmul is not None and matmul.has(Trait.MATRIX_PRODUCT) and matmul.result.type.rank == 2:
        rows, n = matmul.result.type.shape
        k = contraction_size(matmul)
        block = max(ROW_BLOCK_BYTES // (max(n, 1) * 4), MIN_ROW_BLOCK)
        # a product of bf16 words is one block: it is ATen's bf16 GEMM (oneDNN), which reorders the whole [K, N]
        # operand into its bf16 pair layout at every call (in 8 blocks the weight gradient of a 512-2048-512 MLP's
        # bf16 autocast step, [2048, 128] x [128, 512], took 1.3x the time of its [512, 128] x [128, 2048]
        # sibling, in one block 0.95x: Zen 4, session 48); its epilogue is mostly the words' widening
        blocked = k <= block < rows and not matmul.attrs.get("words")
        attrs["matmul_tile"] = (block if blocked else rows, n, k)
    return attrs
