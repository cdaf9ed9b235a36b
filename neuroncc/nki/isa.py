"""``nki.isa``: the simulated NKI instruction set (NKI 0.2+ signatures, ``dst`` first).

Each instruction validates its operands like AWS's simulator, appends one record to the launch's trace
(the cost model's input) and, unless the launch is cost-only, computes its result with numpy. Calls in
the NKI 0.1 style, which return a fresh result tile instead of taking ``dst``, are accepted for
nc_matmul, nc_transpose, tensor_copy, tensor_tensor, tensor_scalar, tensor_reduce and activation.
"""

from __future__ import annotations

from neuroncc.nki.instructions import engine, reduce_cmd
from neuroncc.nki.isa_compute import (
    activation, activation_reduce, reciprocal, scalar_tensor_tensor, tensor_reduce, tensor_scalar, tensor_tensor,
)
from neuroncc.nki.isa_movement import dma_copy, iota, memset, tensor_copy, tensor_copy_predicated
from neuroncc.nki.isa_tensor_engine import nc_matmul, nc_transpose

__all__ = [
    "activation", "activation_reduce", "dma_copy", "engine", "iota", "memset", "nc_matmul", "nc_transpose",
    "reciprocal", "reduce_cmd", "scalar_tensor_tensor", "tensor_copy", "tensor_copy_predicated", "tensor_reduce",
    "tensor_scalar", "tensor_tensor",
]
