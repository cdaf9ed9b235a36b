"""Judging random draws by their distribution: moments, Kolmogorov-Smirnov and chi-square, in numpy only.

Compiled random ops are not bit-equal to eager PyTorch's (a different generator), so the tests, the fuzzer
and the OpInfo sweep judge them statistically: a sample passes when its statistic is below the critical value
at ``ALPHA``. Thresholds are asymptotic and exact enough for the sample sizes used (>= 1000; the acceptance
tests draw >= 1M). Each check returns None when the sample passes, else a sentence saying why not.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

#: False-alarm rate of each check (one check in a thousand fails on a correct generator by chance; the tests
#: draw with fixed seeds, so a passing test stays passing).
ALPHA = 1e-3
#: Standard errors a moment may be off by (two-sided; ~ALPHA for a normal statistic).
SIGMAS = 3.3


def ks_critical(n: int, alpha: float = ALPHA) -> float:
    """The Kolmogorov-Smirnov D a sample of ``n`` exceeds with probability ``alpha`` (asymptotic)."""
    return math.sqrt(-math.log(alpha / 2) / 2) / math.sqrt(n)


def ks_statistic(samples: np.ndarray, cdf: Callable[[np.ndarray], np.ndarray]) -> float:
    """sup |F_n - F| of ``samples`` against a continuous ``cdf``."""
    x = np.sort(np.asarray(samples, dtype=np.float64).reshape(-1))
    n = x.size
    f = cdf(x)
    # (np.maximum, not max(): NaN draws give a NaN D, which fails the test whichever side it is on)
    return float(np.maximum(np.max(np.arange(1, n + 1) / n - f), np.max(f - np.arange(n) / n)))


def normal_cdf(x: np.ndarray, mean: float = 0.0, std: float = 1.0) -> np.ndarray:
    """The normal CDF through erf (Abramowitz & Stegun 7.1.26, |error| < 1.5e-7: far below any D tested)."""
    z = (np.asarray(x, dtype=np.float64) - mean) / (std * math.sqrt(2.0))
    t = 1.0 / (1.0 + 0.3275911 * np.abs(z))
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
    erf = 1.0 - poly * np.exp(-z * z)
    return 0.5 * (1.0 + np.sign(z) * erf)


def uniform_cdf(low: float = 0.0, high: float = 1.0) -> Callable[[np.ndarray], np.ndarray]:
    return lambda x: np.clip((x - low) / (high - low), 0.0, 1.0)


def exponential_cdf(rate: float = 1.0) -> Callable[[np.ndarray], np.ndarray]:
    return lambda x: np.where(x > 0, -np.expm1(-rate * np.maximum(x, 0.0)), 0.0)


def check_ks(samples: np.ndarray, cdf: Callable[[np.ndarray], np.ndarray], what: str, *,
             resolution: float = 0.0) -> str | None:
    """KS test; ``resolution``: the spacing of the values' grid (a float dtype's step), allowed on top of D."""
    n = np.asarray(samples).size
    d, critical = ks_statistic(samples, cdf), ks_critical(n) + resolution
    return None if d <= critical else f"{what}: Kolmogorov-Smirnov D = {d:.3g} > {critical:.3g} (n = {n})"


def check_moments(samples: np.ndarray, mean: float, var: float, what: str, *,
                  fourth_moment: float | None = None) -> str | None:
    """Sample mean and variance within ``SIGMAS`` standard errors of ``mean`` and ``var``.

    ``fourth_moment``: E[(X - mean)^4] (3 var^2 for a normal, var^2 * 9/5 for a uniform), for the variance's
    standard error; default: the normal's."""
    x = np.asarray(samples, dtype=np.float64).reshape(-1)
    n = x.size
    if not np.all(np.isfinite(x)):
        return f"{what}: non-finite draws"
    mean_error = SIGMAS * math.sqrt(var / n) + 1e-12
    if abs(x.mean() - mean) > mean_error:
        return f"{what}: mean {x.mean():.6g}, expected {mean:.6g} +- {mean_error:.3g} (n = {n})"
    m4 = 3 * var * var if fourth_moment is None else fourth_moment
    var_error = SIGMAS * math.sqrt(max(m4 - var * var, 0.0) / n) + 1e-12
    if abs(x.var() - var) > var_error:
        return f"{what}: variance {x.var():.6g}, expected {var:.6g} +- {var_error:.3g} (n = {n})"
    return None


def check_fraction(hits: int, n: int, p: float, what: str) -> str | None:
    """A count of successes in ``n`` Bernoulli(p) trials within ``SIGMAS`` standard deviations of n p."""
    sd = math.sqrt(n * p * (1 - p))
    if abs(hits - n * p) > SIGMAS * sd + 1e-9:
        return f"{what}: {hits} of {n} ({hits / max(n, 1):.5f}), expected p = {p} +- {SIGMAS * sd / max(n, 1):.2g}"
    return None


def check_discrete_uniform(values: np.ndarray, low: int, high: int, what: str) -> str | None:
    """Integers in [low, high) with equal frequencies (a chi-square test, Wilson-Hilferty critical value)."""
    x = np.asarray(values).reshape(-1).astype(np.int64)
    if x.size and (x.min() < low or x.max() >= high):
        return f"{what}: values outside [{low}, {high}): {x.min()} .. {x.max()}"
    cells = high - low
    if cells < 2:
        return None
    counts = np.bincount(x - low, minlength=cells)
    expected = x.size / cells
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    k = cells - 1
    z = 3.09  # the normal quantile at 1 - ALPHA
    critical = k * (1 - 2 / (9 * k) + z * math.sqrt(2 / (9 * k))) ** 3
    return None if chi2 <= critical else f"{what}: chi-square {chi2:.4g} > {critical:.4g} over {cells} values"


def first_failure(*results: str | None) -> str | None:
    return next((r for r in results if r is not None), None)


def ks_two_sample(a: np.ndarray, b: np.ndarray) -> float:
    """sup |F_a - F_b| of two samples (ties allowed: the statistic is then conservative)."""
    x = np.sort(np.asarray(a, dtype=np.float64).reshape(-1))
    y = np.sort(np.asarray(b, dtype=np.float64).reshape(-1))
    values = np.concatenate([x, y])
    fx = np.searchsorted(x, values, side="right") / x.size
    fy = np.searchsorted(y, values, side="right") / y.size
    return float(np.max(np.abs(fx - fy)))


def check_same_distribution(a: np.ndarray, b: np.ndarray, what: str, alpha: float = ALPHA,
                            independent: tuple[int, int] | None = None) -> str | None:
    """Two-sample Kolmogorov-Smirnov: None unless ``a`` and ``b`` differ in distribution at level ``alpha``
    (NaNs must occur equally often; they are left out of the test).

    ``independent``: how many independent draws each sample holds when its values are not all independent
    (the pooled results of ``k`` calls of a random op: values of one call may share one random decision, as
    a feature-map dropout's do). The critical value is then the one for ``k`` draws: the empirical CDF is an
    average of ``k`` independent per-call fractions, each varying no more than one draw's indicator does."""
    a, b = np.asarray(a, dtype=np.float64).reshape(-1), np.asarray(b, dtype=np.float64).reshape(-1)
    if a.size == 0 or b.size == 0:
        return None
    nan_a, nan_b = int(np.isnan(a).sum()), int(np.isnan(b).sum())
    if (nan_a == 0) != (nan_b == 0):
        return f"{what}: {nan_a} NaN of {a.size} draws, eager {nan_b} of {b.size}"
    a, b = a[~np.isnan(a)], b[~np.isnan(b)]
    if a.size == 0 or b.size == 0:
        return None
    d = ks_two_sample(a, b)
    n, m = independent or (a.size, b.size)
    critical = math.sqrt(-math.log(alpha / 2) / 2) * math.sqrt((n + m) / (n * m))
    if d <= critical:
        return None
    return (f"{what}: distribution differs from eager's (two-sample Kolmogorov-Smirnov D = {d:.3g} > {critical:.3g}, "
            f"{a.size} and {b.size} draws{f' from {n} and {m} calls' if independent else ''})")
