"""Facts about fused kernels that several passes, codegen and the CLI share.

* :func:`check_kernel_contract` checks the shape of fused IR (the contract stated in :mod:`.fuse`).
* :func:`kernel_summary` counts kernels and matmuls (``neuroncc inspect`` prints it).
* :func:`kernel_domain` and :func:`reduced_domain_dims` describe a region's iteration space for the layout
  and tile passes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from neuroncc.errors import PassError
from neuroncc.ir import REGISTRY, Category, Function, Op, Trait
from neuroncc.ir.strides import aliases_operand
from neuroncc.ir.view_windows import view_chain_layout


def _category(op: Op) -> Category:
    return REGISTRY.get(op.name).category


def is_free(op: Op) -> bool:
    """Views and constants: they compute nothing a kernel has to schedule."""
    return op.has(Trait.STRIDED_VIEW) or _category(op) is Category.CONSTANT


def region_matmul(region: Function) -> Op | None:
    return next((op for op in region.ops if _category(op) is Category.MATMUL), None)


def contraction_size(matmul: Op) -> int:
    """K of a matmul op: the extent summed over (for a convolution, input channels per group x kernel taps)."""
    if matmul.has(Trait.MATRIX_PRODUCT):
        a = matmul.operands[-2]  # the first factor (a bias comes before the factors)
        return a.type.shape[-2] if matmul.attrs["transpose_a"] else a.type.shape[-1]
    weight = matmul.operands[1]
    return math.prod(weight.type.shape[1:])


def check_kernel_contract(fn: Function) -> None:
    """Raise :class:`PassError` unless ``fn`` has the form the fusion pass promises codegen."""
    for op in fn.ops:
        category = _category(op)
        if category is Category.KERNEL:
            _check_region(op)
        elif category not in (Category.MATMUL, Category.EXTERN) and not aliases_operand(op):
            raise PassError(f"kernel contract: func @{fn.name} has op '{op.name}' at the top level "
                            "(only kernels, matmuls, extern calls and views may stay there)")


def _check_region(kernel: Op) -> None:
    name = kernel.attrs["name"]
    if len(kernel.regions) != 1:
        raise PassError(f"kernel contract: kernel '{name}' has {len(kernel.regions)} regions, not 1")
    (region,) = kernel.regions
    compute = [op for op in region.ops if not is_free(op)]
    matmuls = [op for op in compute if _category(op) is Category.MATMUL]
    for op in region.ops:
        if op.regions or _category(op) in (Category.KERNEL, Category.EXTERN) or op.has(Trait.REINTERPRET):
            raise PassError(f"kernel contract: kernel '{name}' contains '{op.name}'")
    if len(matmuls) > 1:
        raise PassError(f"kernel contract: kernel '{name}' holds {len(matmuls)} matmuls (at most one)")
    if matmuls and compute[0] is not matmuls[0]:
        raise PassError(f"kernel contract: kernel '{name}': its matmul must be the first compute op")
    if matmuls:
        producers, params = region.producers(), set(region.params)
        for operand in matmuls[0].operands:
            found = view_chain_layout(operand, producers)
            if found is None or found[0] not in params:
                raise PassError(f"kernel contract: kernel '{name}': matmul operands must be kernel parameters "
                                "or in-place views of them")


@dataclass(frozen=True)
class KernelSummary:
    """What a fused function launches: kernels (with and without a matmul) and top-level matmuls."""

    fused_kernels: int  # kernels without a matmul
    matmul_kernels: int  # kernels holding a matmul and its epilogue
    matmuls: int  # matmul ops at the top level (no epilogue)
    views: int  # pure views left at the top level (no work: they read in place)
    other: int  # ops of any other kind at the top level (0 after fusion)
    kernel_names: tuple[str, ...]

    @property
    def gemms(self) -> int:
        return self.matmul_kernels + self.matmuls

    @property
    def launches(self) -> int:
        return self.fused_kernels + self.matmul_kernels + self.matmuls + self.other

    def __str__(self) -> str:
        lines = [f"{self.launches} launches: {self.fused_kernels} fused kernels, {self.gemms} GEMMs "
                 f"({self.matmul_kernels} with a fused epilogue, {self.matmuls} alone), "
                 f"{self.views} top-level views, {self.other} other ops"]
        lines += [f"  {name}" for name in self.kernel_names]
        return "\n".join(lines)


def kernel_summary(fn: Function) -> KernelSummary:
    """Count what ``fn`` (normally after ``fuse``) launches."""
    fused = with_matmul = matmuls = views = other = 0
    names: list[str] = []
    for op in fn.ops:
        category = _category(op)
        if category is Category.KERNEL:
            names.append(op.attrs["name"])
            if region_matmul(op.regions[0]) is not None:
                with_matmul += 1
            else:
                fused += 1
        elif category is Category.MATMUL:
            matmuls += 1
        elif op.has(Trait.STRIDED_VIEW):
            views += 1
        else:
            other += 1
    return KernelSummary(fused, with_matmul, matmuls, views, other, tuple(names))


# ---- iteration spaces --------------------------------------------------------------------------------


def kernel_domain(region: Function) -> tuple[int, ...]:
    """The iteration space of a region: the shape of its largest value (on ties the one of highest rank, then
    the first defined).

    For a matmul kernel, the matmul's output (the epilogue runs over it).
    """
    matmul = region_matmul(region)
    if matmul is not None:
        return matmul.results[0].type.shape
    best: tuple[int, ...] = ()
    best_key = (-1, -1)
    for value in list(region.params) + [r for op in region.ops for r in op.results]:
        key = (value.type.numel, value.type.rank)
        if key > best_key:
            best, best_key = value.type.shape, key
    return best


@dataclass(frozen=True)
class ReducedDims:
    """Which domain dims a region's reductions reduce over.

    ``whole``: dims reduced by a reduction whose result the region reads again (a softmax's row max, a
    LayerNorm's mean): a tile must hold those dims entirely (one-pass reductions). ``all`` adds the dims of
    terminal reductions (results only returned, e.g. a weight gradient summed over rows): tiles may split
    those and accumulate partial results.
    """

    all: frozenset[int]
    whole: frozenset[int]


def reduced_domain_dims(region: Function, domain: tuple[int, ...]) -> ReducedDims:
    """The domain dims the region's reductions reduce over. Reductions whose operand lines up with the domain
    (right-aligned as in broadcasting) reduce the matching dims; one over a reshaped operand counts as
    reducing every dim."""
    read = {v for op in region.ops for v in op.operands}
    everything, whole = set(), set()
    for op in region.ops:
        if _category(op) is not Category.REDUCTION:
            continue
        shape = op.operands[0].type.shape
        dims = op.opdef.reduced_dims(op.attrs, len(shape))
        lead = len(domain) - len(shape)
        aligned = lead >= 0 and all(s in (1, domain[lead + i]) for i, s in enumerate(shape))
        found = {lead + d for d in dims if shape[d] != 1} if aligned else set(range(len(domain)))
        everything |= found
        if any(r in read for r in op.results):
            whole |= found
    return ReducedDims(frozenset(everything), frozenset(whole))
