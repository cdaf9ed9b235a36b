"""The lean call of an inference graph: TorchDynamo's arguments straight to the compiled graph's direct call.

AOTAutograd wraps an inference graph's compiled function in ``aot_module_simplified``'s ``forward`` (the
parameters prepended) and its runtime wrapper (input mutations written back, outputs that alias an input or an
intermediate regenerated, effect tokens, subclasses, functionalized RNG, autocast off, grad mode off during the
call). For most inference graphs every one of those does nothing, and the layers cost ~3 us a call of the ~18 us
neuroncc spent on a tiny MLP below TorchDynamo's frame (``benchmarks/bench_call_path.py --layers mlp``). Whether
they do nothing is known when the graph is compiled (AOTAutograd's runtime metadata, and TorchDynamo guards the
grad mode, autocast state, requires_grad and the inputs' types on which it rests), so it is decided here, once,
for a compile and a graph cache hit alike, and obeyed per call:

    lean(*args) = CompiledGraph.lean_call([*params, *args])    # the direct call (direct_call.py) and outputs
                  or, when that call declines (a tensor that does not cross as it is), AOTAutograd's runtime

(``CompiledGraph.lean_entry``: that in one frame, with the graph's settled check made in it.)

Grad mode stays as the caller left it: no input of an inference graph requires grad when grad mode is on
(AOTAutograd traces it for autograd otherwise), so nothing the call makes (outputs by ``torch.empty_strided``,
ATen externs on the inputs' memory) can record autograd history either way.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch._functorch._aot_autograd.schemas import SubclassCreationMeta

from neuroncc.frontend.compiled import CompiledGraph


def lean_refusal(compiled: Any, meta: Any, graph_inputs: int, call_inputs: int, disable_amp: bool) -> str | None:
    """Why an inference graph compiled as ``compiled`` (AOTAutograd's runtime metadata ``meta``; the compiled
    graph takes ``graph_inputs`` arguments, AOTAutograd is called with ``call_inputs``) needs AOTAutograd's
    runtime wrappers, or None when they do nothing for it."""
    if not isinstance(compiled, CompiledGraph) or compiled.device is not None or compiled.lean_call is None:
        return "not a cpu graph called on data pointers"
    if meta is None:
        return "no runtime metadata"
    if graph_inputs != call_inputs:
        return "AOTAutograd deduplicated or merged inputs"
    if disable_amp:
        return "autocast is disabled around the call"
    if meta.num_mutated_inp_runtime_indices or meta.mutated_graph_handled_indices or meta.num_outputs_aliased or \
            meta.num_intermediate_bases:  # (a mutation kept in the graph: the wrapper bumps its version counter)
        return "input mutations or aliased outputs"
    if meta.tokens or any(isinstance(m, SubclassCreationMeta) for m in (*meta.subclass_inp_meta,
                                                                         *meta.subclass_fw_graph_out_meta)):
        return "effect tokens or tensor subclasses"
    if meta.is_rng_op_functionalized or meta.dynamic_outputs or meta.grad_enabled_mutation is not None:
        return "functionalized RNG, dynamic outputs or a grad-mode change"
    if len(compiled.outputs) != meta.num_outputs:
        return "the graph's outputs are not the user's"
    return None


def lean_inference(slow: Callable[..., Any], compiled: CompiledGraph,
                   params_buffers: Sequence[Any]) -> Callable[..., Any]:
    """The callable TorchDynamo calls for an inference graph :func:`lean_refusal` accepted: ``compiled``'s lean
    call on ``[*params_buffers, *args]``, ``slow`` (AOTAutograd's runtime) for a call that declines it. Carries
    what ``aot_module_simplified``'s callable carries (``zero_grad``, ``named_parameters``, ...)."""
    # (the call's check and its fallback in one frame)
    return standing_in_for(slow, compiled.lean_entry(tuple(params_buffers), slow))


def standing_in_for(slow: Callable[..., Any], entry: Callable[..., Any]) -> Callable[..., Any]:
    """``entry`` as TorchDynamo calls it in place of AOTAutograd's callable ``slow``: carrying what
    ``aot_module_simplified``'s callable carries (``zero_grad``, ``named_parameters``, ...) and ``slow`` itself,
    not traced by TorchDynamo."""
    for name in ("zero_grad", "named_parameters", "named_buffers", "serialize"):
        if hasattr(slow, name):
            setattr(entry, name, getattr(slow, name))
    entry.slow = slow  # type: ignore[attr-defined]
    return torch._dynamo.disable(entry, reason="do not trace AOT-compiled graph")


def module_params_buffers(gm: torch.nn.Module) -> list[Any]:
    """The parameters and buffers ``aot_module_simplified`` passes before the call's arguments, in its order."""
    return [*dict(gm.named_parameters(remove_duplicate=False)).values(),
            *dict(gm.named_buffers(remove_duplicate=False)).values()]
