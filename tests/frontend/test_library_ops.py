"""Library ops (Category.EXTERN: LAPACK linear algebra, sorting/selection/scans) through torch.compile on every
target against eager PyTorch, forward and backward, and their error paths.

The cpu target calls the ATen kernel itself (results equal eager's, vector signs included); interp and nki-sim
run the numpy references, so results defined up to sign (singular/eigen vectors) are compared in a
sign-free form there.
"""

from __future__ import annotations

import pytest
import torch

from neuroncc.ir import REGISTRY, Category
from neuroncc.executors.cpu.extern_library import LIBRARY_CALLS

TARGETS = ("interp", "cpu", "nki-sim")


def _inputs() -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    a = torch.randn(2, 4, 4, generator=generator)
    return {"a": a, "spd": a @ a.mT + 4 * torch.eye(4), "square": a + 3 * torch.eye(4),
            "rect": torch.randn(2, 5, 3, generator=generator), "b": torch.randn(2, 4, 2, generator=generator),
            "x": torch.randn(3, 6, generator=generator)}


def _svd_free(u, s, vh):
    return u @ torch.diag_embed(s) @ vh, s  # the product fixes the signs


#: name -> (function of the inputs, sign-free form of its outputs or None)
PROGRAMS = {
    "inv_det_slogdet": (lambda t: (torch.linalg.inv(t["square"]), torch.linalg.det(t["square"]),
                                   *torch.linalg.slogdet(t["square"])), None),
    "solve": (lambda t: (torch.linalg.solve(t["square"], t["b"]),
                         torch.linalg.solve_triangular(t["square"], t["b"], upper=True)), None),
    "cholesky": (lambda t: (torch.linalg.cholesky(t["spd"]), torch.cholesky_solve(t["b"], torch.linalg.cholesky(
        t["spd"])), torch.cholesky_inverse(torch.linalg.cholesky(t["spd"]))), None),
    "lu": (lambda t: (*torch.linalg.lu(t["rect"]), *torch.linalg.lu_factor(t["square"]),
                      torch.linalg.lu_solve(*torch.linalg.lu_factor(t["square"]), t["b"])), None),
    "qr_householder": (lambda t: (*torch.linalg.qr(t["rect"]), *torch.geqrf(t["rect"]),
                                  torch.linalg.householder_product(*torch.geqrf(t["rect"]))), None),
    "ldl": (lambda t: (*torch.linalg.ldl_factor(t["spd"] - 6 * torch.eye(4)),
                       torch.linalg.ldl_solve(*torch.linalg.ldl_factor(t["spd"] - 6 * torch.eye(4)), t["b"])), None),
    "svd": (lambda t: torch.linalg.svd(t["rect"], full_matrices=False), _svd_free),
    "eigh": (lambda t: torch.linalg.eigh(t["spd"]), lambda w, v: (w, v @ torch.diag_embed(w) @ v.mT)),
    "pinv_matrix_exp": (lambda t: (torch.linalg.pinv(t["rect"]), torch.linalg.matrix_exp(t["a"] / 4)), None),
    "sort_topk": (lambda t: (*torch.sort(t["x"], dim=1, descending=True), *torch.topk(t["x"], 2, dim=0),
                             torch.argsort(t["x"], dim=0), *torch.kthvalue(t["x"], 2, dim=1)), None),
    "median_mode": (lambda t: (torch.median(t["x"]), *torch.median(t["x"], 1), *torch.nanmedian(t["x"], 0),
                               *torch.mode(torch.round(t["x"]), 1)), None),
    "scans": (lambda t: (*torch.cummax(t["x"], 1), *torch.cummin(t["x"], 0), torch.logcumsumexp(t["x"], 1)),
              None),
    "search_hist": (lambda t: (torch.searchsorted(torch.sort(t["x"], 1).values, t["x"][:, :2].contiguous()),
                               torch.bucketize(t["x"], torch.tensor([-1.0, 0.0, 1.0]), right=True),
                               torch.histc(t["x"], 5, -2, 2), torch.quantile(t["x"], 0.3, dim=1),
                               *torch.histogram(t["x"], 4), torch.histogram(t["x"], torch.tensor([-1.0, 0.0, 2.0]),
                                                                           weight=t["x"].abs(), density=True)[0]),
                    None),
}


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_library_ops_match_eager(name, target):
    fn, sign_free = PROGRAMS[name]
    inputs = _inputs()
    expected = fn(inputs)
    got = torch.compile(fn, backend="neuron", fullgraph=True, dynamic=False, options={"target": target})(inputs)
    if sign_free is not None and target != "cpu":
        expected, got = sign_free(*expected), sign_free(*got)
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("target", ("cpu", "nki-sim"))
def test_library_op_gradients_match_eager(target):
    def fn(a, x):
        values, _ = torch.sort(x, dim=1)
        total = (values * values.flip(1)).sum() + torch.linalg.eigvalsh(a @ a.mT).sum() + torch.linalg.inv(a).sum()
        if target == "cpu":  # det's backward reads a diagonal through as_strided, which nki-sim refuses
            total = total + torch.linalg.det(a).sum()
        return total

    a = (torch.randn(3, 3) + 3 * torch.eye(3)).requires_grad_()
    x = torch.randn(2, 5, requires_grad=True)
    expected = torch.autograd.grad(fn(a, x), (a, x))
    compiled = torch.compile(fn, backend="neuron", fullgraph=True, dynamic=False, options={"target": target})
    got = torch.autograd.grad(compiled(a, x), (a, x))
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("target", ["cpu", "interp", "nki-sim"])
def test_a_singular_matrix_raises_like_eager_on_every_target(target):
    from neuroncc.ir.ops.library_linalg import LinalgInputError

    compiled = torch.compile(torch.linalg.inv, backend="neuron", fullgraph=True, dynamic=False,
                             options={"target": target})
    with pytest.raises(torch.linalg.LinAlgError, match="singular") as info:
        compiled(torch.zeros(3, 3))
    if target != "cpu":  # the numpy reference's typed error is kept as the cause
        assert isinstance(info.value.__cause__, LinalgInputError)
        assert "linalg.inv" in str(info.value)


def test_every_extern_op_has_a_library_call():
    externs = {op.name for op in REGISTRY.by_category(Category.EXTERN)}
    assert externs == set(LIBRARY_CALLS)
