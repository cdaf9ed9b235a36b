"""Symbolic sizes from TorchDynamo, compiled as one static specialization per concrete shape seen at run time.

TorchDynamo hands the backend a graph with symbolic sizes when ``dynamic=True``, when ``torch._dynamo.
mark_dynamic`` marked a dimension, or (the default, ``dynamic=None``) once it has seen a dimension change.
neuroncc compiles static shapes, so such a graph becomes a :class:`ShapeSpecializations`: a callable that looks
at the sizes of each call's inputs and runs the static compile for them, compiling it the first time a shape is
seen. The symbolic graph is specialized before AOTAutograd sees it (its ``SymInt`` inputs replaced by their
values), so the forward, backward and inference graphs of a specialization are all static: the rest of the
backend is the same as for ``dynamic=False``.

    call with sizes S -> key(S) -> compiled before? run it
                                -> else: log why (input, dimension, old -> new size), specialize the graph
                                   to S, compile (AOTAutograd + neuroncc), remember it, run it

A Python float TorchDynamo did not specialize (``dynamic=True``, or a float argument whose value changed under
``dynamic=None``: ``torch._dynamo.config.specialize_float`` is False) arrives as a 0-d float64 tensor read with
``.item()``; AOTAutograd cannot trace that read with static sizes, so such a float is specialized like a size:
its value is part of the key and the ``.item()`` becomes a constant (one compile per value, as with
``dynamic=False``, where TorchDynamo guards on the value).

The number of specializations per graph is bounded (``options={"max_specializations": N}``, default
:data:`DEFAULT_MAX_SPECIALIZATIONS`). Past it, a new shape runs the graph on eager PyTorch, with one
:class:`~neuroncc.errors.SpecializationLimitWarning` per graph that says to pad inputs to a few sizes
(``neuroncc.pad_to_bucket``) or raise the bound, as TorchDynamo runs a frame past its ``recompile_limit``; with
``torch._dynamo.config.fail_on_recompile_limit_hit`` it raises :class:`~neuroncc.errors.SpecializationLimitError`.
A specialization is a recompile for ``torch.compiler.set_stance``: ``"fail_on_recompile"`` raises TorchDynamo's
``RecompileError`` for a new shape, ``"eager_on_recompile"`` runs it eagerly (shapes compiled before still run
compiled).
"""

from __future__ import annotations

import logging
import re
import threading
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.fx as fx

from neuroncc.errors import SpecializationLimitError, SpecializationLimitWarning
from neuroncc.frontend import stats, tracing
from neuroncc.frontend.bucketing import running_buckets
from neuroncc.frontend.options import DEFAULT_MAX_SPECIALIZATIONS
from neuroncc.codegen.llvm.fork_safety import renew_in_child

log = logging.getLogger("neuroncc.frontend")

#: From this many specializations on, the recompile log is a warning that suggests buckets.
SUGGEST_BUCKETS_AFTER = 3

_SYMBOLIC = (torch.SymInt, torch.SymFloat, torch.SymBool)
_LOCAL = re.compile(r"^L\['(?P<name>[A-Za-z_]\w*)'\]$")
_LOCAL_PREFIX = re.compile(r"^L\['(?P<name>[A-Za-z_]\w*)'\]")

#: Compiles a static graph for concrete inputs: (graph, inputs, specialization name) -> callable(*inputs).
StaticCompiler = Callable[[fx.GraphModule, list[Any], str], Callable[..., Any]]


def has_symbolic_sizes(gm: fx.GraphModule, example_inputs: Sequence[Any]) -> bool:
    """True if TorchDynamo handed over symbolic sizes (SymInt inputs, or tensors with symbolic sizes) or
    Python scalars it did not specialize (0-d tensors read with ``.item()``: :func:`unspecialized_scalars`)."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    return (any(_is_symbolic(v) for v in example_inputs) or any(_is_symbolic(_example(n)) for n in placeholders)
            or bool(unspecialized_scalars(placeholders)))


def unspecialized_scalars(placeholders: Sequence[fx.Node]) -> tuple[int, ...]:
    """Positions of the placeholders that are Python scalars TorchDynamo passes as 0-d tensors and reads only
    with ``.item()`` (an unspecialized float: a module's ``eps`` under ``dynamic=True``, a float argument
    whose value changed)."""
    return tuple(i for i, n in enumerate(placeholders) if _is_unspecialized_scalar(n))


def _is_unspecialized_scalar(node: fx.Node) -> bool:
    grapharg = node.meta.get("grapharg")
    example = _example(node)
    return (getattr(grapharg, "pass_arg_as_tensor", False) is True and isinstance(example, torch.Tensor)
            and example.dim() == 0 and bool(node.users) and all(_is_item(user) for user in node.users))


def _is_item(node: fx.Node) -> bool:
    return ((node.op == "call_method" and node.target == "item")
            or (node.op == "call_function" and node.target in (torch.Tensor.item,
                                                                 torch.ops.aten._local_scalar_dense.default)))


class ShapeSpecializations:
    """A symbolic TorchDynamo graph: one static compile per concrete input shape (see the module docstring)."""

    def __init__(self, gm: fx.GraphModule, example_inputs: Sequence[Any], compile_static: StaticCompiler,
                 name: str, limit: int = DEFAULT_MAX_SPECIALIZATIONS, where: str | None = None):
        self.gm = gm
        self.name = name
        self.limit = limit
        self.where = where
        self._compile_static = compile_static
        placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
        if len(placeholders) != len(example_inputs):
            raise AssertionError(f"{len(placeholders)} placeholders for {len(example_inputs)} inputs")
        self._placeholders = placeholders
        #: positions of scalar (SymInt/SymFloat/SymBool) inputs: replaced by their values, not passed on
        self._scalar_positions = tuple(i for i, v in enumerate(example_inputs) if isinstance(v, _SYMBOLIC))
        #: positions of unspecialized Python scalars (0-d tensors read with .item()): their values are part of
        #: the key and become constants, not passed on
        self._value_positions = unspecialized_scalars(placeholders)
        #: positions of tensors with a symbolic size or stride: their sizes and strides are part of the key
        self._tensor_positions = tuple(
            i for i, n in enumerate(placeholders)
            if i not in self._scalar_positions and _is_symbolic(_example(n)))
        self._passed_positions = tuple(i for i in range(len(placeholders))
                                       if i not in self._scalar_positions and i not in self._value_positions)
        # read now: TorchDynamo drops the placeholders' source metadata once the frame is compiled
        self._labels = [_input_label(n) for n in placeholders]
        self._compiled: dict[tuple[Any, ...], Callable[..., Any]] = {}
        self._last_key: tuple[Any, ...] | None = None
        self._lock = renew_in_child(threading.Lock())
        self._warned_limit = False
        concrete = [_concrete(v) for v in example_inputs]
        self._specialize(self._key(concrete), concrete)

    @property
    def specializations(self) -> int:
        return len(self._compiled)

    def __call__(self, *args: Any) -> Any:
        key = self._key(args)
        compiled = self._compiled.get(key)
        if compiled is None:
            # a compile at call time: under TorchDynamo's lock and session as its recompiles (tracing.py)
            with tracing.compiling(), self._lock:
                compiled = self._compiled.get(key)
                if compiled is None and self._runs_eagerly(key):
                    compiled = None
                elif compiled is None:
                    compiled = self._specialize(key, args)
            if compiled is None:
                return self.gm(*args)  # the symbolic graph, on eager PyTorch
        self._last_key = key
        return compiled(*[args[i] for i in self._passed_positions])

    def _runs_eagerly(self, key: tuple[Any, ...]) -> bool:
        """Whether a shape not compiled yet runs eagerly instead (torch.compile's stance, the bound); raises
        where the stance or TorchDynamo's configuration asks for an error."""
        stance = getattr(getattr(torch._dynamo.eval_frame, "_stance", None), "stance", "default")
        where = f"code at {self.where}" if self.where else "a graph"
        compiled = "; ".join(self._describe(k) for k in self._compiled)
        if stance == "fail_on_recompile":
            raise torch._dynamo.exc.RecompileError(
                f"neuroncc: {where} (graph {self.name}) was called with a new input shape ({self._describe(key)}) "
                f"while torch.compile's stance is 'fail_on_recompile'; shapes compiled: {compiled}")
        if stance == "eager_on_recompile" and self._compiled:
            return True
        if len(self._compiled) < self.limit:
            return False
        message = (f"neuroncc: {where} (graph {self.name}) was called with one input shape more "
                   f"({self._describe(key)}) than its {self.limit} specializations "
                   f"(options={{'max_specializations': {self.limit}}}); shapes compiled: {compiled}.\n  Pad "
                   "variable sizes to a few buckets outside the compiled region (neuroncc.pad_to_bucket / "
                   "neuroncc.bucketed), or raise the bound with options={'max_specializations': N}")
        if torch._dynamo.config.fail_on_recompile_limit_hit:
            raise SpecializationLimitError(message)
        if not self._warned_limit:
            self._warned_limit = True
            warnings.warn(f"{message}.\n  Shapes not compiled run on eager PyTorch from now on, as TorchDynamo "
                          "does past its recompile_limit (torch._dynamo.config.fail_on_recompile_limit_hit = True "
                          "makes this an error)", SpecializationLimitWarning, stacklevel=3)
        return True

    # ---- keys and their differences ---------------------------------------------------------------------

    def _key(self, args: Sequence[Any]) -> tuple[Any, ...]:
        scalars = tuple(args[i] for i in self._scalar_positions)
        tensors = tuple((tuple(args[i].shape), args[i].stride()) for i in self._tensor_positions)
        # repr: a float's exact value, NaN equal to itself, -0.0 apart from 0.0
        values = tuple(repr(args[i].item()) for i in self._value_positions)
        return scalars + tensors + values

    def _changes(self, old: tuple[Any, ...], new: tuple[Any, ...]) -> list[str]:
        """What differs between two keys: ``input 'x' dimension 1: 3 -> 5`` (sizes first, then strides)."""
        count = len(self._scalar_positions)
        tensors = count + len(self._tensor_positions)
        changes: list[str] = []
        for position, (before, after) in zip(self._tensor_positions, zip(old[count:tensors], new[count:tensors])):
            label = self._label(position)
            if len(before[0]) != len(after[0]):
                changes.append(f"input {label} rank {len(before[0])} -> {len(after[0])}")
                continue
            changes += [f"input {label} dimension {d}: {a} -> {b}"
                        for d, (a, b) in enumerate(zip(before[0], after[0])) if a != b]
            if before[0] == after[0] and before[1] != after[1]:
                changes.append(f"input {label} strides {list(before[1])} -> {list(after[1])}")
        changes += [f"{self._label(position)}: {a} -> {b}"
                    for position, a, b in zip(self._value_positions, old[tensors:], new[tensors:]) if a != b]
        if not changes:  # only scalars changed (an int argument, or sizes of tensors that are not inputs)
            changes = [f"{self._label(position)}: {a} -> {b}"
                       for position, a, b in zip(self._scalar_positions, old[:count], new[:count]) if a != b]
        return changes

    def _label(self, position: int) -> str:
        return self._labels[position]

    def _describe(self, key: tuple[Any, ...]) -> str:
        count = len(self._scalar_positions)
        tensors = count + len(self._tensor_positions)
        shapes = [f"{self._label(p)} {list(shape)}" for p, (shape, _) in zip(self._tensor_positions, key[count:tensors])]
        shapes += [f"{self._label(p)} = {value}" for p, value in zip(self._value_positions, key[tensors:])]
        return ", ".join(shapes) or ", ".join(map(str, key[:count]))

    # ---- compiling one specialization --------------------------------------------------------------------

    def _specialize(self, key: tuple[Any, ...], args: Sequence[Any]) -> Callable[..., Any]:
        number = len(self._compiled) + 1
        self._log(number, key)
        values = {p: args[p] for p in self._scalar_positions}
        values.update({p: args[p].item() for p in self._value_positions})
        specialized = specialize_graph(self.gm, values)
        passed = [args[i] for i in self._passed_positions]
        # Outside TorchDynamo's tracing context: AOTAutograd must fake the concrete inputs with static sizes,
        # not reuse the symbolic fake mode of the frame being compiled. In a context of their own: without
        # one, AOTAutograd does not ask the forward for its output strides, and the activations it saves took
        # eager's layouts (transposed after every forward of a channels_last model, read with a stride by the
        # backward's kernels: saved_layouts.py)
        from torch._subclasses.fake_tensor import FakeTensorMode

        with torch._guards.tracing(torch._guards.TracingContext(FakeTensorMode())):
            compiled = self._compile_static(specialized, passed, f"{self.name}_s{number}")
        stats.increment("shape_specializations")
        self._compiled[key] = compiled
        return compiled

    def _log(self, number: int, key: tuple[Any, ...]) -> None:
        where = f"code at {self.where}" if self.where else "a graph"
        if number == 1 or self._last_key is None:
            log.info("neuroncc: %s (graph %s) has symbolic sizes; compiling specialization #1 for %s "
                     "(one per input shape, at most %d)", where, self.name, self._describe(key), self.limit)
            return
        reason = "; ".join(self._changes(self._last_key, key)) or "a new input shape"
        sizes = len(self._scalar_positions) + len(self._tensor_positions)
        value_only = key[:sizes] == self._last_key[:sizes]  # only an unspecialized Python float changed
        # inside neuroncc.bucketed, as many shapes as it has buckets are what its caller chose: no hint
        suggest = number >= SUGGEST_BUCKETS_AFTER and (value_only or number > running_buckets())
        if value_only:
            hint = (f" ({number} specializations so far: pass a float that changes between calls as a tensor, "
                    "which is an input of the compiled code, not a constant of it)") if suggest else ""
        else:
            hint = (f" ({number} shapes so far: pad inputs to a few sizes with neuroncc.pad_to_bucket to bound "
                    "compiles)") if suggest else ""
        log.log(logging.WARNING if suggest else logging.INFO,
                "neuroncc: recompiling %s (graph %s) for a new %s, specialization #%d of at most %d: %s%s",
                where, self.name, "Python float value" if value_only else "shape", number, self.limit, reason, hint)


def specialize_graph(gm: fx.GraphModule, values: dict[int, Any]) -> fx.GraphModule:
    """A copy of ``gm`` whose placeholders at ``values``' positions are replaced by those constants (an
    unspecialized scalar's ``.item()`` reads too)."""
    graph = fx.Graph()
    env: dict[fx.Node, Any] = {}
    replaced: set[fx.Node] = set()
    position = 0
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            if position in values:
                env[node] = values[position]
                replaced.add(node)
            else:
                env[node] = graph.node_copy(node, lambda n: env[n])
            position += 1
            continue
        if _is_item(node) and node.args and node.args[0] in replaced:
            env[node] = env[node.args[0]]
            continue
        env[node] = graph.node_copy(node, lambda n: env[n])
    specialized = fx.GraphModule(gm, graph, gm.__class__.__name__)
    specialized.meta.update(getattr(gm, "meta", {}))
    return specialized


def _input_label(node: fx.Node) -> str:
    """How the user names a graph input: ``'x'`` for a local ``x``, ``args[0]``, ``self.weight``."""
    source = getattr(node.meta.get("grapharg"), "source", None) or node.meta.get("_dynamo_source")
    text = getattr(source, "name", None)
    text = text() if callable(text) else text
    if not isinstance(text, str):
        return f"'{node.name}'"
    local = _LOCAL.match(text)
    if local:
        return f"'{local['name']}'"
    return _LOCAL_PREFIX.sub(r"\g<name>", text)


def _concrete(value: Any) -> Any:
    """A symbolic scalar's value on the call that TorchDynamo is compiling (its hint); others unchanged."""
    if isinstance(value, _SYMBOLIC):
        hint = value.node.hint
        if hint is None:
            raise AssertionError(f"symbolic input {value} has no value")
        return hint
    return value


def _example(node: fx.Node) -> Any:
    return node.meta.get("example_value", node.meta.get("val"))


def _is_symbolic(value: Any) -> bool:
    if isinstance(value, _SYMBOLIC):
        return True
    if isinstance(value, torch.Tensor) and not value.is_nested:
        return any(isinstance(s, torch.SymInt) for s in (*value.shape, *value.stride()))
    return False
