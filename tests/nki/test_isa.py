"""Every ISA instruction against numpy, in float32 and bfloat16."""

from __future__ import annotations

import numpy as np
import pytest

import neuroncc.nki as nki
import neuroncc.nki.isa as nisa
import neuroncc.nki.language as nl

from sim_helpers import bf16, run

DTYPES = ["float32", "bfloat16"]


def _inputs(rng, dtype, *shapes, positive=False):
    arrays = []
    for shape in shapes:
        values = rng.standard_normal(shape).astype(np.float32)
        if positive:
            values = np.abs(values) + 0.5
        arrays.append(values if dtype == "float32" else bf16(values))
    return arrays


def _device(arrays, dtype):
    return [a if dtype == "float32" else nki.bfloat16_array(a) for a in arrays]


def _unary_kernel(dtype, instruction):
    """A kernel that loads x, applies ``instruction(dst, x_tile)`` into a float32 tile and returns it."""
    def kernel(x):
        out = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.shared_hbm)
        dst = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.sbuf)
        instruction(dst, nl.load(x))
        nl.store(out, dst)
        return out
    return kernel


def test_dma_copy_between_hbm_and_sbuf(rng):
    x = rng.standard_normal((64, 300)).astype(np.float32)

    def kernel(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        tile = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=tile, src=x)
        nisa.dma_copy(dst=out, src=tile)
        return out

    np.testing.assert_array_equal(run(kernel, x), x)


def test_tensor_copy_converts_to_the_destination_dtype(rng):
    x = rng.standard_normal((128, 32)).astype(np.float32)

    def kernel(x):
        out = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.shared_hbm)
        narrow = nl.ndarray(x.shape, dtype=nl.bfloat16, buffer=nl.sbuf)
        nisa.tensor_copy(dst=narrow, src=nl.load(x))
        wide = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=wide, src=narrow, engine=nisa.engine.scalar)
        nl.store(out, wide)
        return out

    np.testing.assert_array_equal(run(kernel, x), bf16(x))


def test_memset_and_iota():
    def kernel():
        out = nl.ndarray((64, 2, 3), dtype=nl.int32, buffer=nl.shared_hbm)
        ramp = nl.ndarray((64, 2, 3), dtype=nl.int32, buffer=nl.sbuf)
        nisa.iota(dst=ramp, pattern=[[10, 2], [1, 3]], offset=5, channel_multiplier=100)
        nl.store(out, ramp)
        filled = nl.ndarray((64, 6), dtype=nl.float32, buffer=nl.shared_hbm)
        nl.store(filled, nisa.memset(dst=nl.ndarray((64, 6), dtype=nl.float32), value=2.5))
        return out, filled

    ramp, filled = run(kernel)
    expected = 5 + 100 * np.arange(64)[:, None, None] + 10 * np.arange(2)[None, :, None] + np.arange(3)[None, None, :]
    np.testing.assert_array_equal(ramp, expected)
    assert np.all(filled == 2.5)


@pytest.mark.parametrize("dtype", DTYPES)
def test_nc_matmul_accumulates_across_k_tiles_by_default(rng, dtype):
    a, b = _inputs(rng, dtype, (256, 96), (256, 200))

    def kernel(lhsT, rhs):
        out = nl.ndarray((96, 200), dtype=nl.float32, buffer=nl.shared_hbm)
        acc = nl.ndarray((96, 200), dtype=nl.float32, buffer=nl.psum)
        for k in range(2):
            nisa.nc_matmul(dst=acc, stationary=nl.load(lhsT[k * 128:(k + 1) * 128]),
                           moving=nl.load(rhs[k * 128:(k + 1) * 128]))
        nl.store(out, nl.copy(acc))
        return out

    result = run(kernel, *_device([a, b], dtype))
    np.testing.assert_allclose(result, a.T.astype(np.float64) @ b, rtol=1e-5, atol=1e-4)


def test_nc_matmul_accumulate_flag_overrides_the_written_state(rng):
    a, b = _inputs(rng, "float32", (128, 64), (128, 32))

    def kernel(lhsT, rhs):
        out = nl.ndarray((3, 64, 32), dtype=nl.float32, buffer=nl.shared_hbm)
        s, m = nl.load(lhsT), nl.load(rhs)
        acc = nl.ndarray((64, 32), dtype=nl.float32, buffer=nl.psum)
        nisa.nc_matmul(acc, s, m)                      # first write: overwrites the NaNs
        nisa.nc_matmul(acc, s, m)                      # written: adds
        nl.store(out[0], nl.copy(acc))
        nisa.nc_matmul(acc, s, m, accumulate=False)    # overwrites
        nl.store(out[1], nl.copy(acc))
        primed = nl.ndarray((64, 32), dtype=nl.float32, buffer=nl.psum)
        nisa.memset(dst=primed, value=1.0)             # a memset is a write: the matmul adds to it
        nisa.nc_matmul(primed, s, m, accumulate=None)
        nl.store(out[2], nl.copy(primed))
        return out

    product = a.T @ b
    result = run(kernel, a, b)
    np.testing.assert_allclose(result[0], 2 * product, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(result[1], product, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(result[2], product + 1, rtol=1e-5, atol=1e-5)


def test_nc_matmul_accumulate_true_adds_to_uninitialised_psum():
    def kernel():
        out = nl.ndarray((4, 4), dtype=nl.float32, buffer=nl.shared_hbm)
        acc = nl.ndarray((4, 4), dtype=nl.float32, buffer=nl.psum)
        ones = nl.full((8, 4), 1.0, dtype=nl.float32)
        nisa.nc_matmul(acc, ones, ones, accumulate=True)
        nl.store(out, nl.copy(acc))
        return out

    assert np.all(np.isnan(run(kernel)))


@pytest.mark.parametrize("dtype", DTYPES)
def test_nc_transpose_on_tensor_and_vector_engines(rng, dtype):
    (x,) = _inputs(rng, dtype, (96, 80))

    def kernel(x):
        out = nl.ndarray((80, 96), dtype=x.dtype, buffer=nl.shared_hbm)
        small = nl.ndarray((16, 24), dtype=x.dtype, buffer=nl.shared_hbm)
        tile = nl.load(x)
        flipped = nl.ndarray((80, 96), dtype=x.dtype, buffer=nl.psum)
        nisa.nc_transpose(dst=flipped, data=tile)
        nl.store(out, nl.copy(flipped))
        block = nl.ndarray((16, 24), dtype=x.dtype, buffer=nl.sbuf)
        nisa.nc_transpose(dst=block, data=tile[0:24, 0:16], engine=nisa.engine.vector)
        nl.store(small, block)
        return out, small

    out, small = run(kernel, *_device([x], dtype))
    np.testing.assert_array_equal(out, x.T)
    np.testing.assert_array_equal(small, x[0:24, 0:16].T)


BINARY = [
    (nl.add, np.add), (nl.subtract, np.subtract), (nl.multiply, np.multiply), (nl.divide, np.divide),
    (nl.maximum, np.maximum), (nl.minimum, np.minimum), (np.add, np.add),
    (nl.greater, np.greater), (nl.less_equal, np.less_equal), (nl.equal, np.equal),
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op, reference", BINARY, ids=lambda v: getattr(v, "__name__", None))
def test_tensor_tensor(rng, dtype, op, reference):
    a, b = _inputs(rng, dtype, (128, 64), (128, 64))
    b[0, :4] = a[0, :4]  # some equal elements for the comparisons

    def kernel(a, b):
        out = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.shared_hbm)
        dst = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=dst, data1=nl.load(a), data2=nl.load(b), op=op)
        nl.store(out, dst)
        return out

    np.testing.assert_allclose(run(kernel, *_device([a, b], dtype)), reference(a, b).astype(np.float32),
                               rtol=1e-6, atol=1e-6)


def test_tensor_tensor_on_integers_and_gpsimd():
    a = np.arange(128 * 8, dtype=np.int32).reshape(128, 8)
    b = np.full((128, 8), 3, dtype=np.int32)

    def kernel(a, b):
        out = nl.ndarray(a.shape, dtype=nl.int32, buffer=nl.shared_hbm)
        dst = nl.ndarray(a.shape, dtype=nl.int32, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=dst, data1=nl.load(a), data2=nl.load(b), op=nl.multiply, engine=nisa.engine.gpsimd)
        nl.store(out, dst)
        return out

    np.testing.assert_array_equal(run(kernel, a, b), a * 3)


@pytest.mark.parametrize("dtype", DTYPES)
def test_tensor_scalar_with_numbers_columns_and_reversal(rng, dtype):
    x, column = _inputs(rng, dtype, (128, 40), (128, 1), positive=True)

    def kernel(x, column):
        out = nl.ndarray((2, 128, 40), dtype=nl.float32, buffer=nl.shared_hbm)
        tile, col = nl.load(x), nl.load(column)
        first = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=first, data=tile, op0=nl.subtract, operand0=2.0, reverse0=True,
                           op1=nl.multiply, operand1=col)
        second = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar(second, tile, nl.divide, col, reverse0=True, engine=nisa.engine.scalar)
        nl.store(out[0], first)
        nl.store(out[1], second)
        return out

    result = run(kernel, *_device([x, column], dtype))
    np.testing.assert_allclose(result[0], (2.0 - x) * column, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(result[1], column / x, rtol=1e-6, atol=1e-6)


def test_scalar_tensor_tensor(rng):
    x, column, other = _inputs(rng, "float32", (128, 24), (128, 1), (128, 24))

    def kernel(x, column, other):
        out = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.shared_hbm)
        dst = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.sbuf)
        nisa.scalar_tensor_tensor(dst=dst, data=nl.load(x), op0=nl.multiply, operand0=nl.load(column),
                                  op1=nl.subtract, operand1=nl.load(other), reverse1=True)
        nl.store(out, dst)
        return out

    np.testing.assert_allclose(run(kernel, x, column, other), other - x * column, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op, reference", [(nl.add, np.sum), (nl.maximum, np.max), (nl.minimum, np.min),
                                           (nl.max, np.max)], ids=["add", "maximum", "minimum", "nl.max"])
def test_tensor_reduce_over_trailing_free_axes(rng, dtype, op, reference):
    (x,) = _inputs(rng, dtype, (128, 6, 10))

    def kernel(x):
        out = nl.ndarray((2, 128, 6), dtype=nl.float32, buffer=nl.shared_hbm)
        tile = nl.load(x)
        rows = nl.ndarray((128, 6), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_reduce(dst=rows, op=op, data=tile, axis=2)
        everything = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_reduce(dst=everything, op=op, data=tile, axis=(1, 2), negate=True, keepdims=True)
        nl.store(out[0], rows)
        nl.store(out[1, :, 0:1], everything)
        return out

    result = run(kernel, *_device([x], dtype))
    np.testing.assert_allclose(result[0], reference(x, axis=2), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(result[1, :, 0], -reference(x, axis=(1, 2)), rtol=1e-5, atol=1e-5)


ACTIVATIONS = [
    (nl.exp, np.exp), (nl.log, np.log), (nl.sqrt, np.sqrt), (nl.rsqrt, lambda v: 1 / np.sqrt(v)),
    (nl.tanh, np.tanh), (nl.sigmoid, lambda v: 1 / (1 + np.exp(-v))), (nl.relu, lambda v: np.maximum(v, 0)),
    (nl.gelu, lambda v: 0.5 * v * (1 + np.vectorize(__import__("math").erf)(v / np.sqrt(2)))),
    (nl.silu, lambda v: v / (1 + np.exp(-v))), (nl.square, np.square), (nl.reciprocal, lambda v: 1 / v),
    (nl.negative, np.negative), (nl.abs, np.abs), (nl.copy, lambda v: v),
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op, reference", ACTIVATIONS, ids=lambda v: getattr(v, "__name__", None))
def test_activation_functions(rng, dtype, op, reference):
    positive = op in (nl.log, nl.sqrt, nl.rsqrt)
    (x,) = _inputs(rng, dtype, (128, 48), positive=positive)
    kernel = _unary_kernel(dtype, lambda dst, tile: nisa.activation(dst=dst, op=op, data=tile))
    expected = reference(x.astype(np.float64))
    np.testing.assert_allclose(run(kernel, *_device([x], dtype)), expected, rtol=2e-6, atol=2e-6)


def test_activation_scale_bias_and_fused_row_sum(rng):
    x, scale, bias = _inputs(rng, "float32", (128, 32), (128, 1), (128, 1))

    def kernel(x, scale, bias):
        out = nl.ndarray((128, 33), dtype=nl.float32, buffer=nl.shared_hbm)
        dst = nl.ndarray((128, 32), dtype=nl.float32, buffer=nl.sbuf)
        sums = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.activation(dst=dst, op=nl.exp, data=nl.load(x), scale=nl.load(scale), bias=nl.load(bias),
                        reduce_op=nl.add, reduce_res=sums)
        nisa.activation_reduce(dst=dst, op=nl.exp, data=nl.load(x), reduce_op=nl.add, reduce_res=sums,
                               scale=nl.load(scale), bias=nl.load(bias))
        nisa.activation(dst=dst, op=nl.exp, data=nl.load(x), scale=nl.load(scale), bias=nl.load(bias),
                        reduce_res=sums, reduce_cmd=nisa.reduce_cmd.reduce)
        nl.store(out[:, 0:32], dst)
        nl.store(out[:, 32:33], sums)
        return out

    result = run(kernel, x, scale, bias)
    activated = np.exp(x * scale + bias)
    np.testing.assert_allclose(result[:, :32], activated, rtol=1e-6)
    np.testing.assert_allclose(result[:, 32], 2 * activated.sum(axis=1), rtol=1e-5)


def test_reciprocal(rng):
    (x,) = _inputs(rng, "float32", (128, 16), positive=True)
    kernel = _unary_kernel("float32", lambda dst, tile: nisa.reciprocal(dst=dst, data=tile))
    np.testing.assert_allclose(run(kernel, x), 1 / x, rtol=1e-6)


def test_nki_0_1_style_calls_return_their_results(rng):
    a, b = _inputs(rng, "float32", (128, 64), (128, 32))

    def kernel(a, b):
        out = nl.ndarray((64, 32), dtype=nl.float32, buffer=nl.shared_hbm)
        sums = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.shared_hbm)
        ta, tb = nl.load(a), nl.load(b)
        product = nisa.nc_matmul(ta, tb)
        doubled = nisa.tensor_tensor(nisa.tensor_copy(product), nisa.tensor_copy(product), nl.add)
        halved = nisa.tensor_scalar(doubled, nl.multiply, 0.5)
        relu = nisa.activation(nl.relu, halved)
        nl.store(out, relu)
        nl.store(sums, nisa.tensor_reduce(nl.add, ta, axis=1, keepdims=True))
        return out, sums

    out, sums = run(kernel, a, b)
    np.testing.assert_allclose(out, np.maximum(a.T @ b, 0), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(sums[:, 0], a.sum(axis=1), rtol=1e-5, atol=1e-5)


def test_integer_tiles_with_float_scalars_compute_in_float():
    x = np.arange(128 * 4, dtype=np.int32).reshape(128, 4)

    def kernel(x):
        out = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.shared_hbm)
        dst = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=dst, data=nl.load(x), op0=nl.multiply, operand0=0.5)
        nl.store(out, dst)
        return out

    np.testing.assert_array_equal(run(kernel, x), x * 0.5)


def test_tensor_copy_predicated_selects_without_touching_unselected_values(rng):
    """where(c, a, b) as NKI writes it: copy b, then a where c; NaN and inf in the unselected branch stay out."""
    a = rng.standard_normal((128, 40)).astype(np.float32)
    b = rng.standard_normal((128, 40)).astype(np.float32)
    b[0, :4] = [np.nan, np.inf, -np.inf, np.nan]
    condition = rng.random((128, 40)) < 0.5
    condition[0, :4] = True

    def kernel(a, b, c):
        out = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.shared_hbm)
        filled = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.shared_hbm)
        result = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=result, src=nl.load(b))
        predicate = nl.load(c)
        nisa.tensor_copy_predicated(dst=result, src=nl.load(a), predicate=predicate)
        nl.store(out, result)
        constant = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=constant, src=nl.load(a))
        nisa.tensor_copy_predicated(dst=constant, src=-np.inf, predicate=predicate, reverse_pred=True)
        nl.store(filled, constant)
        return out, filled

    out, filled = run(kernel, a, b, condition)
    np.testing.assert_array_equal(out, np.where(condition, a, b))
    np.testing.assert_array_equal(filled, np.where(condition, a, -np.inf))


def test_tensor_copy_predicated_rejects_float_predicates_and_dtype_mismatches():
    def float_predicate(x):
        tile = nl.load(x)
        nisa.tensor_copy_predicated(dst=tile, src=0.0, predicate=tile)
        return x

    with pytest.raises(nki.NKISimulationError, match="predicate must be uint8"):
        run(float_predicate, np.ones((4, 4), dtype=np.float32))

    def mixed(x, c):
        tile = nl.load(x)
        narrow = nl.ndarray(x.shape, dtype=nl.bfloat16, buffer=nl.sbuf)
        nisa.tensor_copy_predicated(dst=narrow, src=tile, predicate=nl.load(c))
        return x

    with pytest.raises(nki.NKISimulationError, match="src dtype float32 does not match dst dtype bfloat16"):
        run(mixed, np.ones((4, 4), dtype=np.float32), np.ones((4, 4), dtype=np.uint8))
