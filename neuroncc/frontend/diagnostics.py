"""User-facing diagnostics: where in the user's code a node came from, and the typed errors the backend raises.

Every refusal names the problem (the aten op and its input types, or the feature), the user's ``file:line``
(the innermost frame of ``node.meta["stack_trace"]`` outside PyTorch's own sources) and what to do about it.
The checks in :func:`check_graph_features` run on TorchDynamo's graph, before AOTAutograd, because that is
where ``torch.distributions`` (and ``torch.func``, whose failures are named) are still visible. (Symbolic sizes
are not refused: they are specialized per call, see :mod:`neuroncc.frontend.specializations`.)
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx as fx

from neuroncc.errors import UnsupportedOpError

FALLBACK_HINT = 'to run unsupported ops on eager PyTorch instead, pass options={"fallback": "cpu"} to torch.compile'

_TORCH_DIR = os.path.dirname(torch.__file__) + os.sep
_DISTRIBUTIONS_DIR = os.path.join(_TORCH_DIR, "distributions") + os.sep
_RESUME = re.compile(r"^torch_dynamo_resume_in_(.+)_at_\d+$")
_FRAME = re.compile(r'^\s*File "(?P<file>.+)", line (?P<line>\d+), in (?P<function>.+)$')


#: What :class:`Float64Warning` says (the torch backend and the exported-program path alike).
FLOAT64_WARNING = ("neuroncc computes float64 tensors in float32 and complex128 in complex64 (outputs are cast back); "
                   "convert the model with .float() to silence this")


class Float64Warning(UserWarning):
    """float64 tensors in a compiled region: neuroncc computes them in float32 (outputs stay float64)."""


@dataclass(frozen=True, slots=True)
class SourceLocation:
    """Where in the user's code a graph node came from."""

    file: str
    line: int
    function: str
    code: str = ""

    def __str__(self) -> str:
        return f"{self.file}:{self.line}"


def stack_frames(node: fx.Node) -> list[SourceLocation]:
    """The frames of the node's recorded Python stack, outermost first."""
    frames: list[SourceLocation] = []
    lines = (node.meta.get("stack_trace") or "").splitlines()
    for index, text in enumerate(lines):
        match = _FRAME.match(text)
        if match:
            code = lines[index + 1].strip() if index + 1 < len(lines) and not _FRAME.match(lines[index + 1]) else ""
            function = _RESUME.sub(r"\1", match["function"])  # TorchDynamo's resume function after a graph break
            frames.append(SourceLocation(match["file"], int(match["line"]), function, code))
    return frames


def user_location(node: fx.Node) -> SourceLocation | None:
    """The innermost frame of the node's stack outside PyTorch (the user's line), or None if unknown."""
    frames = stack_frames(node)
    for frame in reversed(frames):
        if not os.path.abspath(frame.file).startswith(_TORCH_DIR):
            return frame
    return frames[-1] if frames else None


#: Why an aten op without a lowering has none, where "no lowering" would not tell the user what to change.
NO_LOWERING_REASONS: dict[Any, str] = {
    torch.ops.aten._local_scalar_dense.default: (
        "a tensor read as a Python number inside the compiled region (.item(), int(t), .tolist() with "
        "torch._dynamo.config.capture_scalar_outputs = True): neuroncc compiles graphs whose sizes and scalars "
        "are known when it compiles; leave capture_scalar_outputs off (TorchDynamo then breaks the graph at the "
        "read and neuroncc compiles the graphs on either side) or read the number outside the compiled region"),
    torch.ops.aten._assert_async.msg: (
        "a check of tensor values at run time (F.one_hot's class range, torch._assert_async): neuroncc's graphs "
        "have no run-time assertions; validate the values outside the compiled region"),
    torch.ops.aten._assert_scalar.default: (
        "a check of a data-dependent number at run time (from .item() with capture_scalar_outputs): neuroncc's "
        "graphs have no run-time assertions; read the number outside the compiled region"),
}
NO_LOWERING = "neuroncc has no lowering for this op"


def tensor_type_text(tensor: torch.Tensor) -> str:
    """``int64[4, 3]``: a tensor's dtype and shape as neuroncc's messages write them."""
    return f"{str(tensor.dtype).removeprefix('torch.')}[{', '.join(str(s) for s in tensor.shape)}]"


def _describe_arg(arg: Any) -> str:
    if isinstance(arg, fx.Node):
        meta = arg.meta.get("val", arg.meta.get("example_value"))
        if isinstance(meta, torch.Tensor):
            return tensor_type_text(meta)
        return type(meta).__name__ if meta is not None else arg.name
    if isinstance(arg, list | tuple):
        return "[" + ", ".join(_describe_arg(a) for a in arg) + "]"
    return repr(arg)


def describe_call(node: fx.Node) -> str:
    """``aten.cumsum.default(float32[3, 4], 1)``: the op and the types of its inputs."""
    args = [_describe_arg(a) for a in node.args] + [f"{k}={_describe_arg(v)}" for k, v in node.kwargs.items()]
    return f"{op_name(node)}({', '.join(args)})"


def op_name(node: fx.Node) -> str:
    target = node.target
    if isinstance(target, torch._ops.OpOverload | torch._ops.OpOverloadPacket):
        return str(target)  # aten.cumsum.default
    return getattr(target, "__qualname__", None) or str(target)


def _nearest_location(node: fx.Node) -> SourceLocation | None:
    """The node's user frame, or that of the next node that has one (setup calls often carry no stack)."""
    current: fx.Node | None = node
    while current is not None and current.op != "root":
        location = user_location(current)
        if location is not None:
            return location
        current = current.next
    return None


def _where(node: fx.Node) -> str:
    location = _nearest_location(node)
    if location is None:
        return "(source location unknown)"
    code = f"\n    {location.code}" if location.code else ""
    return f"at {location} (in {location.function}){code}"


def unsupported_op(node: fx.Node, reason: str, others: Iterable[str] = ()) -> UnsupportedOpError:
    """The error for an aten op neuroncc cannot compile; ``others`` names further unsupported ops."""
    more = sorted(set(others) - {op_name(node)})
    also = f"\n  other unsupported ops in this graph: {', '.join(more)}" if more else ""
    error = UnsupportedOpError(
        f"neuroncc cannot compile {describe_call(node)} {_where(node)}\n  reason: {reason}{also}\n"
        f"  {FALLBACK_HINT}"
    )
    error.op = op_name(node)
    error.location = user_location(node)
    return error


def unsupported_feature(feature: str, node: fx.Node | None, hint: str) -> UnsupportedOpError:
    where = _where(node) if node is not None else "in the compiled region"
    error = UnsupportedOpError(f"neuroncc does not support {feature} {where}\n  {hint}")
    error.feature = feature
    return error


# ---- checks on TorchDynamo's graph ---------------------------------------------------------------------


def _example(node: fx.Node) -> Any:
    return node.meta.get("example_value", node.meta.get("val"))


def _tensor_feature(value: Any, devices: tuple[str, ...] = ("cpu", "meta")) -> tuple[str, str] | None:
    """(feature, hint) if a tensor uses something neuroncc refuses, else None."""
    if not isinstance(value, torch.Tensor):
        return None
    if value.is_nested:
        return "nested tensors", "pad the sequences to one length (see neuroncc.pad_to_bucket) or run eagerly"
    if value.layout is not torch.strided:
        return f"sparse tensors (layout {value.layout})", "convert with .to_dense() outside the compiled region"
    if value.device.type not in devices:
        return f"tensors on device '{value.device}'", "neuroncc's torch backend computes CPU tensors"
    return None


def _functorch_target(node: fx.Node) -> bool:
    """A call into functorch's transform machinery (vmap/grad levels, batched or wrapped tensors)."""
    module = getattr(node.target, "__module__", None) or ""
    return module.startswith(("torch._functorch", "torch._C._functorch"))


def functorch_node(gm: fx.GraphModule) -> fx.Node | None:
    """The graph's first call into torch.func's transform machinery (TorchDynamo writes vmap/grad/jacrev/...
    as functorch level calls around the ops they transform, which AOTAutograd traces away), or None."""
    return next((n for n in gm.graph.nodes if n.op == "call_function" and _functorch_target(n)), None)


def functorch_failure(node: fx.Node) -> UnsupportedOpError:
    """The typed error for a graph using torch.func whose compile failed in PyTorch's own tracing."""
    return unsupported_feature("this use of torch.func transforms (vmap, grad, jacrev, ...)", node,
                               "call the transform outside the compiled region, or compile the function it "
                               "transforms")


def check_graph_features(gm: fx.GraphModule, example_inputs: Sequence[Any],
                         devices: tuple[str, ...] = ("cpu", "meta")) -> None:
    """Refuse TorchDynamo graphs that use a feature neuroncc does not compile, naming it and the user's line;
    tensors may live on ``devices``."""
    nodes = list(gm.graph.nodes)
    placeholders = [n for n in nodes if n.op == "placeholder"]
    for index, value in enumerate(example_inputs):
        found = _tensor_feature(value, devices)
        if found:
            placeholder = placeholders[index] if index < len(placeholders) else None
            raise unsupported_feature(f"{found[0]} as graph inputs", placeholder, found[1])
    for node in nodes:
        found = _tensor_feature(_example(node), devices)
        if found and node.op != "placeholder":
            raise unsupported_feature(found[0], node, found[1])
        frames = stack_frames(node)
        if any(os.path.abspath(f.file).startswith(_DISTRIBUTIONS_DIR) for f in frames):
            raise unsupported_feature(
                "torch.distributions", node,
                "compute the log-probability or sample outside the compiled region, or write the formula out")


def check_input_dtypes(gm: fx.GraphModule, example_inputs: Sequence[Any], supported: Iterable[torch.dtype]) -> None:
    """Refuse a graph input whose dtype neuroncc has no element type for (uint16, float8, ...), at the user's line
    (the lowering's refusal of it named no op, input or line)."""
    supported = frozenset(supported)
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    for index, value in enumerate(example_inputs):
        if isinstance(value, torch.Tensor) and value.dtype not in supported:
            placeholder = placeholders[index] if index < len(placeholders) else None
            name = f", {placeholder.name}" if placeholder is not None else ""
            raise unsupported_feature(
                f"{str(value.dtype).removeprefix('torch.')} tensors as graph inputs (input {index}{name})",
                placeholder, f"convert it outside the compiled region to one of "
                f"{', '.join(sorted(str(d).removeprefix('torch.') for d in supported))}")


def uses_float64(gm: fx.GraphModule, example_inputs: Sequence[Any], scalars: Sequence[int] = ()) -> bool:
    """True if the graph reads or computes float64 (or complex128) tensors. ``scalars``: positions of inputs
    that are Python floats passed as 0-d float64 tensors (specialized away, not computed on)."""
    double = (torch.float64, torch.complex128)
    if any(isinstance(v, torch.Tensor) and v.dtype in double for i, v in enumerate(example_inputs) if i not in scalars):
        return True
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    skipped = {placeholders[i] for i in scalars if i < len(placeholders)}
    return any(isinstance(_example(n), torch.Tensor) and _example(n).dtype in double
               for n in gm.graph.nodes if n not in skipped)


# ---- data-dependent shapes -----------------------------------------------------------------------------

def data_dependent_refusal(gm: fx.GraphModule, error: BaseException) -> UnsupportedOpError:
    """The refusal for a graph whose shapes (or control flow) depend on tensor values."""
    where = next((loc for loc in map(user_location, gm.graph.nodes) if loc is not None), None)
    first_line = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    refusal = UnsupportedOpError(
        f"neuroncc cannot compile code whose shapes depend on tensor values"
        f"{f' (graph from {where})' if where else ''}: {type(error).__name__}: {first_line}\n"
        f"  compute the data-dependent part outside the compiled region\n  {FALLBACK_HINT}"
    )
    refusal.feature = "data-dependent shapes"
    return refusal
