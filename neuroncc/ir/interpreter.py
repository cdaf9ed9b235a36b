"""The reference interpreter: runs any verified graph with the ops' numpy references.

This is the semantic ground truth that every pass and backend is tested against. It is deliberately simple
(one environment, one loop); speed is not its job.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from neuroncc.errors import InterpreterError, InterpreterIndexError, InterpreterZeroDivisionError
from neuroncc.ir.dtypes import DType, to_storage
from neuroncc.ir.graph import Function, Op, Value
from neuroncc.ir.ops import REGISTRY

__all__ = ["InterpreterError", "coerce_input", "interpret", "run_op"]


def _compute_form(array: np.ndarray, dtype: DType) -> np.ndarray:
    """Widen half-precision storage to float32 for computing, as PyTorch's CPU kernels do."""
    return array.astype(np.float32) if dtype is DType.f16 else array


def coerce_input(value: Value, array: object, position: int) -> np.ndarray:
    arr = np.asarray(array)
    if arr.shape != value.type.shape:
        raise InterpreterError(
            f"input #{position} has shape {list(arr.shape)}, the graph expects {list(value.type.shape)}"
        )
    return to_storage(arr, value.type.dtype)


def run_op(op: Op, args: Sequence[np.ndarray]) -> tuple[np.ndarray, ...]:
    """Run one op on storage-form arrays and return storage-form results."""
    if op.regions:
        outs: tuple = tuple(interpret(op.regions[0], args))
    else:
        opdef = REGISTRY.get(op.name)
        compute_args = [_compute_form(a, v.type.dtype) for a, v in zip(args, op.operands)]
        with np.errstate(all="ignore"):
            try:
                extra = {"out_dtype": op.results[0].type.dtype} if opdef.wants_out_dtype else {}
                out = opdef.reference(*compute_args, **dict(op.attrs), **extra)
            except IndexError as exc:
                # in eager's words: numpy's own check (index_select's take) says "axis" where PyTorch says "dimension"
                detail = str(exc).replace(" for axis ", " for dimension ")
                raise InterpreterIndexError(f"op '{op.name}': index out of range ({detail})", op=op.name,
                                            detail=detail) from None
            except ZeroDivisionError as exc:  # an integer divisor of zero (the reference's check: eager's words)
                raise InterpreterZeroDivisionError(f"op '{op.name}': {exc}", op=op.name, detail=str(exc)) from None
        outs = out if isinstance(out, tuple) else (out,)
    if len(outs) != len(op.results):
        raise InterpreterError(f"op '{op.name}' produced {len(outs)} results, its type says {len(op.results)}")
    results = []
    for result, array in zip(op.results, outs):
        array = np.asarray(array)
        if array.shape != result.type.shape:
            raise InterpreterError(
                f"op '{op.name}' produced shape {list(array.shape)}, its type says {list(result.type.shape)}"
            )
        with np.errstate(all="ignore"):
            results.append(to_storage(array, result.type.dtype))
    return tuple(results)


def interpret(fn: Function, inputs: Sequence[object]) -> list[np.ndarray]:
    """Run ``fn`` on ``inputs`` (numpy arrays or array-likes); returns fresh numpy arrays.

    bf16 values are float32 arrays holding bf16-representable values (see :mod:`neuroncc.ir.dtypes`).
    """
    if len(inputs) != len(fn.params):
        raise InterpreterError(f"func @{fn.name} takes {len(fn.params)} inputs, got {len(inputs)}")
    env: dict[Value, np.ndarray] = {}
    for position, (param, array) in enumerate(zip(fn.params, inputs)):
        env[param] = coerce_input(param, array, position)
    for op in fn.ops:
        for result, array in zip(op.results, run_op(op, [env[v] for v in op.operands])):
            env[result] = array
    return [np.array(env[v], copy=True, order="C") for v in fn.outputs]
