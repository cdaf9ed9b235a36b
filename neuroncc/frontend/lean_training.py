"""The lean call of a training graph: an ``autograd.Function`` of neuroncc's around the compiled forward and backward.

For a training graph AOTAutograd returns its ``CompiledFunction`` (an ``autograd.Function``) inside its runtime
wrappers (input mutations, aliased outputs, effect tokens, subclasses, functionalized RNG, the dedupe and
synthetic-base wrappers; ``view_replay`` and grad mode forced on; the backward's prologue with its tangent
processing, ``call_compiled_backward``, the double-backward wrapper and the epilogue). Where its runtime metadata
says every one of those does nothing (decided once per compile or graph cache hit, :func:`lean_training_refusal`),
TorchDynamo calls this instead:

    forward(*params, *args):  outputs = compiled forward's direct call
                              saved (outputs past the user's, all plain tensors) -> ctx.save_for_backward
                              the outputs that need no grad marked non-differentiable; the user's outputs returned
    backward(*grads):         the saved tensors released from ctx, the grads of the outputs that need grads in the
                              traced memory format (AOTAutograd's ``coerce_to_expected_memory_format``), the
                              compiled backward's direct call; once differentiable (double backward refused)

and AOTAutograd's runtime for a call with grad mode off, or under compiled autograd.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch._dynamo  # noqa: F401 - first: AOTAutograd's modules import each other in TorchDynamo's order
from torch._functorch._aot_autograd.runtime_wrappers import AOTDispatchAutograd, coerce_to_expected_memory_format
from torch._functorch._aot_autograd.schemas import OutputType, PlainTensorMeta, SubclassCreationMeta

from neuroncc.frontend.compiled import CompiledGraph
from neuroncc.frontend.lean_call import standing_in_for


#: the lean training call in use (False: AOTAutograd's runtime for every training graph; for A/Bs)
ENABLED = True


def lean_training_refusal(forward: Any, backward: Any, meta: Any, graph_inputs: int, call_inputs: int,
                          disable_amp: bool, detach: Sequence[int], saved_hooks: bool) -> str | None:
    """Why a training graph compiled as ``forward`` / ``backward`` (AOTAutograd's runtime metadata ``meta``;
    ``detach``: the inputs AOTAutograd detaches; ``saved_hooks``: saved-tensors hooks were active when its
    runtime was made, which AOTAutograd may have inlined into the graphs and disables around its calls) needs
    AOTAutograd's runtime, or None when it does nothing the lean function does not."""
    if not ENABLED:
        return "switched off"
    for graph in (forward, backward):  # (one without a direct call takes its own call, as under AOTAutograd)
        if not isinstance(graph, CompiledGraph) or graph.device is not None:
            return "not a cpu graph"
    if meta is None or meta.num_symints_saved_for_bw is None or meta.num_tensors_saved_with_no_vc_check is None:
        return "no runtime metadata"
    if graph_inputs != call_inputs:
        return "AOTAutograd deduplicated or merged inputs"
    if disable_amp:
        return "autocast is disabled around the call"
    if detach:
        return "inputs detached before the call"
    if saved_hooks:
        return "saved-tensors hooks"
    if meta.num_mutated_inp_runtime_indices or meta.mutated_graph_handled_indices or meta.num_outputs_aliased or \
            meta.num_intermediate_bases or meta.num_unsafe_view_outputs or \
            meta.indices_of_inputs_that_requires_grad_with_mutations_in_bw:
        return "input mutations or aliased outputs"
    if meta.tokens or meta.num_backward_tokens or any(
            isinstance(m, SubclassCreationMeta)
            for m in (*meta.subclass_inp_meta, *meta.subclass_fw_graph_out_meta, *meta.subclass_tangent_meta)):
        return "effect tokens or tensor subclasses"
    if meta.is_rng_op_functionalized or meta.num_graphsafe_rng_states or meta.dynamic_outputs or \
            meta.grad_enabled_mutation is not None:
        return "functionalized RNG, dynamic outputs or a grad-mode change"
    if meta.num_symints_saved_for_bw or meta.num_opaque_objects_saved_for_bw or \
            meta.num_tensors_saved_with_no_vc_check or meta.dynamic_saved_tensors_idxs:
        return "symbolic sizes, opaque objects or unchecked tensors saved for the backward"
    if any(info.output_type != OutputType.non_alias or not issubclass(info.raw_type, torch.Tensor)
           for info in meta.output_info):
        return "an output that is not a plain tensor"
    if len(forward.outputs) < meta.num_forward_returns or meta.num_forward_returns != meta.num_outputs:
        return "the graph's outputs are not the user's and the saved tensors"
    if len(meta.subclass_tangent_meta) != sum(info.requires_grad_for_backward for info in meta.output_info) or \
            not all(isinstance(m, PlainTensorMeta) and m.memory_format is not None
                    for m in meta.subclass_tangent_meta):
        return "tangents that are not plain tensors"
    return None


def saved_tensors_hooks_active() -> bool:
    """Saved-tensors hooks active now (``lean_training_refusal``'s ``saved_hooks``, taken where AOTAutograd's
    runtime is made)."""
    return bool(torch._functorch._aot_autograd.utils.top_saved_tensors_hooks())


def lean_training(slow: Callable[..., Any], forward: CompiledGraph, backward: CompiledGraph, meta: Any,
                  params_buffers: Sequence[Any]) -> Callable[..., Any]:
    """The callable TorchDynamo calls for a training graph :func:`lean_training_refusal` accepted; ``slow``
    (AOTAutograd's runtime) for a call with grad mode off or under compiled autograd."""
    function = _lean_function(forward, backward, meta)
    prefix = tuple(params_buffers)
    apply, grad_enabled = function.apply, torch.is_grad_enabled
    import torch._dynamo.compiled_autograd as compiled_autograd

    def entry(*args: Any) -> Any:
        if not grad_enabled() or compiled_autograd.compiled_autograd_enabled:
            return slow(*args)
        return list(apply(*prefix, *args))

    entry.function = function  # type: ignore[attr-defined]
    return standing_in_for(slow, entry)


def lean_training_once_decided(slow: Callable[..., Any],
                               decide: Callable[[], Callable[..., Any] | None]) -> Callable[..., Any]:
    """AOTAutograd's runtime ``slow`` until ``decide()`` gives the callable to use (once the backward is
    compiled: the lean call or ``slow``), then that callable."""
    chosen: list[Callable[..., Any] | None] = [None]

    def entry(*args: Any) -> Any:
        call = chosen[0]
        if call is None:
            call = chosen[0] = decide()
            if call is None:
                return slow(*args)
        return call(*args)

    return standing_in_for(slow, entry)


def _lean_function(forward: CompiledGraph, backward: CompiledGraph, meta: Any) -> type[torch.autograd.Function]:
    outputs = meta.num_outputs
    saved = meta.tensors_saved_for_backwards_slice
    non_diff = tuple(i for i, info in enumerate(meta.output_info) if not info.requires_grad)
    tangents = tuple(i for i, info in enumerate(meta.output_info) if info.requires_grad_for_backward)
    formats = tuple(m.memory_format for m in meta.subclass_tangent_meta)
    plain = torch.Tensor
    donated = bool(meta.bw_donated_idxs)
    keep_graph = torch._C._autograd._get_current_graph_task_keep_graph
    nondeterministic = meta.deterministic is not None and not meta.deterministic
    fw_lean = forward.lean_call or (lambda args: None)
    bw_lean = backward.lean_call or (lambda args: None)

    class LeanCompiledFunction(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, *args: Any) -> Any:  # type: ignore[override]
            outs = fw_lean(args)
            if outs is None:  # a tensor that does not cross as it is: the graph's own call
                outs = forward(list(args))
            ctx.save_for_backward(*[x.detach() if x._is_view() else x for x in outs[saved]])
            if non_diff:
                ctx.mark_non_differentiable(*[outs[i] for i in non_diff])
            ctx._materialize_non_diff_grads = False
            return tuple(outs[:outputs])

        @staticmethod
        @torch._dynamo.disable(reason="do not trace generated backwards pass")  # (within a compiled frame's call)
        def backward(ctx: Any, *grads: Any) -> Any:  # type: ignore[override]
            if nondeterministic and torch.are_deterministic_algorithms_enabled():
                torch._check(False, lambda: "This compiled backward function is being run with "
                             "torch.use_deterministic_algorithms(True), but it was previously generated during the "
                             "forward function while torch.use_deterministic_algorithms(False) was set.")
            args = list(ctx.saved_tensors)
            ctx.maybe_clear_saved_tensors()
            if donated and keep_graph() and torch._functorch.config.donated_buffer:
                torch._check(False, lambda: "This backward function was compiled with non-empty donated buffers "
                             "which requires create_graph=False and retain_graph=False.")
            for j, i in enumerate(tangents):
                grad = grads[i]
                if type(grad) is not plain:
                    grad = AOTDispatchAutograd.process_runtime_tangent(grad, meta.subclass_tangent_meta[j])[0]
                args.append(coerce_to_expected_memory_format(grad, formats[j]))
            if torch.is_grad_enabled():  # create_graph: gradients whose own backward refuses, as AOTAutograd's
                return NoDoubleBackward.apply(torch.empty(0, requires_grad=True), *args)
            return run_backward(args)

    def run_backward(args: list[Any]) -> tuple[Any, ...]:
        outs = bw_lean(args)
        if outs is None:
            outs = backward(args)
        return tuple(outs)

    class NoDoubleBackward(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, dummy: Any, *args: Any) -> Any:  # type: ignore[override]
            return run_backward(list(args))

        @staticmethod
        def backward(ctx: Any, *grads: Any) -> Any:  # type: ignore[override]
            raise RuntimeError("torch.compile with aot_autograd does not currently support double backward")

    return LeanCompiledFunction
