"""PyTorch's fused transformer inference ops under torch.compile(backend="neuron"): eval-mode
TransformerEncoderLayer / TransformerEncoder / MultiheadAttention without gradients match eager
(frontend/lowering/transformer_fastpath.py decomposes the ops; tolerances: tests/frontend/transformer_cases.py)."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn

from frontend.transformer_cases import (
    GRAD_MODES, LayerCase, assert_as_accurate_as_eager, doubled, encoder_layer, in_float64, layer_masks,
    padding_mask, source,
)
from neuroncc.frontend.backend import neuron_backend
from neuroncc.frontend.lowering.decompositions import decomposition_table
from neuroncc.frontend.lowering.transformer_fastpath import native_multi_head_attention

aten = torch.ops.aten

LAYER_CASES = [
    *(LayerCase(batch_first, norm_first, activation)
      for batch_first in (True, False) for norm_first in (False, True) for activation in ("relu", "gelu")),
    LayerCase(masks="none"),
    LayerCase(masks="causal"),
    LayerCase(norm_first=True, activation="gelu", masks="causal_and_padding"),
    LayerCase(masks="none", grad_mode="inference_mode"),
    LayerCase(norm_first=True, masks="causal_and_padding", grad_mode="inference_mode"),
]


def _compile_recording(module: nn.Module, seen: set[str]):
    """torch.compile through the neuron backend, noting the names of the functions TorchDynamo's graphs call."""
    def backend(gm, example_inputs):
        seen.update(getattr(node.target, "__name__", str(node.target)) for node in gm.graph.nodes
                    if node.op == "call_function")
        return neuron_backend(gm, example_inputs)

    return torch.compile(module, backend=backend, dynamic=False)


@pytest.mark.parametrize("case", LAYER_CASES, ids=str)
def test_encoder_layer_matches_eager(case):
    layer, x, kwargs = encoder_layer(case), source(case.batch_first), layer_masks(case.masks)
    seen: set[str] = set()
    with GRAD_MODES[case.grad_mode]():
        want = layer(x, **kwargs)
        got = _compile_recording(layer, seen)(x, **kwargs)
        exact = in_float64(layer)(x.double(), **doubled(kwargs))
    assert_as_accurate_as_eager(got, want, exact)
    # batch_first layers take the fast path (one fused op in the graph); the others trace plain ops
    assert ("_transformer_encoder_layer_fwd" in seen) == case.batch_first


@pytest.mark.parametrize("padded", [False, True])
def test_encoder_stack_matches_eager(padded):
    """Two layers and a final norm. With a padding mask, eager takes the nested-tensor path (outputs 0 at the
    padded positions); under torch.compile PyTorch skips it ("mask_check enabled with torch.compile"), for any
    backend: the unpadded positions match eager's, the padded ones the stack without nested tensors."""
    encoder = nn.TransformerEncoder(encoder_layer(LayerCase()), 2, norm=nn.LayerNorm(32)).eval()
    x = source()
    kwargs = {"src_key_padding_mask": padding_mask()} if padded else {}
    seen: set[str] = set()
    with torch.no_grad():
        want = encoder(x, **kwargs)
        got = _compile_recording(encoder, seen)(x, **kwargs)
        exact = in_float64(encoder)(x.double(), **doubled(kwargs))
        if padded:
            encoder.use_nested_tensor = False  # eager without the nested path: its padded positions
            unnested = encoder(x, **kwargs)
            exact_unnested = in_float64(encoder)(x.double(), **doubled(kwargs))
    assert "_transformer_encoder_layer_fwd" in seen
    if not padded:
        assert_as_accurate_as_eager(got, want, exact)
        return
    valid = ~padding_mask()
    assert want[~valid].eq(0).all()
    assert_as_accurate_as_eager(got[valid], want[valid], exact[valid])
    assert_as_accurate_as_eager(got, unnested, exact_unnested)


@pytest.mark.parametrize("need_weights", [False, True])
def test_multihead_attention_matches_eager(need_weights):
    """TorchDynamo never meets nn.MultiheadAttention's fused op (the module skips it while make_fx traces): the
    compiled module is the slow path's plain ops, which must match eager's fused kernel."""
    attention = nn.MultiheadAttention(32, 4, batch_first=True).eval()
    x, mask = source(), padding_mask()

    def fn(module, x, mask):
        return module(x, x, x, key_padding_mask=mask, need_weights=need_weights)

    with torch.no_grad():
        want = fn(attention, x, mask)
        got = torch.compile(fn, backend="neuron", dynamic=False)(attention, x, mask)
        exact = fn(in_float64(attention), x.double(), mask)
    assert_as_accurate_as_eager(got[0], want[0], exact[0])
    if need_weights:
        assert_as_accurate_as_eager(got[1], want[1], exact[1])
    else:
        assert got[1] is None and want[1] is None


def _mha_arguments():
    attention = nn.MultiheadAttention(32, 4, batch_first=True)
    x = source()
    return (x, x, x, 32, 4, attention.in_proj_weight.detach(), attention.in_proj_bias.detach(),
            attention.out_proj.weight.detach(), attention.out_proj.bias.detach())


@pytest.mark.parametrize("mask_type, mask_shape", [(0, (7, 7)), (1, (3, 7)), (2, (3, 4, 7, 7))])
@pytest.mark.parametrize("need_weights", [False, True])
def test_fused_attention_reads_masks_as_aten_does(mask_type, mask_shape, need_weights):
    """The decomposition against ATen's kernel, called directly (no compile): every mask type, and a float mask
    with finite nonzero entries, which the kernel reads as booleans (masked where nonzero, not added)."""
    mask = torch.where(torch.rand(mask_shape, generator=torch.Generator().manual_seed(2)) < 0.3, 0.5, 0.0)
    mask[..., 0] = 0.0  # every query keeps a key
    args = _mha_arguments()
    exact_args = tuple(a.double() if isinstance(a, torch.Tensor) else a for a in args)
    want = aten._native_multi_head_attention(*args, mask, need_weights, False, mask_type)
    got = native_multi_head_attention(*args, mask, need_weights, False, mask_type)
    exact = aten._native_multi_head_attention(*exact_args, mask.double(), need_weights, False, mask_type)
    for g, w, e in zip(got, want, exact):
        if w is None:
            assert g is None
        else:
            assert_as_accurate_as_eager(g, w, e)


def test_fully_masked_rows_are_nan_as_in_eager():
    """ATen's masked softmax leaves a query row whose keys are all padded NaN (the slow path's gives numbers);
    the compiled fast path does the same."""
    layer, x = encoder_layer(LayerCase()), source()
    mask = padding_mask()
    mask[2] = True
    with torch.no_grad():
        want = layer(x, src_key_padding_mask=mask)
        got = torch.compile(layer, backend="neuron", dynamic=False)(x, src_key_padding_mask=mask)
        exact = in_float64(layer)(x.double(), src_key_padding_mask=mask)
    assert want[2].isnan().all() and not want[:2].isnan().any()
    assert_as_accurate_as_eager(got, want, exact)


def test_the_fused_ops_are_in_the_decomposition_table():
    table = decomposition_table()
    assert aten._transformer_encoder_layer_fwd.default in table
    assert aten._native_multi_head_attention.default in table
