"""The forms attention is written in reach the flash-attention kernel: bmm as well as mm, a scale (mul by a
constant or div by one), an additive mask or a masked_fill (``where``) between the scores and the softmax.
Each form is one kernel and matches the reference interpreter (numpy) in the simulator; forms the kernel
cannot compute keep the separate kernels."""

from __future__ import annotations

import numpy as np
import pytest
from emit_helpers import check_against_interpreter, compile_nki

import neuroncc.codegen.nki.program as program
from neuroncc.executors.nki_sim.costs import estimate_costs
from neuroncc.executors.nki_sim.executable import nki_source
from neuroncc.ir import Builder, TensorType, interpret
from neuroncc.ir.dtypes import DType, to_storage


def attention_form(sq=256, sk=1024, d=64, dtype=DType.f32, batch=0, scale="mul", mask=None, mask_batched=False,
                   fill=float("-inf"), rows_major=True):
    """``softmax(scale(q @ k^T) [+ mask | masked_fill]) @ v`` as a model writes it: q ``[(B,) Sq, D]``, k and
    v ``[(B,) Sk, D]``; ``scale``: "mul" (by 1/sqrt(d)), "div" (by sqrt(d)), "left" (the constant first) or
    None; ``mask``: None, "add" (float), "fill" (``where(mask, fill, s)``) or "keep" (``where(mask, s, fill)``)."""
    b = Builder("attention")
    lead = (batch,) if batch else ()
    q = b.param(TensorType(lead + (sq, d), dtype), "q")
    k = b.param(TensorType(lead + (sk, d), dtype), "k")
    v = b.param(TensorType(lead + (sk, d), dtype), "v")
    mask_shape = (lead if mask_batched else ()) + (sq, sk)
    m = None
    if mask == "add":
        m = b.param(TensorType(mask_shape, dtype), "mask")
    elif mask in ("fill", "keep"):
        m = b.param(TensorType(mask_shape, DType.bool), "mask")
    matmul = "bmm" if batch else "mm"
    scores = b.op(matmul, q, b.op("permute", k, dims=[0, 2, 1] if batch else [1, 0]))
    root = float(np.sqrt(d))
    if scale == "mul":
        scores = b.op("mul", scores, b.op("full", shape=(), dtype=dtype, value=1.0 / root))
    elif scale == "left":
        scores = b.op("mul", b.op("full", shape=(), dtype=dtype, value=1.0 / root), scores)
    elif scale == "div":
        scores = b.op("div", scores, b.op("full", shape=(), dtype=dtype, value=root))
    if mask == "add":
        scores = b.op("add", scores, m)
    elif mask == "fill":
        scores = b.op("where", m, b.op("full", shape=(), dtype=dtype, value=fill), scores)
    elif mask == "keep":
        scores = b.op("where", m, scores, b.op("full", shape=(), dtype=dtype, value=fill))
    last = scores.type.rank - 1
    exps = b.op("exp", b.op("sub", scores, b.op("amax", scores, dims=(last,), keepdim=True)))
    probs = b.op("div", exps, b.op("sum", exps, dims=(last,), keepdim=True))
    return b.build([b.op(matmul, probs, v)])


def _inputs(fn, rng, masked_share=0.3):
    arrays = []
    for p in fn.params:
        if p.type.dtype is DType.bool:
            arrays.append(rng.random(p.type.shape) < masked_share)
        elif p.hint == "mask":  # additive: 0 or -inf, as a float attention mask
            arrays.append(to_storage(np.where(rng.random(p.type.shape) < masked_share, -np.inf, 0.0)
                                     .astype(np.float32), p.type.dtype))
        else:
            arrays.append(to_storage(rng.standard_normal(p.type.shape).astype(np.float32), p.type.dtype))
    return arrays


@pytest.mark.parametrize("kwargs", [
    dict(scale="mul"), dict(scale="div"), dict(scale="left"),
    dict(scale="mul", mask="add"), dict(scale="div", mask="fill"), dict(scale=None, mask="keep", fill=-1e4),
    dict(batch=2, scale="mul"), dict(batch=2, scale="mul", mask="add"),
    dict(batch=2, scale="div", mask="fill", mask_batched=True), dict(batch=3, scale=None, sk=512, sq=128),
])
def test_attention_forms_are_one_flash_kernel_matching_numpy(kwargs, rng):
    fn = attention_form(**kwargs)
    exe = check_against_interpreter(fn, rng, inputs=_inputs(fn, rng), atol=1e-4)
    assert exe.stats["kernels"] == 1 and "def attention_" in exe.source, exe.source


def test_a_wholly_masked_first_block_is_not_nan(rng):
    """Keys 0..511 (the first block) masked for some rows: the clamped first max keeps them finite."""
    fn = attention_form(mask="fill", scale="mul")
    q, k, v, mask = _inputs(fn, rng)
    mask[:64, :512] = True
    mask[:64, 512:] = False
    expected = interpret(fn, [q, k, v, mask])[0]
    (got,) = compile_nki(fn)(q, k, v, mask)
    assert np.isfinite(got).all()
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)


def test_bf16_scaled_masked_attention_is_close_to_the_exact_result(rng):
    fn = attention_form(dtype=DType.bf16, batch=2, scale="mul", mask="add")
    inputs = _inputs(fn, rng)
    q, k, v, mask = (a.astype(np.float64) for a in inputs)
    scores = q @ np.swapaxes(k, 1, 2) / 8.0 + mask
    probs = np.exp(scores - scores.max(axis=-1, keepdims=True))
    exact = (probs / probs.sum(axis=-1, keepdims=True)) @ v
    (got,) = compile_nki(fn)(*inputs)
    np.testing.assert_allclose(got.astype(np.float64), exact, atol=3e-2)


@pytest.mark.parametrize("kwargs, why", [
    (dict(scale="mul", mask="add", sk=1000), "keys not a multiple of 128"),
])
def test_forms_the_kernel_does_not_take_keep_the_separate_kernels(kwargs, why):
    assert "def attention_" not in nki_source(attention_form(**kwargs), target="trn2"), why


def test_negative_scales_and_masks_before_the_scale_keep_the_separate_kernels():
    b = Builder("odd")
    q, k, v = (b.param(TensorType((128, 512), DType.f32), n) for n in "qkv")
    m = b.param(TensorType((128, 128), DType.f32), "mask")
    scores = b.op("mm", b.op("permute", q, dims=[1, 0]), k)  # [512, 512]
    flipped = b.op("mul", scores, b.op("full", shape=(), dtype=DType.f32, value=-1.0))  # max becomes min
    exps = b.op("exp", b.op("sub", flipped, b.op("amax", flipped, dims=(1,), keepdim=True)))
    probs = b.op("div", exps, b.op("sum", exps, dims=(1,), keepdim=True))
    fn = b.build([b.op("mm", probs, b.op("permute", v, dims=[1, 0])), m])
    assert "def attention_" not in nki_source(fn, target="trn2")


def test_scaled_attention_costs_no_more_than_the_plain_flash_kernel():
    plain = estimate_costs(attention_form(scale=None, sk=2048, sq=2048, d=128, dtype=DType.bf16), "trn2")
    scaled = estimate_costs(attention_form(scale="mul", sk=2048, sq=2048, d=128, dtype=DType.bf16), "trn2")
    assert len(scaled.kernels) == len(plain.kernels) == 1
    assert scaled.total_us < 1.05 * plain.total_us, (scaled.total_us, plain.total_us)


@pytest.mark.parametrize("mask", ["add", "fill"])
def test_the_fused_masked_kernel_is_faster_than_the_three_kernels(mask, monkeypatch):
    fn = attention_form(sq=1024, sk=1024, d=128, dtype=DType.bf16, scale="mul", mask=mask)
    fused = estimate_costs(fn, "trn2")
    monkeypatch.setattr(program, "find_attention", lambda *args: None)  # the emitter without the pattern
    separate = estimate_costs(fn, "trn2")
    assert len(fused.kernels) == 1 and len(separate.kernels) == 3
    assert fused.total_us < 0.8 * separate.total_us, (fused.total_us, separate.total_us)
