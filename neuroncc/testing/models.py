"""Model graphs built directly in the IR (as the torch front end would emit them after decomposition).

These are for pass tests and measurements without torch: a pre-LayerNorm transformer block (LayerNorm ->
fused QKV projection -> causal attention with softmax -> output projection + residual -> LayerNorm -> MLP
with GELU + residual), and its pieces (softmax, LayerNorm and their backward formulas).
"""

from __future__ import annotations

import math

from neuroncc.ir import Builder, DType, Function, TensorType, Value


def scalar(b: Builder, value: float, dtype: DType) -> Value:
    """A 0-d constant that broadcasts against anything (how the front end spells Python scalars)."""
    return b.op("full", shape=(), dtype=dtype, value=value)


def softmax(b: Builder, x: Value, dim: int) -> Value:
    """softmax as aten decomposes it: exp(x - max) / sum(exp(x - max))."""
    shifted = b.op("sub", x, b.op("amax", x, dims=(dim,), keepdim=True))
    exps = b.op("exp", shifted)
    return b.op("div", exps, b.op("sum", exps, dims=(dim,), keepdim=True))


def softmax_backward(b: Builder, grad: Value, y: Value, dim: int) -> Value:
    """d softmax: y * (grad - sum(grad * y))."""
    dot = b.op("sum", b.op("mul", grad, y), dims=(dim,), keepdim=True)
    return b.op("mul", y, b.op("sub", grad, dot))


def layer_norm(b: Builder, x: Value, weight: Value, bias: Value, eps: float = 1e-5) -> tuple[Value, Value, Value]:
    """LayerNorm over the last dim; returns (output, mean, rstd) as aten.native_layer_norm does."""
    dim, dtype = x.type.rank - 1, x.type.dtype
    mean = b.op("mean", x, dims=(dim,), keepdim=True)
    var = b.op("var", x, dims=(dim,), keepdim=True, correction=0.0)
    rstd = b.op("rsqrt", b.op("add", var, scalar(b, eps, dtype)))
    normalized = b.op("mul", b.op("sub", x, mean), rstd)
    return b.op("add", b.op("mul", normalized, weight), bias), mean, rstd


def layer_norm_backward(b: Builder, grad: Value, x: Value, mean: Value, rstd: Value,
                        weight: Value) -> tuple[Value, Value, Value]:
    """Gradients of LayerNorm over the last dim w.r.t. input, weight and bias (aten's formula)."""
    dim, rows = x.type.rank - 1, tuple(range(x.type.rank - 1))
    xhat = b.op("mul", b.op("sub", x, mean), rstd)
    g = b.op("mul", grad, weight)
    mean_g = b.op("mean", g, dims=(dim,), keepdim=True)
    mean_gx = b.op("mean", b.op("mul", g, xhat), dims=(dim,), keepdim=True)
    inner = b.op("sub", b.op("sub", g, mean_g), b.op("mul", xhat, mean_gx))
    grad_x = b.op("mul", inner, rstd)
    grad_w = b.op("sum", b.op("mul", grad, xhat), dims=rows)
    grad_b = b.op("sum", grad, dims=rows)
    return grad_x, grad_w, grad_b


def linear(b: Builder, x2d: Value, weight: Value, bias: Value) -> Value:
    """nn.Linear as aten: addmm(bias, x, weight.T) with weight [out, in]."""
    return b.op("addmm", bias, x2d, b.op("permute", weight, dims=(1, 0)))


def transformer_block(batch: int = 1, seq: int = 256, d_model: int = 512, heads: int = 8, mlp_ratio: int = 4,
                      dtype: DType = DType.f32) -> Function:
    """A pre-LayerNorm transformer block forward pass with causal self-attention."""
    B, S, D, H = batch, seq, d_model, heads
    hd, F = D // H, mlp_ratio * D
    b = Builder("transformer_block")

    def param(shape: tuple[int, ...], hint: str) -> Value:
        return b.param(TensorType(shape, dtype), hint)

    x = param((B, S, D), "x")
    ln1_w, ln1_b = param((D,), "ln1_weight"), param((D,), "ln1_bias")
    w_qkv, b_qkv = param((3 * D, D), "qkv_weight"), param((3 * D,), "qkv_bias")
    w_o, b_o = param((D, D), "out_weight"), param((D,), "out_bias")
    ln2_w, ln2_b = param((D,), "ln2_weight"), param((D,), "ln2_bias")
    w_fc1, b_fc1 = param((F, D), "fc1_weight"), param((F,), "fc1_bias")
    w_fc2, b_fc2 = param((D, F), "fc2_weight"), param((D,), "fc2_bias")

    h, _, _ = layer_norm(b, x, ln1_w, ln1_b)
    qkv = linear(b, b.op("reshape", h, shape=(B * S, D)), w_qkv, b_qkv)
    heads_first = b.op("permute", b.op("reshape", qkv, shape=(B, S, 3, H, hd)), dims=(2, 0, 3, 1, 4))
    q, k, v = (b.op("reshape", b.op("select", heads_first, dim=0, index=i), shape=(B * H, S, hd)) for i in range(3))
    scores = b.op("bmm", q, b.op("permute", k, dims=(0, 2, 1)))
    scaled = b.op("mul", scores, scalar(b, 1.0 / math.sqrt(hd), dtype))
    positions = b.op("iota", length=S, dtype=DType.i64)
    causal = b.op("ge", b.op("reshape", positions, shape=(S, 1)), b.op("reshape", positions, shape=(1, S)))
    masked = b.op("where", causal, scaled, scalar(b, float("-inf"), dtype))
    probs = softmax(b, masked, dim=2)
    context = b.op("bmm", probs, v)
    context = b.op("permute", b.op("reshape", context, shape=(B, H, S, hd)), dims=(0, 2, 1, 3))
    attn = linear(b, b.op("reshape", context, shape=(B * S, D)), w_o, b_o)
    x1 = b.op("add", x, b.op("reshape", attn, shape=(B, S, D)))
    h2, _, _ = layer_norm(b, x1, ln2_w, ln2_b)
    hidden = b.op("gelu", linear(b, b.op("reshape", h2, shape=(B * S, D)), w_fc1, b_fc1))
    out = b.op("add", x1, b.op("reshape", linear(b, hidden, w_fc2, b_fc2), shape=(B, S, D)))
    return b.build([out])


def softmax_graph(rows: int = 64, cols: int = 128, dtype: DType = DType.f32) -> Function:
    b = Builder("softmax")
    x = b.param(TensorType((rows, cols), dtype), "x")
    return b.build([softmax(b, x, dim=1)])


def layer_norm_graph(rows: int = 64, cols: int = 128, dtype: DType = DType.f32) -> Function:
    b = Builder("layer_norm")
    x = b.param(TensorType((rows, cols), dtype), "x")
    w, bias = b.param(TensorType((cols,), dtype), "weight"), b.param(TensorType((cols,), dtype), "bias")
    out, mean, rstd = layer_norm(b, x, w, bias)
    return b.build([out, mean, rstd])


def layer_norm_backward_graph(rows: int = 64, cols: int = 128, dtype: DType = DType.f32) -> Function:
    b = Builder("layer_norm_backward")
    grad, x = b.param(TensorType((rows, cols), dtype), "grad"), b.param(TensorType((rows, cols), dtype), "x")
    mean, rstd = b.param(TensorType((rows, 1), dtype), "mean"), b.param(TensorType((rows, 1), dtype), "rstd")
    w = b.param(TensorType((cols,), dtype), "weight")
    return b.build(list(layer_norm_backward(b, grad, x, mean, rstd, w)))


def softmax_backward_graph(rows: int = 64, cols: int = 128, dtype: DType = DType.f32) -> Function:
    b = Builder("softmax_backward")
    grad, y = b.param(TensorType((rows, cols), dtype), "grad"), b.param(TensorType((rows, cols), dtype), "y")
    return b.build([softmax_backward(b, grad, y, dim=1)])
