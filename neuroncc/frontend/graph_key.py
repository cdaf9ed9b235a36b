"""The graph cache's key: everything that decides what AOTAutograd and neuroncc make of a TorchDynamo graph.

    graph          the graph's nodes in order: op, name, target (an aten op by its name, a torch function or
                   builtin by module and name, a tensor method by name) and arguments; its constant attributes
                   (tensors by dtype, shape, strides and a sha256 of their bytes, subgraphs by their text)
    inputs         each input (the graph module's own parameters and buffers first, as AOTAutograd passes
                   them): class, dtype, shape, strides, storage offset, device, requires_grad, leaf or not,
                   view or not, conj/neg bits
    aot_config     what AOTAutograd was configured with: parameter count, static inputs, input mutations kept
    global_state   grad mode, autocast per device, deterministic algorithms, torch._functorch's config
    options        the backend's options (target, pipeline, random masks, compile options)

(then the target, its host fingerprint and the versions: ``driver.graph_entries.graph_key``). A graph the key
cannot describe faithfully is not cached: :class:`Uncacheable` says why (a Python function of the user's in
the graph, a non-tensor input, inputs sharing storage, a tensor subclass, a higher-order op, ...), and the
graph cache counts and logs it. Value names and source locations are left out on purpose, as in the compile
cache's key.
"""

from __future__ import annotations

import builtins
import hashlib
import json
import math
import operator
from collections.abc import Sequence
from typing import Any

import torch
import torch.fx as fx

from neuroncc.frontend.options import BackendOptions

#: Constant tensor attributes larger than this are not hashed (the graph is not cached instead).
MAX_HASHED_CONSTANT_BYTES = 64 << 20


class Uncacheable(Exception):
    """The graph cache cannot key this graph; the message says why (shown by the explain tooling)."""


def key_parts(gm: fx.GraphModule, flat_args: Sequence[Any], aot_config: Any,
              options: BackendOptions) -> list[tuple[str, str, str]]:
    """(name, canonical text, summary) of each torch-side component; raises :class:`Uncacheable`."""
    if options.dump_dir:
        raise Uncacheable("dump_dir is set (every graph is compiled, so its IR is dumped)")
    if options.fallback != "none":
        raise Uncacheable(f"fallback='{options.fallback}' compiles graphs in pieces")
    graph_text, node_count = graph_canonical_text(gm)
    inputs = [input_record(i, value) for i, value in enumerate(flat_args)]
    _refuse_shared_storage(flat_args)
    return [
        ("graph", graph_text, f"{node_count} nodes"),
        ("inputs", json.dumps(inputs, separators=(",", ":")), _inputs_summary(flat_args)),
        ("aot_config", _aot_config_text(aot_config), f"{aot_config.num_params_buffers} params/buffers"),
        ("global_state", _global_state_text(), "grad " + ("on" if torch.is_grad_enabled() else "off")),
        ("options", _options_text(options), options.target),
    ]


# ---- the graph ---------------------------------------------------------------------------------------------

def graph_canonical_text(gm: fx.GraphModule) -> tuple[str, int]:
    """The graph's nodes, one line each, and its attributes; raises :class:`Uncacheable`."""
    lines = []
    count = 0
    for node in gm.graph.nodes:
        count += 1
        target = _target_text(gm, node)
        args = _argument_text(node.args)
        kwargs = _argument_text(dict(node.kwargs))
        lines.append(f"{node.op} %{node.name} {target} {args} {kwargs}")
    return "\n".join(lines), count


def _target_text(gm: fx.GraphModule, node: fx.Node) -> str:
    target = node.target
    if node.op in ("placeholder", "output"):
        return ""
    if node.op == "call_method":
        if not isinstance(target, str):
            raise Uncacheable(f"node {node.name}: method {target!r}")
        return f".{target}"
    if node.op == "get_attr":
        return f"@{target}={_attribute_text(gm, str(target))}"
    if node.op == "call_module":
        raise Uncacheable(f"node {node.name} calls module {target} (a module TorchDynamo did not inline)")
    if node.op != "call_function":
        raise Uncacheable(f"node {node.name}: op {node.op}")
    if isinstance(target, torch._ops.HigherOrderOperator):
        raise Uncacheable(f"node {node.name} calls the higher-order op {target.name()}")
    if isinstance(target, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)):
        return f"op:{target}"
    return _function_name(node, target)


def _function_name(node: fx.Node, target: Any) -> str:
    """A builtin or a function of torch's own by its qualified name; anything else (a user's Python function,
    whose code the key cannot see) is uncacheable."""
    module = getattr(target, "__module__", None) or ""
    name = getattr(target, "__qualname__", None) or getattr(target, "__name__", None)
    if not isinstance(name, str):
        raise Uncacheable(f"node {node.name}: call target {target!r} has no name")
    if target is getattr(operator, name, None) or target is getattr(builtins, name, None) or \
            target is getattr(math, name, None):
        return f"py:{getattr(target, '__module__', 'builtins')}.{name}"
    if module == "torch" or module.startswith(("torch.", "torch._C")):
        return f"torch:{module}.{name}"
    if type(target).__name__ == "builtin_function_or_method" and module.startswith("torch"):
        return f"torch:{module}.{name}"
    raise Uncacheable(f"node {node.name} calls {module}.{name}, a Python function the key cannot describe")


def _argument_text(value: Any) -> str:
    if isinstance(value, fx.Node):
        return f"%{value.name}"
    if value is None or isinstance(value, (bool, int, str)):
        return repr(value)
    if isinstance(value, float):
        # (a NaN's sign too: clamp_min(x, -nan) is -nan everywhere, clamp_min(x, nan) +nan)
        if math.isfinite(value):
            return "float:" + value.hex()
        return "float:-nan" if math.isnan(value) and math.copysign(1.0, value) < 0 else f"float:{value!r}"
    if isinstance(value, complex):
        return f"complex({value.real.hex()},{value.imag.hex()})"
    if isinstance(value, (torch.dtype, torch.layout, torch.memory_format)):
        return str(value)
    if isinstance(value, torch.device):
        return f"device({value})"
    if isinstance(value, slice):
        return f"slice({_argument_text(value.start)},{_argument_text(value.stop)},{_argument_text(value.step)})"
    if value is Ellipsis:
        return "..."
    if isinstance(value, (list, tuple)):
        inner = ",".join(_argument_text(v) for v in value)
        return f"[{inner}]" if isinstance(value, list) else f"({inner})"
    if isinstance(value, dict):
        if not all(isinstance(k, str) for k in value):
            raise Uncacheable(f"argument {value!r}: a dict with non-string keys")
        return "{" + ",".join(f"{k}:{_argument_text(v)}" for k, v in sorted(value.items())) + "}"
    raise Uncacheable(f"argument {value!r} ({type(value).__name__}) has no canonical form")


def _attribute_text(gm: fx.GraphModule, path: str) -> str:
    value: Any = gm
    for part in path.split("."):
        value = getattr(value, part)
    if isinstance(value, fx.GraphModule):
        return "graph{" + graph_canonical_text(value)[0] + "}"
    if isinstance(value, torch.Tensor):
        return _tensor_text(value, with_data=not isinstance(value, torch.nn.Parameter))
    raise Uncacheable(f"attribute {path} is a {type(value).__name__}")


def _tensor_text(tensor: torch.Tensor, with_data: bool) -> str:
    if type(tensor) not in (torch.Tensor, torch.nn.Parameter) or tensor.layout != torch.strided:
        raise Uncacheable(f"a constant {type(tensor).__name__} ({tensor.layout})")
    text = f"{tensor.dtype}{list(tensor.shape)}/{list(tensor.stride())}+{tensor.storage_offset()}"
    if with_data:
        nbytes = tensor.numel() * tensor.element_size()
        if nbytes > MAX_HASHED_CONSTANT_BYTES:
            raise Uncacheable(f"a constant tensor of {nbytes} bytes")
        data = tensor.detach().resolve_conj().resolve_neg().contiguous().cpu()
        text += ":" + hashlib.sha256(data.reshape(-1).view(torch.uint8).numpy().tobytes()).hexdigest()
    return text


# ---- the inputs ----------------------------------------------------------------------------------------------

def input_record(position: int, value: Any) -> list[Any]:
    """What of input ``position`` AOTAutograd's result depends on; raises :class:`Uncacheable`."""
    if type(value) not in (torch.Tensor, torch.nn.Parameter):
        kind = "a tensor subclass" if isinstance(value, torch.Tensor) else "not a tensor"
        raise Uncacheable(f"input {position} is {type(value).__name__} ({kind})")
    if value.layout != torch.strided:
        raise Uncacheable(f"input {position} has layout {value.layout}")
    return [type(value).__name__, str(value.dtype), list(value.shape), list(value.stride()),
            value.storage_offset(), str(value.device), value.requires_grad, value.is_leaf, value._is_view(),
            value.is_conj(), value.is_neg(), value.is_inference()]


def _refuse_shared_storage(flat_args: Sequence[Any]) -> None:
    """Inputs that share memory make AOTAutograd deduplicate them or build synthetic bases, which the graph
    cache does not record: such graphs are compiled every time."""
    seen: dict[Any, int] = {}
    for position, value in enumerate(flat_args):
        storage = value.untyped_storage()
        identity = (storage.data_ptr(), storage.nbytes()) if storage.nbytes() else ("empty", position)
        if identity in seen:
            raise Uncacheable(f"inputs {seen[identity]} and {position} share memory")
        seen[identity] = position


def _inputs_summary(flat_args: Sequence[Any]) -> str:
    return "; ".join(f"{str(t.dtype).removeprefix('torch.')}[{','.join(map(str, t.shape))}]"
                     f"{'^' if t.requires_grad else ''}" for t in flat_args) or "(none)"


# ---- configuration and global state --------------------------------------------------------------------------

def _aot_config_text(aot_config: Any) -> str:
    fields = {
        "num_params_buffers": aot_config.num_params_buffers,
        "keep_inference_input_mutations": aot_config.keep_inference_input_mutations,
        "is_export": aot_config.is_export, "no_tangents": aot_config.no_tangents,
        "dynamic_shapes": aot_config.dynamic_shapes, "pre_dispatch": aot_config.pre_dispatch,
        "static_input_indices": list(aot_config.static_input_indices or []),
        "disable_functionalization": aot_config.disable_functionalization,
    }
    if aot_config.dynamic_shapes:
        raise Uncacheable("dynamic shapes")
    return json.dumps(fields, sort_keys=True)


def _global_state_text() -> str:
    autocast = {device: str(torch.get_autocast_dtype(device))
                for device in torch._C._autocast_supported_devices() if torch.is_autocast_enabled(device)}
    state = {
        "grad_enabled": torch.is_grad_enabled(),
        "inference_mode": torch.is_inference_mode_enabled(),
        "autocast": autocast,
        "deterministic": torch.are_deterministic_algorithms_enabled(),
        "deterministic_warn_only": torch.is_deterministic_algorithms_warn_only_enabled(),
        "functorch_config": torch._functorch.config.save_config_portable(),
    }
    try:
        return json.dumps(state, sort_keys=True, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise Uncacheable(f"torch._functorch.config has a value with no JSON form ({exc})") from None


def _options_text(options: BackendOptions) -> str:
    fields = {"target": options.target, "pipeline": options.pipeline, "fallback": options.fallback,
              "random_masks": options.random_masks, "compile_options": dict(options.compile_options)}
    try:
        return json.dumps(fields, sort_keys=True, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise Uncacheable(f"compile options with no JSON form ({exc})") from None
