"""AWS's own NKI sample kernels (``kernels_aws_samples.py``, copied unchanged), each against numpy."""

from __future__ import annotations

import numpy as np
import pytest

import kernels_aws_samples as aws
from neuronxcc import nki
import neuronxcc.nki.language as nl
from neuronxcc.nki.typing import tensor
from public_helpers import layernorm


@pytest.mark.parametrize("rows, cols", [(256, 1024), (200, 1000)])
def test_layernorm_tutorial_v2_masks_bn_stats_of_a_partial_block(rows, cols, rng):
    # bn_stats(..., mask=j * 512 + i_f < cols): the last block of a 1000-wide row holds 488 elements.
    x = rng.standard_normal((rows, cols)).astype(np.float32)
    gamma, beta = rng.random(cols, dtype=np.float32), rng.random(cols, dtype=np.float32)
    out = aws.nki_layernorm_kernel_v2(x, 1e-5, gamma, beta)
    np.testing.assert_allclose(out, layernorm(x, gamma, beta, 1e-5), rtol=1e-4, atol=1e-4)


def test_benchmark_of_typing_placeholders_is_cost_only():
    # The profiling guide: tensor_exp_kernel_(tensor[[250, 512], nl.float32]) under @nki.benchmark.
    aws.tensor_exp_kernel_(tensor[[250, 512], nl.float32])
    latency = aws.tensor_exp_kernel_.benchmark_result.nc_latency.get_latency_percentile(99)
    assert 1.0 < latency < 100.0
    assert aws.tensor_exp_kernel_.benchmark_result.outputs.shape == (250, 512)


def test_simulating_a_placeholder_says_it_has_no_values():
    kernel = nki.jit(aws.tensor_exp_kernel_.kernel)
    with pytest.raises(nki.NKISimulationError, match=r"placeholder \[250, 512\] float32 with no values"):
        kernel(tensor[[250, 512], nl.float32])
    with pytest.raises(nki.NKISimulationError, match="needs a shape and a dtype"):
        nki.benchmark(kernel)(tensor[250, 512])


def test_memset_page_example_takes_shape_by_keyword():
    np.testing.assert_array_equal(aws.nki_memset(), np.full((128, 128), 0.2, dtype=np.float32))


def test_tensor_scalar_page_examples_pass_data_positionally(rng):
    a = rng.random((128, 512), dtype=np.float32) * 100
    c = rng.random((128, 512), dtype=np.float32) * 100
    e = rng.random((64, 1024), dtype=np.float32) * 100
    f = rng.random((64, 1), dtype=np.float32) * 100
    b, d, g = aws.nki_tensor_scalar(a, c, e, f)
    np.testing.assert_allclose(b, a - 1.0, rtol=1e-6)
    np.testing.assert_allclose(d, 1.0 - c, rtol=1e-6)
    np.testing.assert_allclose(g, e * f + 2.5, rtol=1e-6)


def test_store_of_a_number_fills_the_hbm_tensor():
    src = np.ones([128, 512]).astype(np.int32) * 100
    np.testing.assert_array_equal(aws.example_kernel(np.zeros_like(src), use_scalar=True), src)
    x = np.arange(128 * 512, dtype=np.float32).reshape(128, 512)
    np.testing.assert_array_equal(aws.example_kernel(x), x)
