"""Test table entries for the library ops (Category.EXTERN): LAPACK linear algebra and sorting/selection/scans.

Matrices are drawn well conditioned (a random matrix plus a multiple of the identity; SPD ones as M M^T + nI)
so that float32 torch and the float64 references agree to a few ulps times the condition number. Sorting and
selection draw distinct values where PyTorch leaves the order of equal elements to its algorithm (topk,
kthvalue), and small-range values where ties are the point (mode, cummax/cummin, searchsorted).
"""

from __future__ import annotations

import numpy as np
import torch
from hypothesis import assume
from hypothesis import strategies as st

from neuroncc.ir import DType, TensorType
from neuroncc.ir.dtypes import to_storage

from .spec import OpSpec
from .support import FLOATS, INTS, Case, Tol, operand, random_array, rngs

F32, I32, I64, BOOL = DType.f32, DType.i32, DType.i64, DType.bool
LINALG_TOL = Tol(rtol=80, atol=80)


def t(shape, dtype=F32):
    return TensorType(tuple(shape), dtype)


def _batch(draw: st.DrawFn) -> tuple[int, ...]:
    return tuple(draw(st.lists(st.integers(0, 2), max_size=2)))


def _square(rng, batch, n, *, spd=False, boost=3.0):
    m = rng.uniform(-1, 1, (*batch, n, n))
    a = m @ np.swapaxes(m, -1, -2) + n * np.eye(n) if spd else m + boost * np.eye(n)
    return a.astype(np.float32), t((*batch, n, n))


def _plain(rng, shape):
    return rng.uniform(-1, 1, shape).astype(np.float32), t(shape)


@st.composite
def _one_square(draw, *, spd=False, attrs=None):
    rng = draw(rngs())
    case_attrs = {k: draw(v) for k, v in (attrs or {}).items()}
    return Case([_square(rng, _batch(draw), draw(st.integers(0, 4)), spd=spd)], case_attrs)


@st.composite
def _solve_cases(draw, *, attrs):
    """A square A and a right-hand side B with broadcastable batch dims (left: [.., n, k]; right: [.., k, n])."""
    rng = draw(rngs())
    case_attrs = {k: draw(v) for k, v in attrs.items()}
    batch, n, k = _batch(draw), draw(st.integers(0, 4)), draw(st.integers(0, 3))
    b_batch = batch[draw(st.integers(0, len(batch))):]
    if draw(st.booleans()):
        batch, b_batch = b_batch, batch
    shape = (*b_batch, n, k) if case_attrs.get("left", True) else (*b_batch, k, n)
    return Case([_square(rng, batch, n), _plain(rng, shape)], case_attrs)


@st.composite
def _solve_ex_cases(draw):
    case = draw(_solve_cases(attrs={"left": st.booleans()}))
    a, b = case.types
    assume(case.attrs["left"] or not (b.rank == 1 or (b.rank == a.rank - 1 and b.shape == a.shape[:-1])))
    if case.attrs["left"] and draw(st.booleans()):  # a (batch of) vector(s): B is A's shape minus one dim
        rng = draw(rngs())
        a = case.operands[0][1].shape
        shape = a[-1:] if draw(st.booleans()) else a[:-1]
        case.operands[1] = _plain(rng, shape)
    return case


@st.composite
def _rect(draw, *, tall=False, attrs=None):
    rng = draw(rngs())
    m, n = draw(st.integers(0, 4)), draw(st.integers(0, 4))
    if tall:
        m, n = max(m, n), min(m, n)
    return Case([_plain(rng, (*_batch(draw), m, n))], {k: draw(v) for k, v in (attrs or {}).items()})


@st.composite
def _lu_solve_cases(draw):
    case = draw(_solve_cases(attrs={"left": st.booleans(), "adjoint": st.booleans()}))
    a, a_type = case.operands[0]
    lu, pivots, _ = torch.linalg.lu_factor_ex(torch.from_numpy(a))
    case.operands[0] = (lu.numpy(), a_type)
    case.operands.insert(1, (pivots.numpy(), t(pivots.shape, I32)))
    return case


@st.composite
def _lu_unpack_cases(draw):
    case = draw(_rect(attrs={"unpack_data": st.booleans(), "unpack_pivots": st.booleans()}))
    a, a_type = case.operands[0]
    lu, pivots, _ = torch.linalg.lu_factor_ex(torch.from_numpy(a))
    return Case([(lu.numpy(), a_type), (pivots.numpy(), t(pivots.shape, I32))], case.attrs)


@st.composite
def _householder_cases(draw, *, ormqr=False):
    rng = draw(rngs())
    batch = _batch(draw)
    n = draw(st.integers(0, 3))
    m = n + draw(st.integers(0, 2))
    a = _plain(rng, (*batch, m, n))
    tau = _plain(rng, (*batch, n if ormqr else draw(st.integers(0, n))))
    if not ormqr:
        return Case([a, tau])
    attrs = {"left": draw(st.booleans()), "transpose": draw(st.booleans())}
    k = n + draw(st.integers(0, 2))  # torch wants tau's length to be min(C's last dim, A's last dim)
    c = _plain(rng, (*batch, m, k) if attrs["left"] else (*batch, k, m))
    return Case([a, tau, c], attrs)


@st.composite
def _triangular_cases(draw, *, legacy=False):
    attrs = {"upper": st.booleans(), "unitriangular": st.booleans()}
    attrs.update({"transpose": st.booleans()} if legacy else {"left": st.booleans()})
    case = draw(_solve_cases(attrs=attrs))
    if legacy:
        case.operands.reverse()  # triangular_solve(B, A)
    return case


@st.composite
def _cholesky_factor_cases(draw, *, solve=False):
    rng = draw(rngs())
    upper = draw(st.booleans())
    batch, n = _batch(draw), draw(st.integers(0, 4))
    a, a_type = _square(rng, batch, n, spd=True)
    factor = torch.linalg.cholesky(torch.from_numpy(a), upper=upper).numpy()
    if not solve:
        return Case([(factor, a_type)], {"upper": upper})
    return Case([_plain(rng, (*batch, n, draw(st.integers(0, 3)))), (factor, a_type)], {"upper": upper})


def _sign_canonical(vectors_first: bool):
    """Singular/eigen vectors up to sign: flip each so that its largest-magnitude entry is positive."""
    def canonical(results):
        if vectors_first:  # svd: U, S, Vh
            u, s, vh = results
            if u.numel() == 0 or u.shape[-1] == 0:
                return results
            pick = torch.gather(u, -2, u.abs().argmax(-2, keepdim=True)).sign()
            pick = torch.where(pick == 0, torch.ones_like(pick), pick)
            return u * pick, s, vh * pick.mT
        w, v = results
        if v.numel() == 0:
            return results
        pick = torch.gather(v, -2, v.abs().argmax(-2, keepdim=True)).sign()
        return w, v * torch.where(pick == 0, torch.ones_like(pick), pick)

    return canonical


@st.composite
def _symmetric_cases(draw, *, solve=False):
    """Symmetric matrices, some with a tiny diagonal (Bunch-Kaufman then takes 2x2 pivots)."""
    rng = draw(rngs())
    batch, n = _batch(draw), draw(st.integers(0, 5))
    m = rng.uniform(-1, 1, (*batch, n, n))
    a = m + np.swapaxes(m, -1, -2)
    if draw(st.booleans()):
        a = a - np.eye(n) * np.diagonal(a, 0, -2, -1)[..., None] * 0.98
    a = a.astype(np.float32)
    if not solve:
        return Case([(a, t(a.shape))])
    ld, pivots, _ = torch.linalg.ldl_factor_ex(torch.from_numpy(a))
    b = _plain(rng, (*batch, n, draw(st.integers(0, 3))))
    return Case([(ld.numpy(), t(a.shape)), (pivots.numpy(), t(pivots.shape, I32)), b])


# ---- sorting -------------------------------------------------------------------------------------------


def _distinct(rng, shape, dtype):
    """Distinct values (no ties anywhere), exact in every dtype."""
    size = int(np.prod(shape)) if shape else 1
    values = (rng.permutation(size) - size // 2).reshape(shape)
    return to_storage(values.astype(np.float32) * (0.5 if dtype.is_float else 1), dtype), t(shape, dtype)


@st.composite
def _dim_cases(draw, *, dtypes, data="random", nonempty=False, attrs=None, min_rank=0):
    rng = draw(rngs())
    dtype = draw(st.sampled_from(dtypes))
    shape = tuple(draw(st.lists(st.integers(1 if nonempty else 0, 4), min_size=min_rank, max_size=3)))
    if data == "distinct":
        x = _distinct(rng, shape, dtype)
    elif data == "small":
        x = operand(rng, shape, dtype, low=0, high=3)
    else:
        x = operand(rng, shape, dtype, specials=dtype.is_float and draw(st.booleans()))
    case_attrs = {"dim": draw(st.integers(0, max(len(shape) - 1, 0)))}
    case_attrs.update({k: draw(v) for k, v in (attrs or {}).items()})
    return Case([x], case_attrs)


@st.composite
def _topk_cases(draw):
    case = draw(_dim_cases(dtypes=FLOATS + INTS, data="distinct", attrs={"largest": st.booleans()}))
    shape = case.types[0].shape
    case.attrs["k"] = draw(st.integers(0, shape[case.attrs["dim"]])) if shape else 1
    return case


@st.composite
def _kthvalue_cases(draw):
    case = draw(_dim_cases(dtypes=FLOATS + INTS, data="distinct", nonempty=True, attrs={"keepdim": st.booleans()}))
    shape = case.types[0].shape
    case.attrs["k"] = draw(st.integers(1, shape[case.attrs["dim"]] if shape else 1))
    return case


@st.composite
def _median_cases(draw):
    case = draw(_dim_cases(dtypes=(F32, I64), data="distinct", nonempty=True,
                           attrs={"keepdim": st.booleans(), "ignore_nan": st.booleans()}))
    x, x_type = case.operands[0]
    if x_type.dtype.is_float and x.size and draw(st.booleans()):
        x = np.where(draw(rngs()).random(x.shape) < 0.3, np.float32(np.nan), x)
        case.operands[0] = (x, x_type)
    return case


def _median_torch(xs, a):
    if not xs[0].dim():
        return xs[0].clone(), torch.zeros((), dtype=torch.int64)
    return (torch.nanmedian if a["ignore_nan"] else torch.median)(xs[0], a["dim"], a["keepdim"])


@st.composite
def _searchsorted_cases(draw):
    rng = draw(rngs())
    dtype = draw(st.sampled_from((F32, I64, I32)))
    lead = tuple(draw(st.lists(st.integers(0, 2), max_size=2)))
    nd = draw(st.booleans())
    seq_shape = (*lead, draw(st.integers(0, 5))) if nd else (draw(st.integers(0, 5)),)
    values_shape = (*lead, draw(st.integers(0, 4))) if nd else tuple(draw(st.lists(st.integers(0, 3), max_size=2)))
    seq = random_array(rng, seq_shape, dtype, low=-3, high=3)
    values = operand(rng, values_shape, dtype, low=-4, high=4)
    attrs = {"right": draw(st.booleans()), "out_int32": draw(st.booleans())}
    if draw(st.booleans()):
        sorter = np.argsort(seq, axis=-1, kind="stable").astype(np.int64)
        return Case([(seq, t(seq_shape, dtype)), values, (sorter, t(seq_shape, I64))], attrs)
    return Case([(np.sort(seq, axis=-1), t(seq_shape, dtype)), values], attrs)


@st.composite
def _histc_cases(draw):
    rng = draw(rngs())
    shape = tuple(draw(st.lists(st.integers(0, 5), max_size=2)))
    x = operand(rng, shape, F32, low=-3, high=3)
    low, high = draw(st.sampled_from([(0.0, 0.0), (-2.0, 2.0), (-1.0, 3.0), (1.0, 1.0)]))
    return Case([x], {"bins": draw(st.integers(1, 7)), "min": low, "max": high})


@st.composite
def _histogram_cases(draw, *, edges=False):
    rng = draw(rngs())
    shape = tuple(draw(st.lists(st.integers(0, 5), max_size=2)))
    x = operand(rng, shape, F32, low=-3, high=3)
    weight = [operand(rng, shape, F32, low=0, high=2)] if draw(st.booleans()) else []
    attrs = {"density": draw(st.booleans())}
    if edges:
        bounds = np.sort(rng.uniform(-3, 3, draw(st.integers(2, 5)))).astype(np.float32)
        return Case([x, (bounds, t(bounds.shape)), *weight], attrs)
    attrs["bins"] = draw(st.integers(1, 6))
    attrs["range"] = draw(st.sampled_from([(), (-2.0, 2.0), (0.5, 0.5)]))
    return Case([x, *weight], attrs)


def _histogram_torch(xs, a):
    return tuple(torch.histogram(xs[0], a["bins"], range=a["range"] or None, weight=xs[1] if len(xs) > 1 else None,
                                 density=a["density"]))


def _pair(fn):
    return lambda xs, a: tuple(fn(xs, a))


_NOT_F32 = ((t((2, 2), DType.bf16),), {})
_NOT_SQUARE = ((t((2, 3)),), {})
_VECTOR = ((t((3,)),), {})

SPECS = {
    "linalg_inv_ex": OpSpec(_one_square, _pair(lambda xs, a: torch.linalg.inv_ex(xs[0])), LINALG_TOL,
                            (_NOT_F32, _NOT_SQUARE, _VECTOR)),
    "linalg_det": OpSpec(_one_square, _pair(lambda xs, a: torch.ops.aten._linalg_det(xs[0])), LINALG_TOL,
                         (_NOT_F32, _NOT_SQUARE)),
    "linalg_slogdet": OpSpec(_one_square, _pair(lambda xs, a: torch.ops.aten._linalg_slogdet(xs[0])), LINALG_TOL,
                             (_NOT_F32, _NOT_SQUARE)),
    "linalg_solve_ex": OpSpec(_solve_ex_cases,
                              _pair(lambda xs, a: torch.ops.aten._linalg_solve_ex(xs[0], xs[1], left=a["left"])),
                              LINALG_TOL, (((t((3, 3)), t((2, 2))), {}), ((t((3, 3)), t((3,), I64)), {}),
                                           ((t((3, 3)), t((3,))), {"left": False}))),
    "linalg_solve_triangular": OpSpec(
        lambda: _triangular_cases(),
        lambda xs, a: torch.linalg.solve_triangular(xs[0], xs[1], upper=a["upper"], left=a["left"],
                                                    unitriangular=a["unitriangular"]),
        LINALG_TOL, (((t((3, 3)), t((2, 2))), {"upper": True}), ((t((3, 3)), t((3, 2))), {}),
                     ((t((2, 3, 3)), t((3, 3, 1))), {"upper": False}))),
    "linalg_cholesky_ex": OpSpec(lambda: _one_square(spd=True, attrs={"upper": st.booleans()}),
                                 _pair(lambda xs, a: torch.linalg.cholesky_ex(xs[0], upper=a["upper"])), LINALG_TOL,
                                 (_NOT_F32, _NOT_SQUARE)),
    "cholesky_inverse": OpSpec(lambda: _cholesky_factor_cases(),
                               lambda xs, a: torch.cholesky_inverse(xs[0], upper=a["upper"]), LINALG_TOL,
                               (_NOT_F32, _NOT_SQUARE)),
    "cholesky_solve": OpSpec(lambda: _cholesky_factor_cases(solve=True),
                             lambda xs, a: torch.cholesky_solve(xs[0], xs[1], upper=a["upper"]), LINALG_TOL,
                             (((t((3, 2)), t((2, 2))), {}), ((t((3, 2)), t((3, 2))), {}))),
    "linalg_lu": OpSpec(lambda: _rect(), _pair(lambda xs, a: torch.linalg.lu(xs[0])), LINALG_TOL,
                        (_NOT_F32, _VECTOR, ((t((2, 2)),), {"pivot": False}))),
    "linalg_lu_factor_ex": OpSpec(lambda: _rect(), _pair(lambda xs, a: torch.linalg.lu_factor_ex(xs[0])), LINALG_TOL,
                                  (_NOT_F32, _VECTOR, ((t((2, 2)),), {"pivot": False}))),
    "linalg_lu_solve": OpSpec(_lu_solve_cases,
                              lambda xs, a: torch.linalg.lu_solve(xs[0], xs[1], xs[2], left=a["left"],
                                                                  adjoint=a["adjoint"]),
                              LINALG_TOL, (((t((3, 3)), t((3,), I64), t((3, 1))), {}),
                                           ((t((3, 3)), t((2,), I32), t((3, 1))), {}))),
    "lu_unpack": OpSpec(_lu_unpack_cases,
                        _pair(lambda xs, a: torch.lu_unpack(xs[0], xs[1], a["unpack_data"], a["unpack_pivots"])),
                        LINALG_TOL, (((t((3, 3)), t((3,), I64)), {}), ((t((3, 2)), t((3,), I32)), {}))),
    "linalg_ldl_factor_ex": OpSpec(_symmetric_cases, _pair(lambda xs, a: torch.linalg.ldl_factor_ex(xs[0])),
                                   LINALG_TOL, (_NOT_F32, _NOT_SQUARE)),
    "linalg_ldl_solve": OpSpec(lambda: _symmetric_cases(solve=True),
                               lambda xs, a: torch.linalg.ldl_solve(xs[0], xs[1], xs[2]), Tol(rtol=400, atol=400),
                               (((t((3, 3)), t((3,), I64), t((3, 1))), {}), ((t((3, 3)), t((3,), I32), t((2, 1))), {}))),
    "linalg_qr": OpSpec(lambda: _rect(attrs={"mode": st.sampled_from(["reduced", "complete", "r"])}),
                        _pair(lambda xs, a: torch.linalg.qr(xs[0], a["mode"])), LINALG_TOL,
                        (_NOT_F32, _VECTOR, ((t((2, 2)),), {"mode": "economic"}))),
    "linalg_householder_product": OpSpec(_householder_cases,
                                         lambda xs, a: torch.linalg.householder_product(xs[0], xs[1]), LINALG_TOL,
                                         (((t((2, 3)), t((2,))), {}), ((t((3, 2)), t((3,))), {}))),
    "geqrf": OpSpec(lambda: _rect(), _pair(lambda xs, a: torch.geqrf(xs[0])), LINALG_TOL, (_NOT_F32, _VECTOR)),
    "ormqr": OpSpec(lambda: _householder_cases(ormqr=True),
                    lambda xs, a: torch.ormqr(xs[0], xs[1], xs[2], a["left"], a["transpose"]), LINALG_TOL,
                    (((t((3, 2)), t((2,)), t((2, 2))), {}), ((t((3, 2)), t((3,)), t((3, 2))), {}))),
    "linalg_eigh": OpSpec(lambda: _one_square(spd=True, attrs={"UPLO": st.sampled_from("LU"),
                                                               "compute_v": st.booleans()}),
                          _pair(lambda xs, a: torch.ops.aten._linalg_eigh(xs[0], a["UPLO"], a["compute_v"])),
                          LINALG_TOL, (_NOT_F32, _NOT_SQUARE, ((t((2, 2)),), {"UPLO": "X"})),
                          canonical=_sign_canonical(False)),
    "linalg_svd": OpSpec(lambda: _rect(attrs={"full_matrices": st.booleans(), "compute_uv": st.booleans()}),
                         _pair(lambda xs, a: torch.ops.aten._linalg_svd(xs[0], a["full_matrices"], a["compute_uv"])),
                         LINALG_TOL, (_NOT_F32, _VECTOR), canonical=_sign_canonical(True)),
    "linalg_matrix_exp": OpSpec(_one_square, lambda xs, a: torch.linalg.matrix_exp(xs[0]), LINALG_TOL,
                                (_NOT_F32, _NOT_SQUARE)),
    "triangular_solve": OpSpec(lambda: _triangular_cases(legacy=True),
                               _pair(lambda xs, a: torch.triangular_solve(xs[0], xs[1], a["upper"], a["transpose"],
                                                                          a["unitriangular"])),
                               LINALG_TOL, (((t((2, 2)), t((3, 3))), {}), ((t((3, 1)), t((3, 3), I64)), {}))),
    "linalg_check_errors": OpSpec(
        lambda: st.builds(lambda shape: Case([(np.zeros(shape, np.int32), t(shape, I32))],
                                             {"api_name": "linalg.inv", "is_matrix": not shape}),
                          st.lists(st.integers(0, 3), max_size=2).map(tuple)),
        lambda xs, a: torch.empty(0), Tol(), (((t((2,), I64),), {"api_name": "x", "is_matrix": False}),)),
    # ---- sorting, selection, scans ---------------------------------------------------------------------
    "sort": OpSpec(lambda: _dim_cases(dtypes=FLOATS + INTS + (BOOL,), data="small",
                                      attrs={"descending": st.booleans(), "stable": st.booleans()}),
                   _pair(lambda xs, a: torch.sort(xs[0], dim=a["dim"], descending=a["descending"], stable=True)),
                   Tol(), (((t((2, 3)),), {"dim": 2}), ((t((2, 3)),), {"dim": -1}))),
    "topk": OpSpec(_topk_cases, _pair(lambda xs, a: torch.topk(xs[0], a["k"], a["dim"], a["largest"])), Tol(),
                   (((t((2, 3)),), {"k": 4, "dim": 1}), ((t((2, 3)),), {"k": -1, "dim": 0}),
                    ((t((2, 3), BOOL),), {"k": 1, "dim": 0}))),
    "kthvalue": OpSpec(_kthvalue_cases,
                       _pair(lambda xs, a: torch.kthvalue(xs[0], a["k"], a["dim"], a["keepdim"])), Tol(),
                       (((t((2, 3)),), {"k": 0, "dim": 1}), ((t((2, 0)),), {"k": 1, "dim": 1}))),
    "median": OpSpec(_median_cases, _pair(_median_torch), Tol(),
                     (((t((2, 0)),), {"dim": 1}), ((t((2, 3)),), {"dim": 3}))),
    "mode": OpSpec(lambda: _dim_cases(dtypes=(F32, I64, I32), data="small", nonempty=True,
                                      attrs={"keepdim": st.booleans()}),
                   _pair(lambda xs, a: torch.mode(xs[0], a["dim"], a["keepdim"])), Tol(),
                   (((t((2, 0)),), {"dim": 1}), ((t((2, 3), BOOL),), {"dim": 0}))),
    "cummax": OpSpec(lambda: _dim_cases(dtypes=FLOATS + INTS, data="small"),
                     _pair(lambda xs, a: torch.cummax(xs[0], a["dim"])), Tol(), (((t((2, 3)),), {"dim": 2}),)),
    "cummin": OpSpec(lambda: _dim_cases(dtypes=FLOATS + INTS, data="small"),
                     _pair(lambda xs, a: torch.cummin(xs[0], a["dim"])), Tol(), (((t((2, 3)),), {"dim": 2}),)),
    "logcumsumexp": OpSpec(lambda: _dim_cases(dtypes=FLOATS), lambda xs, a: torch.logcumsumexp(xs[0], a["dim"]),
                           Tol(4, 4), (((t((2, 3), I64),), {"dim": 0}), ((t((2, 3)),), {"dim": 2}))),
    "searchsorted": OpSpec(_searchsorted_cases,
                           lambda xs, a: torch.searchsorted(xs[0], xs[1], right=a["right"], out_int32=a["out_int32"],
                                                            sorter=xs[2] if len(xs) > 2 else None), Tol(),
                           (((t((3,)), t((2,), I64)), {}), ((t(()), t((2,))), {}),
                            ((t((2, 3)), t((3, 2))), {}))),
    "histogram": OpSpec(_histogram_cases, _histogram_torch, Tol(4, 4),
                        (((t((3,)),), {"bins": 0}), ((t((3,)),), {"range": (2.0, 1.0)}),
                         ((t((3,)), t((2,))), {}), ((t((3,), I64),), {}))),
    "histogram_edges": OpSpec(lambda: _histogram_cases(edges=True),
                              lambda xs, a: torch.histogram(xs[0], xs[1], weight=xs[2] if len(xs) > 2 else None,
                                                            density=a["density"])[0], Tol(4, 4),
                              (((t((3,)), t((1,))), {}), ((t((3,)), t((2, 2))), {}), ((t((3,)), t((2,), I64)), {}))),
    "histc": OpSpec(_histc_cases, lambda xs, a: torch.histc(xs[0], a["bins"], a["min"], a["max"]), Tol(),
                    (((t((3,)),), {"bins": 0}), ((t((3,)),), {"min": 2.0, "max": 1.0}),
                     ((t((3,), I64),), {}))),
}
