"""Scatter/index ops added for OpInfo coverage (neuroncc/frontend/lowering/coverage_indexing.py) against eager on every
target: duplicate indices, untouched slots, include_self both ways, NaN propagation, empty segments."""

import math

import pytest
import torch

from .helpers import assert_same, assert_same_grads

NAN = math.nan


def _scatter_inputs():
    x = torch.randn(6, 4)
    src = torch.randn(5, 4)
    src[1, 2] = NAN  # amax/amin/prod must propagate it into its slot only
    index = torch.tensor([[0, 1, 0, 3], [0, 1, 2, 3], [5, 5, 5, 5], [0, 0, 0, 0], [1, 2, 2, 2]])
    return x, index, src


@pytest.mark.parametrize("reduce", ["amax", "amin", "prod", "mean"])
@pytest.mark.parametrize("include_self", [True, False])
def test_scatter_reduce(reduce, include_self, target):
    x, index, src = _scatter_inputs()
    assert_same(lambda a, i, s: a.scatter_reduce(0, i, s, reduce, include_self=include_self), x, index, src,
                target=target)


def test_scatter_reduce_on_a_smaller_index_window(target):
    # index smaller than self outside dim: only its leading block is touched (and src is read in that window)
    x, src = torch.randn(4, 5), torch.randn(3, 6)
    index = torch.tensor([[1, 1], [3, 0]])
    assert_same(lambda a, i, s: a.scatter_reduce(1, i, s, "amax", include_self=False), x, index, src, target=target)


@pytest.mark.parametrize("reduce", ["amax", "prod", "mean"])
def test_index_reduce(reduce, target):
    x, source = torch.randn(3, 5, 2), torch.randn(3, 4, 2)
    index = torch.tensor([4, 0, 4, 1])
    for include_self in (True, False):
        assert_same(lambda a, i, s: a.index_reduce(1, i, s, reduce, include_self=include_self), x, index, source,
                    target=target)


def test_scatter_reduce_gradient():
    x, index, src = _scatter_inputs()
    src[1, 2] = 0.5
    assert_same_grads(lambda a, s: a.scatter_reduce(0, index, s, "amax", include_self=True), x, src)


@pytest.mark.parametrize("reduce", ["max", "min", "sum", "mean", "prod"])
def test_segment_reduce(reduce, target):
    data = torch.randn(7, 3)
    lengths, offsets = torch.tensor([2, 0, 4, 1]), torch.tensor([0, 3, 3, 7])
    for initial in (None, 0.5):
        assert_same(lambda d, n: torch.segment_reduce(d, reduce, lengths=n, initial=initial), data, lengths,
                    target=target)
        assert_same(lambda d, o: torch.segment_reduce(d, reduce, offsets=o, initial=initial), data, offsets,
                    target=target)


def test_put_diagonal_and_as_strided_scatter(target):
    x = torch.randn(4, 5)
    assert_same(lambda a, i, s: (a.put(i, s), a.put(i, s, accumulate=True)), x, torch.tensor([0, -1, 7, 0]),
                torch.randn(4), target=target)
    for offset in (0, 2, -3):
        length = torch.diagonal(x, offset).shape[0]
        assert_same(lambda a, s: torch.diagonal_scatter(a, s, offset), x, torch.randn(length), target=target)
    y = torch.randn(2, 3, 4)
    assert_same(lambda a, s: torch.diagonal_scatter(a, s, -1, 2, 0), y, torch.randn(3, 2), target=target)
    assert_same(lambda a, s: torch.as_strided_scatter(a, s, (2, 2), (1, 5), 3), x, torch.randn(2, 2), target=target)


def test_masked_scatter_and_nonzero_static(target):
    x = torch.randn(3, 4)
    mask = torch.rand(3, 4) > 0.5
    assert_same(lambda a, m, s: a.masked_scatter(m, s), x, mask, torch.randn(4, 4), target=target)
    assert_same(lambda a, m, s: a.masked_scatter(m, s), torch.randn(4), mask, torch.randn(12), target=target)
    z = torch.tensor([[0.0, 1.0, 0.0], [2.0, 0.0, 3.0]])
    for size in (0, 2, 3, 5):
        assert_same(lambda a: torch.nonzero_static(a, size=size, fill_value=-7), z, target=target)


def test_legacy_scatter_reduce_take_and_isin(target):
    x, index, src = _scatter_inputs()
    src[1, 2] = 0.5
    assert_same(lambda a, i, s: (a.scatter(0, i, s, reduce="add"), a.scatter(0, i, s, reduce="multiply"),
                                 a.scatter(1, i[:, :2] % 4, 2.0, reduce="multiply")), x, index, src, target=target)
    assert_same(lambda a, i: (torch.take(a, i), torch.take(a[0, 0], i[0, 0])), x, torch.tensor([[0, -1], [23, 5]]),
                target=target)
    assert_same(lambda a, b: (torch.isin(a, b), torch.isin(a, b, invert=True)), torch.tensor([1.0, NAN, 3.0, 4.0]),
                torch.tensor([[4.0, NAN], [1.0, 7.0]]), target=target)


def test_bool_mask_index_put_and_embedding_renorm(target):
    x, mask = torch.randn(4, 3), torch.tensor([True, False, True, True])
    assert_same(lambda a, m, v: (a.index_put((m,), v), a.index_put((m,), v, accumulate=True)), x, mask,
                torch.randn(3), target=target)
    weight = torch.randn(6, 4) * 2
    assert_same(lambda w, i: torch.nn.functional.embedding(i, w, max_norm=1.5), weight,
                torch.tensor([[0, 2], [2, 5]]), target=target)


def test_empty_and_zero_dim_gather_scatter(target):
    x = torch.randn(5)
    assert_same(lambda a, i: torch.gather(a, 0, i), x, torch.zeros(2, 0, dtype=torch.int64), target=target)
    assert_same(lambda a, i, s: a[0].scatter_add(0, i, s), x, torch.tensor([0]), torch.randn(1), target=target)


def test_histc_at_bin_edges(target):
    # the right edge counts in the last bin; NaN and values outside are skipped; 3.3333333 * 3 rounds to 10
    x = torch.tensor([0.0, 1.0, 2.0, 10.0, 9.9999, 3.3333333, -0.5, 11.0, NAN, 6.6666665])
    assert_same(lambda t: (torch.histc(t, bins=3, min=0, max=10), torch.histc(t, bins=7, min=-1, max=4)), x,
                target=target)
    assert_same(lambda t: (torch.histc(t, bins=5), torch.histc(t[:1], bins=4)), torch.randn(40), target=target)


@pytest.mark.parametrize("mode", [0, 1, 2])
def test_embedding_bag_and_its_auxiliary_outputs(mode, target):
    # an empty bag, a padding row, include_last_offset both ways; all four outputs of the aten op
    w, i, o = torch.randn(10, 3), torch.tensor([1, 2, 4, 5, 4, 3, 2, 9]), torch.tensor([0, 3, 3, 5, 8])
    for include_last in (False, True):
        for padding_idx in (-1, 4):
            assert_same(lambda a, b, c: torch.ops.aten._embedding_bag_forward_only(a, b, c, False, mode, False, None,
                                                                                   include_last, padding_idx),
                        w, i, o, target=target)
    if mode == 0:
        assert_same(lambda a, b, c, s: torch.nn.functional.embedding_bag(b, a, c[:4], mode="sum", per_sample_weights=s),
                    w, i, o, torch.randn(8), target=target)


@pytest.mark.parametrize("reduce", ["max", "min", "sum", "mean"])
def test_segment_reduce_gradient_with_ties_and_empty_segments(reduce):
    data = torch.tensor([[1.0, 3.0, 3.0, 0.5, 2.0, -1.0], [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]]).t().contiguous()
    for initial in (None, 2.5):
        assert_same_grads(lambda d: torch.segment_reduce(d, reduce, lengths=torch.tensor([3, 0, 3]), initial=initial)
                          .nan_to_num(0.0, 0.0, 0.0), data)
