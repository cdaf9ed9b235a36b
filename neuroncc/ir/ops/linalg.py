"""Contractions: mm, bmm, addmm, convolution and its backward.

These are the ops the CPU backend hands to ATen/BLAS as extern kernels and the NKI backend puts on TensorE.
Convolution follows ``aten.convolution``: input [N, C, *spatial], weight [O, C/groups, *kernel] (transposed:
[C, O/groups, *kernel]), 1-d, 2-d and 3-d spatial shapes.

``mm``, ``bmm`` and ``addmm`` take ``transpose_a`` / ``transpose_b`` (default false): the operand is stored with
its last two dimensions swapped and the product uses its transpose, so ``mm(a, b, transpose_b=true)`` is
``a @ b.T``. The layout pass folds ``permute`` ops into these flags (BLAS and TensorE read either layout).

With ``words`` (default false; every op here declares it) a bf16 product or convolution takes its operands and
gives its results as 16-bit words (i16, what ``bitcast`` makes of a bf16 value): the cpu target's extern call
reads and writes them as ATen's bfloat16 tensors in place, where bf16 values otherwise live in float32 buffers
that each call narrows and widens (``bf16-product-words``, passes/product_words.py). Its reference widens the
words, computes as for bf16 operands and rounds each result once to its words.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from neuroncc.ir.attrs import Attrs
from neuroncc.ir.dtypes import DType, bf16_from_words, bf16_words, to_storage
from neuroncc.ir.opdef import AttrSpec, Category, OpDef, Trait, broadcast_shapes, fail, same_dtype
from neuroncc.ir.types import TensorType


def _wide(x: np.ndarray) -> np.ndarray:
    return x.astype(np.float64) if x.dtype.kind == "f" else x


def _swap_last_two(t: TensorType) -> TensorType:
    return TensorType(t.shape[:-2] + (t.shape[-1], t.shape[-2]), t.dtype) if t.rank >= 2 else t


def _logical_operands(types: tuple[TensorType, ...], attrs: Attrs) -> tuple[TensorType, TensorType]:
    """The matmul operands as the product sees them (after the transpose flags)."""
    a, b = types
    return (_swap_last_two(a) if attrs["transpose_a"] else a), (_swap_last_two(b) if attrs["transpose_b"] else b)


def _numeric_dtype(op: str, types: tuple[TensorType, ...], *, floats_only: bool = False) -> DType:
    """The operands' one element type; PyTorch has no bool (and no integer convolution) kernels."""
    dtype = same_dtype(op, types)
    if dtype.is_bool or (floats_only and not dtype.is_float):
        raise fail(op, f"operands must be {'float' if floats_only else 'numeric'}, got {dtype.value}")
    return dtype


def _product_dtype(op: str, types: tuple[TensorType, ...], attrs: Attrs, *, floats_only: bool = False) -> DType:
    """The op's element type: the operands' one type (i16, bf16 words, with ``words``; a float one for a
    convolution without)."""
    if not attrs["words"]:
        return _numeric_dtype(op, types, floats_only=floats_only)
    dtype = same_dtype(op, types)
    if dtype is not DType.i16:
        raise fail(op, f"words: operands must be i16 (bf16 words), got {dtype.value}")
    return dtype


def _infer_mm(types: tuple[TensorType, ...], attrs: Attrs, op: str = "mm") -> TensorType:
    dtype = _product_dtype(op, types, attrs)
    a, b = _logical_operands(types, attrs)
    if a.rank != 2 or b.rank != 2:
        raise fail(op, f"operands must be 2-d, got {a} and {b}")
    if a.shape[1] != b.shape[0]:
        raise fail(op, f"contraction sizes differ: {list(a.shape)} @ {list(b.shape)}")
    return TensorType((a.shape[0], b.shape[1]), dtype)


def _infer_bmm(types: tuple[TensorType, ...], attrs: Attrs) -> TensorType:
    dtype = _product_dtype("bmm", types, attrs)
    a, b = _logical_operands(types, attrs)
    if a.rank != 3 or b.rank != 3:
        raise fail("bmm", f"operands must be 3-d, got {a} and {b}")
    if a.shape[0] != b.shape[0] or a.shape[2] != b.shape[1]:
        raise fail("bmm", f"shapes do not match: {list(a.shape)} @ {list(b.shape)}")
    return TensorType((a.shape[0], a.shape[1], b.shape[2]), dtype)


def _infer_addmm(types: tuple[TensorType, ...], attrs: Attrs) -> TensorType:
    bias, a, b = types
    dtype = _product_dtype("addmm", types, attrs)
    integral = all(math.isfinite(attrs[k]) and attrs[k] == int(attrs[k]) for k in ("beta", "alpha"))
    if not dtype.is_float and not attrs["words"] and not integral:
        raise fail("addmm", f"beta and alpha must be integers for {dtype.value} operands, "
                            f"got {attrs['beta']} and {attrs['alpha']}")
    out = _infer_mm((a, b), attrs, "addmm")
    if broadcast_shapes("addmm", bias.shape, out.shape) != out.shape:
        raise fail("addmm", f"bias {list(bias.shape)} does not broadcast to {list(out.shape)}")
    return out


def _words_of(x: np.ndarray) -> np.ndarray:
    """A computed product as the words of its bf16 value (rounded once, as a bf16 result is stored)."""
    return bf16_words(to_storage(x, DType.bf16))


def _words_reference(reference):
    """``reference`` on bf16 words: operands widened to their bf16 values, each result given as its words."""
    def on_words(*operands, words=False, **attrs):
        if not words:
            return reference(*operands, **attrs)
        computed = reference(*(bf16_from_words(x) for x in operands), **attrs)
        return tuple(map(_words_of, computed)) if isinstance(computed, tuple) else _words_of(computed)
    return on_words


def _product(a, b, transpose_a: bool, transpose_b: bool):
    a, b = _wide(a), _wide(b)
    return (np.swapaxes(a, -1, -2) if transpose_a else a) @ (np.swapaxes(b, -1, -2) if transpose_b else b)


@_words_reference
def _mm(a, b, transpose_a=False, transpose_b=False):
    return _product(a, b, transpose_a, transpose_b)


@_words_reference
def _addmm(bias, a, b, beta, alpha, transpose_a=False, transpose_b=False):
    product = alpha * _product(a, b, transpose_a, transpose_b)
    if beta == 0:  # torch.addmm ignores the bias when beta is 0: its NaN and inf do not propagate
        return product
    return beta * _wide(bias) + product


#: bf16 values as their i16 words (the module docstring), an attribute of every product and convolution
_WORDS = {"words": AttrSpec("bool", False)}
_TRANSPOSE_ATTRS = {"transpose_a": AttrSpec("bool", False), "transpose_b": AttrSpec("bool", False), **_WORDS}


# ---- convolution ---------------------------------------------------------------------------------------

_CONV_ATTRS = {
    "stride": AttrSpec("ints"),
    "padding": AttrSpec("ints"),
    "dilation": AttrSpec("ints"),
    "transposed": AttrSpec("bool", False),
    "output_padding": AttrSpec("ints", ()),
    "groups": AttrSpec("int", 1),
}


def conv_output_size(size: int, kernel: int, stride: int, padding: int, dilation: int,
                     transposed: bool, output_padding: int) -> int:
    if transposed:
        return (size - 1) * stride - 2 * padding + dilation * (kernel - 1) + output_padding + 1
    return (size + 2 * padding - dilation * (kernel - 1) - 1) // stride + 1


def _spatial_attrs(op: str, attrs: Attrs, nspatial: int) -> tuple[tuple[int, ...], ...]:
    def expand(key: str, default: int) -> tuple[int, ...]:
        value = attrs[key] or (default,)
        if len(value) == 1:
            value = value * nspatial
        if len(value) != nspatial:
            raise fail(op, f"{key} {list(attrs[key])} does not match {nspatial} spatial dims")
        return value

    return expand("stride", 1), expand("padding", 0), expand("dilation", 1), expand("output_padding", 0)


def _infer_conv(types: tuple[TensorType, ...], attrs: Attrs, op: str = "convolution") -> TensorType:
    x, w = types[0], types[1]
    dtype = _product_dtype(op, types, attrs, floats_only=True)
    if x.rank not in (3, 4, 5) or w.rank != x.rank:
        raise fail(op, f"expects 1-d, 2-d or 3-d convolution (rank-3/4/5 input and weight), got {x} and {w}")
    nspatial, groups = x.rank - 2, attrs["groups"]
    stride, padding, dilation, output_padding = _spatial_attrs(op, attrs, nspatial)
    # PyTorch's own checks (aten/src/ATen/native/Convolution.cpp): numpy would divide by zero or misindex
    if min(stride) < 1 or min(dilation) < 1:
        raise fail(op, f"stride {list(stride)} and dilation {list(dilation)} must be positive")
    if min(padding) < 0 or min(output_padding) < 0:
        raise fail(op, f"padding {list(padding)} and output_padding {list(output_padding)} must be non-negative")
    if attrs["transposed"] and any(p >= max(s, d) for p, s, d in zip(output_padding, stride, dilation)):
        raise fail(op, f"output_padding {list(output_padding)} must be smaller than stride or dilation")
    if w.shape[0] == 0 or 0 in w.shape[2:]:
        raise fail(op, f"weight {list(w.shape)} has no output channels or an empty kernel")
    if 0 in x.shape[1:]:
        raise fail(op, f"input {list(x.shape)} has no channels or an empty spatial dimension (only the batch may be 0)")
    if groups < 1 or x.shape[1] % groups:
        raise fail(op, f"input channels {x.shape[1]} are not divisible by groups={groups}")
    if attrs["transposed"]:
        if w.shape[0] != x.shape[1]:
            raise fail(op, f"transposed weight {list(w.shape)} needs {x.shape[1]} input channels")
        out_channels = w.shape[1] * groups
    else:
        if w.shape[1] * groups != x.shape[1]:
            raise fail(op, f"weight {list(w.shape)} expects {w.shape[1] * groups} input channels, "
                                 f"input has {x.shape[1]}")
        out_channels = w.shape[0]
    if len(types) == 3 and types[2].shape != (out_channels,):
        raise fail(op, f"bias must have shape [{out_channels}], got {list(types[2].shape)}")
    spatial = tuple(
        conv_output_size(x.shape[2 + i], w.shape[2 + i], stride[i], padding[i], dilation[i], attrs["transposed"],
                         output_padding[i])
        for i in range(nspatial)
    )
    if any(s <= 0 for s in spatial):
        raise fail(op, f"output spatial size {list(spatial)} is not positive")
    return TensorType((x.shape[0], out_channels, *spatial), dtype)


def _full(values: tuple[int, ...], nspatial: int, fill: int) -> tuple[int, ...]:
    values = values or (fill,)
    return tuple(values * nspatial if len(values) == 1 else values)


def _taps(kernel: tuple[int, ...]):
    return itertools.product(*(range(k) for k in kernel))


def _window(taps, dilation, stride, out) -> tuple[slice, ...]:
    """The strided slice of the padded input that kernel tap ``taps`` reads for every output position."""
    return (slice(None), slice(None)) + tuple(slice(t * d, t * d + s * (o - 1) + 1, s)
                                              for t, d, s, o in zip(taps, dilation, stride, out))


def conv_forward(x, w, stride, padding, dilation, groups):
    """Cross-correlation, x [N, C, *S], w [O, C/g, *K] (float64), any number of spatial dims."""
    o, cg = w.shape[:2]
    xp = np.pad(x, [(0, 0), (0, 0)] + [(p, p) for p in padding])
    out_sp = [(n + 2 * p - d * (k - 1) - 1) // s + 1
              for n, k, s, p, d in zip(x.shape[2:], w.shape[2:], stride, padding, dilation)]
    out = np.zeros((x.shape[0], o, *out_sp), dtype=np.float64)
    og = o // groups
    for taps in _taps(w.shape[2:]):
        patch = xp[_window(taps, dilation, stride, out_sp)]
        for g in range(groups):
            out[:, g * og:(g + 1) * og] += np.einsum(
                "nc...,oc->no...", patch[:, g * cg:(g + 1) * cg], w[(slice(g * og, (g + 1) * og), slice(None)) + taps]
            )
    return out


def conv_transpose(x, w, stride, padding, output_padding, dilation, groups):
    """Transposed convolution (the gradient of conv_forward w.r.t. its input), w [C, O/g, *K]."""
    c, og = x.shape[1], w.shape[1]
    cg = c // groups
    sizes = x.shape[2:]
    # Scatter every input pixel through every kernel tap into the uncropped output, then crop the padding.
    full = [(n - 1) * s + d * (k - 1) + 1 + op for n, s, d, k, op in zip(sizes, stride, dilation, w.shape[2:],
                                                                         output_padding)]
    out = np.zeros((x.shape[0], og * groups, *full), dtype=np.float64)
    for taps in _taps(w.shape[2:]):
        window = _window(taps, dilation, stride, sizes)
        for g in range(groups):
            contrib = np.einsum("nc...,co->no...", x[:, g * cg:(g + 1) * cg],
                                w[(slice(g * cg, (g + 1) * cg), slice(None)) + taps])
            out[(slice(None), slice(g * og, (g + 1) * og)) + window[2:]] += contrib
    return out[(slice(None), slice(None)) + tuple(slice(p, f - p) for p, f in zip(padding, full))]


def conv_weight_grad(x, grad_out, w_shape, stride, padding, dilation, groups):
    o, cg = w_shape[:2]
    og = o // groups
    xp = np.pad(x, [(0, 0), (0, 0)] + [(p, p) for p in padding])
    gw = np.zeros(w_shape, dtype=np.float64)
    for taps in _taps(w_shape[2:]):
        patch = xp[_window(taps, dilation, stride, grad_out.shape[2:])]
        for g in range(groups):
            summed = [0, *range(2, grad_out.ndim)]  # batch and output positions
            gw[(slice(g * og, (g + 1) * og), slice(None)) + taps] = np.tensordot(
                grad_out[:, g * og:(g + 1) * og], patch[:, g * cg:(g + 1) * cg], axes=(summed, summed)
            )
    return gw


@_words_reference
def _conv(x, w, bias=None, *, stride, padding, dilation, transposed, output_padding, groups):
    n = x.ndim - 2
    x, w = _wide(x), _wide(w)
    st, pa, di = _full(stride, n, 1), _full(padding, n, 0), _full(dilation, n, 1)
    if transposed:
        out = conv_transpose(x, w, st, pa, _full(output_padding, n, 0), di, groups)
    else:
        out = conv_forward(x, w, st, pa, di, groups)
    if bias is not None:
        out = out + _wide(bias).reshape((1, -1) + (1,) * n)
    return out


def _infer_conv_backward(types: tuple[TensorType, ...], attrs: Attrs) -> tuple[TensorType, ...]:
    grad, x, w = types
    if attrs["transposed"]:
        raise fail("convolution_backward", "transposed convolution backward is not supported")
    forward = _infer_conv((x, w), attrs, "convolution_backward")
    if forward.shape != grad.shape or grad.dtype != x.dtype:
        raise fail("convolution_backward", f"grad_output {grad} does not match the forward output {forward}")
    mask = attrs["output_mask"]
    if len(mask) != 3:
        raise fail("convolution_backward", f"output_mask must have 3 entries, got {list(mask)}")
    candidates = (x.contiguous(), w.contiguous(), TensorType((w.shape[0],), x.dtype))
    return tuple(t for t, wanted in zip(candidates, mask) if wanted)


@_words_reference
def _conv_backward(grad, x, w, *, stride, padding, dilation, transposed, output_padding, groups, output_mask):
    n = x.ndim - 2
    grad, x, w = _wide(grad), _wide(x), _wide(w)
    st, pa, di = _full(stride, n, 1), _full(padding, n, 0), _full(dilation, n, 1)
    results = []
    if output_mask[0]:
        # Pick output_padding so the transposed conv reproduces the input's exact spatial size.
        full = [(grad.shape[2 + i] - 1) * st[i] - 2 * pa[i] + di[i] * (w.shape[2 + i] - 1) + 1 for i in range(n)]
        out_pad = tuple(x.shape[2 + i] - full[i] for i in range(n))
        # The input gradient is the transposed convolution of grad with the same weight: read as a transposed
        # weight, [O, C/g, *K] maps O input channels to C output channels, group by group.
        results.append(conv_transpose(grad, w, st, pa, out_pad, di, groups))
    if output_mask[1]:
        results.append(conv_weight_grad(x, grad, w.shape, st, pa, di, groups))
    if output_mask[2]:
        results.append(np.sum(grad, axis=(0, *range(2, grad.ndim))))
    return tuple(results)


_PRODUCT = frozenset({Trait.MATRIX_PRODUCT})

OPS = (
    OpDef("mm", Category.MATMUL, (2, 2), _infer_mm, _mm, _TRANSPOSE_ATTRS,
          "matrix product [M,K] @ [K,N] (transpose_a: a is stored [K,M]; transpose_b: b is stored [N,K]; words: "
          "a bf16 product on its operands' i16 words, giving its result's)",
          traits=_PRODUCT),
    OpDef("bmm", Category.MATMUL, (2, 2), _infer_bmm, _mm, _TRANSPOSE_ATTRS,
          "batched matrix product [B,M,K] @ [B,K,N] (transpose flags swap an operand's last two dims)",
          traits=_PRODUCT),
    OpDef("addmm", Category.MATMUL, (3, 3), _infer_addmm, _addmm,
          {"beta": AttrSpec("float", 1.0), "alpha": AttrSpec("float", 1.0), **_TRANSPOSE_ATTRS},
          "beta*bias + alpha*(a @ b) (transpose flags as for mm)", traits=_PRODUCT),
    OpDef("convolution", Category.MATMUL, (2, 3), _infer_conv, _conv, {**_CONV_ATTRS, **_WORDS},
          "N-d convolution as aten.convolution (1-d, 2-d and 3-d), optional bias operand (words: a bf16 "
          "convolution on its operands' i16 words, giving its result's)"),
    OpDef("convolution_backward", Category.MATMUL, (3, 3), _infer_conv_backward, _conv_backward,
          {**_CONV_ATTRS, "output_mask": AttrSpec("ints", (1, 1, 1)), **_WORDS},
          "gradients of convolution (grad_input, grad_weight, grad_bias as output_mask selects; words: each "
          "as i16 words)"),
)
