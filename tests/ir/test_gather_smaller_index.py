"""gather's index may be smaller than the input outside the gathered dim (as torch.gather allows)."""

import numpy as np
import pytest

from neuroncc.errors import TypeInferenceError
from neuroncc.ir import Builder, DType, TensorType, interpret


def _gather_fn(x_shape, index_shape, dim):
    b = Builder("g")
    x = b.param(TensorType(x_shape, DType.f32), "x")
    index = b.param(TensorType(index_shape, DType.i64), "index")
    return b.build([b.op("gather", x, index, dim=dim)])


def test_gather_reads_the_leading_block_when_index_is_smaller():
    x = np.arange(30, dtype=np.float32).reshape(5, 6)
    index = np.array([[5, 0], [1, 1], [2, 3]])  # [3, 2] from a [5, 6] input along dim 1
    (out,) = interpret(_gather_fn((5, 6), (3, 2), 1), [x, index])
    np.testing.assert_array_equal(out, np.take_along_axis(x[:3], index, axis=1))


def test_gather_index_larger_than_input_outside_dim_is_refused():
    with pytest.raises(TypeInferenceError, match="larger than (the )?input"):
        _gather_fn((2, 6), (3, 2), 1)
