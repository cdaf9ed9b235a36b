"""Tensors and views: slicing, write-through, NaN-filled fresh tiles, reshape, inputs and outputs."""

from __future__ import annotations

import numpy as np

import neuroncc.nki as nki
import neuroncc.nki.isa as nisa
import neuroncc.nki.language as nl

from sim_helpers import bf16, run


def test_writes_through_a_view_reach_the_parent(rng):
    x = rng.standard_normal((128, 64)).astype(np.float32)

    def kernel(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        tile = nl.load(x)
        nisa.memset(dst=tile[32:64, 8:16], value=7.0)
        view = tile[:, nl.ds(40, 8)]
        nisa.memset(dst=view[96:128, 2:4], value=-1.0)
        nl.store(out, tile)
        return out

    expected = x.copy()
    expected[32:64, 8:16] = 7.0
    expected[96:128, 42:44] = -1.0
    np.testing.assert_array_equal(run(kernel, x), expected)


def test_ds_and_slices_with_steps_select_the_same_elements_as_numpy(rng):
    x = rng.standard_normal((4, 32, 16)).astype(np.float32)

    def kernel(x):
        out = nl.ndarray((4, 8, 5), dtype=x.dtype, buffer=nl.shared_hbm)
        tile = nl.ndarray((4, 8, 5), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=tile, src=x[:, nl.ds(3, 8), 1:16:3])
        nl.store(out, tile)
        return out

    np.testing.assert_array_equal(run(kernel, x), x[:, 3:11, 1:16:3])


def test_integer_index_drops_a_dimension_and_negative_indices_count_from_the_end(rng):
    x = rng.standard_normal((3, 128, 8)).astype(np.float32)

    def kernel(x):
        out = nl.ndarray((128, 8), dtype=x.dtype, buffer=nl.shared_hbm)
        nl.store(out, nl.load(x[-1]))
        return out

    np.testing.assert_array_equal(run(kernel, x), x[2])


def test_fresh_tiles_are_nan_filled_so_unwritten_elements_show_up():
    def kernel():
        out = nl.ndarray((128, 8), dtype=nl.float32, buffer=nl.shared_hbm)
        tile = nl.ndarray((128, 8), dtype=nl.float32, buffer=nl.sbuf)
        nisa.memset(dst=tile[:, 0:4], value=1.0)
        nl.store(out, tile)
        return out

    result = run(kernel)
    assert np.all(result[:, 0:4] == 1.0)
    assert np.all(np.isnan(result[:, 4:8]))


def test_uninitialised_psum_read_is_nan_and_integer_tiles_hold_a_sentinel():
    def kernel():
        floats = nl.ndarray((128, 4), dtype=nl.float32, buffer=nl.shared_hbm)
        ints = nl.ndarray((128, 4), dtype=nl.int32, buffer=nl.shared_hbm)
        acc = nl.ndarray((128, 4), dtype=nl.float32, buffer=nl.psum)
        copied = nl.ndarray((128, 4), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=copied, src=acc)
        nl.store(floats, copied)
        nl.store(ints, nl.ndarray((128, 4), dtype=nl.int32, buffer=nl.sbuf))
        return floats, ints

    floats, ints = run(kernel)
    assert np.all(np.isnan(floats))
    assert np.all(ints == np.iinfo(np.int32).min)


def test_zeros_full_and_zeros_like_initialise():
    def kernel(x):
        a = nl.ndarray((128, 4), dtype=nl.float32, buffer=nl.shared_hbm)
        b = nl.ndarray((128, 4), dtype=nl.float32, buffer=nl.shared_hbm)
        c = nl.full((128, 4), 3.5, dtype=nl.float32, buffer=nl.shared_hbm)
        nl.store(a, nl.zeros_like(nl.load(x)))
        nl.store(b, nl.full((128, 4), -2.0, dtype=nl.float32))
        return a, b, c

    a, b, c = run(kernel, np.ones((128, 4), np.float32))
    assert np.all(a == 0) and np.all(b == -2.0) and np.all(c == 3.5)


def test_reshape_views_the_same_storage(rng):
    x = rng.standard_normal(512).astype(np.float32)

    def kernel(x):
        out = nl.ndarray((4, 128), dtype=x.dtype, buffer=nl.shared_hbm)
        nl.store(out, nl.load(x.reshape((4, 128))))
        return out

    np.testing.assert_array_equal(run(kernel, x), x.reshape(4, 128))


def test_inputs_the_kernel_writes_are_updated_in_place_as_nki_simulate_does(rng):
    x = rng.standard_normal((128, 4)).astype(np.float32)
    y = rng.standard_normal((128, 4)).astype(np.float32)
    before = y.copy()

    def kernel(x, y):
        nisa.dma_copy(dst=x, src=nl.zeros((128, 4), dtype=nl.float32))
        nl.store(nl.ndarray((128, 4), dtype=nl.float32, buffer=nl.shared_hbm), nl.load(y))
        return x

    assert np.all(run(kernel, x, y) == 0)
    assert np.all(x == 0)  # written: updated in place
    np.testing.assert_array_equal(y, before)  # only read: untouched


def test_bfloat16_inputs_outputs_and_writes_are_rounded(rng):
    x = rng.standard_normal((128, 16)).astype(np.float32)

    def kernel(x):
        out = nl.ndarray(x.shape, dtype=nl.bfloat16, buffer=nl.shared_hbm)
        tile = nl.ndarray(x.shape, dtype=nl.bfloat16, buffer=nl.sbuf)
        nisa.activation(dst=tile, op=nl.copy, data=nl.load(x), scale=1.0 / 3.0)
        nl.store(out, tile)
        return out

    result = run(kernel, x)
    np.testing.assert_array_equal(result, bf16(x * np.float32(1.0 / 3.0)))
    held = run(lambda t: t, nki.bfloat16_array(x))
    np.testing.assert_array_equal(held, bf16(x))


def test_kernel_may_return_several_outputs_in_a_dict():
    def kernel():
        a = nl.full((2, 2), 1.0, dtype=nl.float32, buffer=nl.shared_hbm)
        return {"a": a, "n": 3}

    result = run(kernel)
    assert result["n"] == 3 and np.all(result["a"] == 1.0)


def test_python_operators_and_setitem_lower_to_instructions(rng):
    x = rng.standard_normal((128, 8)).astype(np.float32)

    def kernel(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        t = nl.load(x)
        result = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
        result[...] = (2.0 * t + 1.0 - t / 4.0) * t - (-t)
        result[0:32, 0:2] = 0.0
        out[...] = result
        return out

    expected = (2 * x + 1 - x / 4) * x + x
    expected[0:32, 0:2] = 0
    np.testing.assert_allclose(run(kernel, x), expected, rtol=1e-6, atol=1e-6)
