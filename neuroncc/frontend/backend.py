"""The ``neuron`` torch.compile backend: ``torch.compile(model, backend="neuron")``.

Registered only through the ``torch_dynamo_backends`` entry point in pyproject.toml (registering it again at
import would trip TorchDynamo's duplicate-name assertion). The backend is a thin adapter:

    TorchDynamo graph -> feature checks (no sparse/nested, no torch.func/distributions)
      -> symbolic sizes? one static specialization per concrete shape at run time (specializations.py)
      -> the graph cache (graph_cache.py): a graph seen before runs from its entry, without what follows
      -> AOTAutograd (our decomposition table, min-cut partitioner; SDPA backend per target: lower_attention)
      -> forward / backward / inference aten graphs -> compile_aten_graph (FX -> IR -> runtime.driver)

Options (``options={...}``) are described in :mod:`neuroncc.frontend.options`.
"""

from __future__ import annotations

import functools
import itertools
import logging
import os
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx as fx
from functorch.compile import make_boxed_func, min_cut_rematerialization_partition
from torch._dynamo.backends.common import aot_autograd

from neuroncc.driver.records import configure_log_from_environ
from neuroncc.errors import InputError
from neuroncc.frontend import graph_cache, stats
from neuroncc.frontend.aten_compiler import compile_aten_graph
from neuroncc.frontend.boundary import HostDevice
from neuroncc.frontend.lowering.decompositions import decomposition_table
from neuroncc.frontend.diagnostics import (
    DATA_DEPENDENT_ERRORS,
    Float64Warning,
    check_graph_features,
    data_dependent_refusal,
    user_location,
    uses_float64,
)
from neuroncc.frontend.fallback import has_communication, partition_and_compile
from neuroncc.frontend.lowering.attention import attention_tracing
from neuroncc.frontend.options import BackendOptions
from neuroncc.frontend.lowering.random_ops import regenerate_random_in_backward, save_random_states
from neuroncc.frontend.profiling import graph_range
from neuroncc.frontend.saved_layouts import report_output_strides, saved_activations, take_input_layouts
from neuroncc.frontend.specializations import ShapeSpecializations, has_symbolic_sizes

log = logging.getLogger("neuroncc.frontend")
# TORCH_LOGS="neuroncc" / "+neuroncc" and torch._logging.set_logs(neuroncc=logging.INFO) control neuroncc's loggers
torch._logging._internal.register_log("neuroncc", ["neuroncc"])
_unnamed_graphs = itertools.count()


def neuron_backend(gm: fx.GraphModule, example_inputs: Sequence[Any], *, options: dict[str, Any] | None = None,
                   device: HostDevice | None = None, **unexpected: Any) -> Callable[..., Any]:
    """TorchDynamo backend entry point: compile ``gm`` for ``example_inputs``' shapes; returns the callable.

    ``device``: the host-memory device the inputs live on, when not CPU (see boundary.py)."""
    if unexpected:
        raise InputError(f"neuron backend: unexpected arguments {sorted(unexpected)} (use options={{...}})")
    config = BackendOptions.from_user(options, os.environ)
    configure_log_from_environ(os.environ)
    check_graph_features(gm, example_inputs, ("cpu", "meta") if device is None else ("cpu", "meta", device.device_type))
    if uses_float64(gm, example_inputs):
        warnings.warn("neuroncc computes float64 tensors in float32 and complex128 in complex64 (outputs are cast "
                      "back); convert the model with .float() to silence this", Float64Warning, stacklevel=2)
    stats.increment("dynamo_graphs")
    name = _graph_name()
    if has_symbolic_sizes(gm, example_inputs):
        # Symbolic sizes: one static compile per concrete shape seen at run time (the first one now).
        return ShapeSpecializations(gm, example_inputs, functools.partial(compile_static, config=config, device=device),
                                    name, config.max_specializations, _first_location(gm))
    _log_specialization(gm, example_inputs, name)
    return compile_static(gm, list(example_inputs), name, config=config, device=device)


def compile_static(gm: fx.GraphModule, example_inputs: list[Any], name: str, *,
                   config: BackendOptions, device: HostDevice | None = None) -> Callable[..., Any]:
    """AOTAutograd with neuroncc's compilers, for a TorchDynamo graph with static sizes (``device``: the
    host-memory device its tensors live on, when not CPU), unless the graph cache has the result."""
    cached = graph_cache.lookup(gm, example_inputs, name, config, device)
    if cached.runtime is not None:
        return cached.runtime
    compilers = AtenCompilers(config, name, device, cached.recorder)
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
    # cpu/interp: attention stays ATen's flash kernel (one library op); nki-sim: the math SDPA backend.
    stats.increment("aot_autograd_runs")
    with attention_tracing(config.target):
        try:
            compiled = compile_with_aot(gm, example_inputs)
        except DATA_DEPENDENT_ERRORS as error:
            raise data_dependent_refusal(gm, error) from error
    if cached.recorder is not None:
        cached.recorder.aot_returned()
    return compiled


@dataclass(frozen=True)
class AtenCompilers:
    """The compilers AOTAutograd calls for each graph it produces."""

    options: BackendOptions
    name: str
    device: HostDevice | None = None
    recorder: graph_cache.GraphRecorder | None = None  # collects the graph cache's entry on a miss

    def forward(self, gm: fx.GraphModule, example_inputs: Sequence[Any]) -> Callable[..., Any]:
        # The activations saved for the backward keep the layout our executable gives them, and AOTAutograd
        # compiles the backward graph for it (as for Inductor's layouts): copying them into eager's strides
        # would cost a copy here and buy nothing, since only our backward graph reads them. (A partitioned
        # graph, fallback="cpu", returns what its pieces return: eager's layouts.)
        saved = saved_activations(gm) if not self._partitioned(gm) else frozenset()
        compiled = self._compile(gm, "forward", saved)
        report_output_strides(compiled, saved)
        if self.recorder is not None:
            self.recorder.forward_compiled(gm, compiled, saved, "autograd")
        return compiled

    def backward(self, gm: fx.GraphModule, example_inputs: Sequence[Any]) -> Callable[..., Any]:
        take_input_layouts(gm, example_inputs)
        compiled = self._compile(gm, "backward")
        if self.recorder is not None:
            self.recorder.backward_compiled(gm, compiled)
        return compiled

    def inference(self, gm: fx.GraphModule, example_inputs: Sequence[Any]) -> Callable[..., Any]:
        compiled = self._compile(gm, "inference")
        if self.recorder is not None:
            self.recorder.forward_compiled(gm, compiled, frozenset(), "inference")
        return compiled

    def _compile(self, gm: fx.GraphModule, kind: str, free_layouts: frozenset[int] = frozenset()) -> Any:
        stats.increment(f"{kind}_graphs")
        name = f"{self.name}_{kind}"
        if self._partitioned(gm):
            def compile_partition(submodule: fx.GraphModule, partition_name: str) -> Any:
                return compile_aten_graph(submodule, partition_name, self.options, device=self.device)

            fallback = self.options.fallback == "cpu"
            return make_boxed_func(graph_range(partition_and_compile(gm, compile_partition, name,
                                                                     fallback=fallback).forward, name))
        return compile_aten_graph(gm, name, self.options, free_layouts, self.device, donate=True)

    def _partitioned(self, gm: fx.GraphModule) -> bool:
        """Compiled in pieces: in fallback mode, or around the collectives of a distributed graph."""
        return self.options.fallback == "cpu" or has_communication(gm)


def _partition_fn(config: BackendOptions) -> Callable[..., Any]:
    """AOTAutograd's min-cut partitioner, after marking the random states to be saved (a checkpointed region
    would recompute them: a new key) and, with ``random_masks="regenerate"``, the generator ops to be
    recomputed (the backward regenerates dropout masks instead of reading saved ones)."""
    def partition(joint: fx.GraphModule, joint_inputs: Sequence[Any], **kwargs: Any) -> Any:
        save_random_states(joint)
        if config.random_masks == "regenerate":
            regenerate_random_in_backward(joint)
        return min_cut_rematerialization_partition(joint, joint_inputs, **kwargs)

    return partition


def _graph_name() -> str:
    """``g<frame>_<specialization>`` from TorchDynamo's compile id (a counter when called outside dynamo)."""
    compile_id = torch._guards.CompileContext.current_compile_id()
    if compile_id is None or compile_id.frame_id is None:
        return f"graph{next(_unnamed_graphs)}"
    return f"g{compile_id.frame_id}_{compile_id.frame_compile_id}"


#: The input signature (name, shape, dtype per tensor input) of the last specialization of each frame.
_last_signatures: dict[int, tuple[tuple[str, tuple[int, ...], str], ...]] = {}


def _signature(gm: fx.GraphModule, example_inputs: Sequence[Any]) -> tuple[tuple[str, tuple[int, ...], str], ...]:
    names = [n.name for n in gm.graph.nodes if n.op == "placeholder"]
    return tuple((names[i] if i < len(names) else f"input {i}", tuple(t.shape), str(t.dtype).removeprefix("torch."))
                 for i, t in enumerate(example_inputs) if isinstance(t, torch.Tensor))


def changed_inputs(before: Sequence[tuple[str, tuple[int, ...], str]],
                   after: Sequence[tuple[str, tuple[int, ...], str]]) -> str:
    """What differs between two input signatures: ``input 'l_x_' shape [2, 3] -> [2, 5]``, ...; '' if nothing."""
    if len(before) != len(after):
        return f"{len(before)} -> {len(after)} tensor inputs"
    changes = []
    for (name, shape, dtype), (_, new_shape, new_dtype) in zip(before, after):
        if shape != new_shape:
            changes.append(f"input '{name}' shape {list(shape)} -> {list(new_shape)}")
        if dtype != new_dtype:
            changes.append(f"input '{name}' dtype {dtype} -> {new_dtype}")
    return "; ".join(changes)


def _log_specialization(gm: fx.GraphModule, example_inputs: Sequence[Any], name: str) -> None:
    compile_id = torch._guards.CompileContext.current_compile_id()
    signature = _signature(gm, example_inputs)
    frame = compile_id.frame_id if compile_id is not None and compile_id.frame_id is not None else None
    previous = _last_signatures.get(frame) if frame is not None else None
    if frame is not None:
        _last_signatures[frame] = signature
    if not log.isEnabledFor(logging.INFO):
        return
    shapes = [list(shape) for _, shape, _ in signature]
    where = _first_location(gm)
    source = f"code at {where}" if where else "a graph"
    if compile_id is not None and compile_id.frame_compile_id:
        changed = changed_inputs(previous, signature) if previous is not None else ""
        log.info("neuroncc: recompiling: specialization #%d of %s (graph %s) for input shapes %s; %sTorchDynamo "
                 "recompiled because: %s (TORCH_LOGS=recompiles lists every failed guard)",
                 compile_id.frame_compile_id, source, name, shapes,
                 f"changed since the last specialization: {changed}; " if changed else "", _recompile_reason())
    else:
        log.info("neuroncc: compiling %s (graph %s) for input shapes %s", source, name, shapes)


def _first_location(gm: fx.GraphModule) -> str | None:
    """The user's ``file:line`` of the graph's first node that has one."""
    where = next((loc for loc in map(user_location, gm.graph.nodes) if loc is not None), None)
    return str(where) if where is not None else None


def _recompile_reason() -> str:
    """The guard failure TorchDynamo recorded for this recompile (an internal detail: best effort)."""
    try:
        from torch._dynamo.utils import get_metrics_context

        reason = get_metrics_context()._metrics.get("recompile_reason")
    except (ImportError, AttributeError):
        reason = None
    return reason or "unknown"
