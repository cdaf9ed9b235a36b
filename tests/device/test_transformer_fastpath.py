"""PyTorch's fused transformer inference ops on the neuron device (eager): each call compiles through the front
end's decomposition (frontend/lowering/transformer_fastpath.py) instead of falling back to CPU, and matches
eager on CPU (tolerances: tests/frontend/transformer_cases.py). The nested-tensor path raises a typed error."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn

import neuroncc
from frontend.transformer_cases import (
    GRAD_MODES, LayerCase, assert_as_accurate_as_eager, doubled, encoder_layer, in_float64, layer_masks,
    padding_mask, source,
)

FUSED_OPS = ("aten._transformer_encoder_layer_fwd.default", "aten._native_multi_head_attention.default")


def _on_device(kwargs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {k: v.to("neuron") for k, v in kwargs.items()}


def _assert_nothing_fell_back() -> None:
    assert not set(FUSED_OPS) & set(neuroncc.get_fallback_ops())


@pytest.mark.parametrize("case", [
    LayerCase(),
    LayerCase(norm_first=True, activation="gelu"),
    LayerCase(masks="causal_and_padding", grad_mode="inference_mode"),
    LayerCase(batch_first=False, masks="none"),  # the slow path's plain ops, for contrast
], ids=str)
def test_encoder_layer_matches_eager(case):
    layer, x, kwargs = encoder_layer(case), source(case.batch_first), layer_masks(case.masks)
    with GRAD_MODES[case.grad_mode]():
        want = layer(x, **kwargs)
        exact = in_float64(layer)(x.double(), **doubled(kwargs))
        got = layer.to("neuron")(x.to("neuron"), **_on_device(kwargs))
    assert_as_accurate_as_eager(got, want, exact)
    _assert_nothing_fell_back()
    executed = neuroncc.get_executed_ops()
    assert (FUSED_OPS[0] in executed) == case.batch_first


def test_encoder_stack_without_padding_matches_eager():
    encoder = nn.TransformerEncoder(encoder_layer(LayerCase()), 2).eval()
    x = source()
    with torch.no_grad():
        want, exact = encoder(x), in_float64(encoder)(x.double())
        got = encoder.to("neuron")(x.to("neuron"))
    assert_as_accurate_as_eager(got, want, exact)
    _assert_nothing_fell_back()


@pytest.mark.parametrize("need_weights, average", [(False, True), (True, True), (True, False)])
def test_multihead_attention_matches_eager(need_weights, average):
    attention = nn.MultiheadAttention(32, 4, batch_first=True).eval()
    x, mask = source(), padding_mask()

    def fn(module, x, mask):
        return module(x, x, x, key_padding_mask=mask, need_weights=need_weights, average_attn_weights=average)

    with torch.no_grad():
        want, exact = fn(attention, x, mask), fn(in_float64(attention), x.double(), mask)
        got = fn(attention.to("neuron"), x.to("neuron"), mask.to("neuron"))
    assert_as_accurate_as_eager(got[0], want[0], exact[0])
    if need_weights:
        assert_as_accurate_as_eager(got[1], want[1], exact[1])
    else:
        assert got[1] is None and want[1] is None  # as eager's kernel returns it
    _assert_nothing_fell_back()
    assert FUSED_OPS[1] in neuroncc.get_executed_ops()


def test_the_nested_tensor_path_is_a_typed_error_naming_the_op_and_line():
    encoder = nn.TransformerEncoder(encoder_layer(LayerCase()), 2).eval().to("neuron")
    x, mask = source().to("neuron"), padding_mask().to("neuron")
    with torch.no_grad(), pytest.warns(UserWarning):  # the mask check runs on CPU (a fallback)
        with pytest.raises(neuroncc.UnsupportedOpError, match="_nested_tensor_from_mask") as info:
            encoder(x, src_key_padding_mask=mask)
    assert f"{__file__}:" in str(info.value) and "enable_nested_tensor=False" in str(info.value)
    # the advice works: without nested tensors the stack runs on the device
    unnested = nn.TransformerEncoder(encoder_layer(LayerCase()), 2, enable_nested_tensor=False).eval()
    with torch.no_grad():
        want = unnested(source(), src_key_padding_mask=padding_mask())
        exact = in_float64(unnested)(source().double(), src_key_padding_mask=padding_mask())
        got = unnested.to("neuron")(x, src_key_padding_mask=mask)
    assert_as_accurate_as_eager(got, want, exact)
