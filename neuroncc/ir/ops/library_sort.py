"""Sorting, selection and scan library ops (Category.EXTERN): sort, topk, kthvalue, median, mode, cummax/cummin,
logcumsumexp, searchsorted, histc, histogram.

Like the linear algebra ops (:mod:`neuroncc.ir.ops.library_linalg`), these run as library kernels (ATen on the
cpu target, host steps on nki-sim). Each follows the ``aten`` op: ``dim`` is a non-negative dimension (0-dim
tensors take 0), indices are i64 (i32 for searchsorted with ``out_int32``). NaN sorts above every number, as
in PyTorch. Where PyTorch leaves the choice among equal elements to its algorithm (kthvalue, topk), the
references pick the stable sort's order.
"""

from __future__ import annotations

import numpy as np

from neuroncc.ir.dtypes import DType
from neuroncc.ir.opdef import AttrSpec, Category, OpDef, fail, normalize_dim
from neuroncc.ir.types import TensorType

I64, I32 = DType.i64, DType.i32


def _dim(op: str, t: TensorType, dim: int) -> int:
    if t.dtype is DType.bool and op not in ("sort",):
        raise fail(op, "bool operands are not supported")
    if dim != normalize_dim(op, dim, t.rank):
        raise fail(op, f"dim must be non-negative, got {dim}")
    return dim


def _keep(shape: tuple[int, ...], dim: int, keepdim: bool) -> tuple[int, ...]:
    if not shape:
        return ()
    return shape[:dim] + ((1,) if keepdim else ()) + shape[dim + 1:]


def _last(x: np.ndarray, dim: int) -> np.ndarray:
    """``x`` with ``dim`` moved last (0-dim tensors become one element)."""
    return np.moveaxis(x, dim, -1) if x.ndim else x.reshape(1)


def _back(x: np.ndarray, dim: int, ndim: int) -> np.ndarray:
    return np.moveaxis(x, -1, dim) if ndim else x.reshape(())


def _stable_order(x: np.ndarray, descending: bool) -> np.ndarray:
    """Stable argsort along the last axis, NaN above everything; descending keeps equal elements in order."""
    if not descending:
        return np.argsort(x, axis=-1, kind="stable")
    n = x.shape[-1]
    return (n - 1 - np.argsort(x[..., ::-1], axis=-1, kind="stable"))[..., ::-1]


# ---- sort / topk ---------------------------------------------------------------------------------------


def _infer_sort(types, attrs):
    x = types[0]
    _dim("sort", x, attrs["dim"])
    return x.contiguous(), TensorType(x.shape, I64)


def _sort(x, *, dim, descending, stable=False):
    xs = _last(x, dim)
    order = _stable_order(xs, descending)
    return _back(np.take_along_axis(xs, order, -1), dim, x.ndim), _back(order, dim, x.ndim).astype(np.int64)


def _infer_topk(types, attrs):
    x = types[0]
    dim = _dim("topk", x, attrs["dim"])
    size = x.shape[dim] if x.rank else 1
    if not (0 if x.rank else 1) <= attrs["k"] <= size:
        raise fail("topk", f"k={attrs['k']} is out of range for a dimension of size {size}")
    shape = x.shape[:dim] + (attrs["k"],) + x.shape[dim + 1:] if x.rank else ()
    return TensorType(shape, x.dtype), TensorType(shape, I64)


def _topk(x, *, k, dim, largest, sorted=True):
    xs = _last(x, dim)
    order = _stable_order(xs, largest)[..., :k]
    return _back(np.take_along_axis(xs, order, -1), dim, x.ndim), _back(order, dim, x.ndim).astype(np.int64)


# ---- kthvalue / median / mode --------------------------------------------------------------------------


def _infer_select(op: str):
    def infer(types, attrs):
        x = types[0]
        dim = _dim(op, x, attrs["dim"])
        if x.rank and x.shape[dim] == 0:
            raise fail(op, f"cannot select from an empty dimension {dim} of {x}")
        if op == "kthvalue" and not 1 <= attrs["k"] <= (x.shape[dim] if x.rank else 1):
            raise fail(op, f"k={attrs['k']} is out of range for {x} along dim {dim}")
        shape = _keep(x.shape, dim, attrs["keepdim"])
        return TensorType(shape, x.dtype), TensorType(shape, I64)

    return infer


def _pick(xs: np.ndarray, order: np.ndarray, position: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    index = np.take_along_axis(order, position[..., None], -1)
    return np.take_along_axis(xs, index, -1)[..., 0], index[..., 0]


def _finish(values, indices, dim, keepdim, ndim):
    if keepdim and ndim:
        values, indices = np.expand_dims(values, dim), np.expand_dims(indices, dim)
    return values, indices.astype(np.int64)


def _kthvalue(x, *, k, dim, keepdim):
    xs = _last(x, dim)
    order = _stable_order(xs, False)
    values, indices = _pick(xs, order, np.full(xs.shape[:-1], k - 1))
    return _finish(values, indices, dim, keepdim, x.ndim)


def _median(x, *, dim, keepdim, ignore_nan):
    """The lower median; with NaN present the first NaN (median) or the median of the rest (nanmedian)."""
    xs = _last(x, dim)
    order = _stable_order(xs, False)
    nans = np.isnan(xs) if xs.dtype.kind == "f" else np.zeros(xs.shape, bool)
    count = xs.shape[-1] - (np.sum(nans, -1) if ignore_nan else np.zeros(xs.shape[:-1], np.int64))
    position = np.where(count > 0, (count - 1) // 2, 0)
    if not ignore_nan:  # the first NaN wins; with none, the NaN-free order's middle
        first_nan = np.argmax(nans, -1)
        values, indices = _pick(xs, order, position)
        has_nan = nans.any(-1)
        indices = np.where(has_nan, first_nan, indices)
        values = np.where(has_nan, np.nan, values) if xs.dtype.kind == "f" else values
        return _finish(values, indices, dim, keepdim, x.ndim)
    values, indices = _pick(xs, order, position)
    return _finish(values, indices, dim, keepdim, x.ndim)


def _mode(x, *, dim, keepdim):
    """The most frequent value (the smallest among equally frequent ones) and its last index."""
    xs = _last(x, dim)
    flat = xs.reshape(-1, xs.shape[-1])
    values = np.empty(flat.shape[0], xs.dtype)
    indices = np.empty(flat.shape[0], np.int64)
    for row in range(flat.shape[0]):
        data = flat[row]
        order = np.argsort(data, kind="stable")
        ordered = data[order]
        best, best_count, start = 0, 0, 0
        for i in range(1, len(ordered) + 1):
            if i == len(ordered) or not (ordered[i] == ordered[start] or
                                         (ordered[i] != ordered[i] and ordered[start] != ordered[start])):
                if i - start > best_count:
                    best, best_count = i - 1, i - start
                start = i
        values[row], indices[row] = ordered[best], order[best]
    return _finish(values.reshape(xs.shape[:-1]), indices.reshape(xs.shape[:-1]), dim, keepdim, x.ndim)


# ---- scans ---------------------------------------------------------------------------------------------


def _infer_cumextreme(op: str):
    def infer(types, attrs):
        x = types[0]
        _dim(op, x, attrs["dim"])
        return x.contiguous(), TensorType(x.shape, I64)

    return infer


def _cumextreme(larger: bool):
    def reference(x, *, dim):
        xs = _last(x, dim)
        values, indices = np.empty_like(xs), np.zeros(xs.shape, np.int64)
        best, where = xs[..., 0].copy() if xs.shape[-1] else None, np.zeros(xs.shape[:-1], np.int64)
        for i in range(xs.shape[-1]):
            item = xs[..., i]
            nan = np.isnan(item) if xs.dtype.kind == "f" else np.zeros(item.shape, bool)
            best_nan = np.isnan(best) if xs.dtype.kind == "f" else np.zeros(item.shape, bool)
            better = (item >= best) if larger else (item <= best)
            take = nan | (~best_nan & better) | (i == 0)
            best, where = np.where(take, item, best), np.where(take, i, where)
            values[..., i], indices[..., i] = best, where
        return _back(values, dim, x.ndim), _back(indices, dim, x.ndim)

    return reference


def _infer_logcumsumexp(types, attrs):
    x = types[0]
    _dim("logcumsumexp", x, attrs["dim"])
    if not x.dtype.is_float:
        raise fail("logcumsumexp", f"operand must be float, got {x.dtype.value}")
    return x.contiguous()


def _logcumsumexp(x, *, dim):
    xs = _last(np.asarray(x, np.float64), dim)
    return _back(np.logaddexp.accumulate(xs, axis=-1) if xs.shape[-1] else xs, dim, x.ndim)


# ---- searchsorted / histc ------------------------------------------------------------------------------


def _infer_searchsorted(types, attrs):
    seq, values = types[0], types[1]
    if seq.dtype != values.dtype or seq.dtype is DType.bool:
        raise fail("searchsorted", f"the sequence and values need one numeric dtype, got {seq} and {values}")
    if seq.rank == 0:
        raise fail("searchsorted", "the sorted sequence must have at least one dimension")
    if seq.rank > 1 and (values.rank != seq.rank or values.shape[:-1] != seq.shape[:-1]):
        raise fail("searchsorted", f"an N-d sequence {list(seq.shape)} needs values with the same leading dims, "
                                   f"got {list(values.shape)}")
    if len(types) == 3 and (types[2].shape != seq.shape or types[2].dtype is not I64):
        raise fail("searchsorted", f"sorter must be i64 {list(seq.shape)}, got {types[2]}")
    return TensorType(values.shape, I32 if attrs["out_int32"] else I64)


def _searchsorted(seq, values, sorter=None, *, right, out_int32):
    side = "right" if right else "left"
    if sorter is not None:
        seq = np.take_along_axis(seq, sorter, -1)
    if seq.ndim == 1:
        out = np.searchsorted(seq, values, side=side)
    else:
        rows = int(np.prod(seq.shape[:-1]))
        rows_seq = seq.reshape(rows, seq.shape[-1])
        rows_val = values.reshape(rows, values.shape[-1])
        out = np.zeros(rows_val.shape, np.int64)
        for row, (s, v) in enumerate(zip(rows_seq, rows_val)):
            out[row] = np.searchsorted(s, v, side=side)
        out = out.reshape(values.shape)
    return np.asarray(out).astype(np.int32 if out_int32 else np.int64)


def _infer_histc(types, attrs):
    x = types[0]
    if not x.dtype.is_float:
        raise fail("histc", f"operand must be float, got {x.dtype.value}")
    if attrs["bins"] <= 0 or not attrs["max"] >= attrs["min"] or not np.isfinite([attrs["min"], attrs["max"]]).all():
        raise fail("histc", f"needs bins > 0 and finite max >= min, got bins={attrs['bins']} [{attrs['min']}, "
                            f"{attrs['max']}]")
    return TensorType((attrs["bins"],), x.dtype)


def _histc(x, *, bins, min, max):
    data = np.asarray(x, np.float32).reshape(-1)
    low, high = np.float32(min), np.float32(max)
    if low == high and data.size:
        finite = data[np.isfinite(data)]
        low, high = (finite.min(), finite.max()) if finite.size else (low, high)
    if low == high:
        low, high = low - np.float32(1), high + np.float32(1)
    inside = data[(data >= low) & (data <= high)]
    position = ((inside - low) * np.float32(bins) / (high - low)).astype(np.int64)
    position = np.minimum(position, bins - 1)
    return np.bincount(position, minlength=bins).astype(np.float32)


def _linspace_f32(start: np.float32, end: np.float32, steps: int) -> np.ndarray:
    """torch.linspace in float32, ATen's formula (from the start for the first half, from the end after)."""
    if steps == 1:
        return np.array([start], np.float32)
    step = np.float32((end - start) / np.float32(steps - 1))
    index = np.arange(steps)
    front = start + step * index.astype(np.float32)
    back = end - step * (steps - 1 - index).astype(np.float32)
    return np.where(index < steps // 2, front, back).astype(np.float32)


def _count(data: np.ndarray, edges: np.ndarray, weight: np.ndarray | None, density: bool) -> np.ndarray:
    """Counts (or weight sums) per bin [edges[i], edges[i+1]), the last bin closed; outside ignored."""
    bins = len(edges) - 1
    inside = (data >= edges[0]) & (data <= edges[-1])
    position = np.minimum(np.searchsorted(edges, data[inside], side="right") - 1, bins - 1)
    weights = None if weight is None else np.asarray(weight, np.float64).reshape(-1)[inside]
    hist = np.bincount(position, weights=weights, minlength=bins).astype(np.float64)
    if density:
        hist = hist / (hist.sum() * np.diff(edges.astype(np.float64)))
    return hist


def _check_histogram_input(op: str, types: tuple[TensorType, ...], weighted: bool) -> TensorType:
    x = types[0]
    if not x.dtype.is_float:
        raise fail(op, f"operand must be float, got {x.dtype.value}")
    if weighted and (types[-1].shape != x.shape or types[-1].dtype != x.dtype):
        raise fail(op, f"weight {types[-1]} must match the input {x}")
    return x


def _infer_histogram(types, attrs):
    x = _check_histogram_input("histogram", types, len(types) == 2)
    span = attrs["range"]
    if attrs["bins"] <= 0 or len(span) not in (0, 2) or (span and not (np.isfinite(span).all() and span[0] <= span[1])):
        raise fail("histogram", f"needs bins > 0 and range [] or a finite [min, max], got bins={attrs['bins']} "
                                f"range={list(span)}")
    return TensorType((attrs["bins"],), x.dtype), TensorType((attrs["bins"] + 1,), x.dtype)


def _histogram(x, weight=None, *, bins, range, density):
    data = np.asarray(x, np.float32).reshape(-1)
    if range:
        low, high = np.float32(range[0]), np.float32(range[1])
    elif data.size:
        low, high = data.min(), data.max()
    else:
        low = high = np.float32(0)
    if low == high:  # numpy's (and PyTorch's) widening of an empty range
        low, high = low - np.float32(0.5), high + np.float32(0.5)
    edges = _linspace_f32(np.float32(low), np.float32(high), bins + 1)
    return _count(data, edges, weight, density), edges


def _infer_histogram_edges(types, attrs):
    x = _check_histogram_input("histogram_edges", types, len(types) == 3)
    edges = types[1]
    if edges.rank != 1 or edges.shape[0] < 2 or edges.dtype != x.dtype:
        raise fail("histogram_edges", f"bin edges must be a 1-d {x.dtype.value} tensor of 2 or more, got {edges}")
    return TensorType((edges.shape[0] - 1,), x.dtype)


def _histogram_edges(x, edges, weight=None, *, density):
    return _count(np.asarray(x, np.float32).reshape(-1), np.asarray(edges, np.float32), weight, density)


_DIM = {"dim": AttrSpec("int")}

OPS = (
    OpDef("sort", Category.EXTERN, (1, 1), _infer_sort, _sort,
          {**_DIM, "descending": AttrSpec("bool", False), "stable": AttrSpec("bool", False)},
          "values sorted along dim and their i64 source indices (NaN largest; equal elements keep their order)"),
    OpDef("topk", Category.EXTERN, (1, 1), _infer_topk, _topk,
          {"k": AttrSpec("int"), **_DIM, "largest": AttrSpec("bool", True), "sorted": AttrSpec("bool", True)},
          "the k largest (or smallest) values along dim, sorted, with their i64 indices"),
    OpDef("kthvalue", Category.EXTERN, (1, 1), _infer_select("kthvalue"), _kthvalue,
          {"k": AttrSpec("int"), **_DIM, "keepdim": AttrSpec("bool", False)},
          "the k-th smallest value along dim (1-based) and its i64 index"),
    OpDef("median", Category.EXTERN, (1, 1), _infer_select("median"), _median,
          {**_DIM, "keepdim": AttrSpec("bool", False), "ignore_nan": AttrSpec("bool", False)},
          "lower median along dim and its index (NaN if any; ignore_nan: nanmedian, the median of the rest)"),
    OpDef("mode", Category.EXTERN, (1, 1), _infer_select("mode"), _mode,
          {**_DIM, "keepdim": AttrSpec("bool", False)},
          "most frequent value along dim (smallest of equally frequent ones) and its last i64 index"),
    OpDef("cummax", Category.EXTERN, (1, 1), _infer_cumextreme("cummax"), _cumextreme(True), _DIM,
          "running maximum along dim and the (latest) i64 index where it occurs; NaN propagates"),
    OpDef("cummin", Category.EXTERN, (1, 1), _infer_cumextreme("cummin"), _cumextreme(False), _DIM,
          "running minimum along dim and the (latest) i64 index where it occurs; NaN propagates"),
    OpDef("logcumsumexp", Category.EXTERN, (1, 1), _infer_logcumsumexp, _logcumsumexp, _DIM,
          "log of the running sum of exp along dim"),
    OpDef("searchsorted", Category.EXTERN, (2, 3), _infer_searchsorted, _searchsorted,
          {"right": AttrSpec("bool", False), "out_int32": AttrSpec("bool", False)},
          "insertion indices of values in a sorted sequence (1-d, or N-d row by row); optional i64 sorter"),
    OpDef("histc", Category.EXTERN, (1, 1), _infer_histc, _histc,
          {"bins": AttrSpec("int", 100), "min": AttrSpec("float", 0.0), "max": AttrSpec("float", 0.0)},
          "histogram of equal-width bins over [min, max] (min == max: the data's range); outside ignored"),
    OpDef("histogram", Category.EXTERN, (1, 2), _infer_histogram, _histogram,
          {"bins": AttrSpec("int", 100), "range": AttrSpec("numbers", ()), "density": AttrSpec("bool", False)},
          "torch.histogram with a bin count: counts (or sums of the optional weight operand) and the bin edges "
          "(linspace over range, or over the data's min and max)"),
    OpDef("histogram_edges", Category.EXTERN, (2, 3), _infer_histogram_edges, _histogram_edges,
          {"density": AttrSpec("bool", False)},
          "torch.histogram with given bin edges (operands: input, edges, optional weight); the last bin closed"),
)
