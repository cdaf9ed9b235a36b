"""Test table entries for the contractions: mm, bmm, addmm, convolution, convolution_backward."""

from __future__ import annotations

import torch
from hypothesis import strategies as st

from neuroncc.ir import DType, TensorType

from .spec import OpSpec
from .support import FLOATS, INTS, Case, Tol, operand, random_array, rngs

F32, I64, BOOL = DType.f32, DType.i64, DType.bool
MATMUL_TOL = Tol(rtol=4, atol=10, half_atol=2e-2)


def t(shape, dtype):
    return TensorType(tuple(shape), dtype)


def _small(rng, shape, dtype):
    return operand(rng, shape, dtype, low=-2, high=2)


def _stored(draw: st.DrawFn, shape: tuple[int, ...], flag: str, attrs: dict) -> tuple[int, ...]:
    """The shape an operand is stored in: with ``transpose_x`` its last two dims are swapped."""
    if draw(st.booleans()):
        attrs[flag] = draw(st.booleans())
    return shape[:-2] + (shape[-1], shape[-2]) if attrs.get(flag) else shape


@st.composite
def _mm_cases(draw: st.DrawFn, batch: bool = False) -> Case:
    rng = draw(rngs())
    dtype = draw(st.sampled_from(FLOATS + INTS))
    lead = (draw(st.integers(0, 4)),) if batch else ()
    m, k, n = (draw(st.integers(0, 5)) for _ in range(3))
    attrs: dict = {}
    a = _small(rng, _stored(draw, (*lead, m, k), "transpose_a", attrs), dtype)
    b = _small(rng, _stored(draw, (*lead, k, n), "transpose_b", attrs), dtype)
    return Case([a, b], attrs)


def _logical(xs, attrs):
    a, b = xs[-2:]
    return (a.mT if attrs["transpose_a"] else a), (b.mT if attrs["transpose_b"] else b)


@st.composite
def _addmm_cases(draw: st.DrawFn) -> Case:
    rng = draw(rngs())
    dtype = draw(st.sampled_from(FLOATS + INTS))
    m, k, n = (draw(st.integers(0, 4)) for _ in range(3))
    bias_shape = draw(st.sampled_from([(m, n), (n,), (1, n), (m, 1), (), (1,)]))
    scalar = st.sampled_from([0.0, 1.0, 0.5, -2.0]) if dtype.is_float else st.sampled_from([0, 1, 2, -1])
    attrs = {key: draw(scalar) for key in ("beta", "alpha") if draw(st.booleans())}
    bias = operand(rng, bias_shape, dtype, low=-2, high=2, specials=draw(st.booleans()))
    a = _small(rng, _stored(draw, (m, k), "transpose_a", attrs), dtype)
    b = _small(rng, _stored(draw, (k, n), "transpose_b", attrs), dtype)
    return Case([bias, a, b], attrs)


def _addmm_torch(xs, attrs):
    beta, alpha = attrs["beta"], attrs["alpha"]
    if not xs[1].is_floating_point():
        beta, alpha = int(beta), int(alpha)
    return torch.addmm(xs[0], *_logical(xs, attrs), beta=beta, alpha=alpha)


# ---- convolution ---------------------------------------------------------------------------------------


@st.composite
def _conv_geometry(draw: st.DrawFn, *, allow_transposed: bool = True) -> dict:
    nspatial = draw(st.sampled_from([1, 2, 3]))
    groups = draw(st.sampled_from([1, 1, 2]))
    c_per_group, o_per_group = draw(st.integers(1, 2)), draw(st.integers(1, 2))
    transposed = allow_transposed and draw(st.booleans())
    stride = tuple(draw(st.integers(1, 3)) for _ in range(nspatial))
    dilation = tuple(draw(st.integers(1, 2)) for _ in range(nspatial))
    kernel = tuple(draw(st.integers(1, 3)) for _ in range(nspatial))
    padding = tuple(draw(st.integers(0, 2)) for _ in range(nspatial))
    output_padding = tuple(
        draw(st.integers(0, max(s, d) - 1)) if transposed else 0 for s, d in zip(stride, dilation)
    )
    spatial = []
    for i in range(nspatial):
        extent = dilation[i] * (kernel[i] - 1) + 1
        if transposed:  # the output (size-1)*s - 2p + extent + op must be positive
            low = max(1, -(-(2 * padding[i] - extent - output_padding[i] + 1) // stride[i]) + 1)
        else:
            low = max(1, extent - 2 * padding[i])
        spatial.append(draw(st.integers(low, low + 3)))
    return dict(nspatial=nspatial, groups=groups, cg=c_per_group, og=o_per_group, transposed=transposed,
                stride=stride, dilation=dilation, kernel=kernel, padding=padding, output_padding=output_padding,
                spatial=tuple(spatial), batch=draw(st.integers(1, 2)))


def _spell(draw: st.DrawFn, values: tuple[int, ...], default: int):
    """The IR accepts a full list, one value for all dims, or (for the default) an empty list."""
    if len(set(values)) == 1 and draw(st.booleans()):
        return () if values[0] == default and draw(st.booleans()) else values[:1]
    return values


def _conv_attrs(draw: st.DrawFn, g: dict) -> dict:
    attrs = {"stride": _spell(draw, g["stride"], 1), "padding": _spell(draw, g["padding"], 0),
             "dilation": _spell(draw, g["dilation"], 1)}
    if g["transposed"] or draw(st.booleans()):
        attrs["transposed"] = g["transposed"]
    if any(g["output_padding"]) or draw(st.booleans()):
        attrs["output_padding"] = _spell(draw, g["output_padding"], 0)
    if g["groups"] != 1 or draw(st.booleans()):
        attrs["groups"] = g["groups"]
    return attrs


def _weight_shape(g: dict) -> tuple[int, ...]:
    c, o = g["cg"] * g["groups"], g["og"] * g["groups"]
    return (c, g["og"], *g["kernel"]) if g["transposed"] else (o, g["cg"], *g["kernel"])


@st.composite
def _conv_cases(draw: st.DrawFn) -> Case:
    rng = draw(rngs())
    dtype = draw(st.sampled_from(FLOATS))
    g = draw(_conv_geometry())
    x = _small(rng, (g["batch"], g["cg"] * g["groups"], *g["spatial"]), dtype)
    operands = [x, _small(rng, _weight_shape(g), dtype)]
    if draw(st.booleans()):
        operands.append(_small(rng, (g["og"] * g["groups"],), dtype))
    return Case(operands, _conv_attrs(draw, g))


def _full(values: tuple[int, ...], nspatial: int, default: int) -> list[int]:
    values = values or (default,)
    return list(values * nspatial if len(values) == 1 else values)


def _conv_args(x: torch.Tensor, attrs) -> tuple:
    n = x.dim() - 2
    return (_full(attrs["stride"], n, 1), _full(attrs["padding"], n, 0), _full(attrs["dilation"], n, 1),
            attrs["transposed"], _full(attrs["output_padding"], n, 0), attrs["groups"])


def _conv_torch(xs, attrs):
    bias = xs[2] if len(xs) == 3 else None
    return torch.ops.aten.convolution(xs[0], xs[1], bias, *_conv_args(xs[0], attrs))


@st.composite
def _conv_backward_cases(draw: st.DrawFn) -> Case:
    rng = draw(rngs())
    dtype = draw(st.sampled_from(FLOATS))
    g = draw(_conv_geometry(allow_transposed=False))
    x_shape = (g["batch"], g["cg"] * g["groups"], *g["spatial"])
    w_shape = _weight_shape(g)
    out_shape = torch.ops.aten.convolution(
        torch.zeros(x_shape), torch.zeros(w_shape), None, list(g["stride"]), list(g["padding"]),
        list(g["dilation"]), False, [0] * g["nspatial"], g["groups"]).shape
    attrs = _conv_attrs(draw, g)
    mask = tuple(draw(st.integers(0, 1)) for _ in range(3))
    if mask != (1, 1, 1) or draw(st.booleans()):
        attrs["output_mask"] = mask
    return Case([_small(rng, tuple(out_shape), dtype), _small(rng, x_shape, dtype), _small(rng, w_shape, dtype)],
                attrs)


def _conv_backward_torch(xs, attrs):
    grad, x, w = xs
    mask = [bool(m) for m in attrs["output_mask"]]
    results = torch.ops.aten.convolution_backward(grad, x, w, [w.shape[0]], *_conv_args(x, attrs), mask)
    return tuple(r for r, wanted in zip(results, mask) if wanted)


_CONV = {"stride": (1,), "padding": (0,), "dilation": (1,)}
_CONV_INVALID = (
    ((t((1, 2, 5), F32), t((3, 2, 2), DType.f16)), _CONV),  # one dtype
    ((t((1, 2, 5), F32), t((3, 3, 2), F32)), _CONV),  # channels
    ((t((1, 2, 3, 3, 3, 3), F32), t((3, 2, 2, 2, 2, 2), F32)), _CONV),  # 4-d convolution
    ((t((1, 2, 5), F32), t((3, 2, 9), F32)), _CONV),  # kernel larger than the input
    ((t((1, 2, 5), F32), t((3, 2, 2), F32), t((2,), F32)), _CONV),  # bias size
    ((t((1, 2, 5), F32), t((3, 2, 2), F32)), {**_CONV, "stride": (1, 1, 1)}),
    ((t((1, 2, 5), F32), t((3, 2, 2), F32)), {**_CONV, "groups": 0}),
    ((t((1, 2, 5), F32), t((3, 2, 2), F32)), {**_CONV, "groups": 2}),
    ((t((1, 2, 5), F32), t((3, 2, 2), F32)), {"stride": (1,), "padding": (0,)}),  # dilation required
)

SPECS = {
    "mm": OpSpec(_mm_cases, lambda xs, attrs: torch.mm(*_logical(xs, attrs)), MATMUL_TOL, (
        ((t((2, 3), F32), t((4, 2), F32)), {}),
        ((t((2, 3), F32), t((3, 2), F32)), {"transpose_b": True}),  # b is stored [N, K]: [2, 3] @ [2, 3]
        ((t((2, 3), F32), t((3, 2), DType.bf16)), {}),
        ((t((2, 3, 1), F32), t((3, 2), F32)), {}),
        ((t((2, 2), BOOL), t((2, 2), BOOL)), {}),  # no bool matmul in torch
        ((t((2, 3), F32),), {}),
    )),
    "bmm": OpSpec(lambda: _mm_cases(batch=True), lambda xs, attrs: torch.bmm(*_logical(xs, attrs)), MATMUL_TOL, (
        ((t((2, 2, 3), F32), t((3, 3, 2), F32)), {}),
        ((t((2, 2, 3), F32), t((2, 2, 2), F32)), {}),
        ((t((2, 2, 3), F32), t((2, 3, 2), F32)), {"transpose_a": True}),
        ((t((2, 3), F32), t((3, 2), F32)), {}),
    )),
    "addmm": OpSpec(_addmm_cases, _addmm_torch, MATMUL_TOL, (
        ((t((3,), F32), t((2, 3), F32), t((3, 2), F32)), {}),  # bias does not broadcast
        ((t((2,), I64), t((2, 3), F32), t((3, 2), F32)), {}),
        ((t((2,), F32), t((2, 3), F32), t((3, 2), F32)), {"beta": "one"}),
        ((t((2,), I64), t((2, 3), I64), t((3, 2), I64)), {"alpha": 0.5}),  # fractional alpha for integers
    )),
    "convolution": OpSpec(_conv_cases, _conv_torch, MATMUL_TOL, _CONV_INVALID),
    "convolution_backward": OpSpec(_conv_backward_cases, _conv_backward_torch, MATMUL_TOL, (
        ((t((1, 3, 4), F32), t((1, 2, 5), F32), t((3, 2, 2), F32)), {**_CONV, "transposed": True}),
        ((t((1, 3, 3), F32), t((1, 2, 5), F32), t((3, 2, 2), F32)), _CONV),  # grad shape
        ((t((1, 3, 4), F32), t((1, 2, 5), F32), t((3, 2, 2), F32)), {**_CONV, "output_mask": (1, 1)}),
    )),
}
