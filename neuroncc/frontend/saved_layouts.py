"""Activations saved for the backward keep the layout our forward executable gives them.

Only our own backward graph reads the activations a forward graph saves, so copying them into eager's
strides after every forward call buys nothing. As for Inductor's layouts, the forward compiler reports the
strides it returns to AOTAutograd (``TracingContext.output_strides``); AOTAutograd then restrides the
backward graph's example inputs, and the backward compiler takes those layouts for its placeholders. Both the
torch backend and the ``.pt2`` training path (``frontend/exported.py``) compile through these three calls:

    saved = saved_activations(gm)                      # forward: which outputs are saved activations
    compiled = CompiledGraph(..., free_layouts=saved)  # they keep the executable's layout
    report_output_strides(compiled, saved)             # every output's strides, for AOTAutograd
    take_input_layouts(gm, example_inputs)             # backward: placeholders get the reported layouts
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.fx as fx

from neuroncc.frontend.compiled import CompiledGraph


def saved_activations(gm: fx.GraphModule) -> frozenset[int]:
    """The forward graph's output positions that are activations saved for the backward graph: none when
    AOTAutograd does not say (no tracing context). With effect tokens (ops with side effects) the graph returns
    the tokens first, which AOTAutograd's slice does not count, so the strides it reads back would be off by
    as many: none then either."""
    context = torch._guards.TracingContext.try_get()
    meta = getattr(context, "fw_metadata", None)
    if meta is None or getattr(meta, "tokens", None) or getattr(context, "output_strides", None) is None:
        return frozenset()
    (output,) = (node for node in gm.graph.nodes if node.op == "output")
    try:
        return frozenset(range(len(output.args[0]))[meta.tensors_saved_for_backwards_slice])
    except (AssertionError, AttributeError, TypeError):
        return frozenset()


def report_output_strides(compiled: CompiledGraph, saved: frozenset[int]) -> None:
    """Tell AOTAutograd the strides of every output ``compiled`` returns (only needed when some differ)."""
    if not saved:
        return
    context = torch._guards.TracingContext.try_get()
    if context is not None and context.output_strides is not None:
        context.output_strides.extend(compiled.output_strides)


def take_input_layouts(gm: fx.GraphModule, example_inputs: Sequence[Any]) -> None:
    """Give the backward graph's placeholders the layouts of the inputs AOTAutograd compiles it for (it
    restrides the saved activations to the reported layouts in the example inputs only)."""
    placeholders = [node for node in gm.graph.nodes if node.op == "placeholder"]
    for node, example in zip(placeholders, example_inputs):
        traced = node.meta.get("val")
        if isinstance(example, torch.Tensor) and isinstance(traced, torch.Tensor) and \
                example.shape == traced.shape and example.stride() != traced.stride():
            node.meta["val"] = example
