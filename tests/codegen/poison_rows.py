"""The row kernels the checking build's tests run (``test_poison_scratch.py``): every row kind of the roofline
(softmax, LayerNorm, RMSNorm, cross-entropy's forward and backward rows, x*w+b and gelu(x*w+b)*sigmoid(x)) in float32
and on bf16 bits, the zoo's residual LayerNorm of two bf16 products, and the softmax and LayerNorm backwards; their
inputs; and the LLVM IR a target gets for one."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from test_one_pass_variance import residual_layernorm_of_products
from test_pairs import _bf16, _bits, _softmax_bits, affine_graph, layernorm_graph
from test_row_pass_bursts import rmsnorm, var_mean_layernorm

from neuroncc.codegen.llvm.program import plan_launch
from neuroncc.codegen.llvm.regions import wrap_remaining_ops
from neuroncc.hardware import host
from neuroncc.ir import Builder, DType, Function, TensorType
from neuroncc.passes.manager import PassContext
from neuroncc.passes.pipeline import default_pipeline, run_pipeline
from neuroncc.testing.models import layer_norm_backward_graph, softmax_backward_graph, softmax_graph


def log_softmax(rows: int, cols: int) -> Function:
    """Cross-entropy's forward row: x - amax - log(sum(exp(x - amax)))."""
    b = Builder("log_softmax")
    x = b.param(TensorType((rows, cols), DType.f32), "x")
    shifted = b.op("sub", x, b.op("amax", x, dims=(1,), keepdim=True))
    total = b.op("sum", b.op("exp", shifted), dims=(1,), keepdim=True)
    return b.build([b.op("sub", shifted, b.op("log", total))])


def exp_times_row_scale(rows: int, cols: int) -> Function:
    """Cross-entropy's backward row: exp(x - amax(x)) * s, s one value a row."""
    b = Builder("exp_times_row_scale")
    x = b.param(TensorType((rows, cols), DType.f32), "x")
    s = b.param(TensorType((rows, 1), DType.f32), "s")
    e = b.op("exp", b.op("sub", x, b.op("amax", x, dims=(1,), keepdim=True)))
    return b.build([b.op("mul", e, s)])


def gelu_sigmoid(rows: int, cols: int) -> Function:
    """Row (a): gelu(x*w+b) * sigmoid(x) in float32."""
    b = Builder("gelu_sigmoid")
    x = b.param(TensorType((rows, cols), DType.f32), "x")
    w, bias = b.param(TensorType((cols,), DType.f32), "w"), b.param(TensorType((cols,), DType.f32), "b")
    y = b.op("add", b.op("mul", x, w), bias)
    return b.build([b.op("mul", b.op("gelu", y), b.op("sigmoid", x))])


def gelu_sigmoid_bits(rows: int, cols: int) -> Function:
    """Row (a) on bf16 bits: each op's result rounded to bf16, as torch.compile hands bf16 tensors over."""
    b = Builder("gelu_sigmoid_bits")
    x = _bf16(b, b.param(TensorType((rows, cols), DType.i16), "x"))
    w = _bf16(b, b.param(TensorType((cols,), DType.i16), "w"))
    bias = _bf16(b, b.param(TensorType((cols,), DType.i16), "b"))
    y = b.op("add", b.op("mul", x, w), bias)
    return b.build([_bits(b, b.op("mul", b.op("gelu", y), b.op("sigmoid", x)))])


def rmsnorm_bits(rows: int, cols: int) -> Function:
    """RMSNorm on bf16 bits (float32 inside)."""
    b = Builder("rmsnorm_bits")
    x = b.op("cast", _bf16(b, b.param(TensorType((rows, cols), DType.i16), "x")), dtype=DType.f32)
    w = b.op("cast", _bf16(b, b.param(TensorType((cols,), DType.i16), "w")), dtype=DType.f32)
    ms = b.op("mean", b.op("mul", x, x), dims=(1,), keepdim=True)
    rms = b.op("rsqrt", b.op("add", ms, b.op("full", shape=(), dtype=DType.f32, value=1e-6)))
    return b.build([_bits(b, b.op("cast", b.op("mul", b.op("mul", x, rms), w), dtype=DType.bf16))])


#: Each row kind: its graph of (rows, cols).
ROWS: dict[str, Callable[[int, int], Function]] = {
    "softmax": softmax_graph,
    "softmax_bf16": _softmax_bits,
    "softmax_backward": softmax_backward_graph,
    "layernorm": var_mean_layernorm,
    "layernorm_bf16": layernorm_graph,
    "layernorm_backward": layer_norm_backward_graph,
    "rmsnorm": rmsnorm,
    "rmsnorm_bf16": rmsnorm_bits,
    "log_softmax": log_softmax,
    "exp_times_row_scale": exp_times_row_scale,
    "affine_bf16": affine_graph,
    "gelu_sigmoid": gelu_sigmoid,
    "gelu_sigmoid_bf16": gelu_sigmoid_bits,
    # (rows: a sequence's tokens, two sequences)
    "residual_layernorm": lambda rows, cols: residual_layernorm_of_products(2, rows, cols),
}
#: The kinds with a variance (their one pass on and off both run).
VARIANCES = ("layernorm", "layernorm_bf16", "residual_layernorm")


def inputs(fn: Function, rng: np.random.Generator) -> list[np.ndarray]:
    """Random inputs: float32 normals, bf16 bits of normals (int16 words), positive rstd for LayerNorm's backward."""
    arrays = []
    for param in fn.params:
        values = rng.standard_normal(param.type.shape).astype(np.float32)
        if param.hint == "rstd":
            values = np.abs(values) + 0.5
        if param.type.dtype is DType.i16:
            values = (values.view(np.uint32) >> 16).astype(np.uint16).view(np.int16)
        arrays.append(values)
    return arrays



#: Hosts the IR is generated for (LLVM's feature strings trimmed to what codegen reads): Zen 4 and Zen 3.
ZEN4_HOST = host.HostCpu(name="znver4", features=(
    "+avx,+avx2,+fma,+f16c,+bmi,+bmi2,+popcnt,+sse4.2,+avx512f,+avx512vl,+avx512bw,+avx512dq,+avx512cd,"
    "+avx512bf16,+avx512vbmi,+avx512vbmi2,+avx512vnni"), triple="x86_64-unknown-linux-gnu", cores=2,
    last_level_cache_bytes=32 << 20)
ZEN3_HOST = host.HostCpu(name="znver3", features="+avx,+avx2,+fma,+f16c,+bmi,+bmi2,+popcnt,+sse4.2,-avx512f",
                         triple="x86_64-unknown-linux-gnu", cores=2, last_level_cache_bytes=32 << 20)
HOSTS = {"znver4": ZEN4_HOST, "znver3": ZEN3_HOST}


def llvm_ir(kind: str, rows: int, cols: int, cpu: str) -> str:
    """The LLVM IR of ``kind``'s kernels at [rows, cols] through the default pipeline, for ``cpu`` (pinned)."""
    saved, host._HOST[:] = list(host._HOST), [HOSTS[cpu]]
    named, host._NAMED[:] = list(host._NAMED), [""]
    try:
        fn = run_pipeline(default_pipeline("cpu"), ROWS[kind](rows, cols), PassContext())
        _, texts = plan_launch(wrap_remaining_ops(fn), "cpu", "features")
        return "".join(texts)
    finally:
        host._HOST[:], host._NAMED[:] = saved, named
