"""Views and data movement: reshape, permute, expand, slice, select, squeeze/unsqueeze, cat, split,
constant_pad, copy, flip, slice_scatter, select_scatter, as_strided, repeat.

Values are logical tensors: a view op produces a value, and whether it shares storage is a backend decision
(``Trait.VIEW`` records PyTorch's aliasing; ``Trait.STRIDED_VIEW`` marks the views that are a strided window
on any laid-out operand, ``Trait.RESHAPE`` those that keep the row-major order). Attributes are normalized:
dims are non-negative and slice bounds are clamped by the front end.
"""

from __future__ import annotations

import math

import numpy as np

from neuroncc.ir.attrs import Attrs
from neuroncc.ir.opdef import AttrSpec, Category, OpDef, Trait, check_scalar, fail, normalize_dim, same_dtype
from neuroncc.ir.types import TensorType, contiguous_strides


def _infer_reshape(types: tuple[TensorType, ...], attrs: Attrs) -> TensorType:
    (t,) = types
    shape = attrs["shape"]
    if any(s < 0 for s in shape):
        raise fail("reshape", f"shape {list(shape)} has a negative size (the front end resolves -1)")
    if math.prod(shape) != t.numel:
        raise fail("reshape", f"cannot reshape {list(t.shape)} ({t.numel} elements) to {list(shape)}")
    return TensorType(shape, t.dtype)


def _infer_permute(types: tuple[TensorType, ...], attrs: Attrs) -> TensorType:
    (t,) = types
    dims = attrs["dims"]
    if sorted(dims) != list(range(t.rank)):
        raise fail("permute", f"dims {list(dims)} are not a permutation of {t.rank} dimensions")
    return TensorType(tuple(t.shape[d] for d in dims), t.dtype)


def _infer_expand(types: tuple[TensorType, ...], attrs: Attrs) -> TensorType:
    (t,) = types
    shape = attrs["shape"]
    if any(s < 0 for s in shape):
        raise fail("expand", f"shape {list(shape)} has a negative size (the front end resolves -1)")
    if len(shape) < t.rank:
        raise fail("expand", f"cannot expand {list(t.shape)} to fewer dims {list(shape)}")
    padded = (1,) * (len(shape) - t.rank) + t.shape
    for have, want in zip(padded, shape):
        if have != want and have != 1:
            raise fail("expand", f"cannot expand {list(t.shape)} to {list(shape)}")
    return TensorType(shape, t.dtype)


def _check_slice(op: str, t: TensorType, attrs: Attrs) -> tuple[int, int]:
    dim = normalize_dim(op, attrs["dim"], t.rank)
    if t.rank == 0:
        raise fail(op, "cannot slice a 0-dim tensor")
    start, end, step = attrs["start"], attrs["end"], attrs["step"]
    if step < 1:
        raise fail(op, f"step must be positive, got {step}")
    if not 0 <= start <= end <= t.shape[dim]:
        raise fail(op, f"slice [{start}:{end}] out of bounds for dimension {dim} of size {t.shape[dim]}")
    return dim, len(range(start, end, step))


def _infer_slice(types: tuple[TensorType, ...], attrs: Attrs) -> TensorType:
    (t,) = types
    dim, length = _check_slice("slice", t, attrs)
    return TensorType(t.shape[:dim] + (length,) + t.shape[dim + 1:], t.dtype)


def _slice(x, dim, start, end, step):
    index = [slice(None)] * x.ndim
    index[dim] = slice(start, end, step)
    return x[tuple(index)]


def _check_select(op: str, t: TensorType, attrs: Attrs) -> int:
    if t.rank == 0:
        raise fail(op, "cannot select from a 0-dim tensor")
    dim = normalize_dim(op, attrs["dim"], t.rank)
    if not 0 <= attrs["index"] < t.shape[dim]:
        raise fail(op, f"index {attrs['index']} out of range for dimension {dim} of size {t.shape[dim]}")
    return dim


def _infer_select(types: tuple[TensorType, ...], attrs: Attrs) -> TensorType:
    (t,) = types
    dim = _check_select("select", t, attrs)
    return TensorType(t.shape[:dim] + t.shape[dim + 1:], t.dtype)


def _select(x, dim, index):
    window = [slice(None)] * x.ndim
    window[dim] = slice(index, index + 1)
    return x[tuple(window)].squeeze(dim)  # a view of x (a 0-dim one when x is 1-d), as torch.select


def _infer_squeeze(types: tuple[TensorType, ...], attrs: Attrs) -> TensorType:
    (t,) = types
    dims = {normalize_dim("squeeze", d, t.rank) for d in attrs["dims"]} if t.rank else set()
    for d in dims:
        if t.shape[d] != 1:
            raise fail("squeeze", f"dimension {d} has size {t.shape[d]}, not 1")
    return TensorType(tuple(s for i, s in enumerate(t.shape) if i not in dims), t.dtype)


def _squeeze(x, dims):
    dropped = {d % x.ndim for d in dims} if x.ndim else set()  # the type rule accepts negative dims
    return x.reshape(tuple(s for i, s in enumerate(x.shape) if i not in dropped))


def _infer_unsqueeze(types: tuple[TensorType, ...], attrs: Attrs) -> TensorType:
    (t,) = types
    dim = normalize_dim("unsqueeze", attrs["dim"], t.rank + 1)
    return TensorType(t.shape[:dim] + (1,) + t.shape[dim:], t.dtype)


def _infer_cat(types: tuple[TensorType, ...], attrs: Attrs) -> TensorType:
    dtype = same_dtype("cat", types)
    first = types[0]
    dim = normalize_dim("cat", attrs["dim"], first.rank)
    if first.rank == 0:
        raise fail("cat", "cannot concatenate 0-dim tensors")
    for index, t in enumerate(types):
        if t.rank != first.rank or t.shape[:dim] + t.shape[dim + 1:] != first.shape[:dim] + first.shape[dim + 1:]:
            raise fail("cat", f"operand #{index} {list(t.shape)} does not match operand #0 {list(first.shape)} "
                              f"outside dimension {dim}")
    total = sum(t.shape[dim] for t in types)
    return TensorType(first.shape[:dim] + (total,) + first.shape[dim + 1:], dtype)


def _infer_split(types: tuple[TensorType, ...], attrs: Attrs) -> tuple[TensorType, ...]:
    (t,) = types
    if t.rank == 0:
        raise fail("split", "cannot split a 0-dim tensor")
    dim = normalize_dim("split", attrs["dim"], t.rank)
    sizes = attrs["sizes"]
    if sum(sizes) != t.shape[dim] or any(s < 0 for s in sizes):
        raise fail("split", f"sizes {list(sizes)} do not add up to dimension {dim} of size {t.shape[dim]}")
    return tuple(TensorType(t.shape[:dim] + (s,) + t.shape[dim + 1:], t.dtype) for s in sizes)


def _split(x, dim, sizes):
    bounds = np.cumsum((0, *sizes))  # one piece per size, even for sizes=[] (np.split would return x itself)
    return tuple(_slice(x, dim % x.ndim, int(a), int(b), 1) for a, b in zip(bounds, bounds[1:]))


def _infer_pad(types: tuple[TensorType, ...], attrs: Attrs) -> TensorType:
    (t,) = types
    pad = attrs["pad"]
    if len(pad) % 2 or len(pad) // 2 > t.rank:
        raise fail("constant_pad", f"pad {list(pad)} must hold (before, after) pairs for at most {t.rank} dims")
    shape = list(t.shape)
    for i in range(len(pad) // 2):
        d = t.rank - 1 - i  # pairs start at the last dimension, as in torch.nn.functional.pad
        before, after = pad[2 * i], pad[2 * i + 1]
        # negative pads crop first (PyTorch narrows the input), and cannot crop more than the dimension holds
        if t.shape[d] + min(before, 0) + min(after, 0) < 0:
            raise fail("constant_pad", f"pad {list(pad)} crops more than the {t.shape[d]} elements of dimension {d}")
        shape[d] += before + after
        if shape[d] < 0:
            raise fail("constant_pad", f"pad {list(pad)} leaves dimension {d} with negative size")
    if isinstance(attrs["value"], float) and not (t.dtype.is_float or t.dtype.is_complex):
        raise fail("constant_pad", f"float pad value {attrs['value']} for {t.dtype.value} tensor")
    check_scalar("constant_pad", "pad value", attrs["value"], t.dtype)
    return TensorType(tuple(shape), t.dtype)


def _constant_pad(x, pad, value):
    if x.ndim == 0:
        return x.copy()  # nothing to pad (np.pad refuses an empty list of widths)
    widths = [(0, 0)] * x.ndim
    crops = [slice(None)] * x.ndim
    for i in range(len(pad) // 2):
        d = x.ndim - 1 - i
        before, after = pad[2 * i], pad[2 * i + 1]
        widths[d] = (max(before, 0), max(after, 0))
        crops[d] = slice(max(-before, 0), x.shape[d] + max(before, 0) + max(after, 0) - max(-after, 0))
    return np.pad(x, widths, constant_values=value)[tuple(crops)]


def _infer_same(name: str):
    def infer(types: tuple[TensorType, ...], attrs: Attrs) -> TensorType:
        return types[0].contiguous()

    return infer


def _infer_flip(types: tuple[TensorType, ...], attrs: Attrs) -> TensorType:
    (t,) = types
    dims = [normalize_dim("flip", d, t.rank) for d in attrs["dims"]]
    if len(set(dims)) != len(dims):
        raise fail("flip", f"dims {list(attrs['dims'])} name a dimension twice")
    return t.contiguous()


def _flip(x, dims):
    # a copy, as torch.flip (np.flip is a view); a 0-dim tensor accepts dim 0/-1 but np.flip does not
    return np.flip(x, dims).copy() if x.ndim else x.copy()


def _infer_slice_scatter(types: tuple[TensorType, ...], attrs: Attrs) -> TensorType:
    base, src = types
    same_dtype("slice_scatter", types)
    dim, length = _check_slice("slice_scatter", base, attrs)
    want = base.shape[:dim] + (length,) + base.shape[dim + 1:]
    if src.shape != want:
        raise fail("slice_scatter", f"src {list(src.shape)} does not match the slice shape {list(want)}")
    return base.contiguous()


def _slice_scatter(base, src, dim, start, end, step):
    out = base.copy()
    index = [slice(None)] * base.ndim
    index[dim] = slice(start, end, step)
    out[tuple(index)] = src
    return out


def _infer_select_scatter(types: tuple[TensorType, ...], attrs: Attrs) -> TensorType:
    base, src = types
    same_dtype("select_scatter", types)
    dim = _check_select("select_scatter", base, attrs)
    want = base.shape[:dim] + base.shape[dim + 1:]
    if src.shape != want:
        raise fail("select_scatter", f"src {list(src.shape)} does not match the selected shape {list(want)}")
    return base.contiguous()


def _select_scatter(base, src, dim, index):
    out = base.copy()
    idx = [slice(None)] * base.ndim
    idx[dim] = index
    out[tuple(idx)] = src
    return out


def _infer_as_strided(types: tuple[TensorType, ...], attrs: Attrs) -> TensorType:
    (t,) = types
    shape, strides, offset = attrs["shape"], attrs["strides"], attrs["offset"]
    if len(shape) != len(strides):
        raise fail("as_strided", f"shape {list(shape)} and strides {list(strides)} differ in rank")
    if any(s < 0 for s in shape):
        raise fail("as_strided", f"shape {list(shape)} has a negative size")
    if any(s < 0 for s in strides) or offset < 0:
        raise fail("as_strided", "strides and offset must be non-negative")
    if math.prod(shape) and offset + sum((n - 1) * s for n, s in zip(shape, strides)) >= t.numel:
        raise fail("as_strided", f"view {list(shape)} strides {list(strides)} offset {offset} reads past "
                                 f"the {t.numel} elements of the operand")
    return TensorType(shape, t.dtype)


def _as_strided(x, shape, strides, offset):
    """Index the operand's contiguous storage as PyTorch's as_strided does (a view of it, read-only: windows
    may overlap)."""
    flat = np.ascontiguousarray(x).reshape(-1)
    if not shape or 0 in shape:
        return flat[offset:offset + 1].reshape(shape) if not shape else np.empty(shape, flat.dtype)
    return np.lib.stride_tricks.as_strided(flat[offset:], shape, [stride * flat.itemsize for stride in strides],
                                           writeable=False)


def _infer_repeat(types: tuple[TensorType, ...], attrs: Attrs) -> TensorType:
    (t,) = types
    repeats = attrs["repeats"]
    if len(repeats) < t.rank or any(r < 0 for r in repeats):
        raise fail("repeat", f"repeats {list(repeats)} must be non-negative and cover all {t.rank} dims")
    padded = (1,) * (len(repeats) - t.rank) + t.shape
    return TensorType(tuple(s * r for s, r in zip(padded, repeats)), t.dtype)


def _repeat(x, repeats):
    return np.tile(x.reshape((1,) * (len(repeats) - x.ndim) + x.shape), repeats)


_SLICE_ATTRS = {"dim": AttrSpec("int"), "start": AttrSpec("int"), "end": AttrSpec("int"), "step": AttrSpec("int", 1)}
_SELECT_ATTRS = {"dim": AttrSpec("int"), "index": AttrSpec("int")}

#: A strided window on operand 0 (see Trait.STRIDED_VIEW) ...
_WINDOW = frozenset({Trait.VIEW, Trait.STRIDED_VIEW})
#: ... that keeps the row-major order.
_REGROUPING = _WINDOW | {Trait.RESHAPE}

OPS = (
    OpDef("reshape", Category.MOVEMENT, (1, 1), _infer_reshape, lambda x, shape: x.reshape(shape),
          {"shape": AttrSpec("ints")}, "row-major reshape", traits=_REGROUPING),
    OpDef("permute", Category.MOVEMENT, (1, 1), _infer_permute, lambda x, dims: np.transpose(x, dims),
          {"dims": AttrSpec("ints")}, "reorder dimensions", traits=_WINDOW),
    OpDef("expand", Category.MOVEMENT, (1, 1), _infer_expand, lambda x, shape: np.broadcast_to(x, shape),
          {"shape": AttrSpec("ints")}, "broadcast to a shape (stride-0 view)",
          traits=_WINDOW | {Trait.BROADCAST}),
    OpDef("slice", Category.MOVEMENT, (1, 1), _infer_slice, _slice, _SLICE_ATTRS, "x[start:end:step] along dim",
          traits=_WINDOW),
    OpDef("select", Category.MOVEMENT, (1, 1), _infer_select, _select, _SELECT_ATTRS,
          "x[index] along dim (drops dim)", traits=_WINDOW),
    OpDef("squeeze", Category.MOVEMENT, (1, 1), _infer_squeeze, _squeeze, {"dims": AttrSpec("ints")},
          "drop size-1 dims", traits=_REGROUPING),
    OpDef("unsqueeze", Category.MOVEMENT, (1, 1), _infer_unsqueeze, lambda x, dim: np.expand_dims(x, dim),
          {"dim": AttrSpec("int")}, "insert a size-1 dim", traits=_REGROUPING),
    OpDef("cat", Category.MOVEMENT, (1, None), _infer_cat, lambda *xs, dim: np.concatenate(xs, axis=dim),
          {"dim": AttrSpec("int")}, "concatenate along dim", traits=frozenset({Trait.CONCATENATION})),
    OpDef("split", Category.MOVEMENT, (1, 1), _infer_split, _split, {"dim": AttrSpec("int"), "sizes": AttrSpec("ints")},
          "split into pieces of the given sizes along dim", traits=frozenset({Trait.VIEW})),
    OpDef("constant_pad", Category.MOVEMENT, (1, 1), _infer_pad, _constant_pad,
          {"pad": AttrSpec("ints"), "value": AttrSpec("number", 0.0)},
          "pad (or crop, with negative pads) with a constant, last dim first"),
    OpDef("copy", Category.MOVEMENT, (1, 1), _infer_same("copy"), lambda x: np.array(x, copy=True), {},
          "a fresh contiguous copy",
          traits=frozenset({Trait.POINTWISE})),
    OpDef("flip", Category.MOVEMENT, (1, 1), _infer_flip, _flip, {"dims": AttrSpec("ints")},
          "reverse along dims"),
    OpDef("slice_scatter", Category.MOVEMENT, (2, 2), _infer_slice_scatter, _slice_scatter, _SLICE_ATTRS,
          "base with base[start:end:step] along dim replaced by src"),
    OpDef("select_scatter", Category.MOVEMENT, (2, 2), _infer_select_scatter, _select_scatter, _SELECT_ATTRS,
          "base with base[index] along dim replaced by src"),
    OpDef("as_strided", Category.MOVEMENT, (1, 1), _infer_as_strided, _as_strided,
          {"shape": AttrSpec("ints"), "strides": AttrSpec("ints"), "offset": AttrSpec("int", 0)},
          "a strided window on the operand's contiguous storage",
          traits=frozenset({Trait.VIEW})),
    OpDef("repeat", Category.MOVEMENT, (1, 1), _infer_repeat, _repeat, {"repeats": AttrSpec("ints")},
          "tile the tensor (torch.Tensor.repeat)"),
)

__all__ = ["OPS", "contiguous_strides"]
