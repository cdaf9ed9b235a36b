"""Bucketing bounds recompiles: many lengths, at most one compile per bucket, results as eager's."""

from __future__ import annotations

import pytest
import torch

import neuroncc
from frontend import models


def test_pad_to_bucket_pads_the_end_of_dim():
    x = torch.arange(6.0).reshape(2, 3)
    padded = neuroncc.pad_to_bucket(x, 1, (2, 4, 8), value=-1)
    assert padded.shape == (2, 4)
    torch.testing.assert_close(padded[:, :3], x)
    assert (padded[:, 3] == -1).all()
    assert neuroncc.pad_to_bucket(x, -2, (2, 4)) is x  # already a bucket size: unchanged


def test_too_long_for_every_bucket_is_a_typed_error():
    with pytest.raises(neuroncc.InputError, match="larger than the largest bucket 8"):
        neuroncc.pad_to_bucket(torch.zeros(9), 0, (4, 8))


def test_many_lengths_compile_at_most_once_per_bucket():
    block = models.CausalSelfAttention(d=16, heads=2, block=16, sdpa=True).eval()
    compiled = torch.compile(block, backend="neuron", dynamic=False)
    buckets = (4, 8, 16)
    run = neuroncc.bucketed(compiled, buckets=buckets, dim=1)
    lengths = range(3, 15)
    with torch.no_grad():
        for length in lengths:
            x = torch.randn(2, length, 16)
            out = run(x)
            assert out.shape == x.shape
            # Right-padding cannot change a causal model's outputs at the real positions.
            torch.testing.assert_close(out, block(x), rtol=1e-5, atol=1e-5)
    assert len(lengths) == 12
    assert neuroncc.stats()["dynamo_graphs"] <= len(buckets)
    assert neuroncc.stats()["dynamo_graphs"] == 3  # lengths 3..14 touch every bucket


def test_mask_keyword_marks_real_positions():
    @neuroncc.bucketed(buckets=(8,), dim=1, mask="mask")
    @torch.compile(backend="neuron", dynamic=False)
    def masked_mean(x, mask):
        weights = mask.to(x.dtype).unsqueeze(-1)
        return (x * weights).sum(1) / weights.sum(1)

    for length in (2, 5, 7):
        x = torch.randn(3, length, 4)
        torch.testing.assert_close(masked_mean(x), x.mean(1))
    assert neuroncc.stats()["dynamo_graphs"] == 1
