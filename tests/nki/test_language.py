"""nki.language functions against numpy."""

from __future__ import annotations

import numpy as np
import pytest

import neuroncc.nki as nki
import neuroncc.nki.language as nl

from sim_helpers import bf16, run


def _binary_kernel(fn, out_dtype=nl.float32):
    def kernel(x, y):
        out = nl.ndarray(np.broadcast_shapes(x.shape, y.shape), dtype=out_dtype, buffer=nl.shared_hbm)
        nl.store(out, nl.copy(fn(nl.load(x), nl.load(y)), dtype=out_dtype))
        return out
    return kernel


@pytest.mark.parametrize("fn, reference", [
    (nl.add, np.add), (nl.subtract, np.subtract), (nl.multiply, np.multiply), (nl.divide, np.divide),
    (nl.maximum, np.maximum), (nl.minimum, np.minimum), (nl.power, np.power),
], ids=lambda v: getattr(v, "__name__", None))
@pytest.mark.parametrize("y_shape", [(128, 32), (128, 1), (1, 32)], ids=["same", "column", "row"])
def test_binary_ops_broadcast_like_numpy(rng, fn, reference, y_shape):
    x = np.abs(rng.standard_normal((128, 32))).astype(np.float32) + 0.5
    y = rng.standard_normal(y_shape).astype(np.float32)
    np.testing.assert_allclose(run(_binary_kernel(fn), x, y), reference(x, y), rtol=1e-5, atol=1e-6)


def test_binary_ops_with_python_numbers_on_either_side(rng):
    x = rng.standard_normal((64, 8)).astype(np.float32)

    def kernel(x):
        out = nl.ndarray((3, 64, 8), dtype=nl.float32, buffer=nl.shared_hbm)
        t = nl.load(x)
        nl.store(out[0], nl.subtract(1.0, t))
        nl.store(out[1], nl.divide(t, 4))
        nl.store(out[2], nl.maximum(0.25, t))
        return out

    result = run(kernel, x)
    np.testing.assert_allclose(result, np.stack([1 - x, x / 4, np.maximum(0.25, x)]), rtol=1e-6)


def test_comparisons_give_bool_tiles_unless_told(rng):
    x, y = rng.standard_normal((2, 64, 8)).astype(np.float32)

    def kernel(x, y):
        a, b = nl.load(x), nl.load(y)
        flags = nl.ndarray(x.shape, dtype=nl.bool_, buffer=nl.shared_hbm)
        mask = nl.greater(a, b)
        assert mask.dtype == nl.bool_
        nl.store(flags, mask)
        floats = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.shared_hbm)
        nl.store(floats, nl.less_equal(a, 0.0, dtype=nl.float32))
        eq = nl.ndarray(x.shape, dtype=nl.bool_, buffer=nl.shared_hbm)
        nl.store(eq, nl.not_equal(nl.equal(a, a), nl.greater_equal(a, b)))
        return flags, floats, eq

    flags, floats, eq = run(kernel, x, y)
    np.testing.assert_array_equal(flags, x > y)
    np.testing.assert_array_equal(floats, (x <= 0).astype(np.float32))
    np.testing.assert_array_equal(eq, np.ones_like(flags) != (x >= y))


@pytest.mark.parametrize("fn, reference", [
    (nl.exp, np.exp), (nl.tanh, np.tanh), (nl.sigmoid, lambda v: 1 / (1 + np.exp(-v))),
    (nl.relu, lambda v: np.maximum(v, 0)), (nl.silu, lambda v: v / (1 + np.exp(-v))),
    (nl.square, np.square), (nl.negative, np.negative), (nl.abs, np.abs),
    (nl.sqrt, lambda v: np.sqrt(np.abs(v))), (nl.rsqrt, lambda v: 1 / np.sqrt(np.abs(v))),
    (nl.log, lambda v: np.log(np.abs(v))), (nl.reciprocal, lambda v: 1 / v),
], ids=lambda v: getattr(v, "__name__", None))
def test_unary_ops(rng, fn, reference):
    x = rng.standard_normal((128, 16)).astype(np.float32)
    needs_positive = fn in (nl.sqrt, nl.rsqrt, nl.log)

    def kernel(x):
        out = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.shared_hbm)
        t = nl.load(x)
        nl.store(out, fn(nl.abs(t) if needs_positive else t))
        return out

    np.testing.assert_allclose(run(kernel, x), reference(x.astype(np.float64)), rtol=2e-6, atol=2e-6)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_reductions(rng, dtype):
    x = rng.standard_normal((128, 4, 16)).astype(np.float32)
    x = x if dtype == "float32" else bf16(x)

    def kernel(x):
        out = nl.ndarray((5, 128, 4), dtype=nl.float32, buffer=nl.shared_hbm)
        t = nl.load(x)
        nl.store(out[0], nl.sum(t, axis=2, dtype=nl.float32))
        nl.store(out[1], nl.max(t, axis=-1, dtype=nl.float32))
        nl.store(out[2], nl.min(t, axis=2, dtype=nl.float32))
        nl.store(out[3], nl.mean(t, axis=2, dtype=nl.float32))
        nl.store(out[4, :, 0:1], nl.sum(t, axis=(1, 2), keepdims=True, dtype=nl.float32))
        return out

    device_x = x if dtype == "float32" else nki.bfloat16_array(x)
    result = run(kernel, device_x)
    tol = dict(rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(result[0], x.sum(2), **tol)
    np.testing.assert_allclose(result[1], x.max(2), **tol)
    np.testing.assert_allclose(result[2], x.min(2), **tol)
    np.testing.assert_allclose(result[3], x.mean(2), **tol)
    np.testing.assert_allclose(result[4, :, 0], x.sum((1, 2)), **tol)


def test_sum_of_a_2d_tile_keeps_a_column():
    def kernel(x):
        total = nl.sum(nl.load(x), axis=1)
        assert total.shape == (128, 1)
        out = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.shared_hbm)
        nl.store(out, total)
        return out

    np.testing.assert_allclose(run(kernel, np.ones((128, 10), np.float32))[:, 0], 10.0)


@pytest.mark.parametrize("transpose_x", [False, True])
def test_matmul_returns_psum_with_and_without_pre_transposed_x(rng, transpose_x):
    x = rng.standard_normal((64, 96)).astype(np.float32)
    y = rng.standard_normal((96 if not transpose_x else 64, 40)).astype(np.float32)

    def kernel(x, y):
        out = nl.ndarray((96 if transpose_x else 64, 40), dtype=nl.float32, buffer=nl.shared_hbm)
        product = nl.matmul(nl.load(x), nl.load(y), transpose_x=transpose_x)
        assert product.buffer is nl.psum and product.dtype == nl.float32
        nl.store(out, nl.copy(product))
        return out

    expected = (x.T if transpose_x else x) @ y
    np.testing.assert_allclose(run(kernel, x, y), expected, rtol=1e-5, atol=1e-5)


def test_transpose_and_broadcast_to(rng):
    x = rng.standard_normal((32, 100)).astype(np.float32)
    row = rng.standard_normal((1, 100)).astype(np.float32)

    def kernel(x, row):
        flipped = nl.ndarray((100, 32), dtype=nl.float32, buffer=nl.shared_hbm)
        nl.store(flipped, nl.copy(nl.transpose(nl.load(x))))
        spread = nl.ndarray((128, 100), dtype=nl.float32, buffer=nl.shared_hbm)
        nl.store(spread, nl.broadcast_to(nl.load(row), (128, 100)))
        return flipped, spread

    flipped, spread = run(kernel, x, row)
    np.testing.assert_array_equal(flipped, x.T)
    np.testing.assert_array_equal(spread, np.broadcast_to(row, (128, 100)))


def test_load_and_store_convert_dtypes(rng):
    x = rng.standard_normal((128, 8)).astype(np.float32)

    def kernel(x):
        out = nl.ndarray(x.shape, dtype=nl.bfloat16, buffer=nl.shared_hbm)
        narrow = nl.load(x, dtype=nl.bfloat16)
        assert narrow.dtype == nl.bfloat16
        nl.store(out, nl.copy(narrow, dtype=nl.float32))  # store converts back to bfloat16
        return out

    np.testing.assert_array_equal(run(kernel, x), bf16(x))


def test_load_of_a_vector_puts_it_on_the_partitions(rng):
    """A vector's only dimension is its partition dimension, as for every tile: NKI's mamba tutorial loads
    ``A[c0:c1, i]`` as a per-partition scale; a row is ``v.reshape((1, n))``, as its LayerNorm tutorial does."""
    v = rng.standard_normal(50).astype(np.float32)

    def kernel(v):
        column = nl.load(v)
        assert column.shape == (50, 1)
        row = nl.load(v.reshape((1, 50)))
        out = nl.ndarray((2, 50), dtype=nl.float32, buffer=nl.shared_hbm)
        nl.store(out[0:1, :], row)
        nl.store(out[1, :], column)
        return out

    result = run(kernel, v)
    np.testing.assert_array_equal(result[0], v)
    np.testing.assert_array_equal(result[1], v)


def test_loop_helpers_are_ranges():
    assert list(nl.affine_range(3)) == [0, 1, 2]
    assert list(nl.sequential_range(1, 7, 2)) == [1, 3, 5]
    assert list(nl.static_range(2, 4)) == [2, 3]


def test_tile_size_constants():
    ts = nl.tile_size
    assert (ts.pmax, ts.gemm_stationary_fmax, ts.gemm_moving_fmax, ts.psum_fmax, ts.psum_num_banks) == \
        (128, 128, 512, 512, 8)


def test_grid_programs_share_inputs_and_shared_outputs():
    seen = []

    @nki.jit
    def kernel(x):
        out = nl.ndarray((2, 3), dtype=nl.float32, buffer=nl.shared_hbm)
        i, j = nl.program_id(0), nl.program_id(1)
        seen.append((i, j, nl.num_programs(), nl.num_programs(1), nl.program_ndim()))
        cell = nl.full((1, 1), float(10 * i + j), dtype=nl.float32)
        nl.store(out[i:i + 1, j:j + 1], cell)
        return out

    result = nki.simulate(kernel[2, 3])(np.zeros(1, np.float32))
    np.testing.assert_array_equal(result, [[0, 1, 2], [10, 11, 12]])
    assert seen == [(i, j, 6, 3, 2) for i in range(2) for j in range(3)]


def test_calling_a_jitted_kernel_simulates_it_and_kernels_can_call_kernels(rng):
    x = rng.standard_normal((128, 4)).astype(np.float32)

    @nki.jit
    def double(t):
        return nl.multiply(t, 2.0)

    @nki.jit()
    def kernel(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        nl.store(out, double(nl.load(x)))
        return out

    np.testing.assert_array_equal(kernel(x), 2 * x)
    np.testing.assert_array_equal(nki.simulate_kernel(kernel, x), 2 * x)


def test_integer_tiles_promote_to_float_with_float_numbers_or_division():
    x = np.arange(128 * 4, dtype=np.int32).reshape(128, 4)

    def kernel(x):
        t = nl.load(x)
        half, ratio, doubled = nl.multiply(t, 0.5), nl.divide(t, 3), nl.add(t, t)
        assert (half.dtype, ratio.dtype, doubled.dtype) == (nl.float32, nl.float32, nl.int32)
        out = nl.ndarray((2, 128, 4), dtype=nl.float32, buffer=nl.shared_hbm)
        nl.store(out[0], half)
        nl.store(out[1], ratio)
        return out

    result = run(kernel, x)
    np.testing.assert_allclose(result[0], x * 0.5)
    np.testing.assert_allclose(result[1], x / 3, rtol=1e-6)


def test_bitwise_ops_on_integer_tiles_and_their_rejection_on_floats():
    a = np.arange(128 * 4, dtype=np.int32).reshape(128, 4)

    def kernel(a):
        t = nl.load(a)
        out = nl.ndarray((3, 128, 4), dtype=nl.int32, buffer=nl.shared_hbm)
        nl.store(out[0], nl.bitwise_and(t, 6))
        nl.store(out[1], nl.bitwise_or(t, t))
        nl.store(out[2], nl.bitwise_xor(t, 5))
        return out

    result = run(kernel, a)
    np.testing.assert_array_equal(result, np.stack([a & 6, a | a, a ^ 5]))
    with pytest.raises(nki.NKISimulationError, match="tensor_tensor op 'bitwise_and' needs integer operands"):
        run(lambda x: nl.bitwise_and(nl.load(x), nl.load(x)), np.ones((4, 4), np.float32))
