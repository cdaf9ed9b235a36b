"""Model graphs built directly in the IR (as the torch front end would emit them after decomposition).

These are for pass tests and measurements without torch: a pre-LayerNorm transformer block (LayerNorm ->
fused QKV projection -> causal attention with softmax -> output projection + residual -> LayerNorm -> MLP
with GELU + residual), its training step (forward and backward in one joint graph, as AOTAutograd traces
it), and its pieces (softmax, LayerNorm and their backward formulas).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

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


@dataclass
class _Block:
    """The values of one transformer block forward pass that its backward pass reads."""

    x: Value
    params: dict[str, Value]
    ln1: tuple[Value, Value, Value]  # LayerNorm output, mean, rstd
    qkv_in: Value  # LayerNorm 1 output as [B*S, D]
    q: Value
    k: Value
    v: Value
    causal: Value
    probs: Value
    context2d: Value
    x1: Value
    ln2: tuple[Value, Value, Value]
    fc1_in: Value
    fc1_out: Value
    hidden: Value
    out: Value


def _block_forward(b: Builder, B: int, S: int, D: int, H: int, F: int, dtype: DType) -> _Block:
    hd = D // H

    def param(shape: tuple[int, ...], hint: str) -> Value:
        return b.param(TensorType(shape, dtype), hint)

    x = param((B, S, D), "x")
    p = {name: param(shape, name) for name, shape in (
        ("ln1_weight", (D,)), ("ln1_bias", (D,)), ("qkv_weight", (3 * D, D)), ("qkv_bias", (3 * D,)),
        ("out_weight", (D, D)), ("out_bias", (D,)), ("ln2_weight", (D,)), ("ln2_bias", (D,)),
        ("fc1_weight", (F, D)), ("fc1_bias", (F,)), ("fc2_weight", (D, F)), ("fc2_bias", (D,)),
    )}
    ln1 = layer_norm(b, x, p["ln1_weight"], p["ln1_bias"])
    qkv_in = b.op("reshape", ln1[0], shape=(B * S, D))
    qkv = linear(b, qkv_in, p["qkv_weight"], p["qkv_bias"])
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
    context2d = b.op("reshape", context, shape=(B * S, D))
    attn = linear(b, context2d, p["out_weight"], p["out_bias"])
    x1 = b.op("add", x, b.op("reshape", attn, shape=(B, S, D)))
    ln2 = layer_norm(b, x1, p["ln2_weight"], p["ln2_bias"])
    fc1_in = b.op("reshape", ln2[0], shape=(B * S, D))
    fc1_out = linear(b, fc1_in, p["fc1_weight"], p["fc1_bias"])
    hidden = b.op("gelu", fc1_out)
    out = b.op("add", x1, b.op("reshape", linear(b, hidden, p["fc2_weight"], p["fc2_bias"]), shape=(B, S, D)))
    return _Block(x, p, ln1, qkv_in, q, k, v, causal, probs, context2d, x1, ln2, fc1_in, fc1_out, hidden, out)


def transformer_block(batch: int = 1, seq: int = 256, d_model: int = 512, heads: int = 8, mlp_ratio: int = 4,
                      dtype: DType = DType.f32) -> Function:
    """A pre-LayerNorm transformer block forward pass with causal self-attention."""
    b = Builder("transformer_block")
    block = _block_forward(b, batch, seq, d_model, heads, mlp_ratio * d_model, dtype)
    return b.build([block.out])


def gelu_backward(b: Builder, grad: Value, x: Value) -> Value:
    """d gelu(x) = Phi(x) + x * phi(x), times the incoming gradient."""
    dtype = x.type.dtype
    cdf = b.op("mul", scalar(b, 0.5, dtype),
               b.op("add", scalar(b, 1.0, dtype), b.op("erf", b.op("mul", x, scalar(b, 1 / math.sqrt(2), dtype)))))
    square = b.op("mul", b.op("mul", x, x), scalar(b, -0.5, dtype))
    pdf = b.op("mul", b.op("exp", square), scalar(b, 1 / math.sqrt(2 * math.pi), dtype))
    return b.op("mul", grad, b.op("add", cdf, b.op("mul", x, pdf)))


def _linear_backward(b: Builder, grad2d: Value, x2d: Value, weight: Value) -> tuple[Value, Value, Value]:
    """Gradients of addmm(bias, x, weight.T): (d x, d weight, d bias)."""
    grad_x = b.op("mm", grad2d, weight)
    grad_w = b.op("mm", b.op("permute", grad2d, dims=(1, 0)), x2d)
    return grad_x, grad_w, b.op("sum", grad2d, dims=(0,))


def transformer_block_training(batch: int = 1, seq: int = 256, d_model: int = 512, heads: int = 8,
                               mlp_ratio: int = 4, dtype: DType = DType.f32) -> Function:
    """One training step's joint graph of the block: forward, then backward from an incoming gradient.

    Parameters: x, the 12 weights and biases, grad_out. Results: the output, d x, and the 12 gradients
    (in parameter order). The gradients match torch.autograd (tests/passes/test_models.py checks).
    """
    B, S, D, H, F = batch, seq, d_model, heads, mlp_ratio * d_model
    hd = D // H
    b = Builder("transformer_block_training")
    f = _block_forward(b, B, S, D, H, F, dtype)
    p = f.params
    grad_out = b.param(TensorType((B, S, D), dtype), "grad_out")
    # MLP
    g2d = b.op("reshape", grad_out, shape=(B * S, D))
    d_hidden, d_fc2_w, d_fc2_b = _linear_backward(b, g2d, f.hidden, p["fc2_weight"])
    d_fc1_out = gelu_backward(b, d_hidden, f.fc1_out)
    d_fc1_in, d_fc1_w, d_fc1_b = _linear_backward(b, d_fc1_out, f.fc1_in, p["fc1_weight"])
    d_ln2 = b.op("reshape", d_fc1_in, shape=(B, S, D))
    d_x1_ln, d_ln2_w, d_ln2_b = layer_norm_backward(b, d_ln2, f.x1, f.ln2[1], f.ln2[2], p["ln2_weight"])
    d_x1 = b.op("add", grad_out, d_x1_ln)
    # attention output projection
    d_attn2d = b.op("reshape", d_x1, shape=(B * S, D))
    d_context2d, d_out_w, d_out_b = _linear_backward(b, d_attn2d, f.context2d, p["out_weight"])
    d_context = b.op("reshape", b.op("permute", b.op("reshape", d_context2d, shape=(B, S, H, hd)), dims=(0, 2, 1, 3)),
                     shape=(B * H, S, hd))
    # attention core
    d_probs = b.op("bmm", d_context, b.op("permute", f.v, dims=(0, 2, 1)))
    d_v = b.op("bmm", b.op("permute", f.probs, dims=(0, 2, 1)), d_context)
    d_masked = softmax_backward(b, d_probs, f.probs, dim=2)
    d_scaled = b.op("where", f.causal, d_masked, scalar(b, 0.0, dtype))
    d_scores = b.op("mul", d_scaled, scalar(b, 1.0 / math.sqrt(hd), dtype))
    d_q = b.op("bmm", d_scores, f.k)
    d_k = b.op("bmm", b.op("permute", d_scores, dims=(0, 2, 1)), f.q)
    heads = [b.op("unsqueeze", b.op("reshape", d, shape=(B, H, S, hd)), dim=0) for d in (d_q, d_k, d_v)]
    d_qkv = b.op("reshape", b.op("permute", b.op("cat", *heads, dim=0), dims=(1, 3, 0, 2, 4)), shape=(B * S, 3 * D))
    d_qkv_in, d_qkv_w, d_qkv_b = _linear_backward(b, d_qkv, f.qkv_in, p["qkv_weight"])
    d_ln1 = b.op("reshape", d_qkv_in, shape=(B, S, D))
    d_x_ln, d_ln1_w, d_ln1_b = layer_norm_backward(b, d_ln1, f.x, f.ln1[1], f.ln1[2], p["ln1_weight"])
    d_x = b.op("add", d_x1, d_x_ln)
    grads = (d_ln1_w, d_ln1_b, d_qkv_w, d_qkv_b, d_out_w, d_out_b, d_ln2_w, d_ln2_b,
             d_fc1_w, d_fc1_b, d_fc2_w, d_fc2_b)
    return b.build([f.out, d_x, *grads])


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
