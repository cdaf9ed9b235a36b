"""Convolutions for NKI: rewritten into ops the emitter already has (im2col by strided DMA, then TensorE).

* ``convolution(x, w)``: pad ``x`` (``constant_pad``), gather every output pixel's receptive field with one
  strided read (``as_strided`` -> ``[N*OH*OW, C*KH*KW]``, a DMA between HBM tensors), multiply by the
  flattened weight (``mm``, transposed weight) per group, and view the result as ``[N, O, OH, OW]``.
* ``convolution_backward``: the weight gradient is ``grad^T @ im2col(x)``, the bias gradient a sum, and
  the input gradient the transposed convolution, written as a convolution of the (zero-dilated, padded)
  output gradient with the flipped, channel-swapped weight.

1-d convolutions are 2-d ones with a height of 1. Transposed forward convolutions and 3-d ones are refused.
"""

from __future__ import annotations

from collections.abc import Callable

from neuroncc.errors import CodegenError
from neuroncc.ir import Builder, Function, Op, Value


def _pairs(values: tuple[int, ...], fill: int, spatial: int) -> list[int]:
    values = tuple(values) or (fill,)
    values = values * spatial if len(values) == 1 else values
    return [fill, values[0]] if spatial == 1 else [values[0], values[1]]


class _Lowering:
    """Emits the replacement ops of one convolution op into a Builder."""

    def __init__(self, b: Builder):
        self.b = b

    def as_2d(self, value: Value) -> Value:
        shape = value.type.shape
        return self.b.op("reshape", value, shape=[shape[0], shape[1], 1, shape[2]]) if len(shape) == 3 else value

    def im2col(self, x: Value, kernel: tuple[int, int], stride: list[int], padding: list[int],
               dilation: list[int], groups: int) -> tuple[list[Value], tuple[int, int]]:
        """Per group, the ``[N*OH*OW, Cg*KH*KW]`` matrix of receptive fields of ``x`` [N, C, H, W]."""
        b = self.b
        n, c, h, w = x.type.shape
        if any(padding):
            x = b.op("constant_pad", x, pad=[padding[1], padding[1], padding[0], padding[0]], value=0.0
                     if x.type.dtype.is_float else 0)
        _, _, hp, wp = x.type.shape
        kh, kw = kernel
        oh = (hp - dilation[0] * (kh - 1) - 1) // stride[0] + 1
        ow = (wp - dilation[1] * (kw - 1) - 1) // stride[1] + 1
        cg = c // groups
        columns = []
        for g in range(groups):
            patches = b.op("as_strided", x, shape=[n, oh, ow, cg, kh, kw],
                           strides=[c * hp * wp, stride[0] * wp, stride[1], hp * wp, dilation[0] * wp, dilation[1]],
                           offset=g * cg * hp * wp)
            columns.append(b.op("reshape", patches, shape=[n * oh * ow, cg * kh * kw]))
        return columns, (oh, ow)

    def forward(self, x: Value, w: Value, bias: Value | None, attrs) -> Value:
        b = self.b
        spatial = x.type.rank - 2
        x2, w2 = self.as_2d(x), self.as_2d(w)
        stride, padding = _pairs(attrs["stride"], 1, spatial), _pairs(attrs["padding"], 0, spatial)
        dilation, groups = _pairs(attrs["dilation"], 1, spatial), attrs["groups"]
        o, cg, kh, kw = w2.type.shape
        n = x2.type.shape[0]
        columns, (oh, ow) = self.im2col(x2, (kh, kw), stride, padding, dilation, groups)
        og = o // groups
        products = []
        for g, cols in enumerate(columns):
            weight = b.op("reshape", b.op("slice", w2, dim=0, start=g * og, end=(g + 1) * og, step=1),
                          shape=[og, cg * kh * kw])
            products.append(b.op("mm", cols, weight, transpose_b=True))
        product = products[0] if groups == 1 else b.op("cat", *products, dim=1)
        out = b.op("permute", b.op("reshape", product, shape=[n, oh, ow, o]), dims=[0, 3, 1, 2])
        if bias is not None:
            out = b.op("add", out, b.op("reshape", bias, shape=[o, 1, 1]))
        if spatial == 1:
            out = b.op("reshape", out, shape=[n, o, ow])
        return out

    def backward(self, grad: Value, x: Value, w: Value, attrs) -> list[Value]:
        b = self.b
        spatial = x.type.rank - 2
        g2, x2, w2 = self.as_2d(grad), self.as_2d(x), self.as_2d(w)
        stride, padding = _pairs(attrs["stride"], 1, spatial), _pairs(attrs["padding"], 0, spatial)
        dilation, groups = _pairs(attrs["dilation"], 1, spatial), attrs["groups"]
        mask = attrs["output_mask"]
        n, o, oh, ow = g2.type.shape
        _, cg, kh, kw = w2.type.shape
        og = o // groups
        rows = b.op("reshape", b.op("permute", g2, dims=[0, 2, 3, 1]), shape=[n * oh * ow, o])
        results: list[Value] = []
        if mask[0]:
            results.append(self.input_grad(g2, x2, w2, stride, padding, dilation, groups, spatial))
        if mask[1]:
            columns, _ = self.im2col(x2, (kh, kw), stride, padding, dilation, groups)
            grads = [b.op("mm", b.op("slice", rows, dim=1, start=g * og, end=(g + 1) * og, step=1), cols,
                          transpose_a=True) for g, cols in enumerate(columns)]
            weight = grads[0] if groups == 1 else b.op("cat", *grads, dim=0)
            results.append(b.op("reshape", weight, shape=list(w.type.shape)))
        if mask[2]:
            results.append(b.op("sum", g2, dims=[0, 2, 3]))
        return results

    def input_grad(self, grad: Value, x: Value, w: Value, stride: list[int], padding: list[int],
                   dilation: list[int], groups: int, spatial: int) -> Value:
        """The transposed convolution of ``grad`` as a stride-1 convolution of the zero-dilated, padded
        gradient with the flipped weight whose in and out channels are swapped per group."""
        b = self.b
        n, o, oh, ow = grad.type.shape
        _, c, h, wd = x.type.shape
        _, cg, kh, kw = w.type.shape
        og = o // groups
        dilated = grad
        if stride != [1, 1]:
            zero = 0.0 if grad.type.dtype.is_float else 0
            rows = b.op("full", shape=[n, o, oh, (ow - 1) * stride[1] + 1], dtype=grad.type.dtype, value=zero)
            rows = b.op("slice_scatter", rows, grad, dim=3, start=0, end=(ow - 1) * stride[1] + 1, step=stride[1])
            full = b.op("full", shape=[n, o, (oh - 1) * stride[0] + 1, (ow - 1) * stride[1] + 1],
                        dtype=grad.type.dtype, value=zero)
            dilated = b.op("slice_scatter", full, rows, dim=2, start=0, end=(oh - 1) * stride[0] + 1, step=stride[0])
        pads = []
        for size, k, p, d, extent in ((wd, kw, padding[1], dilation[1], dilated.type.shape[3]),
                                      (h, kh, padding[0], dilation[0], dilated.type.shape[2])):
            before = d * (k - 1) - p
            pads += [before, size - (extent + before - d * (k - 1))]
        padded = b.op("constant_pad", dilated, pad=pads, value=0.0 if grad.type.dtype.is_float else 0)
        flipped = b.op("flip", w, dims=[2, 3])
        pieces = [b.op("permute", b.op("slice", flipped, dim=0, start=g * og, end=(g + 1) * og, step=1),
                       dims=[1, 0, 2, 3]) for g in range(groups)]
        swapped = pieces[0] if groups == 1 else b.op("cat", *pieces, dim=0)
        swapped = b.op("copy", swapped)
        attrs = {"stride": [1, 1], "padding": [0, 0], "dilation": dilation, "groups": groups}
        out = self.forward(padded, swapped, None, attrs)
        return b.op("reshape", out, shape=[n, c, wd]) if spatial == 1 else out


def _forward(lowering: _Lowering, op: Op, operands: tuple[Value, ...]) -> list[Value]:
    if op.attrs["transposed"]:
        raise CodegenError("nki: op 'convolution' with transposed=true (a transposed convolution) is not "
                           "emitted for NKI")
    return [lowering.forward(operands[0], operands[1], operands[2] if len(operands) > 2 else None, op.attrs)]


def _backward(lowering: _Lowering, op: Op, operands: tuple[Value, ...]) -> list[Value]:
    return lowering.backward(*operands, op.attrs)


#: Convolution op -> its rewrite into pads, strided reads and matmuls (one entry per op).
DECOMPOSITIONS: dict[str, Callable[[_Lowering, Op, tuple[Value, ...]], list[Value]]] = {
    "convolution": _forward,
    "convolution_backward": _backward,
}


def decompose_convolutions(region: Function) -> Function:
    """``region`` with every convolution and convolution_backward rewritten (see the module docstring)."""
    if not any(op.name in DECOMPOSITIONS for op in region.ops):
        return region
    b = Builder(region.name)
    b.params = list(region.params)
    mapping: dict[Value, Value] = {}
    lowering = _Lowering(b)
    for op in region.ops:
        operands = tuple(mapping.get(v, v) for v in op.operands)
        decompose = DECOMPOSITIONS.get(op.name)
        if decompose is None:
            b.append(Op(op.name, operands, op.results, op.attrs, op.regions))
            continue
        if operands[0].type.rank == 5:
            raise CodegenError(f"nki: op '{op.name}' with 3 spatial dims (a 3-d convolution) is not emitted for "
                               "NKI; compile it for the cpu target")
        results = decompose(lowering, op, operands)
        for old, new in zip(op.results, results):
            if new.type.shape != old.type.shape or new.type.dtype != old.type.dtype:
                raise CodegenError(f"nki: decomposing '{op.name}' gave {new.type}, expected {old.type}")
            mapping[old] = new
    return b.build([mapping.get(v, v) for v in region.outputs])
