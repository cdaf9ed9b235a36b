"""Lowerings of the aten ops neuroncc runs as library kernels (Category.EXTERN IR ops): LAPACK linear algebra
(factorizations, solves, eigh, svd, matrix_exp) and sorting/selection/scans (sort, topk, kthvalue, median,
mode, cummax/cummin, logcumsumexp, searchsorted, bucketize, histc).

Each aten op maps onto the IR op of the same meaning (``neuroncc/ir/ops/library_*.py``) with its arguments as
attributes. ``check_errors`` is not an attribute: eager raises on a singular matrix through a separate
``_linalg_check_errors`` call, which AOTAutograd wraps in ``with_effects`` (it returns nothing); it becomes
the ``linalg_check_errors`` op, whose empty result is the new effect token, so it is never dead code.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.fx as fx

from neuroncc.errors import UnsupportedOpError
from neuroncc.frontend.lowering.context import LoweringContext, normalize_dim
from neuroncc.ir import DType, Value

aten = torch.ops.aten
Lowering = Callable[..., Any]


def _f32(ctx: LoweringContext, node: fx.Node, arg: Any) -> Value:
    """A float operand of a LAPACK op: float32 (float64 computes as float32 like everywhere in neuroncc)."""
    value = ctx.value(arg)
    if value.type.dtype is not DType.f32:
        raise UnsupportedOpError(f"{value.type.dtype.value} operands (the library kernels are float32 LAPACK)")
    return value


def _emit_all(ctx: LoweringContext, name: str, *operands: Value, **attrs: Any) -> tuple[Value, ...]:
    values = ctx.emit(name, *operands, **attrs)
    return values if isinstance(values, tuple) else (values,)


# ---- linear algebra ------------------------------------------------------------------------------------


def _inv_ex(ctx, node, A, *, check_errors=False):
    return _emit_all(ctx, "linalg_inv_ex", _f32(ctx, node, A))


def _det(ctx, node, A):
    return _emit_all(ctx, "linalg_det", _f32(ctx, node, A))


def _slogdet(ctx, node, A):
    return _emit_all(ctx, "linalg_slogdet", _f32(ctx, node, A))


def _solve_ex(ctx, node, A, B, *, left=True, check_errors=False):
    return _emit_all(ctx, "linalg_solve_ex", _f32(ctx, node, A), _f32(ctx, node, B), left=left)


def _solve_triangular(ctx, node, A, B, *, upper, left=True, unitriangular=False):
    return ctx.emit("linalg_solve_triangular", _f32(ctx, node, A), _f32(ctx, node, B), upper=upper, left=left,
                    unitriangular=unitriangular)


def _cholesky_ex(ctx, node, A, *, upper=False, check_errors=False):
    return _emit_all(ctx, "linalg_cholesky_ex", _f32(ctx, node, A), upper=upper)


def _cholesky(ctx, node, A, upper=False):
    return _emit_all(ctx, "linalg_cholesky_ex", _f32(ctx, node, A), upper=upper)[0]


def _cholesky_inverse(ctx, node, A, upper=False):
    return ctx.emit("cholesky_inverse", _f32(ctx, node, A), upper=upper)


def _cholesky_solve(ctx, node, B, factor, upper=False):
    return ctx.emit("cholesky_solve", _f32(ctx, node, B), _f32(ctx, node, factor), upper=upper)


def _lu(ctx, node, A, *, pivot=True):
    return _emit_all(ctx, "linalg_lu", _f32(ctx, node, A), pivot=pivot)


def _lu_factor_ex(ctx, node, A, *, pivot=True, check_errors=False):
    return _emit_all(ctx, "linalg_lu_factor_ex", _f32(ctx, node, A), pivot=pivot)


def _lu_solve(ctx, node, LU, pivots, B, *, left=True, adjoint=False):
    return ctx.emit("linalg_lu_solve", _f32(ctx, node, LU), ctx.value(pivots), _f32(ctx, node, B), left=left,
                    adjoint=adjoint)


def _lu_unpack(ctx, node, LU, pivots, unpack_data=True, unpack_pivots=True):
    return _emit_all(ctx, "lu_unpack", _f32(ctx, node, LU), ctx.value(pivots), unpack_data=unpack_data,
                     unpack_pivots=unpack_pivots)


def _ldl_factor_ex(ctx, node, A, *, hermitian=False, check_errors=False):
    return _emit_all(ctx, "linalg_ldl_factor_ex", _f32(ctx, node, A), hermitian=hermitian)


def _ldl_solve(ctx, node, LD, pivots, B, *, hermitian=False):
    return ctx.emit("linalg_ldl_solve", _f32(ctx, node, LD), ctx.value(pivots), _f32(ctx, node, B),
                    hermitian=hermitian)


def _qr(ctx, node, A, mode="reduced"):
    return _emit_all(ctx, "linalg_qr", _f32(ctx, node, A), mode=mode)


def _householder_product(ctx, node, A, tau):
    return ctx.emit("linalg_householder_product", _f32(ctx, node, A), _f32(ctx, node, tau))


def _geqrf(ctx, node, A):
    return _emit_all(ctx, "geqrf", _f32(ctx, node, A))


def _ormqr(ctx, node, A, tau, C, left=True, transpose=False):
    return ctx.emit("ormqr", _f32(ctx, node, A), _f32(ctx, node, tau), _f32(ctx, node, C), left=left,
                    transpose=transpose)


def _eigh(ctx, node, A, UPLO="L", compute_v=True):
    return _emit_all(ctx, "linalg_eigh", _f32(ctx, node, A), UPLO=UPLO, compute_v=compute_v)


def _svd(ctx, node, A, full_matrices=False, compute_uv=True, *, driver=None):
    if driver is not None:
        raise UnsupportedOpError(f"svd driver '{driver}' (only the default exists on the CPU)")
    return _emit_all(ctx, "linalg_svd", _f32(ctx, node, A), full_matrices=full_matrices, compute_uv=compute_uv)


def _matrix_exp(ctx, node, A):
    return ctx.emit("linalg_matrix_exp", _f32(ctx, node, A))


def _triangular_solve(ctx, node, B, A, upper=True, transpose=False, unitriangular=False):
    return _emit_all(ctx, "triangular_solve", _f32(ctx, node, B), _f32(ctx, node, A), upper=upper,
                     transpose=transpose, unitriangular=unitriangular)


# ---- sorting, selection, scans -------------------------------------------------------------------------


def _dim(ctx: LoweringContext, self: Any, dim: int) -> tuple[Value, int]:
    x = ctx.value(self)
    return x, normalize_dim(dim, x.type.rank)


def _sort(ctx, node, self, dim=-1, descending=False):
    x, d = _dim(ctx, self, dim)
    return _emit_all(ctx, "sort", x, dim=d, descending=descending)


def _sort_stable(ctx, node, self, *, stable=None, dim=-1, descending=False):
    x, d = _dim(ctx, self, dim)
    return _emit_all(ctx, "sort", x, dim=d, descending=descending, stable=bool(stable))


def _topk(ctx, node, self, k, dim=-1, largest=True, sorted=True):
    x, d = _dim(ctx, self, dim)
    return _emit_all(ctx, "topk", x, k=int(k), dim=d, largest=largest, sorted=sorted)


def _kthvalue(ctx, node, self, k, dim=-1, keepdim=False):
    x, d = _dim(ctx, self, dim)
    return _emit_all(ctx, "kthvalue", x, k=int(k), dim=d, keepdim=keepdim)


def _median_dim(ignore_nan: bool) -> Lowering:
    def lower(ctx, node, self, dim, keepdim=False):
        x, d = _dim(ctx, self, dim)
        return _emit_all(ctx, "median", x, dim=d, keepdim=keepdim, ignore_nan=ignore_nan)

    return lower


def _median_all(ignore_nan: bool) -> Lowering:
    """median() of every element: the median of the flattened tensor."""
    def lower(ctx, node, self):
        x = ctx.value(self)
        if x.type.numel == 0:
            raise UnsupportedOpError("the median of an empty tensor")
        flat = ctx.emit("reshape", x, shape=(x.type.numel,)) if x.type.rank != 1 else x
        return _emit_all(ctx, "median", flat, dim=0, keepdim=False, ignore_nan=ignore_nan)[0]

    return lower


def _mode(ctx, node, self, dim=-1, keepdim=False):
    x, d = _dim(ctx, self, dim)
    return _emit_all(ctx, "mode", x, dim=d, keepdim=keepdim)


def _scan(ir_name: str, pair: bool) -> Lowering:
    def lower(ctx, node, self, dim):
        x, d = _dim(ctx, self, dim)
        return _emit_all(ctx, ir_name, x, dim=d) if pair else ctx.emit(ir_name, x, dim=d)

    return lower


def _searchsorted(ctx, node, sorted_sequence, self, *, out_int32=False, right=False, side=None, sorter=None):
    if side is not None:
        right = side == "right"
    dtype = ctx.promoted_dtype(sorted_sequence, self)
    operands = [ctx.operand(sorted_sequence, dtype), ctx.operand(self, dtype)]
    if sorter is not None:
        operands.append(ctx.value(sorter))
    return ctx.emit("searchsorted", *operands, right=bool(right), out_int32=bool(out_int32))


def _bucketize(ctx, node, self, boundaries, *, out_int32=False, right=False):
    dtype = ctx.promoted_dtype(boundaries, self)
    return ctx.emit("searchsorted", ctx.operand(boundaries, dtype), ctx.operand(self, dtype), right=bool(right),
                    out_int32=bool(out_int32))


def _histc(ctx, node, self, bins=100, min=0, max=0):
    return ctx.emit("histc", ctx.value(self), bins=int(bins), min=float(min), max=float(max))


def _with_effects(ctx, node, token, op, *args, **kwargs):
    """An effectful op threaded by a token: only LAPACK's error check (see the module docstring)."""
    if op is not aten._linalg_check_errors.default:
        raise UnsupportedOpError(f"side-effecting op {op} (with_effects)")
    info, api_name = args
    return ctx.emit("linalg_check_errors", ctx.value(info), api_name=api_name,
                    is_matrix=bool(kwargs["is_matrix"])), None


def _pinv(A: torch.Tensor, *, atol: Any = None, rtol: Any = None, hermitian: bool = False) -> torch.Tensor:
    """linalg_pinv as ATen computes it (LinearAlgebra.cpp), over eigh or svd: both library ops."""
    if A.numel() == 0:
        return A.new_zeros((*A.shape[:-2], A.shape[-1], A.shape[-2]))
    default_rtol = torch.finfo(A.dtype).eps * max(A.shape[-1], A.shape[-2])
    atol_t = torch.zeros((), dtype=A.dtype) if atol is None else atol.to(A.dtype)
    if rtol is not None:
        rtol_t = rtol.to(A.dtype)
    elif atol is not None:
        rtol_t = torch.where(atol_t > 0, torch.zeros((), dtype=A.dtype), torch.full((), default_rtol, dtype=A.dtype))
    else:
        rtol_t = torch.full((), default_rtol, dtype=A.dtype)
    if hermitian:
        S, U = torch.linalg.eigh(A)
        magnitude = S.abs()
        tol = torch.maximum(atol_t.unsqueeze(-1), rtol_t.unsqueeze(-1) * magnitude.amax(-1, keepdim=True))
        inverse = torch.where(magnitude > tol, S.reciprocal(), torch.zeros((), dtype=A.dtype))
        return (U * inverse.unsqueeze(-2)) @ U.mT
    U, S, Vh = torch.linalg.svd(A, full_matrices=False)
    tol = torch.maximum(atol_t.unsqueeze(-1), rtol_t.unsqueeze(-1) * S[..., :1])
    inverse = torch.where(S > tol, S.reciprocal(), torch.zeros((), dtype=A.dtype))
    return (Vh.mT * inverse.unsqueeze(-2)) @ U.mT


def library_decompositions() -> dict[Any, Callable[..., Any]]:
    """Composite ops written over the library ops (added to the front end's decomposition table). The linear
    algebra backward formulas also write onto diagonals: diagonal_scatter is in frontend/lowering/coverage_indexing.py."""
    return {aten.linalg_pinv.atol_rtol_tensor: _pinv}


def _histogram_count(ctx, node, self, bins=100, *, range=None, weight=None, density=False):
    operands = [ctx.value(self)] + ([ctx.value(weight)] if weight is not None else [])
    return _emit_all(ctx, "histogram", *operands, bins=int(bins), range=tuple(float(r) for r in range or ()),
                     density=bool(density))


def _histogram_edges(ctx, node, self, bins, *, weight=None, density=False):
    edges = ctx.value(bins)
    operands = [ctx.value(self), edges] + ([ctx.value(weight)] if weight is not None else [])
    return ctx.emit("histogram_edges", *operands, density=bool(density)), edges


LIBRARY_LOWERINGS: dict[Any, Lowering] = {
    aten.linalg_inv_ex.default: _inv_ex,
    aten._linalg_det.default: _det,
    aten._linalg_slogdet.default: _slogdet,
    aten._linalg_solve_ex.default: _solve_ex,
    aten.linalg_solve_triangular.default: _solve_triangular,
    aten.linalg_cholesky_ex.default: _cholesky_ex,
    aten.cholesky.default: _cholesky,
    aten.cholesky_inverse.default: _cholesky_inverse,
    aten.cholesky_solve.default: _cholesky_solve,
    aten.linalg_lu.default: _lu,
    aten.linalg_lu_factor_ex.default: _lu_factor_ex,
    aten.linalg_lu_solve.default: _lu_solve,
    aten.lu_unpack.default: _lu_unpack,
    aten.linalg_ldl_factor_ex.default: _ldl_factor_ex,
    aten.linalg_ldl_solve.default: _ldl_solve,
    aten.linalg_qr.default: _qr,
    aten.linalg_householder_product.default: _householder_product,
    aten.geqrf.default: _geqrf,
    aten.ormqr.default: _ormqr,
    aten._linalg_eigh.default: _eigh,
    aten._linalg_svd.default: _svd,
    aten.linalg_matrix_exp.default: _matrix_exp,
    aten.triangular_solve.default: _triangular_solve,
    aten.sort.default: _sort,
    aten.sort.stable: _sort_stable,
    aten.topk.default: _topk,
    aten.kthvalue.default: _kthvalue,
    aten.median.default: _median_all(False),
    aten.median.dim: _median_dim(False),
    aten.nanmedian.default: _median_all(True),
    aten.nanmedian.dim: _median_dim(True),
    aten.mode.default: _mode,
    aten.cummax.default: _scan("cummax", True),
    aten.cummin.default: _scan("cummin", True),
    aten.logcumsumexp.default: _scan("logcumsumexp", False),
    aten.searchsorted.Tensor: _searchsorted,
    aten.searchsorted.Scalar: _searchsorted,
    aten.bucketize.Tensor: _bucketize,
    aten.bucketize.Scalar: _bucketize,
    aten.histc.default: _histc,
    aten.histogram.bin_ct: _histogram_count,
    aten.histogram.bins_tensor: _histogram_edges,
    torch.ops.higher_order.with_effects: _with_effects,
}
