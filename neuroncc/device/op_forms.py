"""What an aten op does to its arguments, read from its schema once per op.

* Its *functional form*: the overload computing the same values without writing an argument (``add_.Tensor``
  and ``add.out`` -> ``add.Tensor``; ``pow_.Scalar`` -> ``pow.Tensor_Scalar``), found by matching argument
  names and types. The eager compiler compiles the functional form and writes the results into the arguments
  the op writes (``self``, ``out=``).
* Which arguments it writes, and which of its returns are those arguments (``add_`` returns ``self``).
* For ``_foreach_*`` ops: the element op applied to each position of the tensor lists (``_foreach_addcdiv_``
  -> ``addcdiv``), so a foreach call becomes one program of per-tensor ops.
* Whether it draws random numbers (a ``Generator?`` argument) or, for the device, is a view.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import torch

aten = torch.ops.aten


@dataclass(frozen=True)
class OpForm:
    op: Any  # the OpOverload
    functional: Any | None  # its functional form (the op itself when it writes nothing); None: none found
    written: tuple[str, ...]  # names of the arguments it writes, in schema order
    returns: tuple[str | None, ...]  # per return: the written argument it is, or None for a new tensor
    foreach: bool  # a _foreach_ op: lists are mapped element by element
    random: bool  # takes a Generator
    out_arguments: tuple[str, ...]  # the written kwarg-only arguments (out=)

    @property
    def name(self) -> str:
        return str(self.op)

    @property
    def writes(self) -> bool:
        return bool(self.written)


@functools.cache
def form_of(op: Any) -> OpForm:
    schema = op._schema
    written = tuple(a.name for a in schema.arguments if a.alias_info is not None and a.alias_info.is_write)
    by_set = {frozenset(a.alias_info.before_set): a.name for a in schema.arguments
              if a.alias_info is not None and a.alias_info.is_write}
    returns = tuple(by_set.get(frozenset(r.alias_info.before_set)) if r.alias_info is not None else None
                    for r in schema.returns)
    out_arguments = tuple(a.name for a in schema.arguments if a.name in written and a.kwarg_only)
    random = any("Generator" in str(a.type) for a in schema.arguments)
    foreach = schema.name.startswith("aten::_foreach_")
    functional = op if not written else _functional_form(op, set(out_arguments))
    return OpForm(op, functional, written, returns, foreach, random, out_arguments)


def _functional_form(op: Any, out_arguments: set[str]) -> Any | None:
    schema = op._schema
    base = schema.name.split("::")[1]
    if not out_arguments and base.startswith("__i") and base.endswith("__"):
        base = "__" + base.removeprefix("__i")  # the operators' in-place forms: __ilshift__ -> __lshift__
    elif not out_arguments:
        base = base.removesuffix("_")  # add_ -> add
    packet = getattr(aten, base, None)
    if packet is None:
        return None
    wanted = [(a.name, str(a.type)) for a in schema.arguments if a.name not in out_arguments]
    candidates = [getattr(packet, name) for name in packet.overloads()]
    # the same overload name first (add_.Tensor -> add.Tensor), then any with the same arguments
    candidates.sort(key=lambda c: c._overloadname != schema.overload_name)
    for candidate in candidates:
        arguments = candidate._schema.arguments
        if any(a.alias_info is not None and a.alias_info.is_write for a in arguments):
            continue
        if [(a.name, str(a.type)) for a in arguments] == wanted:
            return candidate
    return None


def argument(op: Any, name: str, args: Any, kwargs: dict[str, Any]) -> Any:
    """The value the call passed for argument ``name`` of ``op`` (positional or keyword)."""
    if name in kwargs:
        return kwargs[name]
    for position, arg in enumerate(op._schema.arguments):
        if arg.name == name:
            if position < len(args):
                return args[position]
            return arg.default_value
    raise KeyError(name)


def without(op: Any, names: tuple[str, ...], args: list[Any], kwargs: dict[str, Any]) -> tuple[list[Any], dict[str, Any]]:
    """The call's arguments less the (keyword-only) ``names``: what its functional form takes."""
    return list(args), {k: v for k, v in kwargs.items() if k not in names}


def element_calls(form: OpForm, args: list[Any], kwargs: dict[str, Any],
                  concrete: Any = None) -> list[tuple[Any, list[Any], dict[str, Any]]]:
    """A foreach call as calls of its element op, one per list position (functional arguments only); any
    other op's call as itself (its functional form). ``concrete(value)`` turns an argument into what overload
    resolution can read (the builder passes placeholders for floats)."""
    functional_args, functional_kwargs = without(form.op, form.out_arguments, args, kwargs)
    if not form.foreach:
        return [(form.functional, functional_args, functional_kwargs)]
    schema = form.op._schema
    element_name = schema.name.split("::")[1].removeprefix("_foreach_").removesuffix("_")
    lists = [i for i, a in enumerate(schema.arguments)
             if isinstance(a.type, torch._C.ListType) and i < len(functional_args)]
    length = len(functional_args[lists[0]])
    calls = []
    for index in range(length):
        element_args = [value[index] if position in lists else value for position, value in enumerate(functional_args)]
        element_kwargs = dict(functional_kwargs)
        try:
            overload = resolve_overload(element_name, _mapped(element_args, concrete),
                                        {k: _mapped(v, concrete) for k, v in element_kwargs.items()})
        except RuntimeError:
            # a foreach op passes positionally what its element op takes by keyword (_foreach_addcmul's
            # value, _foreach_addcdiv's scalars -> addcdiv(..., value=))
            element_args, element_kwargs = _keywords_of(element_name, element_args, element_kwargs)
            overload = resolve_overload(element_name, _mapped(element_args, concrete),
                                        {k: _mapped(v, concrete) for k, v in element_kwargs.items()})
        calls.append((overload, element_args, element_kwargs))
    return calls


def _keywords_of(name: str, args: list[Any], kwargs: dict[str, Any]) -> tuple[list[Any], dict[str, Any]]:
    """``args`` past the element op's positional parameters, as its keyword-only ones (first overload that
    has enough)."""
    packet = getattr(aten, name)
    for overload in packet.overloads():
        parameters = getattr(packet, overload)._schema.arguments
        positional = [p for p in parameters if not p.kwarg_only]
        keywords = [p.name for p in parameters if p.kwarg_only and p.name not in kwargs]
        extra = len(args) - len(positional)
        if 0 < extra <= len(keywords):
            return args[:len(positional)], {**kwargs, **dict(zip(keywords, args[len(positional):]))}
    return args, kwargs


def _mapped(value: Any, concrete: Any) -> Any:
    if concrete is None:
        return value
    if isinstance(value, list | tuple):
        return [_mapped(item, concrete) for item in value]
    return concrete(value)


def resolve_overload(name: str, args: list[Any], kwargs: dict[str, Any]) -> Any:
    """The overload of ``aten.<name>`` that PyTorch picks for these arguments (tensors may be meta)."""
    overload = torch._C._jit_resolve_packet(f"aten::{name}", *args, **kwargs)
    return getattr(getattr(aten, name), overload)


def writes_results(form: OpForm, args: list[Any], kwargs: dict[str, Any]) -> list[Any]:
    """The argument values the op writes, flattened (a foreach op's lists element by element), in the order
    of the functional form's results."""
    written = []
    for name in form.written:
        value = argument(form.op, name, args, kwargs)
        written.extend(value if isinstance(value, list | tuple) else [value])
    return written
