"""LDL^T factorization of symmetric matrices (Category.EXTERN): ``linalg_ldl_factor_ex`` and ``linalg_ldl_solve``.

The references transcribe LAPACK's unblocked Bunch-Kaufman routines for the lower triangle (``dsytf2``: the
pivot choice with alpha = (1 + sqrt(17)) / 8, 1x1 and 2x2 pivots; ``dsytrs``: the solve), which is what ATen's
``sytrf``/``sytrs`` compute for the matrix sizes graphs carry (measured equal on random symmetric and nearly
singular matrices). ``LD`` holds L below the diagonal and D on it (2x2 blocks on the subdiagonal), the upper
triangle zero; pivots are LAPACK's 1-based i32 (negative for the two rows of a 2x2 block).
"""

from __future__ import annotations

import numpy as np

from neuroncc.ir.dtypes import DType
from neuroncc.ir.opdef import AttrSpec, Category, OpDef, fail
from neuroncc.ir.ops.library_linalg import _batch_rhs, _matrix, _per_matrix, _tt

I32 = DType.i32
ALPHA = (1 + np.sqrt(17.0)) / 8


def ldl_factor(a):
    """LAPACK dsytf2 (lower): the packed LD, 1-based pivots, info (0, or the first zero pivot)."""
    a = np.array(a, dtype=np.float64); n = a.shape[0]
    a = np.tril(a) + np.tril(a, -1).T  # read the lower triangle
    piv = np.zeros(n, np.int32); info = 0; k = 0
    while k < n:
        kstep = 1
        absakk = abs(a[k, k])
        if k < n - 1:
            imax = k + 1 + int(np.argmax(np.abs(a[k + 1:, k]))); colmax = abs(a[imax, k])
        else:
            imax, colmax = k, 0.0
        if max(absakk, colmax) == 0 or np.isnan(absakk):
            info = info or k + 1; kp = k
        else:
            if absakk >= ALPHA * colmax:
                kp = k
            else:
                rowmax = np.max(np.abs(a[imax, k:imax])) if imax > k else 0.0
                if imax < n - 1:
                    rowmax = max(rowmax, np.max(np.abs(a[imax + 1:, imax])))
                if absakk >= ALPHA * colmax * (colmax / rowmax):
                    kp = k
                elif abs(a[imax, imax]) >= ALPHA * rowmax:
                    kp = imax
                else:
                    kp = imax; kstep = 2
            kk = k + kstep - 1
            if kp != kk:
                if kp < n - 1:
                    a[kp + 1:, [kk, kp]] = a[kp + 1:, [kp, kk]]
                seg = a[kk + 1:kp, kk].copy()
                a[kk + 1:kp, kk] = a[kp, kk + 1:kp]; a[kp, kk + 1:kp] = seg
                a[kk, kk], a[kp, kp] = a[kp, kp], a[kk, kk]
                if kstep == 2:
                    a[k + 1, k], a[kp, k] = a[kp, k], a[k + 1, k]
            if kstep == 1:
                if k < n - 1:
                    d11 = 1.0 / a[k, k]
                    x = a[k + 1:, k].copy()
                    a[k + 1:, k + 1:] -= d11 * np.tril(np.outer(x, x))
                    a[k + 1:, k] *= d11
            else:
                if k < n - 2:
                    d21 = a[k + 1, k]; d11 = a[k + 1, k + 1] / d21; d22 = a[k, k] / d21
                    t = 1.0 / (d11 * d22 - 1.0); d21 = t / d21
                    for j in range(k + 2, n):
                        wk = d21 * (d11 * a[j, k] - a[j, k + 1])
                        wkp1 = d21 * (d22 * a[j, k + 1] - a[j, k])
                        a[j:, j] -= a[j:, k] * wk + a[j:, k + 1] * wkp1
                        a[j, k] = wk; a[j, k + 1] = wkp1
        if kstep == 1:
            piv[k] = kp + 1
        else:
            piv[k] = piv[k + 1] = -(kp + 1)
        k += kstep
    return np.tril(a), piv, info


def ldl_solve(ld, piv, b):
    """LAPACK dsytrs (lower): X with A X = B from A's packed LD and pivots."""
    a = np.asarray(ld, np.float64); b = np.array(b, np.float64); n = a.shape[0]
    piv = np.asarray(piv, np.int64)
    k = 0
    while k < n:
        if piv[k] > 0:
            kp = piv[k] - 1
            b[[k, kp]] = b[[kp, k]]
            b[k + 1:] -= np.outer(a[k + 1:, k], b[k])
            b[k] /= a[k, k]
            k += 1
        else:
            kp = -piv[k] - 1
            b[[k + 1, kp]] = b[[kp, k + 1]]
            if k < n - 2:
                b[k + 2:] -= np.outer(a[k + 2:, k], b[k]) + np.outer(a[k + 2:, k + 1], b[k + 1])
            akm1k = a[k + 1, k]; akm1 = a[k, k] / akm1k; ak = a[k + 1, k + 1] / akm1k
            denom = akm1 * ak - 1.0
            bkm1 = b[k] / akm1k; bk = b[k + 1] / akm1k
            b[k] = (ak * bkm1 - bk) / denom; b[k + 1] = (akm1 * bk - bkm1) / denom
            k += 2
    k = n - 1
    while k >= 0:
        if piv[k] > 0:
            b[k] -= a[k + 1:, k] @ b[k + 1:]
            kp = piv[k] - 1
            b[[k, kp]] = b[[kp, k]]
            k -= 1
        else:
            if k < n - 1:
                b[k] -= a[k + 1:, k] @ b[k + 1:]
                b[k - 1] -= a[k + 1:, k - 1] @ b[k + 1:]
            kp = -piv[k] - 1
            b[[k, kp]] = b[[kp, k]]
            k -= 2
    return b


def _ldl_factor_one(a, *, hermitian=False):
    ld, piv, info = ldl_factor(a)
    return ld, piv, np.array(info, np.int32)


def _infer_factor(types, attrs):
    a = _matrix("linalg_ldl_factor_ex", types[0], square=True)
    return _tt(a), _tt(a[:-1], I32), _tt(a[:-2], I32)


def _infer_solve(types, attrs):
    ld = _matrix("linalg_ldl_solve", types[0], "LD", square=True)
    if types[1].dtype is not I32 or types[1].shape != ld[:-1]:
        raise fail("linalg_ldl_solve", f"pivots must be i32 {list(ld[:-1])}, got {types[1]}")
    return _tt(_batch_rhs("linalg_ldl_solve", ld, types[2]))


OPS = (
    OpDef("linalg_ldl_factor_ex", Category.EXTERN, (1, 1), _infer_factor,
          lambda a, *, hermitian=False, check_errors=False: _per_matrix(_ldl_factor_one, a, core=(2,)),
          {"hermitian": AttrSpec("bool", False), "check_errors": AttrSpec("bool", False)},
          "Bunch-Kaufman LDL^T of a symmetric matrix (its lower triangle): packed LD, i32 pivots, info"),
    OpDef("linalg_ldl_solve", Category.EXTERN, (3, 3), _infer_solve,
          lambda ld, piv, b, *, hermitian=False: _per_matrix(lambda *x: (ldl_solve(*x),), ld, piv, b, core=(2, 1, 2)),
          {"hermitian": AttrSpec("bool", False)}, "X with A X = B from linalg_ldl_factor_ex's LD and pivots"),
)
