"""Linear algebra library ops (Category.EXTERN): factorizations, solves, decompositions.

These are the ops a CPU compiler hands to a library (LAPACK through ATen) rather than generating code for:
they are left unfused at the top level, the cpu launcher calls ATen for each (see
:mod:`neuroncc.executors.cpu.extern_library`) and nki-sim runs them as host steps. Each follows the ``aten`` op of
the same name: operands ``[..., m, n]`` with any batch dims, float32 only (ATen has no bf16/f16 LAPACK),
pivots and ``info`` as int32 like LAPACK's. The numpy references compute in float64, one matrix at a time
(numpy's LAPACK for QR/SVD/eigh, a textbook partial-pivoting LU where numpy has none); sign-ambiguous
results (Q, singular and eigen vectors) follow LAPACK's Householder conventions like ATen's.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from neuroncc.errors import InterpreterError
from neuroncc.ir.dtypes import DType
from neuroncc.ir.opdef import AttrSpec, Category, OpDef, broadcast_shapes, fail
from neuroncc.ir.types import TensorType

F32, I32 = DType.f32, DType.i32


class LinalgInputError(InterpreterError):
    """A factorization failed on its input at run time (eager raises torch.linalg.LinAlgError there)."""


# ---- type rule helpers ---------------------------------------------------------------------------------


def _matrix(op: str, t: TensorType, what: str = "A", *, square: bool = False) -> tuple[int, ...]:
    if t.dtype is not F32:
        raise fail(op, f"{what} must be f32 (the library kernels are float32 LAPACK), got {t.dtype.value}")
    if t.rank < 2:
        raise fail(op, f"{what} must be a (batch of) matrices, got {t}")
    if square and t.shape[-1] != t.shape[-2]:
        raise fail(op, f"{what} must be a (batch of) square matrices, got {list(t.shape)}")
    return t.shape


def _tt(shape: tuple[int, ...], dtype: DType = F32) -> TensorType:
    return TensorType(tuple(shape), dtype)


def _batch_rhs(op: str, a: tuple[int, ...], b: TensorType, *, left: bool = True) -> tuple[int, ...]:
    """The broadcast shape of a right-hand side matrix ``b`` against square ``a`` [..., n, n]."""
    _matrix(op, b, "B")
    n = a[-1]
    if (b.shape[-2] if left else b.shape[-1]) != n:
        raise fail(op, f"B {list(b.shape)} does not match A {list(a)}")
    batch = broadcast_shapes(op, a[:-2], b.shape[:-2])
    return (*batch, *b.shape[-2:])


# ---- numpy helpers: one matrix at a time ---------------------------------------------------------------


def _per_matrix(fn: Callable[..., tuple[np.ndarray, ...]], *arrays: np.ndarray, core: tuple[int, ...],
                **kw) -> tuple[np.ndarray, ...]:
    """Apply ``fn`` to each matrix of ``arrays`` (batch dims broadcast; ``core[i]`` trailing dims of array i
    belong to one problem) and stack the results back over the batch."""
    arrays = [np.asarray(a, dtype=np.float64) if a.dtype.kind == "f" else np.asarray(a) for a in arrays]
    batch = broadcast_shapes("library", *(a.shape[:a.ndim - c] for a, c in zip(arrays, core)))
    full = [np.broadcast_to(a, batch + a.shape[a.ndim - c:]) for a, c in zip(arrays, core)]
    count = int(np.prod(batch)) if batch else 1
    flat = [f.reshape((count,) + f.shape[len(batch):]) for f in full]
    outs = [fn(*(f[i] for f in flat), **kw) for i in range(count)]
    if count == 0:  # run once for the result shapes only: zeros, and pivots of 1 (valid 1-based indices)
        probe = fn(*(np.zeros(f.shape[1:], f.dtype) if f.dtype.kind == "f" else np.ones(f.shape[1:], f.dtype)
                     for f in flat), **kw)
        return tuple(np.zeros(batch + np.shape(p), np.asarray(p).dtype) for p in probe)
    return tuple(np.stack([o[k] for o in outs]).reshape(batch + np.shape(outs[0][k])) for k in range(len(outs[0])))


def lu_factor(a: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """LAPACK getrf: partial pivoting (first largest |pivot|), LU packed, 1-based pivots, info."""
    lu = np.array(a, dtype=np.float64)
    m, n = lu.shape
    k = min(m, n)
    pivots = np.zeros(k, np.int32)
    info = 0
    for j in range(k):
        p = j + int(np.argmax(np.abs(lu[j:, j]))) if m > j else j
        pivots[j] = p + 1
        if p != j:
            lu[[j, p]] = lu[[p, j]]
        if lu[j, j] == 0:
            info = info or j + 1
            continue
        lu[j + 1:, j] /= lu[j, j]
        lu[j + 1:, j + 1:] -= np.outer(lu[j + 1:, j], lu[j, j + 1:])
    return lu, pivots, np.array(info, np.int32)


def permutation(pivots: np.ndarray, m: int) -> np.ndarray:
    """P with A = P @ L @ U for LAPACK's 1-based row swaps."""
    order = np.arange(m)
    for i, p in enumerate(np.asarray(pivots, np.int64) - 1):
        order[[i, p]] = order[[p, i]]
    return np.eye(m)[order].T


def _unpack(lu: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    m, n = lu.shape
    k = min(m, n)
    return np.tril(lu[:, :k], -1) + np.eye(m, k), np.triu(lu[:k, :])


def _solve(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    try:
        return np.linalg.solve(a, b)
    except np.linalg.LinAlgError:
        return np.full(np.shape(b), np.nan)


def _inv(a: np.ndarray) -> np.ndarray:
    return _solve(a, np.eye(a.shape[-1]))


def _householder(a: np.ndarray, tau: np.ndarray, columns: int) -> np.ndarray:
    """H_1 ... H_k restricted to its first ``columns`` columns (LAPACK orgqr), H_i = I - tau_i v_i v_i^T."""
    m = a.shape[0]
    q = np.eye(m)
    for i in range(len(tau)):
        v = np.zeros(m)
        v[i] = 1.0
        v[i + 1:] = a[i + 1:, i]
        q = q - tau[i] * np.outer(q @ v, v)
    return q[:, :columns]


# ---- references (batch handled by _per_matrix) ---------------------------------------------------------


def _inv_ex_one(a):
    _, _, info = lu_factor(a)
    return _inv(a), info


def _det_one(a):
    lu, piv, _ = lu_factor(a.T)  # ATen factors the transpose (A's memory read column-major): same det
    swaps = int(np.sum(piv != np.arange(1, len(piv) + 1)))
    return np.prod(np.diag(lu)) * (-1.0) ** swaps, lu, piv


def _slogdet_one(a):
    det, lu, piv = _det_one(a)
    return np.sign(det), np.log(np.abs(det)), lu, piv


def _solve_one(a, b, *, left):
    return (_solve(a, b) if left else _solve(a.T, b.T).T),


def _solve_triangular_one(a, b, *, upper, left, unitriangular):
    t = np.triu(a) if upper else np.tril(a)
    if unitriangular:
        np.fill_diagonal(t, 1.0)
    return (_solve(t, b) if left else _solve(t.T, b.T).T),


def _cholesky_one(a, *, upper):
    try:
        lower, info = np.linalg.cholesky(np.tril(a) + np.tril(a, -1).T), 0
    except np.linalg.LinAlgError:
        lower, info = np.full(a.shape, np.nan), 1
    return (lower.T if upper else lower), np.array(info, np.int32)


def _cholesky_inverse_one(f, *, upper):
    t = np.triu(f) if upper else np.tril(f)
    return _inv(t.T @ t if upper else t @ t.T),


def _cholesky_solve_one(b, f, *, upper):
    t = np.triu(f) if upper else np.tril(f)
    return _solve(t.T @ t if upper else t @ t.T, b),


def _lu_one(a, *, pivot=True):
    lu, piv, _ = lu_factor(a)
    lower, upper = _unpack(lu)
    return permutation(piv, a.shape[0]), lower, upper


def _lu_solve_one(lu, piv, b, *, left, adjoint):
    lower, upper = _unpack(lu)
    a = permutation(piv, lu.shape[0]) @ lower @ upper
    a = a.T if adjoint else a
    return (_solve(a, b) if left else _solve(a.T, b.T).T),


def _lu_unpack_one(lu, piv, *, unpack_data, unpack_pivots):
    lower, upper = _unpack(lu) if unpack_data else (np.zeros(0), np.zeros(0))
    p = permutation(piv, lu.shape[0]) if unpack_pivots else np.zeros(0)
    return p, lower, upper


def _qr_one(a, *, mode):
    if mode == "r":
        return np.zeros(0), np.linalg.qr(a, mode="r")
    return tuple(np.linalg.qr(a, mode=mode))


def _geqrf_one(a):
    if 0 in a.shape:
        return a, np.zeros(min(a.shape))
    h, tau = np.linalg.qr(a, mode="raw")
    return h.T, tau


def _ormqr_one(a, tau, c, *, left, transpose):
    q = _householder(a, tau, a.shape[0])
    q = q.T if transpose else q
    return (q @ c if left else c @ q),


def _eigh_one(a, *, UPLO, compute_v):
    w, v = np.linalg.eigh(a, UPLO=UPLO)
    return w, (v if compute_v else np.zeros(0))


def _svd_one(a, *, full_matrices, compute_uv):
    if not compute_uv:
        return np.zeros(0), np.linalg.svd(a, compute_uv=False), np.zeros(0)
    m, n = a.shape
    if 0 in a.shape:  # LAPACK is not called: identity-shaped factors of zeros
        k = min(m, n)
        return (np.eye(m, m if full_matrices else k), np.zeros(k), np.eye(n if full_matrices else k, n))
    return tuple(np.linalg.svd(a, full_matrices=full_matrices))


def _matrix_exp_one(a):
    """Scaling and squaring with a degree-18 Taylor polynomial (float64; converged for ||A/2^s|| <= 1/2)."""
    norm = np.max(np.sum(np.abs(a), axis=0)) if a.size else 0.0
    if not np.isfinite(norm):
        return np.full(a.shape, np.nan),
    s = max(0, int(np.ceil(np.log2(norm))) + 1) if norm > 0 else 0
    x = a / 2.0 ** s
    term, total = np.eye(a.shape[0]), np.eye(a.shape[0])
    for k in range(1, 19):
        term = term @ x / k
        total = total + term
    for _ in range(s):
        total = total @ total
    return total,


def _triangular_solve_one(b, a, *, upper, transpose, unitriangular):
    t = np.triu(a) if upper else np.tril(a)
    if unitriangular:
        np.fill_diagonal(t, 1.0)
    return _solve(t.T if transpose else t, b), a


def _infer_check_errors(types, attrs):
    if types[0].dtype is not I32:
        raise fail("linalg_check_errors", f"info must be i32, got {types[0]}")
    return _tt((0,))


def _check_errors(info, *, api_name, is_matrix):
    """Raise, as eager does, when LAPACK reported a failure (a singular or not positive-definite matrix)."""
    bad = np.flatnonzero(np.asarray(info).reshape(-1))
    if bad.size:
        raise LinalgInputError(f"{api_name}: the factorization failed (info={int(np.asarray(info).reshape(-1)[bad[0]])}"
                               f"{'' if is_matrix else f' for batch element {int(bad[0])}'}): the input is singular "
                               "or not positive-definite")
    return np.zeros(0, np.float32)


# ---- type rules ----------------------------------------------------------------------------------------


def _infer_inv_ex(types, attrs):
    a = _matrix("linalg_inv_ex", types[0], square=True)
    return _tt(a), _tt(a[:-2], I32)


def _infer_det(types, attrs):
    a = _matrix("linalg_det", types[0], square=True)
    return _tt(a[:-2]), _tt(a), _tt(a[:-1], I32)


def _infer_slogdet(types, attrs):
    a = _matrix("linalg_slogdet", types[0], square=True)
    return _tt(a[:-2]), _tt(a[:-2]), _tt(a), _tt(a[:-1], I32)


def _solve_is_vector(a: tuple[int, ...], b: TensorType) -> bool:
    """torch.linalg.solve's rule: B is a (batch of) vector(s) when 1-d or when it is A's shape minus one dim."""
    return b.rank == 1 or (b.rank == len(a) - 1 and b.shape == a[:-1])


def _infer_solve_ex(types, attrs):
    a = _matrix("linalg_solve_ex", types[0], square=True)
    b = types[1]
    if _solve_is_vector(a, b):
        if b.dtype is not F32 or b.shape[-1] != a[-1] or not attrs["left"]:
            raise fail("linalg_solve_ex", f"vector B {b} does not match A {list(a)} (vectors need left=true)")
        x = (*broadcast_shapes("linalg_solve_ex", a[:-2], b.shape[:-1]), a[-1])
    else:
        x = _batch_rhs("linalg_solve_ex", a, b, left=attrs["left"])
    # the LU factors are A's own (not broadcast against B's batch), as ATen returns them
    return _tt(x), _tt(a), _tt(a[:-1], I32), _tt(a[:-2], I32)


def _infer_solve_triangular(types, attrs):
    a = _matrix("linalg_solve_triangular", types[0], square=True)
    return _tt(_batch_rhs("linalg_solve_triangular", a, types[1], left=attrs["left"]))


def _infer_cholesky(types, attrs):
    a = _matrix("linalg_cholesky_ex", types[0], square=True)
    return _tt(a), _tt(a[:-2], I32)


def _infer_cholesky_inverse(types, attrs):
    return _tt(_matrix("cholesky_inverse", types[0], square=True))


def _infer_cholesky_solve(types, attrs):
    a = _matrix("cholesky_solve", types[1], "the factor", square=True)
    return _tt(_batch_rhs("cholesky_solve", a, types[0]))


def _infer_lu(types, attrs):
    a = _matrix("linalg_lu", types[0])
    m, n = a[-2:]
    k = min(m, n)
    return _tt((*a[:-2], m, m)), _tt((*a[:-2], m, k)), _tt((*a[:-2], k, n))


def _infer_lu_factor(types, attrs):
    a = _matrix("linalg_lu_factor_ex", types[0])
    return _tt(a), _tt((*a[:-2], min(a[-2:])), I32), _tt(a[:-2], I32)


def _check_pivots(op: str, lu: tuple[int, ...], piv: TensorType) -> None:
    if piv.dtype is not I32 or piv.shape != (*lu[:-2], min(lu[-2:])):
        raise fail(op, f"pivots must be i32 {list(lu[:-2]) + [min(lu[-2:])]}, got {piv}")


def _infer_lu_solve(types, attrs):
    lu = _matrix("linalg_lu_solve", types[0], "LU", square=True)
    _check_pivots("linalg_lu_solve", lu, types[1])
    return _tt(_batch_rhs("linalg_lu_solve", lu, types[2], left=attrs["left"]))


def _infer_lu_unpack(types, attrs):
    lu = _matrix("lu_unpack", types[0], "LU")
    _check_pivots("lu_unpack", lu, types[1])
    p, lower, upper = _infer_lu((types[0],), attrs)
    empty = _tt((0,))
    return (p if attrs["unpack_pivots"] else empty), (lower if attrs["unpack_data"] else empty), \
        (upper if attrs["unpack_data"] else empty)


def _infer_qr(types, attrs):
    a = _matrix("linalg_qr", types[0])
    m, n = a[-2:]
    k = min(m, n)
    mode = attrs["mode"]
    if mode not in ("reduced", "complete", "r"):
        raise fail("linalg_qr", f"mode must be reduced, complete or r, got '{mode}'")
    if mode == "r":
        return _tt((0,)), _tt((*a[:-2], k, n))
    q_cols = m if mode == "complete" else k
    return _tt((*a[:-2], m, q_cols)), _tt((*a[:-2], q_cols, n))


def _infer_householder(types, attrs):
    a = _matrix("linalg_householder_product", types[0])
    tau = types[1]
    if a[-2] < a[-1] or tau.dtype is not F32 or tau.shape[:-1] != a[:-2] or tau.shape[-1:] > (a[-1],) \
            or tau.rank != len(a) - 1:
        raise fail("linalg_householder_product", f"needs A [..., m, n] with m >= n and tau [..., k<=n], got "
                                                 f"{list(a)} and {tau}")
    return _tt(a)


def _infer_geqrf(types, attrs):
    a = _matrix("geqrf", types[0])
    return _tt(a), _tt((*a[:-2], min(a[-2:])))


def _infer_ormqr(types, attrs):
    a = _matrix("ormqr", types[0])
    tau, c = types[1], types[2]
    _matrix("ormqr", c, "C")
    m = c.shape[-2] if attrs["left"] else c.shape[-1]
    if a[-2] != m or tau.shape[:-1] != a[:-2] or tau.rank != len(a) - 1 or tau.shape[-1] > min(a[-2:]) \
            or c.shape[:-2] != a[:-2] or tau.dtype is not F32:
        raise fail("ormqr", f"A {list(a)}, tau {tau} and C {c} do not match")
    return _tt(c.shape)


def _infer_eigh(types, attrs):
    a = _matrix("linalg_eigh", types[0], square=True)
    if attrs["UPLO"] not in ("L", "U"):
        raise fail("linalg_eigh", f"UPLO must be 'L' or 'U', got '{attrs['UPLO']}'")
    return _tt(a[:-1]), (_tt(a) if attrs["compute_v"] else _tt((0,)))


def _infer_svd(types, attrs):
    a = _matrix("linalg_svd", types[0])
    m, n = a[-2:]
    k = min(m, n)
    if not attrs["compute_uv"]:
        return _tt((0,)), _tt((*a[:-2], k)), _tt((0,))
    full = attrs["full_matrices"]
    return _tt((*a[:-2], m, m if full else k)), _tt((*a[:-2], k)), _tt((*a[:-2], n if full else k, n))


def _infer_matrix_exp(types, attrs):
    return _tt(_matrix("linalg_matrix_exp", types[0], square=True))


def _infer_triangular_solve(types, attrs):
    a = _matrix("triangular_solve", types[1], square=True)
    x = _batch_rhs("triangular_solve", a, types[0])
    return _tt(x), _tt((*x[:-2], *a[-2:]))


# ---- references ----------------------------------------------------------------------------------------


def _ref(one: Callable, core: tuple[int, ...]) -> Callable:
    def reference(*arrays, **attrs):
        return _per_matrix(one, *arrays, core=core, **attrs)

    return reference


def _solve_ex(a, b, *, left, check_errors=False):
    lu, piv, info = _per_matrix(lu_factor, a, core=(2,))
    if _solve_is_vector(a.shape, TensorType(b.shape, F32)):  # a (batch of) column vector(s)
        (x,) = _per_matrix(_solve_one, a, b[..., None], core=(2, 2), left=True)
        return x[..., 0], lu, piv, info
    (x,) = _per_matrix(_solve_one, a, b, core=(2, 2), left=left)
    return x, lu, piv, info


def _cholesky(a, *, upper, check_errors=False):
    return _per_matrix(_cholesky_one, a, core=(2,), upper=upper)


def _inv_ex(a, *, check_errors=False):
    return _per_matrix(_inv_ex_one, a, core=(2,))


def _lu_factor(a, *, pivot=True, check_errors=False):
    return _per_matrix(lu_factor, a, core=(2,))


def _lu_unpack(lu, piv, *, unpack_data, unpack_pivots):
    p, lower, upper = _per_matrix(_lu_unpack_one, lu, piv, core=(2, 1), unpack_data=unpack_data,
                                  unpack_pivots=unpack_pivots)
    empty = np.zeros(0)
    return (p if unpack_pivots else empty), (lower if unpack_data else empty), (upper if unpack_data else empty)


def _qr(a, *, mode):
    q, r = _per_matrix(_qr_one, a, core=(2,), mode=mode)
    return (np.zeros(0) if mode == "r" else q), r


def _eigh(a, *, UPLO, compute_v):
    w, v = _per_matrix(_eigh_one, a, core=(2,), UPLO=UPLO, compute_v=True)
    return w, (v if compute_v else np.zeros(0))


def _svd(a, *, full_matrices, compute_uv):
    u, s, vh = _per_matrix(_svd_one, a, core=(2,), full_matrices=full_matrices, compute_uv=True)
    return (u, s, vh) if compute_uv else (np.zeros(0), s, np.zeros(0))


def _lu_pivot_only(types, attrs):
    if not attrs["pivot"]:
        raise fail("linalg_lu", "LU without pivoting is not supported on the CPU")


def _infer_lu_checked(types, attrs):
    _lu_pivot_only(types, attrs)
    return _infer_lu(types, attrs)


def _infer_lu_factor_checked(types, attrs):
    if not attrs["pivot"]:
        raise fail("linalg_lu_factor_ex", "LU without pivoting is not supported on the CPU")
    return _infer_lu_factor(types, attrs)


_CHECK = {"check_errors": AttrSpec("bool", False)}

OPS = (
    OpDef("linalg_inv_ex", Category.EXTERN, (1, 1), _infer_inv_ex, _inv_ex, _CHECK,
          "inverse of square matrices, and LAPACK's info (i32, 0 = invertible)"),
    OpDef("linalg_det", Category.EXTERN, (1, 1), _infer_det, _ref(_det_one, (2,)), {},
          "determinant, with the LU factors of A^T and i32 pivots it came from (as ATen; for the backward)"),
    OpDef("linalg_slogdet", Category.EXTERN, (1, 1), _infer_slogdet, _ref(_slogdet_one, (2,)), {},
          "sign and log|det|, with the LU factors of A^T and i32 pivots (as ATen)"),
    OpDef("linalg_solve_ex", Category.EXTERN, (2, 2), _infer_solve_ex, _solve_ex,
          {"left": AttrSpec("bool", True), **_CHECK},
          "X with A X = B (left) or X A = B; B a matrix or vector (torch's rule); also LU, pivots, info"),
    OpDef("linalg_solve_triangular", Category.EXTERN, (2, 2), _infer_solve_triangular,
          _ref(_solve_triangular_one, (2, 2)),
          {"upper": AttrSpec("bool"), "left": AttrSpec("bool", True), "unitriangular": AttrSpec("bool", False)},
          "X with T X = B (left) or X T = B, T the upper/lower triangle of A (unit diagonal if unitriangular)"),
    OpDef("linalg_cholesky_ex", Category.EXTERN, (1, 1), _infer_cholesky, _cholesky,
          {"upper": AttrSpec("bool", False), **_CHECK},
          "Cholesky factor of a symmetric positive-definite matrix (its lower triangle) and info"),
    OpDef("cholesky_inverse", Category.EXTERN, (1, 1), _infer_cholesky_inverse, _ref(_cholesky_inverse_one, (2,)),
          {"upper": AttrSpec("bool", False)}, "inverse of A = L L^T (or U^T U) from its Cholesky factor"),
    OpDef("cholesky_solve", Category.EXTERN, (2, 2), _infer_cholesky_solve, _ref(_cholesky_solve_one, (2, 2)),
          {"upper": AttrSpec("bool", False)}, "X with (L L^T) X = B: operands B, then the Cholesky factor"),
    OpDef("linalg_lu", Category.EXTERN, (1, 1), _infer_lu_checked, _ref(_lu_one, (2,)),
          {"pivot": AttrSpec("bool", True)}, "P, L, U with A = P L U (partial pivoting)"),
    OpDef("linalg_lu_factor_ex", Category.EXTERN, (1, 1), _infer_lu_factor_checked, _lu_factor,
          {"pivot": AttrSpec("bool", True), **_CHECK}, "packed LU factors, i32 pivots (1-based, LAPACK) and info"),
    OpDef("linalg_lu_solve", Category.EXTERN, (3, 3), _infer_lu_solve, _ref(_lu_solve_one, (2, 1, 2)),
          {"left": AttrSpec("bool", True), "adjoint": AttrSpec("bool", False)},
          "X with A X = B from A's packed LU factors and pivots (adjoint: A^T X = B; left=false: X A = B)"),
    OpDef("lu_unpack", Category.EXTERN, (2, 2), _infer_lu_unpack, _lu_unpack,
          {"unpack_data": AttrSpec("bool", True), "unpack_pivots": AttrSpec("bool", True)},
          "P, L, U from packed LU factors and pivots (a [0] tensor for each part not unpacked)"),
    OpDef("linalg_qr", Category.EXTERN, (1, 1), _infer_qr, _qr, {"mode": AttrSpec("str", "reduced")},
          "Householder QR (mode reduced, complete, or r: Q is then a [0] tensor)"),
    OpDef("linalg_householder_product", Category.EXTERN, (2, 2), _infer_householder,
          _ref(lambda a, tau: (_householder(a, tau, a.shape[1]),), (2, 1)), {},
          "the first n columns of H_1...H_k from Householder vectors (LAPACK orgqr)"),
    OpDef("geqrf", Category.EXTERN, (1, 1), _infer_geqrf, _ref(_geqrf_one, (2,)), {},
          "LAPACK geqrf: R and the Householder vectors packed in one matrix, and tau"),
    OpDef("ormqr", Category.EXTERN, (3, 3), _infer_ormqr, _ref(_ormqr_one, (2, 1, 2)),
          {"left": AttrSpec("bool", True), "transpose": AttrSpec("bool", False)},
          "Q C, C Q (or with Q^T) for Q given by geqrf's Householder vectors (operands A, tau, C)"),
    OpDef("linalg_eigh", Category.EXTERN, (1, 1), _infer_eigh, _eigh,
          {"UPLO": AttrSpec("str", "L"), "compute_v": AttrSpec("bool", True)},
          "eigenvalues (ascending) and eigenvectors of a symmetric matrix read from its UPLO triangle"),
    OpDef("linalg_svd", Category.EXTERN, (1, 1), _infer_svd, _svd,
          {"full_matrices": AttrSpec("bool", False), "compute_uv": AttrSpec("bool", True)},
          "U, S (descending), Vh with A = U diag(S) Vh (U and Vh are [0] tensors without compute_uv)"),
    OpDef("linalg_matrix_exp", Category.EXTERN, (1, 1), _infer_matrix_exp, _ref(_matrix_exp_one, (2,)), {},
          "matrix exponential"),
    OpDef("triangular_solve", Category.EXTERN, (2, 2), _infer_triangular_solve,
          _ref(_triangular_solve_one, (2, 2)),
          {"upper": AttrSpec("bool", True), "transpose": AttrSpec("bool", False),
           "unitriangular": AttrSpec("bool", False)},
          "legacy torch.triangular_solve(B, A): X with op(T) X = B, and a copy of A"),
    OpDef("linalg_check_errors", Category.EXTERN, (1, 1), _infer_check_errors, _check_errors,
          {"api_name": AttrSpec("str"), "is_matrix": AttrSpec("bool")},
          "raise when any LAPACK info is non-zero (eager's error check); its [0] result orders it (an effect "
          "token)"),
)
