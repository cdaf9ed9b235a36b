"""``nki.isa``: the simulated NKI instruction set, for both API generations.

Each instruction validates its operands like AWS's simulator, appends one record to the launch's trace
(the cost model's input) and, unless the launch is cost-only, computes its result with numpy. NKI 0.2+
calls pass ``dst`` first; NKI 0.1 calls (``nisa.activation(op=nl.exp, data=x)``, ``nisa.nc_matmul(a, b)``,
``nisa.memset(shape, value, dtype)``, ``nisa.iota(expr, dtype)``) return a fresh result tile and take
``mask=``. The engine constants of both (``nisa.engine.vector``, ``nisa.vector_engine``) are here.
"""

from __future__ import annotations

import enum

from neuroncc.nki.context import current
from neuroncc.nki.instructions import (
    engine, gpsimd_engine, reduce_cmd, scalar_engine, tensor_engine, unknown_engine, vector_engine,
)
from neuroncc.nki.isa_compute import (
    activation, activation_reduce, reciprocal, scalar_tensor_tensor, tensor_reduce, tensor_scalar, tensor_tensor,
)
from neuroncc.nki.isa_movement import (
    affine_select, dma_copy, iota, memset, tensor_copy, tensor_copy_predicated,
)
from neuroncc.nki.isa_mx import nc_matmul_mx, quantize_mx
from neuroncc.nki.isa_reduce import bn_aggr, bn_stats, tensor_scalar_reduce, tensor_tensor_scan
from neuroncc.nki.isa_tensor_engine import nc_matmul, nc_transpose
from neuroncc.nki import unsupported


class nc_version(enum.IntEnum):  # noqa: N801 - spelled as in NKI
    """NeuronCore generations, as ``nisa.nc_version`` (``gen2`` is trn1's NC-v2)."""

    gen2 = 2
    gen3 = 3
    gen4 = 4


def get_nc_version() -> nc_version:
    """The NeuronCore generation the running launch simulates."""
    return nc_version(int(current().target.core.removeprefix("NC-v")))


class dge_mode(enum.IntEnum):  # noqa: N801 - spelled as in NKI
    """DMA descriptor generation modes (accepted; the simulator's DMA cost does not depend on them)."""

    unknown = 0
    none = 1
    swdge = 2
    hwdge = 3


class oob_mode(enum.IntEnum):  # noqa: N801 - spelled as in NKI
    """Out-of-bounds handling of indirect DMAs (indirect DMAs are not simulated)."""

    error = 0
    skip = 1


class matmul_perf_mode(enum.Enum):  # noqa: N801 - spelled as in NKI
    """TensorE performance modes of nc_matmul (accepted; the cost model charges the normal rate)."""

    none = "none"
    double_row = "double_row"


__all__ = [
    "activation", "activation_reduce", "affine_select", "bn_aggr", "bn_stats", "dge_mode", "dma_copy", "engine",
    "get_nc_version", "gpsimd_engine", "iota", "matmul_perf_mode", "memset", "nc_matmul", "nc_matmul_mx",
    "nc_transpose", "nc_version", "oob_mode", "quantize_mx", "reciprocal", "reduce_cmd", "scalar_engine",
    "scalar_tensor_tensor", "tensor_copy", "tensor_copy_predicated", "tensor_engine", "tensor_reduce",
    "tensor_scalar", "tensor_scalar_reduce", "tensor_tensor", "tensor_tensor_scan", "unknown_engine",
    "vector_engine",
]


def __getattr__(name: str) -> object:
    """NKI instructions the simulator lacks: a function raising ``NKIUnsupportedError`` when called."""
    return unsupported.stub("nki.isa", name)
