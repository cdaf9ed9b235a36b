"""NKI 0.1 kernels in the public samples' style (``neuronxcc.nki``), each checked against numpy."""

from __future__ import annotations

import numpy as np
import pytest

import kernels_nki01 as k1
from neuronxcc import nki
import neuronxcc.nki.language as nl
from public_helpers import bf16, layernorm, rmsnorm, softmax_attention


@pytest.mark.parametrize("rows", [128, 300])
def test_masked_add_handles_a_partial_last_tile(rows, rng):
    a = rng.standard_normal((rows, 64)).astype(np.float32)
    b = rng.standard_normal((rows, 64)).astype(np.float32)
    np.testing.assert_array_equal(k1.add_masked(a, b), a + b)


def test_mask_limits_compute_and_store_to_the_selected_corner(rng):
    x = rng.random((128, 512), dtype=np.float32) * 100
    np.testing.assert_allclose(nki.simulate_kernel(k1.square_corner, x), np.square(x[:64, :256]), rtol=1e-6)


def test_masked_instructions_are_costed_at_the_masked_size(rng):
    x = rng.random((128, 512), dtype=np.float32)
    trace = nki.trace_kernel(k1.square_corner, x)
    square = [e for e in trace if getattr(e, "op", None) == "activation"]
    assert [o.shape for o in square[0].operands] == [(64, 256), (64, 256)]


def test_strided_index_expressions_split_even_and_odd_columns(rng):
    x = rng.standard_normal((64, 9)).astype(np.float32)
    even, odd = k1.split_even_odd(x)
    np.testing.assert_array_equal(even, x[:, 0::2])
    np.testing.assert_array_equal(odd, x[:, 1::2])


def test_pooling_windows_as_one_affine_index_pattern(rng):
    x = rng.standard_normal((8, 6, 6)).astype(np.float32)
    expected = x.reshape(8, 3, 2, 3, 2).max(axis=(2, 4))
    np.testing.assert_array_equal(k1.max_pool(x, 2), expected)


@pytest.mark.parametrize("grid", [(4, 2), "nc(2)*2", "2*nc(2)"])
def test_spmd_grids_including_physical_core_annotations(grid, rng):
    src = rng.random((4, 2, 1, 1), dtype=np.float32)
    if grid == "nc(2)*2":
        launch = k1.copy_grid[nl.spmd_dim(nl.nc(2), 2), 2]
        assert launch[nl.nc(2) * 2, 2].core_of((2, 0)) == launch.core_of((2, 0)) == 1
    elif grid == "2*nc(2)":
        launch = k1.copy_grid[2 * nl.nc(2), 2]
        assert launch.core_of((1, 0)) == 1 and launch.core_of((2, 0)) == 0
    else:
        launch = k1.copy_grid[grid]
    np.testing.assert_array_equal(launch(src), src)


@nki.jit
def _exp_rows(x):
    """Each of 4 programs exponentiates its own 128 rows several times (ScalarE-bound)."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    rows = nl.ds(nl.program_id(0) * 128, 128)
    tile = nl.load(x[rows, :])
    for _ in range(8):
        tile = nl.exp(tile)
    nl.store(out[rows, :], tile)
    return out


def test_programs_on_two_cores_run_in_parallel_in_the_cost_model():
    x = nki.TensorSpec.of((512, 2048), nl.float32)
    one_core = nki.benchmark(_exp_rows[4], execute=False)(x)
    two_cores = nki.benchmark(_exp_rows[nl.nc(2) * 2], execute=False)(x)
    assert len(two_cores.core_profiles) == 2 and len(one_core.core_profiles) == 1
    assert two_cores.profile.engine("ScalarE").instructions == one_core.profile.engine("ScalarE").instructions // 2
    assert two_cores.latency_us < 0.6 * one_core.latency_us


def _qkv(rng, d_head, seqlen, dtype=np.float32):
    return [(rng.random((d_head, seqlen), dtype=np.float32) - 0.5) * 2 for _ in range(3)]


def test_attention_with_nl_matmul_of_a_transpose_in_psum(rng):
    """NKI accepts nl.matmul of nl.transpose's PSUM result (the first attention tutorial)."""
    q, k, v = _qkv(rng, 128, 128)
    np.testing.assert_allclose(k1.attention_nl(q, k, v), softmax_attention(q, k, v), atol=1e-4)


def test_attention_with_result_returning_isa_calls(rng):
    q, k, v = _qkv(rng, 128, 128)
    np.testing.assert_allclose(k1.attention_isa(q, k, v), softmax_attention(q, k, v), atol=1e-4)


def test_blocked_attention_with_par_dim_psum_blocks_and_accumulation(rng):
    q, k, v = (bf16(t) for t in _qkv(rng, 128, 512))
    out = k1.attention_blocked(*(nki.bfloat16_array(t) for t in (q, k, v)))
    np.testing.assert_allclose(out, softmax_attention(q, k, v), atol=2e-2)


def test_psum_accumulation_and_assignments_cost_no_extra_copies(rng):
    """psum += nc_matmul(...) and x[...] = <result> leave the matmul/producer writing the target directly."""
    q, k, v = (nki.bfloat16_array(t) for t in _qkv(rng, 128, 512))
    ops = [e.op for e in nki.trace_kernel(k1.attention_blocked, q, k, v) if hasattr(e, "op")]
    assert ops.count("nc_matmul") == 4 * 1 + 4 * 4  # q@k per (query tile, 512 block); p@v per (tile, 128 block)
    assert ops.count("tensor_tensor") == 0  # no add for `acc +=`, no VectorE work besides copies and scalars


def test_causal_attention_with_tensor_scalar_reduce_and_loop_reduce(rng):
    q, k, v = (bf16(t) for t in _qkv(rng, 128, 256))
    out = k1.attention_scan_max(*(nki.bfloat16_array(t) for t in (q, k, v)))
    scores = q.astype(np.float64).T @ k.astype(np.float64)
    scores = np.where(np.tril(np.ones((256, 256), bool)), scores, -30000.0)
    scores = np.exp(scores - scores.max(axis=1, keepdims=True))
    expected = (scores / scores.sum(axis=1, keepdims=True)) @ v.astype(np.float64).T
    np.testing.assert_allclose(out, expected, atol=2e-2)


@pytest.mark.parametrize("rows", [256, 200])
def test_layernorm_with_masks_and_partition_broadcast(rows, rng):
    x = rng.standard_normal((rows, 96)).astype(np.float32)
    gamma, beta = rng.standard_normal(96).astype(np.float32), rng.standard_normal(96).astype(np.float32)
    np.testing.assert_allclose(k1.layernorm_nl(x, 1e-5, gamma, beta), layernorm(x, gamma, beta, 1e-5),
                               rtol=1e-4, atol=1e-4)


def test_layernorm_with_bn_stats_over_several_chunks(rng):
    x = rng.standard_normal((256, 1200)).astype(np.float32) * 3 + 1
    gamma, beta = rng.standard_normal(1200).astype(np.float32), rng.standard_normal(1200).astype(np.float32)
    np.testing.assert_allclose(k1.layernorm_bn(x, 1e-5, gamma, beta), layernorm(x, gamma, beta, 1e-5),
                               rtol=1e-4, atol=1e-4)


def test_rmsnorm_writes_its_output_argument_in_place(rng):
    x = rng.standard_normal((256, 64)).astype(np.float32)
    g = rng.standard_normal(64).astype(np.float32)
    out = np.zeros_like(x)
    nki.baremetal(k1.rmsnorm_blocked)(x, g, out)
    np.testing.assert_allclose(out, rmsnorm(x, g, 1e-6), rtol=1e-4, atol=1e-5)


def test_selective_scan_recurrence(rng):
    delta = rng.random((128, 40), dtype=np.float32)
    u = rng.standard_normal((128, 40)).astype(np.float32)
    a = -rng.random((128, 1), dtype=np.float32)
    h = np.zeros(128)
    expected = np.empty((128, 40))
    for t in range(40):
        h = np.exp(delta[:, t] * a[:, 0]) * h + delta[:, t] * u[:, t]
        expected[:, t] = h
    np.testing.assert_allclose(k1.mamba_scan(delta, u, a), expected, rtol=1e-5, atol=1e-5)


def test_iota_of_an_index_expression_and_shaped_memset():
    expected = 0.5 * np.arange(128 * 24, dtype=np.float32).reshape(128, 24)
    np.testing.assert_array_equal(k1.iota_and_memset(24), expected)


def test_static_cast_rounds_host_data():
    x = np.array([1.0 + 2 ** -10, 3.14159], np.float32)
    cast = nl.static_cast(x, nl.bfloat16)
    np.testing.assert_array_equal(np.asarray(cast), bf16(x))
    assert nl.static_cast(2.7, nl.int32) == 3
