"""The graph cache: a TorchDynamo graph seen before runs without AOTAutograd, the importer or the passes.

``compile_static`` (frontend.backend) asks :func:`lookup` first. The key (``frontend.graph_key``) covers the
graph, its inputs, AOTAutograd's configuration, grad/autocast state, the options and the versions; the entry
(an ordinary compile-cache entry, ``driver.graph_entries``) names the compiled forward and backward (or
inference) artifacts by their own keys and holds what AOTAutograd's runtime wrappers need, as JSON
(``frontend.aot_metadata``):

    hit   -> load the artifacts by key (memory tier, then the disk) -> CompiledGraphs -> the runtime wrappers
             PyTorch's own AOTAutograd cache rebuilds after a load (AOTDispatchSubclassWrapper,
             FunctionalizedRngRuntimeWrapper, AOTDispatchAutograd.post_compile or RuntimeWrapper), so the
             semantics (input mutations written back, aliased outputs regenerated, gradients detached) are
             torch's own
    miss  -> AOTAutograd runs as before; a :class:`GraphRecorder` collects what the compilers see (the
             artifact keys, AOTAutograd's runtime metadata from the tracing context, the inputs to detach
             from the backward graph) and publishes the entry once the backward graph is compiled (lazily,
             at the first backward) or, for an inference graph, once AOTAutograd returns

A graph the key or the metadata codec cannot describe is compiled every time (counted as
``graph_cache_uncacheable``, its reason logged on ``neuroncc.frontend`` at INFO and kept in
:func:`uncacheable_reasons`). A damaged entry, or one whose artifacts are gone, is a miss with one
:class:`~neuroncc.driver.notices.CacheWarning`, recompiled and replaced; nothing here raises into a compile.
"""

from __future__ import annotations

import logging
import os
import time
import warnings
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch._dynamo  # noqa: F401 - first: AOTAutograd's modules import each other in TorchDynamo's order
import torch.fx as fx
from torch._functorch._aot_autograd.runtime_wrappers import (
    AOTDispatchAutograd,
    AOTDispatchAutogradCompileSpec,
    AOTDispatchSubclassWrapper,
    FunctionalizedRngRuntimeWrapper,
    RuntimeWrapper,
    post_compile,
)

from neuroncc.driver.cache import CompileCache, cache_from_environ
from neuroncc.driver.graph_entries import GRAPH_FORMAT_VERSION, graph_key, read_graph_entry, write_graph_entry
from neuroncc.driver.cache_key import CacheKey
from neuroncc.driver.notices import CacheWarning
from neuroncc.executors.executable import Executable
from neuroncc.frontend import cache_artifacts, stats
from neuroncc.frontend.aot_metadata import BadMetadata, UnsupportedMetadata, decode_metadata, encode_metadata
from neuroncc.frontend.compiled import CompiledGraph
from neuroncc.frontend.graph_key import Uncacheable, key_parts
from neuroncc.frontend.imported import ImportedGraph, UnencodableOutput, decode_output, encode_output
from neuroncc.frontend.lean_call import lean_inference, lean_refusal
from neuroncc.frontend.run_errors import RerunSource
from neuroncc.frontend.lean_training import lean_training, lean_training_refusal, saved_tensors_hooks_active
from neuroncc.frontend.options import BackendOptions
import neuroncc

log = logging.getLogger("neuroncc.frontend")
_reasons: Counter[str] = Counter()


def uncacheable_reasons() -> dict[str, int]:
    """Why graphs of this process were not cached, with how many times each reason came up."""
    return dict(_reasons)


@dataclass
class Lookup:
    """What :func:`lookup` found: a ready ``runtime`` (a hit), or a ``recorder`` for the compile (a miss), or
    neither (not cached)."""

    runtime: Callable[..., Any] | None = None
    recorder: GraphRecorder | None = None


def lookup(gm: fx.GraphModule, example_inputs: Sequence[Any], name: str, options: BackendOptions,
           device: Any) -> Lookup:
    """The graph cache's answer for ``gm`` with ``example_inputs`` (see the module docstring)."""
    if not options.graph_cache:
        return Lookup()
    cache = cache_from_environ(os.environ)
    if cache is None:
        return Lookup()
    try:
        if device is not None:
            raise Uncacheable("a host device's graph")
        if torch._dynamo.compiled_autograd.compiled_autograd_enabled or torch._dynamo.config.compiled_autograd:
            raise Uncacheable("compiled autograd retraces the backward graph, which the entry does not keep")
        aot_config, params_buffers = _aot_config(gm, example_inputs)
        key = graph_key(key_parts(gm, [*params_buffers, *example_inputs], aot_config, options), options.target,
                        cache.build_environment())
    except Uncacheable as reason:
        _uncacheable(name, str(reason))
        return Lookup()
    except Exception as exc:  # noqa: BLE001 - keying must never break a compile: the graph is compiled as before
        _uncacheable(name, f"internal error while keying the graph ({type(exc).__name__}: {exc})")
        return Lookup()
    payload = read_graph_entry(cache, key.key, options.target)
    replace = False  # an entry whose payload does not rebuild is replaced by this compile's
    if payload is not None:
        start = time.perf_counter()
        try:
            runtime = _rebuild(payload, cache, options.target, gm, aot_config, params_buffers)
        except Exception as exc:  # noqa: BLE001 - a bad entry is a miss, never a crash (BadMetadata, a stale entry, ...)
            warnings.warn(f"ignoring graph cache entry {key.key[:16]} of {name} ({exc}); recompiling",
                          CacheWarning, stacklevel=2)
            runtime, replace = None, True
        if runtime is not None:
            stats.increment("graph_cache_hits")
            for artifact in (key.key, *_artifact_keys(payload)):
                cache_artifacts.record(artifact)
            log.info("neuroncc: graph cache hit for %s (key %s, %.3f s)", name, key.key[:16],
                     time.perf_counter() - start)
            return Lookup(runtime=runtime)
    stats.increment("graph_cache_misses")
    if log.isEnabledFor(logging.INFO):
        closest, differing = cache.explain_miss(key, name)
        log.info("neuroncc: graph cache miss for %s (key %s)%s", name, key.key[:16],
                 f"; the stored entry of {closest} differs in: {', '.join(differing)}" if closest else "")
    inputs = [(str(t.dtype).removeprefix("torch."), list(t.shape), list(t.stride()))
              for t in [*params_buffers, *example_inputs]]
    return Lookup(recorder=GraphRecorder(cache, key, name, options, inputs, replace))


def _uncacheable(name: str, reason: str) -> None:
    stats.increment("graph_cache_uncacheable")
    _reasons[reason] += 1
    log.info("neuroncc: graph cache: not caching %s: %s", name, reason)


#: AOTAutograd's ``keep_inference_input_mutations`` as the backend configures it (backend.compile_static): the
#: key says it, and a hit's runtime wrapper bumps the version counters of the inputs the graph mutates as a
#: miss's does
KEEP_INFERENCE_INPUT_MUTATIONS = True


def _aot_config(gm: fx.GraphModule, example_inputs: Sequence[Any]) -> tuple[Any, list[Any]]:
    """AOTAutograd's configuration for ``gm`` as ``aot_module_simplified`` makes it (the parameter count,
    static inputs from TorchDynamo), and the graph module's own parameters and buffers."""
    from torch._functorch.aot_autograd import prepare_aot_config

    if any(not isinstance(x, torch.Tensor) for x in example_inputs):
        raise Uncacheable("a non-tensor input")
    params_buffers, _, _, _, _, aot_config = prepare_aot_config(gm, example_inputs, None,
                                                                KEEP_INFERENCE_INPUT_MUTATIONS, False)
    return aot_config, list(params_buffers)


# ---- a hit: the runtime AOTAutograd would have built ------------------------------------------------------


class _StaleEntry(Exception):
    """An entry whose artifacts are not (or no longer) in the cache."""


def _artifact_keys(payload: Any) -> list[str]:
    return [payload[part]["artifact"] for part in ("forward", "backward") if payload.get(part) is not None]


def _rebuild(payload: Any, cache: CompileCache, target: str, gm: fx.GraphModule, aot_config: Any,
             params_buffers: list[Any]) -> Callable[..., Any]:
    """The callable ``aot_module_simplified`` returns, from the entry: PyTorch's own post-load sequence
    (``GenericAOTAutogradResult._apply_runtime_wrappers``) around neuroncc's loaded executables."""
    if payload.get("format") != GRAPH_FORMAT_VERSION or payload.get("kind") not in ("autograd", "inference"):
        raise BadMetadata(f"payload format {payload.get('format')!r} / kind {payload.get('kind')!r}")
    meta = decode_metadata(payload["metadata"])
    training = payload["kind"] == "autograd"
    forward_executable = _load_graph(payload["forward"], cache, target)
    if training:
        backward_executable = _load_graph(payload["backward"], cache, target)
    forward = _compiled_graph(payload["forward"], forward_executable, target)
    forward.source = RerunSource(gm, len(params_buffers))  # an index error at run time is located in it
    if (context := torch._guards.TracingContext.try_get()) is not None:
        context.fw_metadata = meta  # as AOTAutograd leaves it (read by the DDP optimizer's buckets)
    fw = AOTDispatchSubclassWrapper(trace_joint=training, fw_only=None, maybe_subclass_meta=None,
                                    num_fw_outs_saved_for_bw=payload["num_fw_outs_saved_for_bw"]
                                    ).post_compile(forward, aot_config, runtime_metadata=meta)
    fw = FunctionalizedRngRuntimeWrapper(return_new_outs=not training).post_compile(fw, aot_config,
                                                                                     runtime_metadata=meta)
    fw._boxed_call = True
    disable_amp = torch._C._is_any_autocast_enabled()
    detach = _int_list(payload["indices_of_inps_to_detach"])
    if training:
        backward_graph = _compiled_graph(payload["backward"], backward_executable, target)
        forward.share_arena_with(backward_graph)  # their calls follow one another: one arena (as on a compile)
        backward = torch._dynamo.disable(backward_graph, reason="do not trace generated backwards pass")
        symints = payload["num_symints_saved_for_bw"]
        if type(symints) is not int:
            raise BadMetadata("num_symints_saved_for_bw")
        spec = AOTDispatchAutogradCompileSpec(
            compiled_fw_func=fw, compiled_bw_func=backward, maybe_subclass_meta=None,
            num_symints_saved_for_bw=symints, backward_state_indices=[], disable_amp=disable_amp,
            indices_of_inps_to_detach=detach, lazy_backward_info=None, bw_compiler=None, aot_config=aot_config,
            fw_metadata=meta, try_save_cache_entry=None)
        compiled = AOTDispatchAutograd.post_compile(spec)
    else:
        compiled = RuntimeWrapper(indices_of_inps_to_detach=detach, trace_joint=False,
                                  disable_amp=disable_amp).post_compile(fw, aot_config, runtime_metadata=meta)
    # AOTAutograd's dedupe and synthetic-base wrappers do nothing for inputs that share no memory (the key
    # refuses the others), so the dispatch wrapper list is empty
    compiled, _ = post_compile([], compiled, aot_config, runtime_metadata=meta)
    runtime = _module_call(compiled, params_buffers, gm)
    # AOTAutograd's wrappers left out where they do nothing (lean_call.py, lean_training.py), as on a compile;
    # the graph takes one argument per input (the dedupe wrapper's list is empty: see above)
    inputs = len(params_buffers) + sum(node.op == "placeholder" for node in gm.graph.nodes)
    if not training:
        if lean_refusal(forward, meta, inputs, inputs, disable_amp) is None:
            return lean_inference(runtime, forward, params_buffers)
    elif lean_training_refusal(forward, backward_graph, meta, inputs, inputs, disable_amp, detach,
                               saved_tensors_hooks_active()) is None:
        return lean_training(runtime, forward, backward_graph, meta, params_buffers)
    return runtime


def _module_call(compiled: Callable[..., Any], params_buffers: list[Any], gm: fx.GraphModule) -> Callable[..., Any]:
    """What ``aot_module_simplified`` and TorchDynamo's ``aot_autograd`` wrap around the runtime."""
    def forward(*runtime_args: Any) -> Any:
        return compiled([*params_buffers, *runtime_args])

    forward.zero_grad = gm.zero_grad  # type: ignore[attr-defined]
    forward.named_parameters = gm.named_parameters  # type: ignore[attr-defined]
    forward.named_buffers = gm.named_buffers  # type: ignore[attr-defined]
    return torch._dynamo.disable(forward, reason="do not trace AOT-compiled graph")


def _load_graph(part: Any, cache: CompileCache, target: str) -> Executable:
    """The executable stored under the artifact key of a graph's description."""
    if type(part) is not dict:
        raise BadMetadata("graph description")
    artifact = part["artifact"]
    if type(artifact) is not str:
        raise BadMetadata("artifact key")
    executable = cache.load_entry(artifact, target)
    if executable is None:
        raise _StaleEntry(f"artifact {artifact[:16]} is not in the cache")
    return executable


def _compiled_graph(part: dict[str, Any], executable: Executable, target: str) -> CompiledGraph:
    """A CompiledGraph from a graph's description and its loaded executable."""
    artifact = part["artifact"]
    outputs = tuple(_decode_output(o) for o in part["outputs"])
    mutations = tuple((p, i) for p, i in (_int_list(pair) for pair in part["mutations"]))
    if type(part["bf16_bits"]) is not bool or type(part["rng_key"]) is not bool:
        raise BadMetadata("flags")
    graph = ImportedGraph(executable.function, tuple(_int_list(part["param_positions"])), outputs, mutations,
                          part["bf16_bits"], part["rng_key"])
    stats.record_executable(executable, target)
    return CompiledGraph(graph, executable, frozenset(_int_list(part["free_layouts"])), artifact_key=artifact)


def _int_list(data: Any) -> list[int]:
    if type(data) is not list or any(type(v) is not int for v in data):
        raise BadMetadata(f"not a list of ints: {data!r}")
    return data


def _decode_output(data: Any) -> Any:
    try:
        return decode_output(data)
    except UnencodableOutput as exc:
        raise BadMetadata(str(exc)) from None


# ---- a miss: what the compilers see, published once complete ----------------------------------------------


def describe_graph(compiled: Any, free_layouts: frozenset[int]) -> dict[str, Any]:
    """The JSON description of a CompiledGraph (raises Uncacheable for one the entry cannot point to)."""
    if not isinstance(compiled, CompiledGraph) or compiled.artifact_key is None or compiled.device is not None:
        raise Uncacheable("a graph compiled without the compile cache, in pieces, or for a host device")
    graph = compiled.graph
    try:
        outputs = [encode_output(output) for output in graph.outputs]
    except UnencodableOutput as exc:
        raise Uncacheable(str(exc)) from None
    return {"artifact": compiled.artifact_key, "param_positions": list(graph.param_positions), "outputs": outputs,
            "mutations": [list(pair) for pair in graph.mutations], "bf16_bits": graph.bf16_bits,
            "rng_key": graph.rng_key, "free_layouts": sorted(free_layouts)}


class GraphRecorder:
    """Collects one graph's entry while AOTAutograd and neuroncc compile it; publishes it when complete."""

    def __init__(self, cache: CompileCache, key: CacheKey, name: str, options: BackendOptions,
                 inputs: list[tuple[str, list[int], list[int]]], replace: bool = False):
        self.cache, self.key, self.name, self.options, self.inputs = cache, key, name, options, inputs
        self.replace = replace
        self.kind: str | None = None
        self.forward: dict[str, Any] | None = None
        self.backward: dict[str, Any] | None = None
        self.metadata: Any = None
        self.num_fw_outs_saved_for_bw: int | None = None
        self.detach: list[int] = []
        self.traced = False
        self.closed = False  # published, or given up
        self.start = time.perf_counter()

    def forward_compiled(self, gm: fx.GraphModule, compiled: Any, free_layouts: frozenset[int], kind: str) -> None:
        """The forward (``kind="autograd"``) or inference graph was compiled into ``compiled``."""
        self._guarded(lambda: self._forward(gm, compiled, free_layouts, kind))

    def backward_compiled(self, gm: fx.GraphModule, compiled: Any) -> None:
        self._guarded(lambda: self._backward(gm, compiled))

    def aot_returned(self) -> None:
        """AOTAutograd returned (the metadata is runtime-safe now; an inference entry is complete)."""
        self.traced = True
        self._guarded(self._publish_if_complete)

    def _forward(self, gm: fx.GraphModule, compiled: Any, free_layouts: frozenset[int], kind: str) -> None:
        context = torch._guards.TracingContext.try_get()
        meta = getattr(context, "fw_metadata", None)
        if meta is None:
            raise Uncacheable("no AOTAutograd metadata in the tracing context")
        self.kind, self.metadata = kind, meta
        self.forward = describe_graph(compiled, free_layouts)
        if kind == "autograd":
            (output,) = (node for node in gm.graph.nodes if node.op == "output")
            self.num_fw_outs_saved_for_bw = len(output.args[0]) - meta.num_forward

    def _backward(self, gm: fx.GraphModule, compiled: Any) -> None:
        from torch._functorch._aot_autograd.graph_compile import _compute_indices_of_inps_to_detach

        if self.metadata is None:
            raise Uncacheable("a backward graph without its forward")
        self.detach = _compute_indices_of_inps_to_detach(gm, None, self.metadata, self.metadata)
        self.backward = describe_graph(compiled, frozenset())
        self._publish_if_complete()

    def _guarded(self, step: Callable[[], None]) -> None:
        """Run ``step``; a graph that turns out uncacheable is compiled as usual (never an error)."""
        if self.closed:
            return
        try:
            step()
        except (Uncacheable, UnsupportedMetadata) as reason:
            self.closed = True
            _uncacheable(self.name, str(reason))
        except Exception as exc:  # noqa: BLE001 - the cache must never break a compile or a backward
            self.closed = True
            _uncacheable(self.name, f"internal error while recording ({type(exc).__name__}: {exc})")

    def _publish_if_complete(self) -> None:
        if not self.traced or self.forward is None or (self.kind == "autograd" and self.backward is None):
            return
        self.closed = True
        payload = {
            "format": GRAPH_FORMAT_VERSION, "kind": self.kind, "metadata": encode_metadata(self.metadata),
            "forward": self.forward, "backward": self.backward if self.kind == "autograd" else None,
            "num_fw_outs_saved_for_bw": self.num_fw_outs_saved_for_bw,
            "num_symints_saved_for_bw": self.metadata.num_symints_saved_for_bw or 0,
            "indices_of_inps_to_detach": list(self.detach),
        }
        if write_graph_entry(self.cache, self.key, graph_name=self.name, target=self.options.target,
                             inputs=self.inputs, options={"target": self.options.target}, payload=payload,
                             timings={"compile": time.perf_counter() - self.start},
                             neuroncc_version=neuroncc.__version__, replace=self.replace):
            stats.increment("graph_cache_stores")
            cache_artifacts.record(self.key.key)
