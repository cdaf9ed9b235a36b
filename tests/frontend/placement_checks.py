"""The output placement both direct-call forms must keep (``DirectCall.launch`` and its one-frame form)."""

from __future__ import annotations

import torch

from neuroncc.hardware import host
from neuroncc.hardware.host import ALIAS_PERIOD_BYTES

ROWS, COLS = 512, 512  # 1 MiB float32: a large output, placed


def scaled_plus_one(x, w):
    return x * w + 1.0


def input_at(memory: torch.Tensor, offset: int) -> torch.Tensor:
    """A [ROWS, COLS] input starting ``offset`` floats into ``memory`` (its first element marks the offset)."""
    x = memory[offset:offset + ROWS * COLS].view(ROWS, COLS)
    x[0, 0] = offset
    return x


def check_outputs_off_inputs_modulo_4k(compiled, memory: torch.Tensor, w: torch.Tensor) -> None:
    """At every 16-byte page offset of the input, ``compiled``'s output (of :func:`scaled_plus_one`) is right, is
    not 4K-aliased with the input or the weight (``hardware.host.placement_shift``: at none of
    ``host.aliased_distances()`` past either), and is no view (the caller may modify it in place)."""
    distances = host.aliased_distances()
    for offset in range(0, ALIAS_PERIOD_BYTES // 4, 4):
        x = input_at(memory, offset)
        out = compiled(x, w)
        torch.testing.assert_close(out, scaled_plus_one(x, w))
        for source in (x, w):
            assert (out.data_ptr() - source.data_ptr()) % ALIAS_PERIOD_BYTES not in distances, offset
        assert out._base is None and out.is_contiguous()
    out.add_(1.0)


def placement_memory() -> torch.Tensor:
    """Memory for :func:`input_at` at every offset of a 4 KiB period."""
    return torch.zeros(ROWS * COLS + ALIAS_PERIOD_BYTES // 4)
