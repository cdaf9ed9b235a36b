"""float32 mm/addmm/bmm straight into the BLAS that ATen calls, without a tensor or a dispatch per call.

ATen computes a float32 ``mm``/``addmm`` on CPU (``addmm_impl_cpu_`` in LinearAlgebra.cpp) by choosing
transpose flags and leading dimensions from the operands' strides, copying the bias into the result, and calling
the Fortran ``sgemm_`` of the BLAS it was built with (MKL, exported by ``libtorch_cpu.so``);
``bmm`` over batches with at least :data:`BMM_NAIVE_BELOW` multiply-adds each goes to MKL's ``sgemm_batch``.
:func:`plan_gemm` repeats those decisions from the launch plan's static layouts, so a prepared call
(:class:`BlasMatmul`) computes bitwise what ``torch.mm``/``addmm``/``bmm`` compute on the same operands, and a
call costs one ctypes call (~1.3 us) instead of building numpy views, wrapping them as tensors and dispatching
(~10 us).

Whatever ATen would not send to BLAS stays on ATen (:mod:`neuroncc.executors.cpu.extern`): other dtypes, layouts
BLAS cannot express (ATen copies those first), an empty contraction, bmm below the naive-kernel threshold, a
float32 matmul precision other than "highest" (ATen then uses oneDNN's reduced-precision gemm) and products big
enough for the oneDNN path. The library is located through torch (imported lazily: the one place below the
front end allowed to); without the symbols, :func:`prepare` returns None and ATen runs everything.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Callable
from neuroncc.ir.types import contiguous_strides
import numpy as np

from neuroncc.ir import REGISTRY, Trait

#: ATen's bmm computes batches of fewer multiply-adds each with its own naive loop, not BLAS.
BMM_NAIVE_BELOW = 400
INT_MAX = 2**31 - 1
_VOID_P = ctypes.c_void_p


@dataclass(frozen=True)
class Matrix:
    """A 2-d operand as ATen sees it: logical shape and element strides (a free transpose swaps both)."""

    shape: tuple[int, int]
    strides: tuple[int, int]


@dataclass(frozen=True)
class GemmPlan:
    """One column-major ``sgemm_`` call: C = alpha * op(A) @ op(B) + beta * C, with ``swap`` telling which of
    the product's operands is A (ATen computes C^T = B^T A^T when the result is row-major)."""

    transa: bool
    transb: bool
    m: int
    n: int
    k: int
    lda: int
    ldb: int
    ldc: int
    swap: bool


def plan_gemm(first: Matrix, second: Matrix, result: Matrix) -> GemmPlan | None:
    """ATen's ``addmm_impl_cpu_`` + ``cpublas::gemm`` choices for ``result = first @ second``, or None where
    ATen would copy an operand or the result first, or not call BLAS (then ATen must run it).

    The caller handles empty results and K == 0 (ATen calls no gemm for those)."""
    (rows, cols), (r0, r1) = result.shape, result.strides
    m1, m2 = first, second
    if r0 == 1 and (cols == 1 or r1 >= max(1, rows)):
        transpose_c = False
    elif r1 == 1 and (rows == 1 or r0 >= max(1, cols)):
        transpose_c, m1, m2 = True, m2, m1
    else:
        return None  # ATen makes the result Fortran-contiguous in a temporary
    m, n = (cols, rows) if transpose_c else (rows, cols)
    k = m1.shape[0 if transpose_c else 1]
    outer, inner = (1, 0) if transpose_c else (0, 1)  # stride positions read as (rows of op, cols of op)

    def cast(matrix: Matrix, lead: int, other: int) -> bool | None:
        """Whether BLAS reads ``matrix`` transposed; None when ATen would clone it."""
        s = matrix.strides
        if s[outer] == 1 and s[inner] >= max(1, lead):
            return False
        if s[inner] == 1 and s[outer] >= max(1, other):
            return True
        return None

    transa, transb = cast(m1, m, k), cast(m2, k, n)
    if transa is None or transb is None:
        return None
    lda = m1.strides[1 if transa == transpose_c else 0]
    ldb = m2.strides[1 if transb == transpose_c else 0]
    ldc = result.strides[0 if transpose_c else 1]
    return _normalized_plan(transa, transb, m, n, k, lda, ldb, ldc, transpose_c)


def _normalized_plan(transa: bool, transb: bool, m: int, n: int, k: int, lda: int, ldb: int, ldc: int,
                     transpose_c: bool) -> GemmPlan | None:
    """ATen's cpublas::internal::normalize_last_dims, then its use_blas_gemm check (None: ATen would run its
    own gemm kernel, so BLAS must not be called)."""
    if n == 1:
        ldc = m
    if transa:
        lda = k if m == 1 else lda
    elif k == 1:
        lda = m
    if transb:
        ldb = n if k == 1 else ldb
    elif n == 1:
        ldb = k
    if max(m, n, k, lda, ldb, ldc) > INT_MAX or lda < max(1, k if transa else m) or \
            ldb < max(1, n if transb else k) or ldc < max(1, m):
        return None
    return GemmPlan(transa, transb, m, n, k, lda, ldb, ldc, transpose_c)


class _Library:
    """``sgemm_`` / ``sgemm_batch`` of the BLAS torch was built with, and torch's precision setting."""

    def __init__(self) -> None:
        import torch

        path = os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cpu.so")
        self.sgemm = self.sgemm_batch = None
        self.precision: Callable[[], str] = torch.get_float32_matmul_precision
        try:
            library = ctypes.CDLL(path)
        except OSError:
            return
        for name, count in (("sgemm_", 13), ("sgemm_batch", 15)):
            function = getattr(library, name, None)
            if function is not None:
                function.restype = None
                function.argtypes = [_VOID_P] * count
            setattr(self, name.rstrip("_"), function)


_LIBRARY: _Library | None = None


def library() -> _Library:
    """The process's BLAS entry points, located on first use."""
    global _LIBRARY
    if _LIBRARY is None:
        _LIBRARY = _Library()
    return _LIBRARY


def _keep(*objects: Any) -> tuple[Any, ...]:
    return objects


@dataclass(frozen=True)
class NativeGemm:
    """A prepared non-batched :class:`BlasMatmul` as addresses: ``sgemm_``'s, its fixed by-reference parameters
    (ta, tb, m, n, k, alpha, lda, ldb, beta, ldc: owned by the BlasMatmul), which operand pointers are A and B,
    and addmm's bias copy (row bytes, rows, source row stride bytes) or None."""

    function: int
    parameters: tuple[int, ...]
    a: int
    b: int
    bias: tuple[int, int, int] | None


class BlasMatmul:
    """A prepared float32 mm/addmm/bmm: ``call(pointers)`` with the data addresses of the operands (op order)
    and then the result; see the module docstring. Build with :func:`prepare`."""

    def __init__(self, name: str, plan: GemmPlan, alpha: float, beta: float, bias: Any, batch: Any) -> None:
        self.name, self.plan = name, plan
        lib = library()
        c_int, c_float = ctypes.c_int, ctypes.c_float
        count = batch[0] if batch else 1
        self._owned = _keep(
            ctypes.c_char(b"T" if plan.transa else b"N"), ctypes.c_char(b"T" if plan.transb else b"N"),
            c_int(plan.m), c_int(plan.n), c_int(plan.k), c_float(alpha), c_int(plan.lda), c_int(plan.ldb),
            c_float(beta), c_int(plan.ldc), c_int(1), c_int(count))
        ta, tb, m, n, k, a, lda, ldb, b, ldc, groups, size = (ctypes.addressof(x) for x in self._owned)
        self._precision = lib.precision
        self._bias = bias  # addmm: (row bytes, rows, bias row stride bytes) of the copy into the result
        first = 0 if bias is None else 1  # addmm's operand 0 is its bias; the factors follow
        i, j = (first + 1, first) if plan.swap else (first, first + 1)  # pointer positions of A and B
        if batch:
            # one array of 3 x count pointers (A's, B's, C's); refilled only when a base address moves
            strides = batch[1]
            steps = (strides[1], strides[0], strides[2]) if plan.swap else strides
            self._steps = np.arange(count, dtype=np.int64)[None, :] * np.array(steps, dtype=np.int64)[:, None]
            self._table = np.zeros((3, count), dtype=np.int64)
            self._bases = np.zeros((3, 1), dtype=np.int64)
            self._last: tuple[int, int, int] | None = None
            sgemm_batch, table = lib.sgemm_batch, self._table.ctypes.data
            a_ptrs, b_ptrs, c_ptrs = table, table + 8 * count, table + 16 * count

            def gemm(pointers: Sequence[int]) -> None:
                bases = (pointers[i], pointers[j], pointers[-1])
                if bases != self._last:
                    self._bases[:, 0] = bases
                    np.add(self._steps, self._bases, out=self._table)
                    self._last = bases
                sgemm_batch(ta, tb, m, n, k, a, a_ptrs, lda, b_ptrs, ldb, b, c_ptrs, ldc, groups, size)
        else:
            sgemm = lib.sgemm

            def gemm(pointers: Sequence[int]) -> None:
                sgemm(ta, tb, m, n, k, a, pointers[i], lda, pointers[j], ldb, b, pointers[-1], ldc)
        self._gemm = gemm
        #: the same call as data, for native launch sequences (executors/cpu/native_sequence.py); not batched
        self.native = None if batch else NativeGemm(
            ctypes.cast(lib.sgemm, _VOID_P).value, (ta, tb, m, n, k, a, lda, ldb, b, ldc), i, j, bias)

    def __call__(self, pointers: Sequence[int]) -> bool:
        """Run it on ``pointers``; False (nothing done) when ATen must run it instead (a float32 matmul
        precision other than "highest" was set after the plan was made)."""
        if self._precision() != "highest":
            return False
        if self._bias is not None:
            _broadcast_rows(pointers[0], pointers[-1], *self._bias)
        self._gemm(pointers)
        return True


def _broadcast_rows(source: int, target: int, row_bytes: int, rows: int, source_row_stride: int) -> None:
    """Copy a bias into every row of a contiguous [rows, N] result: one copy when the bias is [rows, N]
    itself, else its one row and then doubling copies of the rows already written (log2(rows) copies)."""
    if source_row_stride:
        ctypes.memmove(target, source, row_bytes * rows)
        return
    ctypes.memmove(target, source, row_bytes)
    done = 1
    while done < rows:
        step = min(done, rows - done)
        ctypes.memmove(target + done * row_bytes, target, step * row_bytes)
        done += step


def _matrix(shape: Sequence[int], strides: Sequence[int], transposed: bool) -> Matrix:
    """The last two dims of a stored operand as the product reads them (the layout pass's transpose_a/_b)."""
    rows, cols = shape[-2], shape[-1]
    s0, s1 = strides[-2], strides[-1]
    return Matrix((cols, rows), (s1, s0)) if transposed else Matrix((rows, cols), (s0, s1))


def _bias_copy(bias_shape: Sequence[int], bias_strides: Sequence[int], rows: int, cols: int) -> Any:
    """(row bytes, rows, source row stride bytes) of copying ``bias`` into a contiguous [rows, cols] result,
    or None when the bias layout is not one row (broadcast) or the whole contiguous matrix."""
    shape, strides = list(bias_shape), list(bias_strides)
    while len(shape) < 2:
        shape.insert(0, 1)
        strides.insert(0, 0)
    if shape[1] != cols or (cols > 1 and strides[1] != 1):
        return None  # a column or scalar bias broadcast along a row: not a row copy
    if shape[0] == 1 or strides[0] == 0:
        return cols * 4, rows, 0
    if shape[0] == rows and (rows == 1 or strides[0] == cols):
        return cols * 4, rows, cols * 4
    return None


def prepare(name: str, attrs: Mapping[str, Any], operands: Sequence[tuple[Sequence[int], Sequence[int]]],
            result: tuple[Sequence[int], Sequence[int]], dtypes: Sequence[str],
            onednn_takes: Callable[[int, int, int], bool] | None = None) -> BlasMatmul | None:
    """A prepared BLAS call computing op ``name`` like ATen, or None when ATen must run it.

    ``operands``/``result``: (shape, element strides) of each stored operand (op order) and of the result;
    ``dtypes``: their dtype names (all must be f32); ``onednn_takes(rows, depth, cols)``: whether a product
    stays on the extern module's path (it sends those to oneDNN: :meth:`CpuTarget.onednn_takes`)."""
    if not REGISTRY.get(name).has(Trait.MATRIX_PRODUCT) or any(d != "f32" for d in dtypes):
        return None
    batched = len(result[0]) == 3  # bmm: [batch, m, n]
    lib = library()
    if (lib.sgemm_batch if batched else lib.sgemm) is None or lib.precision() != "highest":
        return None
    first = len(operands) - 2  # the factors are the last two operands (addmm's first is its bias)
    a = _matrix(*operands[first], attrs.get("transpose_a", False))
    b = _matrix(*operands[first + 1], attrs.get("transpose_b", False))
    out_shape, out_strides = result
    rows, cols, depth = out_shape[-2], out_shape[-1], a.shape[1]
    batch = out_shape[0] if batched else 1
    if rows * cols * batch == 0 or depth == 0:
        return None  # no gemm call in ATen either; rare, cheap
    if onednn_takes is not None and not batched and onednn_takes(rows, depth, cols):
        return None
    batch_steps = None
    if batched:
        planned = _bmm_batch(operands, attrs, out_shape, out_strides)
        if planned is None:
            return None
        plan, batch_steps = planned
    else:
        plan = plan_gemm(a, b, Matrix((rows, cols), (out_strides[-2], out_strides[-1])))
    if plan is None:
        return None
    alpha, beta, bias = 1.0, 0.0, None
    if first == 1:  # addmm: beta * bias + alpha * product
        alpha, beta = float(attrs["alpha"]), float(attrs["beta"])
        if beta == 0 or tuple(out_strides) != (cols, 1) and rows > 1:
            return None  # beta 0: ATen skips the bias copy (NaN in it must not leak); keep ATen for that
        bias = _bias_copy(*operands[0], rows, cols)
        if bias is None:
            return None
    return BlasMatmul(name, plan, alpha, beta, bias, batch_steps)


def plan_bmm(first: Matrix, second: Matrix, result_row_stride: int) -> GemmPlan | None:
    """ATen's ``baddbmm_with_gemm_`` + ``gemm_batched_with_stride`` choices for one batch item of
    ``first @ second`` (the result contiguous), or None where ATen would not call MKL's batched gemm."""
    (rows, depth), (cols, ) = first.shape, second.shape[1:]

    def transposed(matrix: Matrix) -> bool:
        return matrix.strides[0] == 1 and matrix.strides[1] >= matrix.shape[0]

    transa, transb = transposed(second), transposed(first)  # ATen passes mat2 as A: C^T = B^T A^T
    m, n, k = cols, rows, depth
    lda = second.strides[1 if transa else 0]
    ldb = first.strides[1 if transb else 0]
    ldc = result_row_stride
    return _normalized_plan(transa, transb, m, n, k, lda, ldb, ldc, True)  # None: ATen loops over plain gemms


def _bmm_batch(operands: Sequence[tuple[Sequence[int], Sequence[int]]], attrs: Mapping[str, Any],
               out_shape: Sequence[int], out_strides: Sequence[int]) -> Any:
    """(plan, (batch, (a, b, c) batch strides in bytes)) when ATen's bmm calls MKL's batched gemm, else
    None: at least :data:`BMM_NAIVE_BELOW` multiply-adds per batch, every batch item contiguous or
    transposed, a contiguous result, more than one batch (ATen makes one batch a plain gemm)."""

    count, rows, cols = out_shape
    a = _matrix(*operands[0], attrs.get("transpose_a", False))
    b = _matrix(*operands[1], attrs.get("transpose_b", False))
    if rows * cols * a.shape[1] < BMM_NAIVE_BELOW or count < 2:
        return None
    if tuple(out_strides) != contiguous_strides(tuple(out_shape)):
        return None
    for (r, c), (s1, s2) in ((a.shape, a.strides), (b.shape, b.strides)):
        if not ((s2 == 1 and (r == 1 or s1 >= c)) or (s1 == 1 and (c == 1 or s2 >= r))):
            return None  # ATen splits along the batch into addmm calls
    plan = plan_bmm(a, b, out_strides[1])
    if plan is None:
        return None
    return plan, (count, (operands[0][1][0] * 4, operands[1][1][0] * 4, out_strides[0] * 4))


__all__ = ["BMM_NAIVE_BELOW", "BlasMatmul", "GemmPlan", "Matrix", "library", "plan_bmm", "plan_gemm", "prepare"]
