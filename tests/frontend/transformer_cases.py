"""PyTorch's transformer modules in the configurations that take their fused inference fast path, and the
judgement of a compiled result against eager's (tests/frontend/test_transformer_fastpath.py and
tests/device/test_transformer_fastpath.py).

Accuracy is judged against float64 (neuroncc.testing.compare): the same module in float64 takes the same fast
path (ATen's fused kernels run in float64 on CPU), so it computes the same function, masks read as ATen reads
them included. A result passes when it is no further from that answer than 3x eager's own float32 error (plus
1e-5 of the output's scale): the tolerance is what float32 rounding does to this computation, measured.
"""

from __future__ import annotations

import copy
from contextlib import AbstractContextManager
from dataclasses import dataclass

import torch
import torch.nn as nn

from neuroncc.testing.compare import float64_judgement, special_positions_differ

D_MODEL, HEADS, FEEDFORWARD, BATCH, LENGTH = 32, 4, 64, 3, 7

#: The grad modes in which the fast path runs (both keep autograd from recording).
GRAD_MODES: dict[str, type[AbstractContextManager]] = {
    "no_grad": torch.no_grad,
    "inference_mode": torch.inference_mode,
}


@dataclass(frozen=True)
class LayerCase:
    batch_first: bool = True
    norm_first: bool = False
    activation: str = "relu"
    masks: str = "padding"  # none | padding | causal | causal_and_padding
    grad_mode: str = "no_grad"

    def __str__(self) -> str:
        return (f"{'bf' if self.batch_first else 'seq_first'}-{'pre' if self.norm_first else 'post'}norm-"
                f"{self.activation}-{self.masks}-{self.grad_mode}")


def encoder_layer(case: LayerCase) -> nn.TransformerEncoderLayer:
    return nn.TransformerEncoderLayer(D_MODEL, HEADS, FEEDFORWARD, dropout=0.1, activation=case.activation,
                                      batch_first=case.batch_first, norm_first=case.norm_first).eval()


def source(batch_first: bool = True) -> torch.Tensor:
    shape = (BATCH, LENGTH, D_MODEL) if batch_first else (LENGTH, BATCH, D_MODEL)
    return torch.randn(*shape, generator=torch.Generator().manual_seed(1))


def padding_mask() -> torch.Tensor:
    """[B, L], True at padded keys; every sequence keeps at least one key, left-aligned (as the nested path
    of nn.TransformerEncoder requires)."""
    mask = torch.zeros(BATCH, LENGTH, dtype=torch.bool)
    mask[1, 5:] = True
    mask[2, 3:] = True
    return mask


def layer_masks(masks: str) -> dict[str, torch.Tensor]:
    """The keyword arguments of a TransformerEncoderLayer call for ``masks``."""
    kwargs = {}
    if "padding" in masks:
        kwargs["src_key_padding_mask"] = padding_mask()
    if "causal" in masks:  # bool like the padding mask: mixed mask types warn, a graph break in TorchDynamo
        kwargs["src_mask"] = torch.ones(LENGTH, LENGTH, dtype=torch.bool).triu(1)
    return kwargs


def in_float64(module: nn.Module) -> nn.Module:
    return copy.deepcopy(module).double()


def doubled(kwargs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {k: v.double() if v.is_floating_point() else v for k, v in kwargs.items()}


def assert_as_accurate_as_eager(got: torch.Tensor, want: torch.Tensor, exact: torch.Tensor) -> None:
    """``got`` (compiled) has NaN/inf where eager's ``want`` has them, and is as close to the float64 ``exact``
    as eager is (see the module docstring)."""
    got = got.detach().cpu()
    assert got.shape == want.shape and got.dtype == want.dtype
    problem = special_positions_differ(got, want) or float64_judgement(got, want, exact)
    assert problem is None, problem
