"""The ``neuron`` torch.compile backend: ``torch.compile(model, backend="neuron")``.

Registered only through the ``torch_dynamo_backends`` entry point in pyproject.toml (registering it again at
import would trip TorchDynamo's duplicate-name assertion). The backend is a thin adapter:

    TorchDynamo graph -> feature checks (no sparse/nested, no torch.distributions)
      -> symbolic sizes? one static specialization per concrete shape at run time (specializations.py)
      -> the graph cache (graph_cache.py): a graph seen before runs from its entry, without what follows
      -> a miss (aot_compile.py, imported only then): AOTAutograd (our decomposition table, min-cut
         partitioner; SDPA backend per target: lower_attention) -> forward / backward / inference aten graphs
         -> compile_aten_graph (FX -> IR -> driver)

Options (``options={...}``) are described in :mod:`neuroncc.frontend.options`.
"""

from __future__ import annotations

import functools
import itertools
import logging
import os
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.fx as fx

from neuroncc.driver.log_settings import configure_log_from_environ
from neuroncc.errors import InputError, NeuronccError
from neuroncc.frontend import graph_cache, stats
from neuroncc.frontend.accelerator_stream import untrack_current_stream
from neuroncc.frontend.boundary import HostDevice
from neuroncc.frontend.diagnostics import (FLOAT64_WARNING, Float64Warning, check_graph_features, check_input_dtypes,
                                          functorch_node, functorch_failure, user_location, uses_float64)
from neuroncc.frontend.options import BackendOptions
from neuroncc.frontend.specializations import ShapeSpecializations, has_symbolic_sizes, unspecialized_scalars

log = logging.getLogger("neuroncc.frontend")
# TORCH_LOGS="neuroncc" / "+neuroncc" and torch._logging.set_logs(neuroncc=logging.INFO) control neuroncc's loggers
torch._logging._internal.register_log("neuroncc", ["neuroncc"])
_unnamed_graphs = itertools.count()
untrack_current_stream()  # before the first frame this backend compiles is traced (accelerator_stream.py)


def neuron_backend(gm: fx.GraphModule, example_inputs: Sequence[Any], *, options: dict[str, Any] | None = None,
                   device: HostDevice | None = None, **unexpected: Any) -> Callable[..., Any]:
    """TorchDynamo backend entry point: compile ``gm`` for ``example_inputs``' shapes; returns the callable.

    ``device``: the host-memory device the inputs live on, when not CPU (see boundary.py)."""
    if unexpected:
        raise InputError(f"neuron backend: unexpected arguments {sorted(unexpected)} (use options={{...}})")
    config = BackendOptions.from_user(options, os.environ)
    configure_log_from_environ(os.environ)
    check_graph_features(gm, example_inputs, ("cpu", "meta") if device is None else ("cpu", "meta", device.device_type))
    if detaches_only(gm):  # eager's own detach: nothing to compile, and no AOTAutograd runtime around it
        stats.increment("dynamo_graphs")
        stats.increment("detach_graphs")
        return gm.forward
    scalars = unspecialized_scalars([n for n in gm.graph.nodes if n.op == "placeholder"])
    if uses_float64(gm, example_inputs, scalars):
        warnings.warn(FLOAT64_WARNING, Float64Warning, stacklevel=2)
    stats.increment("dynamo_graphs")
    name = _graph_name()
    if has_symbolic_sizes(gm, example_inputs):
        # Symbolic sizes (or unspecialized Python floats): one static compile per concrete shape (and float
        # value) seen at run time, the first one now.
        return ShapeSpecializations(gm, example_inputs, functools.partial(compile_static, config=config, device=device),
                                    name, config.max_specializations, _first_location(gm))
    _log_specialization(gm, example_inputs, name)
    return compile_static(gm, list(example_inputs), name, config=config, device=device)


def detaches_only(gm: fx.GraphModule) -> bool:
    """Whether every op of ``gm`` is a ``detach`` (TorchDynamo's graphs around a training step's graph breaks:
    ``x.detach().requires_grad_()`` before the loss, ``loss.detach()`` after ``backward()``). Such a graph computes
    nothing: its outputs are aliases of its inputs, which AOTAutograd's runtime makes again from the inputs after
    the compiled graph's call (an inference graph with aliased outputs: the lean call refuses it). So it runs as
    TorchDynamo traced it, eager's ``detach`` on the inputs: ~35-45 us a graph less than AOTAutograd's runtime
    and a launch, each cold after a training step's kernels (performance-history.md, session 38 xent38)."""
    ops = [node for node in gm.graph.nodes if node.op not in ("placeholder", "output")]
    return bool(ops) and all((node.op == "call_method" and node.target == "detach") or
                             (node.op == "call_function" and node.target in _DETACH_FUNCTIONS) for node in ops)


_DETACH_FUNCTIONS = (torch.detach, torch.Tensor.detach)


def compile_static(gm: fx.GraphModule, example_inputs: list[Any], name: str, *,
                   config: BackendOptions, device: HostDevice | None = None) -> Callable[..., Any]:
    """AOTAutograd with neuroncc's compilers, for a TorchDynamo graph with static sizes (``device``: the
    host-memory device its tensors live on, when not CPU), unless the graph cache has the result."""
    cached = graph_cache.lookup(gm, example_inputs, name, config, device)
    if cached.runtime is not None:
        return cached.runtime
    # a miss: AOTAutograd, the importer, the lowering rules and the compiler, imported only now (a warm start
    # whose graphs all hit never loads them: tests/frontend/test_warm_imports.py)
    from neuroncc.frontend.aot_compile import compile_with_aot_autograd
    from neuroncc.frontend.lowering.context import DEMOTED, TORCH_TO_IR

    check_input_dtypes(gm, example_inputs, (*TORCH_TO_IR, *DEMOTED))
    transform = functorch_node(gm)
    if transform is None:
        return compile_with_aot_autograd(gm, example_inputs, name, config, device, cached.recorder)
    try:  # torch.func transforms: AOTAutograd traces them away (per-sample gradients, jacrev, MAML's inner grad)
        return compile_with_aot_autograd(gm, example_inputs, name, config, device, cached.recorder)
    except NeuronccError:
        raise
    except Exception as error:  # what PyTorch's tracing of the transform refused: named, typed
        raise functorch_failure(transform) from error


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
