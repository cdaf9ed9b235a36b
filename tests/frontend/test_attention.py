"""Scaled dot-product attention through torch.compile: ATen's CPU flash kernel as one library op on the cpu
target (forward and backward equal to eager's), the references on interp, the math decomposition on nki-sim
and wherever ATen itself would not run its flash kernel (see neuroncc/frontend/lowering/attention.py)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from neuroncc.frontend.lowering.attention import SMALL_HEAD_SCORES
from neuroncc.frontend.lowering.decompositions import decomposition_table
from neuroncc.ir import parse
from neuroncc.driver.compile import compile_graph

aten = torch.ops.aten


def _gqa(q, k, v, **kw):
    return F.scaled_dot_product_attention(q, k, v, enable_gqa=True, **kw)


#: name -> (attention function, q/k/v shapes [B, H, L, E] / [B, Hkv, S, E])
CONFIGS = {
    "plain": (lambda q, k, v: F.scaled_dot_product_attention(q, k, v), ((2, 4, 8, 16), (2, 4, 8, 16))),
    "causal_scale": (lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=0.3),
                     ((1, 2, 7, 8), (1, 2, 5, 8))),
    "bool_mask": (lambda q, k, v: F.scaled_dot_product_attention(
        q, k, v, attn_mask=torch.ones(q.shape[2], k.shape[2], dtype=torch.bool).tril()), ((2, 3, 6, 4), (2, 3, 6, 4))),
    "float_mask": (lambda q, k, v: F.scaled_dot_product_attention(
        q, k, v, attn_mask=torch.linspace(-2, 1, q.shape[0] * q.shape[2] * k.shape[2]).reshape(
            q.shape[0], 1, q.shape[2], k.shape[2]).to(q.dtype)), ((2, 2, 5, 8), (2, 2, 9, 8))),
    "gqa": (_gqa, ((1, 8, 6, 16), (1, 2, 6, 16))),
    "head_dim_1": (lambda q, k, v: F.scaled_dot_product_attention(q, k, v), ((3, 1, 4, 1), (3, 1, 4, 1))),
}


def _operands(shapes, dtype):
    (q_shape, kv_shape) = shapes
    return [torch.randn(s).to(dtype).requires_grad_() for s in (q_shape, kv_shape, kv_shape)]


def _forward_and_grads(fn, operands):
    out = fn(*operands)
    grad = torch.linspace(-1, 1, out.numel()).reshape(out.shape).to(out.dtype)
    return (out, *torch.autograd.grad(out, operands, grad))


def _check(fn, shapes, dtype=torch.float32, target="cpu", **tol):
    operands = _operands(shapes, dtype)
    expected = _forward_and_grads(fn, operands)
    compiled = torch.compile(fn, backend="neuron", fullgraph=True, dynamic=False, options={"target": target})
    got = _forward_and_grads(compiled, operands)
    torch.testing.assert_close(got, expected, **tol)


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_cpu_attention_forward_and_backward_equal_eager(name):
    fn, shapes = CONFIGS[name]
    _check(fn, shapes)  # the same ATen kernels: default float32 tolerances


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("name", ["causal_scale", "float_mask", "gqa"])
def test_cpu_half_precision_attention_equals_eager(name, dtype):
    fn, shapes = CONFIGS[name]
    _check(fn, shapes, dtype)  # ATen's bf16/f16 kernels, not float32 ones: eager's rounding, default tolerances


@pytest.mark.parametrize("name", ["causal_scale", "bool_mask", "gqa"])
def test_interp_attention_references_match_eager(name):
    fn, shapes = CONFIGS[name]
    _check(fn, shapes, target="interp", rtol=1e-5, atol=1e-5)


def test_nki_sim_keeps_the_math_decomposition(tmp_path):
    fn, shapes = CONFIGS["causal_scale"]
    operands = _operands(shapes, torch.float32)
    compiled = torch.compile(fn, backend="neuron", fullgraph=True, dynamic=False,
                             options={"target": "nki-sim", "dump_dir": str(tmp_path)})
    torch.testing.assert_close(_forward_and_grads(compiled, operands), _forward_and_grads(fn, operands),
                               rtol=1e-4, atol=1e-5)
    ops = _op_names(tmp_path)
    assert "flash_attention" not in ops["forward"] and "bmm" in ops["forward"]
    assert "flash_attention_backward" not in ops["backward"]


def _op_names(directory) -> dict[str, list[str]]:
    graphs = {path.stem.rsplit("_", 1)[1]: parse(path.read_text()) for path in directory.glob("*.nir")}
    return {kind: [op.name for op in fn.ops] for kind, fn in graphs.items()}


#: causal attention over heads longer than SMALL_HEAD_SCORES allows: ATen's flash kernel keeps them
LONG_HEADS = (CONFIGS["causal_scale"][0], ((1, 2, 80, 8), (1, 2, 72, 8)))


def test_long_heads_stay_above_the_math_bound():
    (q, k) = LONG_HEADS[1]
    assert q[2] * k[2] > SMALL_HEAD_SCORES


def test_attention_is_one_extern_step_forward_and_backward(tmp_path):
    fn, shapes = LONG_HEADS
    compiled = torch.compile(fn, backend="neuron", fullgraph=True, dynamic=False,
                             options={"dump_dir": str(tmp_path)})
    _forward_and_grads(compiled, _operands(shapes, torch.float32))
    for kind, op in (("forward", "flash_attention"), ("backward", "flash_attention_backward")):
        imported = parse((tmp_path / f"g0_0_{kind}.nir").read_text())
        assert [o.name for o in imported.ops].count(op) == 1
        assert not {"bmm", "exp", "amax"} & {o.name for o in imported.ops}
        exe = compile_graph(imported, target="cpu")
        steps = [exe.function.ops[s.op_index].name for s in exe.plan.steps if s.kind == "extern"]
        assert steps == [op]


@pytest.mark.parametrize("name", ["plain", "causal_scale", "head_dim_1"])
def test_small_heads_are_generated_code_forward_and_backward(name, tmp_path):
    """Small float32 heads: bmm and fused softmax kernels instead of ATen's flash ops (no library step runs),
    with eager's forward and gradients (ATen's kernel sums in another order: float32 tolerances of the
    reductions' lengths, 16 terms at most here)."""
    fn, shapes = CONFIGS[name]
    operands = _operands(shapes, torch.float32)
    compiled = torch.compile(fn, backend="neuron", fullgraph=True, dynamic=False,
                             options={"dump_dir": str(tmp_path)})
    torch.testing.assert_close(_forward_and_grads(compiled, operands), _forward_and_grads(fn, operands),
                               rtol=1e-5, atol=1e-5)
    for kind in ("forward", "backward"):
        imported = parse((tmp_path / f"g0_0_{kind}.nir").read_text())
        assert not any("flash" in op.name for op in imported.ops) and "bmm" in {op.name for op in imported.ops}
        exe = compile_graph(imported, target="cpu")
        assert [s for s in exe.plan.steps if s.kind == "extern" and "flash" in exe.function.ops[s.op_index].name] \
            == []
        # their bmm are generated code too (codegen/llvm/small_matmul.py): no BLAS or ATen call at all
        assert exe.stats["extern_calls"] == 0 and exe.stats["blas_calls"] == 0


def test_small_heads_with_a_mask_or_in_half_precision_keep_the_library_op(tmp_path):
    fn, shapes = CONFIGS["float_mask"]
    compiled = torch.compile(fn, backend="neuron", fullgraph=True, dynamic=False,
                             options={"dump_dir": str(tmp_path)})
    _forward_and_grads(compiled, _operands(shapes, torch.float32))
    assert "flash_attention" in _op_names(tmp_path)["forward"]


#: Attention that ATen itself runs on its math path: neuroncc decomposes it as before, results as eager's.
MATH_PATH = {
    "value_head_size_differs": (lambda q, k, v: F.scaled_dot_product_attention(q, k, v[..., :4]),
                                ((2, 2, 5, 8), (2, 2, 5, 8))),
    "three_dims": (lambda q, k, v: F.scaled_dot_product_attention(q[0], k[0], v[0], is_causal=True),
                   ((1, 3, 5, 8), (1, 3, 5, 8))),
}


@pytest.mark.parametrize("name", sorted(MATH_PATH))
def test_math_path_attention_still_decomposes(name, tmp_path):
    fn, shapes = MATH_PATH[name]
    operands = _operands(shapes, torch.float32)
    compiled = torch.compile(fn, backend="neuron", fullgraph=True, dynamic=False,
                             options={"dump_dir": str(tmp_path)})
    torch.testing.assert_close(_forward_and_grads(compiled, operands), _forward_and_grads(fn, operands),
                               rtol=1e-5, atol=1e-5)
    assert not any("flash" in op for ops in _op_names(tmp_path).values() for op in ops)


def test_a_mask_that_needs_a_gradient_takes_the_math_path(tmp_path):
    def fn(q, k, v, mask):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)

    operands = [*_operands(((1, 2, 4, 8), (1, 2, 6, 8)), torch.float32), torch.randn(4, 6, requires_grad=True)]
    compiled = torch.compile(fn, backend="neuron", fullgraph=True, dynamic=False,
                             options={"dump_dir": str(tmp_path)})
    torch.testing.assert_close(_forward_and_grads(compiled, operands), _forward_and_grads(fn, operands),
                               rtol=1e-5, atol=1e-5)
    assert "flash_attention" not in _op_names(tmp_path)["forward"]


def test_dropout_takes_the_math_path_and_compiles(tmp_path):
    fn = torch.compile(lambda q: F.scaled_dot_product_attention(q, q, q, dropout_p=0.5), backend="neuron",
                       fullgraph=True, dynamic=False, options={"dump_dir": str(tmp_path)})
    q = torch.randn(1, 2, 4, 8, requires_grad=True)
    fn(q).sum().backward()
    assert torch.isfinite(q.grad).all()
    ops = _op_names(tmp_path)
    assert "flash_attention" not in ops["forward"] and "philox_uniform" in ops["forward"]  # tests/frontend/test_random.py


def test_transformer_encoder_layer_training_matches_eager(tmp_path):
    torch.backends.mha.set_fastpath_enabled(False)
    try:
        layer = torch.nn.TransformerEncoderLayer(d_model=32, nhead=4, dim_feedforward=64, batch_first=True,
                                                 dropout=0.0)
        x = torch.randn(2, 6, 32)
        expected_out = layer(x)
        expected = torch.autograd.grad(expected_out.square().mean(), list(layer.parameters()))
        compiled = torch.compile(layer, backend="neuron", dynamic=False, options={"dump_dir": str(tmp_path)})
        out = compiled(x)
        got = torch.autograd.grad(out.square().mean(), list(layer.parameters()))
    finally:
        torch.backends.mha.set_fastpath_enabled(True)
    torch.testing.assert_close(out, expected_out, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-5)
    ops = _op_names(tmp_path)  # heads of 6 x 6 scores: the small-head math, both ways
    assert not any("flash" in op for op in ops["forward"] + ops["backward"])
    assert "bmm" in ops["forward"] and "bmm" in ops["backward"]


def test_the_flash_decomposition_stays_out_of_the_table():
    # PyTorch's decomposition returns the attention probabilities in the logsumexp slot (wrong gradients).
    assert aten._scaled_dot_product_flash_attention_for_cpu.default not in decomposition_table()


@pytest.mark.parametrize("target, fused", [("cpu", True), ("nki-sim", False)])
def test_exported_programs_trace_attention_per_target(target, fused):
    from neuroncc.frontend.exported import import_inference

    class Attention(torch.nn.Module):
        def forward(self, q, k, v):
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    args = tuple(torch.randn(1, 2, 80, 8) for _ in range(3))  # long heads: the library op on cpu
    graph = import_inference(torch.export.export(Attention(), args), "attention", target)
    assert ("flash_attention" in [op.name for op in graph.imported.function.ops]) == fused


def _written_attention(q, k, v, mask):
    """Multi-head attention as models write it by hand: scores scaled, masked, softmax, times v."""
    scores = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5
    scores = scores.masked_fill(mask, float("-inf")) if mask.dtype == torch.bool else scores + mask
    return torch.softmax(scores, dim=-1) @ v


@pytest.mark.parametrize("mask_dtype, mask_shape", [(torch.float32, (256, 256)), (torch.bool, (256, 256)),
                                                    (torch.float32, (2, 2, 256, 256))])
def test_nki_sim_written_attention_is_one_flash_kernel(mask_dtype, mask_shape, tmp_path):
    """[B, H, L, E] attention through torch.compile: the graph (4-d scores viewed as 3-d bmm operands, the scale
    and the mask (shared, or one per batch and head) in the softmax kernel) reaches the flash-attention kernel,
    and equals eager."""
    from neuroncc.executors.nki_sim.executable import nki_source

    q, k, v = (torch.randn(2, 2, 256, 32) for _ in range(3))
    drop = torch.rand(mask_shape) < 0.25
    mask = drop if mask_dtype is torch.bool else torch.where(drop, float("-inf"), 0.0)
    compiled = torch.compile(_written_attention, backend="neuron", fullgraph=True, dynamic=False,
                             options={"target": "nki-sim", "dump_dir": str(tmp_path)})
    torch.testing.assert_close(compiled(q, k, v, mask), _written_attention(q, k, v, mask), rtol=1e-4, atol=1e-5)
    (forward,) = [parse(path.read_text()) for path in tmp_path.glob("*forward*.nir")] or \
        [parse(path.read_text()) for path in tmp_path.glob("*.nir")]
    source = nki_source(forward, target="trn2")
    assert source.count("@nki.jit") == 1 and "def attention_" in source, source
