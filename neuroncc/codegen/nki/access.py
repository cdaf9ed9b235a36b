"""DMA transfers between HBM tensors and on-chip tiles, written as NKI slicing expressions.

A kernel argument arrives as a contiguous HBM tensor; a stage reads it through an :class:`AffineMap`
(reshapes, slices, broadcasts and transposes of the argument all become one). NKI views are a whole-tensor
``reshape`` followed by ints, slices and ``nl.ds`` per dimension, so :func:`hbm_view` factors the tensor's
flat storage into a *layout* with one dimension per domain dim the map steps along: for a map stepping 1024
per row and 1 per column of a ``[4096, 1024]`` argument that is the argument itself, ``x[nl.ds(i * 128, 128),
0:1024]``.

One DMA needs both sides to list their dims in the same order (NKI compares shapes after dropping size-1
dims). A view lists its dims by decreasing stride; a tile lists the partition dim first. When the orders
differ (a transposed or permuted read) :func:`transfer` loops over the dims that break the order, moving
a smaller box per DMA: always correct, efficient exactly when no loop is needed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from neuroncc.codegen.nki.shapes import AffineMap
from neuroncc.codegen.nki.source import Names, SourceWriter, shape_tuple


@dataclass(frozen=True, slots=True)
class Index:
    """How one domain dim is indexed in one iteration: a single point ``start`` or ``size`` points from it.

    ``start`` and ``size`` are Python expressions of the kernel (loop variables are names); ``bound`` is the
    largest ``size`` takes and ``extent`` the domain dim's full size.
    """

    kind: str  # "int" | "span"
    start: str
    size: str = "1"
    bound: int = 1
    extent: int = 1

    @staticmethod
    def point(start: str, extent: int) -> Index:
        return Index("int", start, "1", 1, extent)

    @staticmethod
    def span(start: str, size: str, bound: int, extent: int) -> Index:
        return Index("span", start, size, bound, extent)


@dataclass(frozen=True, slots=True)
class HbmSide:
    """An HBM tensor (name, shape) read or written at the points ``indexes`` of a domain through ``amap``."""

    name: str
    shape: tuple[int, ...]
    amap: AffineMap
    indexes: tuple[Index, ...]


@dataclass(frozen=True, slots=True)
class TileSide:
    """An on-chip tile; ``axes[a]`` is the domain dim tile axis ``a`` spans (None: a size-1 padding axis).

    ``varies[a]`` says whether the tile's value changes along that axis (else the axis has size 1), and
    ``limits[a]`` how many of its elements this iteration moves when fewer than the tile holds (the last,
    partial block of a dimension), else None.
    """

    name: str
    axes: tuple[int | None, ...]
    varies: tuple[bool, ...]
    limits: tuple[str | None, ...]


def _add(base: int, expr: str) -> str:
    if base == 0:
        return expr
    if expr == "0":
        return str(base)
    return f"{base} + {expr}"


def _scaled(expr: str, factor: int) -> str:
    if factor == 1 or expr == "0":
        return expr
    if factor == -1:
        return f"-({expr})"
    return f"({expr}) * {factor}" if not expr.isidentifier() and not expr.isdigit() else f"{expr} * {factor}"


@dataclass(frozen=True, slots=True)
class _Layout:
    """A factorisation of a tensor's flat storage: ``shape`` and, per domain dim, the layout dim it steps."""

    shape: tuple[int, ...]
    units: tuple[int, ...]  # flat stride of each layout dim
    dim_of: dict[int, int]  # domain dim -> layout dim


def _layout(numel: int, active: dict[int, int]) -> _Layout | None:
    """Layout dims at every |coefficient| of the active domain dims; None when they do not nest."""
    units = sorted({numel, 1, *(abs(c) for c in active.values())}, reverse=True)
    if len({abs(c) for c in active.values()}) != len(active):
        return None  # two dims stepping the same stride (an overlapping view)
    if any(units[i] % units[i + 1] for i in range(len(units) - 1)):
        return None
    if len(units) == 1:  # a single element
        units = [1, 1]
    strides = units[1:]
    shape = tuple(units[i] // units[i + 1] for i in range(len(units) - 1))
    dim_of = {d: strides.index(abs(c)) for d, c in active.items()}
    return _Layout(shape, tuple(strides), dim_of)


class _HbmView:
    """The NKI view expression of an :class:`HbmSide`, with some domain dims turned into loop points."""

    def __init__(self, side: HbmSide):
        self.side = side
        numel = 1
        for n in side.shape:
            numel *= n
        self.numel = numel
        # A domain dim of extent 1 only ever takes index 0: its coefficient (which may equal the whole
        # tensor's size, e.g. the row stride of a [1, 5] argument) steps nothing and must not shape the layout.
        self.active = {d: c for d, c in enumerate(side.amap.coeffs) if c != 0 and side.indexes[d].extent > 1}
        self.layout = _layout(numel, self.active)
        if self.layout is not None and any(self.active[d] < 0 and side.indexes[d].kind == "span" for d in self.active):
            self.layout = None  # NKI slices step forward only; reversed dims are looped (see order_units)

    def unit(self, dim: int) -> int:
        return abs(self.active.get(dim, 0))

    def spans(self) -> list[int]:
        """Domain dims this view has as (non-trivial) slices, in the view's order."""
        if self.layout is None:
            return []
        dims = [d for d in self.active if self.side.indexes[d].kind == "span" and self.side.indexes[d].bound > 1]
        return sorted(dims, key=lambda d: -abs(self.active[d]))

    def expression(self, looped: dict[int, str]) -> str:
        """The view, with domain dims in ``looped`` indexed at ``start + loop variable``."""
        side = self.side
        if self.layout is None:
            return self._flat_expression(looped)
        layout = self.layout
        digits = []
        rest = side.amap.offset
        for unit, size in zip(layout.units, layout.shape):
            digits.append((rest // unit) % size)
        keys: list[str] = [str(digit) for digit in digits]
        for dim, position in layout.dim_of.items():
            index = side.indexes[dim]
            sign = 1 if self.active[dim] > 0 else -1
            if index.kind == "int" or dim in looped:
                point = index.start if dim not in looped else _add_expr(index.start, looped[dim])
                keys[position] = _add(digits[position], _scaled(point, sign))
            else:
                keys[position] = _span(_add(digits[position], index.start), index.size, layout.shape[position])
        if not any(":" in key or key.startswith("nl.ds(") for key in keys):
            keys[-1] = f"nl.ds({keys[-1]}, 1)"  # a view keeps one dim: a 0-d view would be a copy, not a view
        base = side.name if layout.shape == side.shape else f"{side.name}.reshape({_tuple(layout.shape)})"
        if all(key == ":" for key in keys):
            return base
        return f"{base}[{', '.join(keys)}]"

    def _flat_expression(self, looped: dict[int, str]) -> str:
        terms = [str(self.side.amap.offset)] if self.side.amap.offset else []
        for dim, coeff in self.active.items():
            index = self.side.indexes[dim]
            point = _add_expr(index.start, looped[dim]) if dim in looped else index.start
            terms.append(_scaled(point, coeff))
        flat = " + ".join(terms) or "0"
        return f"{self.side.name}.reshape(({self.numel},))[nl.ds({flat}, 1)]"


def _span(start: str, size: str, extent: int) -> str:
    """``nl.ds(start, size)``, or a plain slice when both are numbers (``:`` for the whole dim)."""
    if start.isdigit() and size.isdigit():
        if start == "0" and int(size) == extent:
            return ":"
        return f"{start}:{int(start) + int(size)}"
    return f"nl.ds({start}, {size})"


def _add_expr(a: str, b: str) -> str:
    if a == "0":
        return b
    if b == "0":
        return a
    return f"{a} + {b}"


def _tuple(values: Sequence[int]) -> str:
    return shape_tuple([str(v) for v in values])


def _tile_expression(tile: TileSide, looped: dict[int, str]) -> str:
    keys = []
    for axis, dim in enumerate(tile.axes):
        if dim is not None and dim in looped and tile.varies[axis]:
            keys.append(f"nl.ds({looped[dim]}, 1)")
        elif tile.limits[axis] is not None and tile.varies[axis]:
            keys.append(f"0:{tile.limits[axis]}")
        else:
            keys.append(":")
    if all(k == ":" for k in keys):
        return tile.name
    while keys and keys[-1] == ":":
        keys.pop()
    return f"{tile.name}[{', '.join(keys)}]"


def _loops_for(order: Sequence[int], units: dict[int, int]) -> list[int]:
    """Dims of ``order`` to loop over so the kept ones step by strictly decreasing ``units`` (a dim this
    side does not step along at all must be looped too: the side has no dimension to match it)."""
    looped, last = [], None
    for dim in order:
        unit = units.get(dim, 0)
        if unit == 0 or (last is not None and unit >= last):
            looped.append(dim)
        else:
            last = unit
    return looped


def transfer(writer: SourceWriter, names: Names, dst: HbmSide | TileSide, src: HbmSide | TileSide,
             indexes: Sequence[Index]) -> None:
    """Write the DMA(s) copying ``src`` to ``dst`` (one of them HBM) at the domain points ``indexes``."""
    hbm_sides = [side for side in (dst, src) if isinstance(side, HbmSide)]
    views = {id(side): _HbmView(side) for side in hbm_sides}
    tile = dst if isinstance(dst, TileSide) else src if isinstance(src, TileSide) else None
    if tile is not None:
        order = [d for d, v in zip(tile.axes, tile.varies) if d is not None and v and indexes[d].bound > 1]
    else:
        order = views[id(dst)].spans() if views[id(dst)].layout is not None else \
            [d for d in views[id(dst)].active if indexes[d].kind == "span" and indexes[d].bound > 1]
    looped: set[int] = set()
    for side in hbm_sides:
        view = views[id(side)]
        if view.layout is None:  # no layout fits: one element per DMA
            looped |= {d for d, index in enumerate(indexes)
                       if index.kind == "span" and index.bound > 1 and (d in view.active or d in order)}
            continue
        kept = [d for d in order if d not in looped]
        looped |= set(_loops_for(kept, {d: view.unit(d) for d in kept}))
        looped |= {d for d in view.spans() if d not in order}
    variables: dict[int, str] = {}
    for dim in sorted(looped):
        variables[dim] = names.fresh(f"e{dim}")
        writer.open(f"for {variables[dim]} in nl.affine_range({indexes[dim].size}):")

    def render(side: HbmSide | TileSide) -> str:
        if isinstance(side, TileSide):
            return _tile_expression(side, variables)
        return views[id(side)].expression(variables)

    writer.line(f"nisa.dma_copy(dst={render(dst)}, src={render(src)})")
    for _ in looped:
        writer.close()
