"""Random ops under torch.compile(backend="neuron"): distributions, dropout, seeding, backward, eval mode.

Compiled draws come from neuroncc's Philox generator, not eager's, so values are judged by their
distribution (>= 1M draws: moments, Kolmogorov-Smirnov, chi-square; neuroncc.testing.distributions), and
seeding by what users rely on: torch.manual_seed reproduces a compiled run, each call draws fresh numbers,
get_rng_state/set_rng_state replay them, the backward zeroes exactly what the forward dropped.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import neuroncc
from neuroncc.testing.distributions import (
    check_discrete_uniform, check_fraction, check_ks, check_moments, exponential_cdf, normal_cdf, uniform_cdf,
)

N = 1 << 20  # draws per distribution


def _compile(fn, **options):
    return torch.compile(fn, backend="neuron", dynamic=False, fullgraph=True, options=options)


def _ok(failure):
    assert failure is None, failure


@pytest.mark.parametrize("kind", ["normal", "uniform", "exponential"])
def test_nan_draws_fail_the_kolmogorov_smirnov_check(kind):
    rng = np.random.default_rng(0)
    draws, cdf = {"normal": (rng.standard_normal(4096), normal_cdf), "uniform": (rng.random(4096), uniform_cdf()),
                  "exponential": (rng.exponential(1.0, 4096), exponential_cdf())}[kind]
    _ok(check_ks(draws, cdf, "draws"))
    for nans in (1, 4096):
        bad = draws.copy()
        bad[:nans] = np.nan
        assert check_ks(bad, cdf, "draws") is not None, nans


@pytest.mark.parametrize("p", [0.1, 0.5])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_dropout_drops_p_within_3_sigma_of_a_million_elements(p, dtype):
    x = torch.ones(1024, 1024, dtype=dtype)
    y = _compile(lambda x: F.dropout(x, p, training=True))(x)
    dropped = int((y == 0).sum())
    sigma = math.sqrt(N * p * (1 - p))
    assert abs(dropped - N * p) <= 3 * sigma, f"{dropped} of {N} dropped, expected {N * p:.0f} +- {3 * sigma:.0f}"
    kept = y[y != 0]
    assert torch.equal(kept, torch.full_like(kept, 1.0) * (1.0 / (1.0 - p)))  # survivors scaled as eager
    assert neuroncc.stats()["fallback_ops"] == 0


def test_same_seed_same_mask_fresh_masks_per_call_and_rng_state_replay():
    fn = _compile(lambda x: F.dropout(x, 0.5, training=True))
    x = torch.randn(64, 256)
    torch.manual_seed(123)
    first, second = fn(x), fn(x)
    assert not torch.equal(first == 0, second == 0)  # successive calls draw fresh masks
    torch.manual_seed(123)
    assert torch.equal(fn(x), first) and torch.equal(fn(x), second)  # the seed reproduces the run
    state = torch.get_rng_state()
    third = fn(x)
    torch.rand(3)  # eager draws in between advance the same generator
    torch.set_rng_state(state)
    assert torch.equal(fn(x), third)
    with torch.random.fork_rng():
        torch.manual_seed(7)
        other = fn(x)
    assert not torch.equal(other == 0, third == 0)


@pytest.mark.parametrize("masks", ["save", "regenerate"])
def test_gradient_is_zero_exactly_where_the_forward_dropped(masks, tmp_path):
    def fn(x, w):
        return F.dropout(x @ w, 0.4, training=True).tanh()

    compiled = _compile(fn, random_masks=masks, dump_dir=str(tmp_path))
    x = torch.randn(128, 64, requires_grad=True)
    w = torch.randn(64, 96, requires_grad=True)
    torch.manual_seed(5)
    hidden = (x @ w).detach()
    out = compiled(x, w)
    grad_out = torch.randn_like(out)
    (g_x, g_w) = torch.autograd.grad(out, (x, w), grad_out)
    dropped = out == 0  # tanh(0) = 0; x @ w is never exactly 0 here
    assert 0.3 < float(dropped.float().mean()) < 0.5
    # d out / d (x @ w) is zero exactly at the dropped elements and (1 - tanh^2) / (1 - p) elsewhere
    local = torch.where(dropped, 0.0, (1 - out.detach() ** 2) / 0.6) * grad_out
    torch.testing.assert_close(g_w, x.detach().T @ local, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(g_x, local @ w.detach().T, rtol=1e-4, atol=1e-4)
    expected = torch.where(dropped, torch.zeros(()), torch.tanh(hidden / 0.6))
    torch.testing.assert_close(out.detach(), expected, rtol=1e-5, atol=1e-5)
    backward = (tmp_path / "g0_0_backward.nir").read_text() if (tmp_path / "g0_0_backward.nir").exists() else \
        next(p.read_text() for p in tmp_path.glob("*backward*.nir"))
    assert ("philox_uniform" in backward) == (masks == "regenerate")  # the mask is saved, or regenerated


def test_saving_and_regenerating_masks_give_the_same_numbers():
    def fn(x):
        return F.dropout(x, 0.3, training=True).square()

    results = []
    data = torch.randn(256, 128)
    for masks in ("save", "regenerate"):
        torch._dynamo.reset()
        x = data.clone().requires_grad_()
        torch.manual_seed(11)
        out = _compile(fn, random_masks=masks)(x)
        results.append((out, torch.autograd.grad(out.sum(), x)[0]))
    assert torch.equal(results[0][0], results[1][0]) and torch.equal(results[0][1], results[1][1])


def test_random_masks_option_is_checked():
    with pytest.raises(Exception, match="random_masks must be one of"):
        _compile(lambda x: x + 1, random_masks="sometimes")(torch.ones(2))


def test_eval_mode_is_identical_to_eager(tmp_path):
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.Dropout(0.5), torch.nn.GELU(),
                                torch.nn.Dropout(0.2), torch.nn.Linear(64, 8)).eval()
    x = torch.randn(16, 32)
    compiled = torch.compile(model, backend="neuron", dynamic=False, options={"dump_dir": str(tmp_path)})
    torch.testing.assert_close(compiled(x), model(x), rtol=1e-6, atol=1e-6)
    assert not any("philox" in p.read_text() for p in tmp_path.glob("*.nir"))


def _draws():
    """One graph drawing N values from every distribution (one compile for all of them)."""
    ramp = torch.linspace(0.0, 1.0, N)
    like = torch.empty(N)

    def fn(ramp, like):
        return {
            "rand": torch.rand(N),
            "rand_bf16": torch.rand(N, dtype=torch.bfloat16),
            "randn": torch.randn(N),
            "rand_like": torch.rand_like(like),
            "randn_like": torch.randn_like(like),
            "bernoulli_p": torch.bernoulli(like, 0.3),
            "bernoulli_tensor": torch.bernoulli(ramp),
            "randint": torch.randint(-3, 7, (N,)),
            "normal": torch.normal(ramp * 10, 2.0),
            "uniform_": torch.empty(N).uniform_(-1.0, 2.0),
            "normal_": torch.empty(N).normal_(3.0, 0.5),
            "exponential_": torch.empty(N).exponential_(2.0),
            "randperm": torch.randperm(N),
        }

    return _compile(fn)(ramp, like), ramp


def test_distributions_of_a_million_draws():
    draws, ramp = _draws()
    assert neuroncc.stats()["fallback_ops"] == 0
    d = {k: v.double().numpy() for k, v in draws.items()}
    _ok(check_moments(d["rand"], 0.5, 1 / 12, "rand", fourth_moment=1 / 80))
    _ok(check_ks(d["rand"], uniform_cdf(), "rand"))
    assert d["rand"].min() >= 0 and d["rand"].max() < 1 and draws["rand_bf16"].max() < 1
    _ok(check_ks(d["rand_bf16"], uniform_cdf(), "rand bf16", resolution=2**-8))
    for name in ("randn", "randn_like"):
        _ok(check_moments(d[name], 0.0, 1.0, name))
        _ok(check_ks(d[name], normal_cdf, name))
    _ok(check_ks(d["rand_like"], uniform_cdf(), "rand_like"))
    _ok(check_fraction(int(d["bernoulli_p"].sum()), N, 0.3, "bernoulli(x, 0.3)"))
    p = ramp.double().numpy()  # bernoulli(p) with p from 0 to 1: the count of ones is a sum of Bernoullis
    ones, mean, sd = d["bernoulli_tensor"].sum(), p.sum(), math.sqrt((p * (1 - p)).sum())
    assert abs(ones - mean) < 3.3 * sd, (ones, mean, sd)
    low_half = d["bernoulli_tensor"][: N // 2].mean()  # and more ones where p is larger
    assert low_half < 0.26 and d["bernoulli_tensor"][N // 2:].mean() > 0.74
    assert draws["randint"].dtype is torch.int64
    _ok(check_discrete_uniform(d["randint"], -3, 7, "randint"))
    _ok(check_ks((d["normal"] - p * 10) / 2.0, normal_cdf, "normal(mean tensor, std)"))
    _ok(check_ks(d["uniform_"], uniform_cdf(-1.0, 2.0), "uniform_"))
    _ok(check_moments(d["normal_"], 3.0, 0.25, "normal_"))
    _ok(check_ks(d["exponential_"], exponential_cdf(2.0), "exponential_"))
    perm = draws["randperm"].numpy()
    assert np.array_equal(np.sort(perm), np.arange(N))
    rho = np.corrcoef(perm, np.arange(N))[0, 1]  # a shuffle does not keep order
    assert abs(rho) < 3.3 / math.sqrt(N)


def test_randperm_of_three_draws_each_permutation_equally_often():
    fn = _compile(lambda: torch.randperm(3))
    counts: dict[tuple[int, ...], int] = {}
    for _ in range(3000):
        key = tuple(fn().tolist())
        counts[key] = counts.get(key, 0) + 1
    assert len(counts) == 6
    index = {perm: i for i, perm in enumerate(sorted(counts))}
    values = np.concatenate([np.full(c, index[k]) for k, c in counts.items()])
    _ok(check_discrete_uniform(values, 0, 6, "randperm(3)"))


def test_targets_draw_the_same_bits_for_the_same_seed():
    def fn(x):
        return F.dropout(x, 0.5, training=True) + torch.rand_like(x) + torch.randint(0, 100, x.shape)

    # [4, 130]: on nki-sim dim 1 on partitions (a full tile of 128 and a partial one of 2) for each of 4 rows, the
    # kernels [64, 130] gets but for their loops' bounds (and the simulator's time is per tile: 37 -> ~5 s)
    x = torch.randn(4, 130)
    results = []
    for target in ("interp", "cpu", "nki-sim"):
        torch._dynamo.reset()
        torch.manual_seed(2024)
        results.append(_compile(fn, target=target)(x))
    assert torch.equal(results[0], results[1]) and torch.equal(results[0], results[2])


def test_sdpa_dropout_compiles_and_is_unbiased():
    q, k, v = (torch.randn(2, 2, 16, 8, requires_grad=True) for _ in range(3))

    def attention(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, dropout_p=0.25)

    compiled = _compile(attention)
    expected = F.scaled_dot_product_attention(q, k, v).detach()
    total = torch.zeros_like(expected)
    runs = 400
    for _ in range(runs):
        out = compiled(q, k, v)
        total += out.detach()
    assert not torch.equal(out.detach(), expected)
    # dropout is unbiased: the mean over many masks approaches the attention without dropout
    torch.testing.assert_close(total / runs, expected, rtol=0.0, atol=0.15)
    grads = torch.autograd.grad(out.square().sum(), (q, k, v))
    assert all(torch.isfinite(g).all() for g in grads)
    assert neuroncc.stats()["fallback_ops"] == 0


def test_a_random_op_with_an_explicit_generator_is_refused_or_runs_eagerly():
    generator = torch.Generator().manual_seed(3)

    def fn(x):
        return x + torch.rand(x.shape, generator=generator)

    compiled = torch.compile(fn, backend="neuron", dynamic=False)
    out = compiled(torch.zeros(4))  # TorchDynamo does not put generator objects in graphs: it breaks there
    assert out.shape == (4,) and bool(((out >= 0) & (out < 1)).all())


def test_multinomial_with_and_without_replacement_follow_the_weights():
    weights = torch.tensor([[0.1, 0.0, 0.6, 0.3], [1.0, 1.0, 1.0, 1.0]])
    draws = _compile(lambda w: torch.multinomial(w.expand(4096, 2, 4).reshape(8192, 4), 400, replacement=True))(weights)
    first = draws.view(4096, 2, 400)[:, 0].reshape(-1).numpy()
    counts = np.bincount(first, minlength=4)
    assert counts[1] == 0  # a zero weight is never drawn
    for index, p in ((0, 0.1), (2, 0.6), (3, 0.3)):
        _ok(check_fraction(int(counts[index]), first.size, p, f"multinomial with replacement, index {index}"))
    _ok(check_discrete_uniform(draws.view(4096, 2, 400)[:, 1].reshape(-1).numpy(), 0, 4, "uniform weights"))
    # without replacement: the first pick follows the weights, the picks of a row are distinct
    picks = _compile(lambda w: torch.multinomial(w.expand(20000, 2, 4).reshape(40000, 4), 3))(weights)
    picks = picks.view(20000, 2, 3)
    assert all(len(set(row)) == 3 for row in picks[:200, 1].tolist()) and not bool((picks[:, 0] == 1).any())
    first_pick = np.bincount(picks[:, 0, 0].numpy(), minlength=4)
    for index, p in ((0, 0.1), (2, 0.6), (3, 0.3)):
        _ok(check_fraction(int(first_pick[index]), 20000, p, f"first pick without replacement, index {index}"))
    # the second pick: P(2nd = 3) = P(1st = 2) * 0.3 / 0.4 + P(1st = 0) * 0.3 / 0.9 = 0.45 + 0.0333
    _ok(check_fraction(int((picks[:, 0, 1] == 3).sum()), 20000, 0.45 + 0.1 / 3, "second pick"))


def test_rrelu_in_training_draws_slopes_and_its_gradient_is_the_slope():
    x = (-torch.rand(N) - 0.01).requires_grad_()
    y = _compile(lambda x: F.rrelu(x, lower=0.1, upper=0.3, training=True))(x)
    slopes = (y / x).detach().double().numpy()
    _ok(check_ks(slopes, uniform_cdf(0.1, 0.3), "rrelu slopes", resolution=1e-6))
    y.backward(torch.ones_like(y))
    torch.testing.assert_close(x.grad, (y / x).detach())


@pytest.mark.parametrize("masks", ["save", "regenerate"])
def test_dropout_inside_activation_checkpointing_recomputes_the_same_mask(masks):
    from torch.utils.checkpoint import checkpoint

    def block(x, w):
        return F.dropout(x @ w, 0.5, training=True)

    def fn(x, w):
        return checkpoint(block, x, w, use_reentrant=False)

    x = torch.randn(64, 32, requires_grad=True)
    w = torch.randn(32, 48, requires_grad=True)
    out = _compile(fn, random_masks=masks)(x, w)
    grad_out = torch.randn_like(out)
    (g_w,) = torch.autograd.grad(out, (w,), grad_out)
    kept = (out != 0).float()  # x @ w is never exactly 0 here
    assert 0.4 < float(kept.mean()) < 0.6
    # the backward recomputed the region: its mask must be the forward's (a new key would drop others)
    torch.testing.assert_close(g_w, x.detach().T @ (grad_out * kept * 2.0), rtol=1e-4, atol=1e-4)
    assert neuroncc.stats()["fallback_ops"] == 0
