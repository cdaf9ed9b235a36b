"""Run-time check errors of compiled graphs (an index out of range, an integer division by zero), located in the
user's code.

A kernel whose check failed says which of its ops failed and on which value
(``executors/cpu/check_failure.py``), but the IR knows nothing of the user's source. The graph a
:class:`~neuroncc.frontend.compiled.CompiledGraph` was imported from does: each node's
``meta["stack_trace"]`` (TorchDynamo, AOTAutograd and torch.export keep it). On the failure path only, the
graph is rerun eagerly, node by node, on copies of the call's inputs: the node that raises is the op that
failed, eager's message gives the value and the valid range, the node's stack gives the user's ``file:line``.
Nothing here runs while calls succeed: the call sites catch :class:`~neuroncc.errors.RuntimeCheckError` in the
``try`` they already have.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx as fx

from neuroncc.errors import RuntimeCheckError, RuntimeZeroDivisionError
from neuroncc.frontend.diagnostics import op_name, tensor_type_text, user_location

#: placeholder names AOTAutograd and TorchDynamo make up (the user's names are those torch.export keeps)
_TRACER_NAME = re.compile(r"^(arg\d+_\d+|primals_\d+|tangents_\d+|l_.*_|s\d+)$")
#: the words of eager's index errors (gather, index_select, embedding, index, index_put, scatter, ...)
_INDEX_WORDS = ("out of bounds", "out of range", "index")


@dataclass(frozen=True)
class RerunSource:
    """A graph to rerun that takes the call's arguments from ``skip`` on: TorchDynamo's graph behind a graph-cache
    hit's forward, whose call is AOTAutograd's (parameters and buffers first; the graph holds them itself)."""

    gm: fx.GraphModule
    skip: int


class _NodeFailed(Exception):
    def __init__(self, node: fx.Node, error: BaseException):
        super().__init__(str(error))
        self.node, self.error = node, error


class _Rerun(fx.Interpreter):
    """An eager run of the graph that stops at the first node raising, naming it."""

    def run_node(self, n: fx.Node) -> Any:
        try:
            return super().run_node(n)
        except Exception as error:  # noqa: BLE001 - any node's failure ends the rerun, named
            raise _NodeFailed(n, error) from error


def located_run_error(error: RuntimeCheckError, gm: fx.GraphModule | RerunSource | None,
                      args: Sequence[Any]) -> RuntimeCheckError:
    """``error`` (raised by a call of the graph imported from ``gm`` on ``args``) as the same type, naming the
    aten op, the operand (the index, the divisor), eager's words for the value and range, and the user's
    ``file:line``; the kernel's report when the rerun does not find the op (then ``error`` as it is when there is
    no graph)."""
    if error.location is not None or gm is None:
        return error
    if isinstance(gm, RerunSource):
        gm, args = gm.gm, args[gm.skip:]
    division = isinstance(error, RuntimeZeroDivisionError)
    found = _failing_node(gm, args, _is_zero_division if division else _is_index_error)
    if found is None:
        sites = [] if division else _index_sites(gm)
        if not sites:
            return error
        return type(error)(f"{error}\n  index ops of this graph: {'; '.join(sites)}", op=error.op,
                           detail=error.detail, kernel=error.kernel)
    node, eager_error = found
    location = user_location(node)
    if division:  # eager says "ZeroDivisionError" only
        detail, operand = ZERO_DIVISION_DETAIL, _divisor_operand(node)
    else:
        detail, operand = index_detail(eager_error, error.detail), _index_operands(node)
    where = f" at {location} (in {location.function})" if location is not None else " (source location unknown)"
    code = f"\n    {location.code}" if location is not None and location.code else ""
    kernel = f"\n  in neuroncc kernel '{error.kernel}'" if error.kernel else ""
    kernel += f" (its op '{error.op}')" if error.kernel and error.op else ""
    return type(error)(f"{_op_label(node)}{where}: {detail}{operand}{code}{kernel}", op=_op_label(node),
                       detail=detail, kernel=error.kernel, location=str(location) if location is not None else None)


def _op_label(node: fx.Node) -> str:
    """The op as the user may know it: ``aten.gather.default`` for an aten graph's node, ``torch.gather`` or
    ``Tensor.gather`` for TorchDynamo's (``_VariableFunctionsClass.gather`` is what its qualname says)."""
    if node.op == "call_method":
        return f"Tensor.{node.target}"
    name = op_name(node)
    if name.startswith("_VariableFunctionsClass."):
        return "torch." + name.removeprefix("_VariableFunctionsClass.")
    return name


def _is_index_error(error: BaseException) -> bool:
    return isinstance(error, IndexError | RuntimeError) and any(w in str(error) for w in _INDEX_WORDS)


def _is_zero_division(error: BaseException) -> bool:
    return isinstance(error, ZeroDivisionError | RuntimeError) and "ZeroDivisionError" in str(error)


def _failing_node(gm: fx.GraphModule, args: Sequence[Any],
                  matches: Any) -> tuple[fx.Node, BaseException] | None:
    """(node, eager's error) of the first node whose eager run raises an error that ``matches`` (the kind of
    error the kernel met) on copies of ``args``."""
    copies = [_host_copy(a) for a in args]
    rerun = _Rerun(gm)
    rerun.extra_traceback = False
    try:
        with torch.no_grad(), torch.random.fork_rng(devices=[]), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            rerun.run(*copies)
    except _NodeFailed as failed:
        return (failed.node, failed.error) if matches(failed.error) else None
    except Exception:  # noqa: BLE001 - the rerun is best effort: the kernel's own report stands
        return None
    return None


def _host_copy(value: Any) -> Any:
    """A CPU copy of a tensor argument (the rerun must not write into the caller's tensors, nor run the
    device's ops); anything else as it is."""
    if isinstance(value, torch.Tensor):
        return value.detach().to("cpu", copy=True)
    return value


ZERO_DIVISION_DETAIL = "integer division by zero"


def index_detail(eager_error: BaseException, kernel_detail: str | None) -> str:
    """The value and range of an index error in eager's words, unless they leave the value out ("index out of
    range in self": index_select, embedding), where the kernel's rerun names it (``kernel_detail``)."""
    detail = (str(eager_error).strip().splitlines() or ["index out of range"])[0]
    return kernel_detail if kernel_detail and not any(c.isdigit() for c in detail) else detail


def index_operands_text(operands: Iterable[tuple[str, Sequence[Any], str | None]]) -> str:
    """`` (operand 'index', the input 'ids', int64[4, 3])``: of ``(schema name, the argument's values, the program
    input it is or None)``, the arguments holding integer tensors (real or fake: their dtype and shape)."""
    named = []
    for name, values, given in operands:
        ints = [v for v in values if isinstance(v, torch.Tensor) and not v.is_floating_point()
                and not v.is_complex() and v.dtype is not torch.bool]
        if ints:
            named.append(f"operand '{name}'{_given(given)}, {', '.join(map(tensor_type_text, ints))}")
    return f" ({'; '.join(named)})" if named else ""


def divisor_text(name: str, value: Any, given: str | None = None) -> str:
    """`` (divisor: operand 'other', the input 'y', int64[2])`` for a tensor (real or fake), ``= 0`` for a number,
    the name alone when ``value`` is None (its type unknown)."""
    if value is not None and not isinstance(value, torch.Tensor):
        return f" (divisor: operand '{name}' = {value})"
    types = f", {tensor_type_text(value)}" if value is not None else ""
    return f" (divisor: operand '{name}'{_given(given)}{types})"


def _given(name: str | None) -> str:
    return f", the input '{name}'" if name else ""


def _input_name(value: Any) -> str | None:
    """The program input an argument is, by the name the user gave it (torch.export keeps those)."""
    return value.name if isinstance(value, fx.Node) and value.op == "placeholder" and \
        not _TRACER_NAME.match(value.name) else None


def _meta(value: Any) -> Any:
    return value.meta.get("val") if isinstance(value, fx.Node) else None


def _index_operands(node: fx.Node) -> str:
    """`` (operand 'index', int64[4, 3])``: the node's integer tensor arguments, named as its schema does."""
    schema = getattr(node.target, "_schema", None)
    if schema is None:
        return ""
    operands = []
    for argument, value in zip(schema.arguments, node.args):
        values = value if isinstance(value, list | tuple) else [value]
        inputs = [name for name in map(_input_name, values) if name]
        operands.append((argument.name, [_meta(v) for v in values],
                         inputs[0] if len(inputs) == 1 and len(values) == 1 else None))
    return index_operands_text(operands)


def _divisor_operand(node: fx.Node) -> str:
    """The divisor of ``x // y``, ``x % y``, ``torch.div``, ``torch.fmod``: the node's second argument."""
    if len(node.args) < 2:
        return ""
    schema = getattr(node.target, "_schema", None)
    name = schema.arguments[1].name if schema is not None and len(schema.arguments) > 1 else "other"
    value = node.args[1]
    if not isinstance(value, fx.Node):
        return divisor_text(name, value)
    meta = _meta(value)
    return divisor_text(name, meta if isinstance(meta, torch.Tensor) else None, _input_name(value))


def _index_sites(gm: fx.GraphModule) -> list[str]:
    """``aten.gather.default at f.py:4`` for each node of ``gm`` that reads or writes through integer
    index tensors: where the failing op may be when the rerun did not find it."""
    sites = []
    for node in gm.graph.nodes:
        schema = getattr(node.target, "_schema", None)
        if node.op == "call_function" and schema is not None and _index_operands(node) \
                and any("ind" in argument.name for argument in schema.arguments):
            location = user_location(node)
            sites.append(f"{_op_label(node)} at {location if location is not None else '(unknown)'}")
    return sites
