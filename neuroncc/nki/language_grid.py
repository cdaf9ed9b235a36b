"""``nki.language`` loops and the launch grid: ``affine_range`` & co., ``program_id``, ``spmd_dim`` / ``nc``.

Loops are plain ``range`` (in NKI 0.2+ they are aliases of it; 0.1's scheduling hints such as
``directives=nki.compiler.no_reorder()`` are accepted and have no effect on the simulation). A launch grid
``kernel[4, 2]`` runs the body once per program; ``nl.nc(2)`` / ``nl.spmd_dim`` in a grid dimension also say
which physical NeuronCore runs each program (NKI 0.1), which the cost model uses to run them in parallel.
"""

from __future__ import annotations

import builtins
import math
from dataclasses import dataclass

from neuroncc.nki.context import current
from neuroncc.nki.errors import NKISimulationError


def affine_range(start: int, stop: int | None = None, step: int = 1, **_hints: object) -> range:
    """Loop without loop-carried dependencies (other than accumulation); ``range`` in NKI 0.2+."""
    return range(start) if stop is None else range(start, stop, step)


def sequential_range(start: int, stop: int | None = None, step: int = 1, **_hints: object) -> range:
    """Loop whose iterations depend on each other; ``range`` in NKI 0.2+."""
    return range(start) if stop is None else range(start, stop, step)


def static_range(start: int, stop: int | None = None, step: int = 1, **_hints: object) -> range:
    """Fully unrolled loop; ``range`` in NKI 0.2+."""
    return range(start) if stop is None else range(start, stop, step)


def program_id(axis: int = 0) -> int:
    """This program's index along ``axis`` of the launch grid (``kernel[gx, gy](...)``)."""
    context = current()
    if not 0 <= axis < builtins.max(1, len(context.grid)):
        raise NKISimulationError(f"program_id axis {axis} is out of range for a {len(context.grid)}-D launch grid")
    return context.program_id[axis] if context.grid else 0


def num_programs(axes: int | tuple[int, ...] | None = None) -> int:
    """Programs along ``axes`` of the launch grid (all axes when None)."""
    grid = current().grid or (1,)
    if axes is None:
        return math.prod(grid)
    chosen = (axes,) if isinstance(axes, int) else tuple(axes)
    if any(not 0 <= a < len(grid) for a in chosen):
        raise NKISimulationError(f"num_programs axes {axes} out of range for a {len(grid)}-D launch grid")
    return math.prod(grid[a] for a in chosen)


def program_ndim() -> int:
    """Number of dimensions of the launch grid."""
    return len(current().grid)


@dataclass(frozen=True, slots=True)
class SpmdDim:
    """A launch-grid dimension split over physical NeuronCores (NKI 0.1's ``nl.nc`` / ``nl.spmd_dim``).

    ``factors`` are the sub-dimensions, outermost first; ``core_factor`` is the index of the one that is
    ``nl.nc(n)``. Program index ``i`` of the dimension is the mixed-radix number of the factors, and its
    digit in the ``nc`` factor is the physical core. ``nl.nc(2) * 2`` is ``spmd_dim(nc(2), 2)``.
    """

    factors: tuple[int, ...]
    core_factor: int | None

    @property
    def size(self) -> int:
        return math.prod(self.factors)

    @property
    def cores(self) -> int:
        return 1 if self.core_factor is None else self.factors[self.core_factor]

    def core_of(self, index: int) -> int:
        """The physical core that runs program ``index`` of this dimension."""
        if self.core_factor is None:
            return 0
        digits = []
        for factor in reversed(self.factors):
            index, digit = divmod(index, factor)
            digits.append(digit)
        return list(reversed(digits))[self.core_factor]

    def __mul__(self, other: object) -> SpmdDim:
        return spmd_dim(self, other)

    def __rmul__(self, other: object) -> SpmdDim:
        return spmd_dim(other, self)


def nc(cores: int) -> SpmdDim:
    """A launch-grid dimension of ``cores`` programs, one per physical NeuronCore."""
    if not isinstance(cores, int) or cores <= 0:
        raise NKISimulationError(f"nl.nc takes a positive number of cores, got {cores!r}")
    return SpmdDim((cores,), 0)


def spmd_dim(*parts: object) -> SpmdDim:
    """A launch-grid dimension made of sub-dimensions, one of which may be ``nl.nc(n)`` (NKI 0.1)."""
    factors: list[int] = []
    core: int | None = None
    for part in parts:
        if isinstance(part, SpmdDim):
            if part.core_factor is not None:
                if core is not None:
                    raise NKISimulationError("a launch-grid dimension can name physical cores (nl.nc) only once")
                core = len(factors) + part.core_factor
            factors.extend(part.factors)
        elif isinstance(part, int) and part > 0:
            factors.append(part)
        else:
            raise NKISimulationError(f"nl.spmd_dim takes positive ints and nl.nc(n), got {part!r}")
    return SpmdDim(tuple(factors), core)
