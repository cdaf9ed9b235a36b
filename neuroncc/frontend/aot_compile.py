"""A graph cache miss: AOTAutograd with neuroncc's compilers, for a TorchDynamo graph with static sizes.

    compile_with_aot_autograd(gm, inputs, ...) = AOTAutograd (our decomposition table, the min-cut partitioner
        after marking random states and merging common subexpressions; SDPA backend per target: lower_attention)
        -> AtenCompilers: forward / backward / inference aten graphs -> compile_aten_graph (FX -> IR -> driver)
        -> the graph cache's recorder hears each compiled graph and publishes the entry

Imported by ``backend.compile_static`` on a miss only: with it come AOTAutograd's tracing machinery, the
importer and its lowering rules and the compiler (passes, code generation), none of which a graph cache hit
runs (``tests/frontend/test_warm_imports.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx as fx
from torch._dynamo.backends.common import aot_autograd
from torch._functorch._aot_autograd.utils import make_boxed_func
from torch._subclasses.fake_tensor import DataDependentOutputException, DynamicOutputShapeException
from torch.fx.experimental.symbolic_shapes import GuardOnDataDependentSymNode

from neuroncc.executors.cpu import helper_start
from neuroncc.frontend import graph_cache, stats
from neuroncc.frontend.aten_compiler import compile_aten_graph, imports_gc_paused
from neuroncc.frontend.boundary import HostDevice
from neuroncc.frontend.compiled import CompiledGraph
from neuroncc.frontend.diagnostics import data_dependent_refusal
from neuroncc.frontend.fallback import has_communication, partition_and_compile
from neuroncc.frontend.joint_cse import partition_joint
from neuroncc.frontend.lean_call import lean_inference, lean_refusal, module_params_buffers
from neuroncc.frontend import lean_training as lean_training_switch
from neuroncc.frontend.lean_training import (lean_training, lean_training_once_decided, lean_training_refusal,
                                             saved_tensors_hooks_active)
from neuroncc.frontend.lowering.attention import attention_tracing
from neuroncc.frontend.lowering.decompositions import decomposition_table
from neuroncc.frontend.lowering.random_ops import regenerate_random_in_backward, save_random_states
from neuroncc.frontend.options import BackendOptions
from neuroncc.frontend.profiling import graph_range
from neuroncc.frontend.saved_facts import SavedFacts, forward_facts
from neuroncc.frontend.saved_layouts import report_output_strides, saved_activations, take_input_layouts

#: What AOTAutograd raises when tracing needs a value only known at run time (a size read from a tensor); here,
#: not in diagnostics.py, whose importers (the device's ops) would load sympy with it.
DATA_DEPENDENT_ERRORS: tuple[type[BaseException], ...] = (
    GuardOnDataDependentSymNode, DataDependentOutputException, DynamicOutputShapeException,
)


def compile_with_aot_autograd(gm: fx.GraphModule, example_inputs: list[Any], name: str, config: BackendOptions,
                              device: HostDevice | None,
                              recorder: graph_cache.GraphRecorder | None) -> Callable[..., Any]:
    """The callable AOTAutograd makes of ``gm`` with neuroncc's compilers (``device``: the host-memory device its
    tensors live on, when not CPU; ``recorder``: the graph cache's, which collects the entry)."""
    compilers = AtenCompilers(config, name, device, recorder)
    compile_with_aot = aot_autograd(
        fw_compiler=compilers.forward,
        bw_compiler=compilers.backward,
        inference_compiler=compilers.inference,
        decompositions=decomposition_table(),
        partition_fn=_partition_fn(config),
        # Input mutations stay in the graph as a trailing copy_(input, new) (inference graphs, and data-only
        # mutations of inputs that need no grad in training graphs: BatchNorm's running stats). The compiled
        # graph writes them back itself, or its kernels compute them in the input's memory (importer.py's
        # ``donate``): the optimizer step then writes each parameter and moment once, instead of into a fresh
        # output that AOTAutograd copies in (52 bytes moved per AdamW parameter instead of 28).
        keep_inference_input_mutations=graph_cache.KEEP_INFERENCE_INPUT_MUTATIONS,  # True
    )
    if config.target == "cpu":  # the native helpers compile on the core AOTAutograd's trace leaves idle
        with imports_gc_paused():
            helper_start.load_helpers_soon()
    # cpu/interp: attention stays ATen's flash kernel (one library op); nki-sim: the math SDPA backend.
    stats.increment("aot_autograd_runs")
    with attention_tracing(config.target):
        try:
            compiled = compile_with_aot(gm, example_inputs)
        except DATA_DEPENDENT_ERRORS as error:
            raise data_dependent_refusal(gm, error) from error
    if recorder is not None:
        recorder.aot_returned()
    if compilers.compiled_inference:  # an inference graph: AOTAutograd's wrappers left out where they do nothing
        graph, meta, graph_inputs = compilers.compiled_inference[-1]
        params_buffers = module_params_buffers(gm)
        if lean_refusal(graph, meta, graph_inputs, len(params_buffers) + len(example_inputs),
                        torch._C._is_any_autocast_enabled()) is None:
            return lean_inference(compiled, graph, params_buffers)
    elif compilers.compiled_forward and lean_training_switch.ENABLED:
        # a training graph: AOTAutograd's runtime left out where it does nothing (lean_training.py), decided when
        # its backward is compiled (AOTAutograd compiles a static graph's backward lazily, at its first call)
        params_buffers = module_params_buffers(gm)
        call_inputs, disable_amp = len(params_buffers) + len(example_inputs), torch._C._is_any_autocast_enabled()
        saved_hooks = saved_tensors_hooks_active()

        def decide() -> Callable[..., Any] | None:
            if not compilers.compiled_training:
                return None
            forward, backward, meta, graph_inputs, detach = compilers.compiled_training[-1]
            if lean_training_refusal(forward, backward, meta, graph_inputs, call_inputs, disable_amp, detach,
                                     saved_hooks) is None:
                return lean_training(compiled, forward, backward, meta, params_buffers)
            return compiled

        return lean_training_once_decided(compiled, decide)
    return compiled


@dataclass(frozen=True)
class AtenCompilers:
    """The compilers AOTAutograd calls for each graph it produces."""

    options: BackendOptions
    name: str
    device: HostDevice | None = None
    recorder: graph_cache.GraphRecorder | None = None  # collects the graph cache's entry on a miss
    #: the forward graph compiled (its backward shares its arena)
    compiled_forward: list[Any] = field(default_factory=list)
    forward_inputs: list[int] = field(default_factory=list)
    #: the inference graph compiled, with AOTAutograd's runtime metadata and its number of inputs (lean_call.py)
    compiled_inference: list[tuple[Any, Any, int]] = field(default_factory=list)
    #: the training graph compiled: forward, backward, AOTAutograd's runtime metadata, the forward's number of
    #: inputs and the inputs AOTAutograd detaches (lean_training.py)
    compiled_training: list[tuple[Any, Any, Any, int, list[int]]] = field(default_factory=list)
    #: "forward": what the forward graph's ops say about its saved activations, for the backward graph
    saved_facts: dict[str, SavedFacts] = field(default_factory=dict)

    def forward(self, gm: fx.GraphModule, example_inputs: Sequence[Any]) -> Callable[..., Any]:
        # The activations saved for the backward keep the layout our executable gives them, and AOTAutograd
        # compiles the backward graph for it (as for Inductor's layouts): copying them into eager's strides
        # would cost a copy here and buy nothing, since only our backward graph reads them. (A partitioned
        # graph, fallback="cpu", returns what its pieces return: eager's layouts.)
        saved = saved_activations(gm) if not self._partitioned(gm) else frozenset()
        compiled = self._compile(gm, "forward", saved)
        self.compiled_forward.append(compiled)
        self.forward_inputs.append(sum(node.op == "placeholder" for node in gm.graph.nodes))
        if isinstance(compiled, CompiledGraph):  # what its ops say about the activations the backward reads
            self.saved_facts["forward"] = forward_facts(gm, compiled.graph)
        report_output_strides(compiled, saved)
        if self.recorder is not None:
            self.recorder.forward_compiled(gm, compiled, saved, "autograd")
        return compiled

    def backward(self, gm: fx.GraphModule, example_inputs: Sequence[Any]) -> Callable[..., Any]:
        take_input_layouts(gm, example_inputs)
        compiled = self._compile(gm, "backward", saved_facts=self.saved_facts.get("forward"))
        forward = self.compiled_forward[-1] if self.compiled_forward else None
        if isinstance(forward, CompiledGraph) and isinstance(compiled, CompiledGraph):
            forward.share_arena_with(compiled)  # their calls follow one another: one arena (as on a hit)
        if self.recorder is not None:
            self.recorder.backward_compiled(gm, compiled)
        context = torch._guards.TracingContext.try_get()
        meta = getattr(context, "fw_metadata", None)
        if forward is not None and meta is not None:
            from torch._functorch._aot_autograd.graph_compile import _compute_indices_of_inps_to_detach

            self.compiled_training.append((forward, compiled, meta, self.forward_inputs[-1],
                                           _compute_indices_of_inps_to_detach(gm, None, meta, meta)))
        return compiled

    def inference(self, gm: fx.GraphModule, example_inputs: Sequence[Any]) -> Callable[..., Any]:
        compiled = self._compile(gm, "inference")
        context = torch._guards.TracingContext.try_get()
        self.compiled_inference.append((compiled, getattr(context, "fw_metadata", None),
                                        sum(node.op == "placeholder" for node in gm.graph.nodes)))
        if self.recorder is not None:
            self.recorder.forward_compiled(gm, compiled, frozenset(), "inference")
        return compiled

    def _compile(self, gm: fx.GraphModule, kind: str, free_layouts: frozenset[int] = frozenset(),
                 saved_facts: SavedFacts | None = None) -> Any:
        stats.increment(f"{kind}_graphs")
        name = f"{self.name}_{kind}"
        if self._partitioned(gm):
            def compile_partition(submodule: fx.GraphModule, partition_name: str) -> Any:
                return compile_aten_graph(submodule, partition_name, self.options, device=self.device)

            fallback = self.options.fallback == "cpu"
            return make_boxed_func(graph_range(partition_and_compile(gm, compile_partition, name,
                                                                     fallback=fallback).forward, name))
        return compile_aten_graph(gm, name, self.options, free_layouts, self.device, donate=True,
                                  saved_facts=saved_facts)

    def _partitioned(self, gm: fx.GraphModule) -> bool:
        """Compiled in pieces: in fallback mode, or around the collectives of a distributed graph."""
        return self.options.fallback == "cpu" or has_communication(gm)


def _partition_fn(config: BackendOptions) -> Callable[..., Any]:
    """AOTAutograd's min-cut partitioner (its common subexpressions merged without Inductor's import:
    joint_cse.py), after marking the random states to be saved (a checkpointed region would recompute them: a
    new key) and, with ``random_masks="regenerate"``, the generator ops to be recomputed (the backward
    regenerates dropout masks instead of reading saved ones)."""
    def partition(joint: fx.GraphModule, joint_inputs: Sequence[Any], **kwargs: Any) -> Any:
        save_random_states(joint)
        if config.random_masks == "regenerate":
            regenerate_random_in_backward(joint)
        return partition_joint(joint, joint_inputs, **kwargs)

    return partition
