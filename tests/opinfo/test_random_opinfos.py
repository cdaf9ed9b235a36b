"""The OpInfo sweep judges random ops by distribution: the check passes eager against itself and catches skew.

The test's critical value counts calls (1000), not values, so it catches gross errors (a wrong probability,
range or distribution); the >= 1M-draw tests of tests/frontend/test_random.py catch small ones. (The sweep's
verdicts for the random OpInfos themselves are in expected_status.json, checked like every other
op's by test_opinfo_status.py.)
"""

from __future__ import annotations

import functools

import torch

from neuroncc.testing.opinfo import distribution_difference, float32_opinfos, op_key, sample_callable, samples_for


@functools.cache
def _sample(key: str, mode: str = "fwd", index: int = 0):
    op = next(o for o in float32_opinfos() if op_key(o) == key)
    sample = list(samples_for(op, mode, seed=0, limit=index + 1))[index]
    return sample, *sample_callable(op, sample)


def test_eager_against_itself_passes():
    sample, fn, tensors = _sample("uniform")
    assert distribution_difference(fn, fn, tensors, sample, "fwd", seed=0) is None


def test_a_skewed_generator_is_caught():
    sample, fn, tensors = _sample("uniform")
    low, high = -100.0, 100.0  # the sample draws uniform_(-100, 100)

    def skewed(*args):
        u = (fn(*args) - low) / (high - low)
        return u ** 2 * (high - low) + low

    failure = distribution_difference(skewed, fn, tensors, sample, "fwd", seed=0)
    assert failure is not None and "distribution differs" in failure


def test_a_wrong_dropout_probability_is_caught_in_gradients_too():
    sample, fn, tensors = _sample("nn.functional.dropout", "bwd", index=2)
    assert sample.kwargs == {"p": 0.5, "training": True}

    def wrong_p(x):  # keeps 75% of the elements, where the sample's dropout keeps 50% (same survivor values)
        return torch.nn.functional.dropout(x, p=0.25, training=True) * (0.75 / 0.5)

    failure = distribution_difference(wrong_p, fn, tensors, sample, "bwd", seed=0)
    assert failure is not None and "distribution differs" in failure
