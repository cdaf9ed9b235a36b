"""Bucketing bounds recompiles: many lengths, at most one compile per bucket, results as eager's."""

from __future__ import annotations

import logging

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


def test_bucketed_shapes_do_not_warn_to_use_buckets(caplog):
    """docs/torch-backend.md's example compiles with the default ``dynamic=None``: TorchDynamo's second length
    makes a symbolic graph, whose third shape was a WARNING "pad inputs to a few sizes with neuroncc.pad_to_bucket"
    to a caller already padding to buckets. Inside ``bucketed`` as many shapes as buckets log at INFO."""
    model = torch.nn.Sequential(torch.nn.Embedding(100, 16), torch.nn.Linear(16, 100))
    compiled = torch.compile(model, backend="neuron")
    run = neuroncc.bucketed(compiled, buckets=(4, 8, 16, 32), dim=1)
    with caplog.at_level(logging.INFO, logger="neuroncc.frontend"), torch.no_grad():
        for length in (3, 7, 15, 31, 2):
            tokens = torch.randint(0, 100, (2, length))
            torch.testing.assert_close(run(tokens), model(tokens))
        recompiles = [r for r in caplog.records if "recompiling" in r.getMessage()]
        assert len(recompiles) == 3 and all(r.levelno == logging.INFO for r in recompiles)
        assert not any("pad_to_bucket" in r.getMessage() for r in caplog.records)
        caplog.clear()
        compiled(torch.randint(0, 100, (2, 12)))  # outside bucketed, a fifth shape still suggests buckets
    assert any(r.levelno == logging.WARNING and "pad_to_bucket" in r.getMessage() for r in caplog.records)
