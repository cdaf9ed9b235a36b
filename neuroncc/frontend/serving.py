"""Serving an exported program without TorchDynamo: ``neuroncc.compile_program`` (AOTInductor's
``aoti_compile_and_package`` + ``aoti_load_package`` in one step).

    served = neuroncc.compile_program(torch.export.export(model, (x,)))   # or a .pt2 path
    y = served(x)                                                          # the program's own signature

:func:`compile_program` imports the program's inference graph (:func:`~neuroncc.frontend.exported.import_inference`,
the loader and decompositions ``neuroncc compile/run`` use) and compiles it through the compile cache (a second
process loads the executable and compiles nothing: found by the program cache, ``program_cache.py``, before the
program is decomposed). The :class:`CompiledProgram` it returns holds the program's
state (parameters, buffers, constants) and is called like the exported module: positional and keyword inputs,
pytrees in and out (the program's in/out specs), buffer updates kept in its state.

A call pays for neither TorchDynamo's guards nor AOTAutograd's wrappers (their floor alone is 2.2-2.4x eager's
time on issue #18's tiny MLP, which this path runs at 0.43-0.58x): everything that does not depend on the
call's tensors is decided once, here. Per call (:meth:`CompiledProgram.__call__`): the user inputs are
bound (a tuple as it is, when the program takes tensors positionally), checked by one C++ tensor guard
(TorchDynamo's ``TensorGuards``: Python type, dispatch keys, dtype, device, requires_grad, sizes, strides of
the last call that passed the check in Python), and the executable is called on data pointers
(:mod:`~neuroncc.frontend.direct_call`). Inputs the guard does not recognise are checked in Python, and a wrong
one raises :class:`~neuroncc.errors.InputError` naming the input and what was expected.

Autograd: a compiled program computes inference only; its outputs never require grad. An input that requires
grad is refused while grad mode is on (the caller evidently wants gradients the program cannot give) and
read as data under ``torch.no_grad()`` / ``torch.inference_mode()``, as eager would read it there.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from operator import itemgetter
from pathlib import Path
from types import MappingProxyType
from typing import Any

import torch
import torch.utils._pytree as pytree
from torch.export import ExportedProgram
from torch.export.graph_signature import OutputKind

from neuroncc.driver.cache import cache_from_environ
from neuroncc.driver.compile import DEFAULT_TARGET, compile_graph
from neuroncc.driver.records import CompileRecord
from neuroncc.errors import InputError, RuntimeCheckError
from neuroncc.executors.executable import TARGETS, Executable
from neuroncc.frontend import cache_artifacts, program_cache, stats
from neuroncc.frontend.aten_compiler import cyclic_gc_paused, record_compiled
from neuroncc.frontend.compiled import CompiledGraph
from neuroncc.frontend.direct_call import DirectCall, exact_match_guard
from neuroncc.frontend.imported import ComputedOutput
from neuroncc.frontend.exported import InferenceGraph, ProgramInput, fixed_inputs, import_inference, load_program
from neuroncc.frontend.options import check_compile_options
from neuroncc.frontend.run_errors import located_run_error
from neuroncc.hardware.host import PLACED_OUTPUT_MIN_BYTES
from neuroncc.ir.ops.library_linalg import LinalgInputError

#: Tensor types a program takes as they are (a Parameter is a plain tensor to the executable).
_PLAIN_TENSORS = (torch.Tensor, torch.nn.Parameter)


def compile_program(program: ExportedProgram | str | os.PathLike[str], *, target: str = DEFAULT_TARGET,
                    pipeline: str | None = None, options: Mapping[str, Any] | None = None,
                    name: str | None = None) -> CompiledProgram:
    """Compile ``program`` (a ``torch.export.ExportedProgram``, or the path of a ``torch.export.save`` archive,
    loaded without unpickling; ``name`` picks one of an archive's several programs) for ``target`` through the
    compile cache (``$NEURONCC_CACHE_DIR``; ``$NEURONCC_DISABLE_CACHE`` turns it off), and return the callable
    that runs it. ``pipeline`` overrides the target's pass pipeline; ``options`` go to the passes and code
    generators (as ``torch.compile``'s ``options=``). Raises :class:`~neuroncc.errors.InputError` for an unusable
    archive or target, :class:`~neuroncc.errors.UnsupportedOpError` for a program neuroncc cannot compile."""
    if target not in TARGETS:
        raise InputError(f"unknown target '{target}' (known: {', '.join(sorted(TARGETS))})")
    check_compile_options(options)
    if isinstance(program, (str, os.PathLike)):
        function_name = _function_name(Path(program).stem)
        program = load_program(program, name)
    elif isinstance(program, ExportedProgram):
        function_name = "program"
    else:
        raise InputError(f"compile_program takes a torch.export.ExportedProgram or the path of a .pt2 archive, "
                         f"got {type(program).__name__}")
    cache = cache_from_environ(os.environ)
    key = program_cache.key_for(program, function_name, target, pipeline, options, cache)
    hit = program_cache.lookup(cache, key, program, target) if key is not None else None  # type: ignore[arg-type]
    if hit is not None:  # nothing decomposed, imported or compiled
        stats.record_executable(hit.executable, target)
        for entry in (key.key, hit.artifact):  # type: ignore[union-attr]
            cache_artifacts.record(entry)  # portable: torch.compiler.save_cache_artifacts() carries both
        return CompiledProgram(hit.graph, hit.executable, program_hit=hit.artifact)
    graph = import_inference(program, function_name, target)
    records: list[CompileRecord] = []
    with cyclic_gc_paused():
        executable = compile_graph(graph.imported.function, target=target, pipeline=pipeline, options=options,
                                   cache=cache,
                                   on_compiled=lambda record: (records.append(record), record_compiled(record, 0.0)))
    stats.increment("graphs_compiled")  # counted as the torch backend counts its graphs (aten_compiler.py)
    stats.record_executable(executable, target)
    record = records[0] if records else None
    if key is not None and record is not None and record.cache != "uncached":
        if program_cache.store(cache, key, program, graph, record.key, target):  # type: ignore[arg-type]
            cache_artifacts.record(key.key)
    return CompiledProgram(graph, executable, record)


def _function_name(stem: str) -> str:
    """An IR function name from an archive's file name (``my-model.pt2`` -> ``my_model``)."""
    cleaned = "".join(c if c.isalnum() or c == "_" else "_" for c in stem) or "program"
    return cleaned if not cleaned[0].isdigit() else f"m_{cleaned}"


class CompiledProgram:
    """An exported program's compiled inference graph with its state, called as the exported module is.

    ``state`` maps each parameter, buffer and constant (by fully qualified name) to the tensor the program reads
    (a copy of the program's, made here); a buffer the program updates (BatchNorm's running statistics in train
    mode) is replaced there by its new value after each call. An input the program updates in place (``x.add_(1)``
    in its forward) is updated in the caller's tensor after each call, as eager PyTorch leaves it, on the direct
    call too. ``cache`` says how the executable was obtained: ``"hit"`` (loaded from the compile
    cache), ``"miss"`` (compiled, now stored) or ``"uncached"``.
    """

    def __init__(self, graph: InferenceGraph, executable: Executable, record: CompileRecord | None = None, *,
                 program_hit: str | None = None):
        """``record``: what compiling ``graph`` reported; ``program_hit``: instead, the artifact key a program
        cache entry loaded ``executable`` by (``program_cache.py``: a hit, nothing decomposed or compiled)."""
        self.graph = graph
        self.cache = "hit" if program_hit else record.cache if record is not None else "uncached"
        self._state: dict[str, torch.Tensor] = graph.initial_state()
        artifact = program_hit or (record.key if record and record.cache != "uncached" else None)
        self._compiled = CompiledGraph(graph.imported, executable, artifact_key=artifact,
                                       source=graph.program.graph_module)
        self.executable = self._compiled.executable
        self._inputs: tuple[ProgramInput, ...] = graph.user_inputs
        self._signature = _Signature(graph.program)
        #: the graph's arguments with the state in place; a call fills in the user inputs' positions
        self._arguments: list[Any] = [None if spec.kind == "input" else self._state[spec.target]
                                      for spec in graph.inputs]
        self._user_positions = tuple(position for position, spec in enumerate(graph.inputs) if spec.kind == "input")
        user_outputs = [index for index, spec in enumerate(graph.program.graph_signature.output_specs)
                        if spec.kind == OutputKind.USER_OUTPUT]
        self._user_outputs = _picker(user_outputs, len(graph.imported.outputs))
        self._returned = _returner(graph.program.call_spec.out_spec)
        slot_of = {spec.target: position for position, spec in enumerate(graph.inputs) if spec.kind == "buffer"}
        #: (graph output, buffer fqn, its argument position) per buffer the program updates
        self._updates = tuple((index, fqn, slot_of[fqn]) for index, fqn in graph.buffer_mutations)
        #: (graph output, position in the call's flat inputs) per input the program updates in place
        self._input_updates = graph.input_mutations
        self._guard: Any = None  # the C++ check of a call's user inputs (exact_match_guard), once one passed
        self._direct = _DirectProgram.of(self._compiled, self._arguments, self._user_positions, user_outputs,
                                         graph.program.call_spec.out_spec, self._updates, self._input_updates)
        #: the direct call's one-frame form (``DirectCall.outputs_call``) on ``(*state, *inputs)``, for a program that
        #: returns its graph's one output as it is and updates nothing, else None: a call the guard passed enters
        #: no other frame before the kernel (after a roofline row's kernel each frame costs 5-15 us: session 29)
        self._one = self._direct.one_output if self._direct is not None else None
        self._state_prefix = tuple(self._arguments[:len(self._arguments) - len(self._user_positions)])
        if self._user_positions != tuple(range(len(self._state_prefix), len(self._arguments))):
            self._one = None  # the user's inputs are not the graph's last arguments

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        signature = self._signature
        flat = args if not kwargs and signature.flat_positional == len(args) else signature.bind(args, kwargs)
        guard = self._guard
        if guard is not None and guard.check(*flat):  # tensors of the kind a call before passed in Python
            one = self._one
            try:
                if one is not None:
                    try:
                        made = one((*self._state_prefix, *flat))
                    except LinalgInputError as error:  # what eager raises, as CompiledGraph's calls do
                        raise torch.linalg.LinAlgError(str(error)) from error
                    if made is not None:
                        return made[0]
                return self._direct(flat, self._state)
            except RuntimeCheckError as error:  # located in the program's graph, as CompiledGraph's calls do
                raise located_run_error(error, self._compiled.source, self._with_state(flat)) from error
        given = flat
        flat = self._checked(flat)
        outputs = self._compiled(self._with_state(flat))
        for index, fqn, position in self._updates:
            self._state[fqn] = self._arguments[position] = outputs[index]
            if self._direct is not None:  # its addresses too
                self._direct.moved_state(position, outputs[index])
        if self._input_updates:  # the caller's tensors updated in place, as eager leaves them
            with torch.no_grad():
                for index, position in self._input_updates:
                    given[position].copy_(outputs[index])
        return self._returned(self._user_outputs(outputs))

    @property
    def state(self) -> Mapping[str, torch.Tensor]:
        """The tensors the program reads, by fully qualified name (read-only: edit a tensor in place, e.g.
        ``copy_``, to change a weight; the calls read these tensors' memory)."""
        return MappingProxyType(self._state)

    def _with_state(self, flat: Sequence[Any]) -> list[Any]:
        """The graph's arguments: the state, with the user inputs ``flat`` in their positions."""
        arguments = self._arguments.copy()
        for position, tensor in zip(self._user_positions, flat):
            arguments[position] = tensor
        return arguments

    def _checked(self, flat: tuple[Any, ...] | list[Any]) -> list[torch.Tensor]:
        """The call's user inputs checked in Python (InputError names the first wrong one). When the direct
        call takes them as they are, later calls with tensors of the same kind pass the C++ guard instead."""
        grad_enabled = torch.is_grad_enabled()
        checked = [_checked_input(value, spec, grad_enabled) for value, spec in zip(flat, self._inputs, strict=True)]
        if self._direct is not None and all(tensor is value and not tensor.requires_grad
                                            for tensor, value in zip(checked, flat)) and self._direct.takes(checked):
            self._guard = exact_match_guard(tuple(checked))
        return checked

    def __repr__(self) -> str:
        inputs = ", ".join(f"{spec.target}: {spec.describe()}" for spec in self._inputs)
        return f"CompiledProgram({self.graph.imported.function.name}({inputs}), cache={self.cache!r})"


class _DirectProgram:
    """The program's call on data pointers (:meth:`DirectCall.launch`) for user inputs the guard passed: the
    state's addresses are kept between calls (a buffer update replaces one), each call adds its inputs'."""

    def __init__(self, direct: DirectCall, arguments: list[Any], user_positions: tuple[int, ...],
                 computed: list[int], out_spec: pytree.TreeSpec | None, updates: tuple[tuple[int, int, int], ...],
                 input_updates: tuple[tuple[int, int], ...] = ()):
        self.launch = direct.launch
        self.arguments = arguments  # the program's (shared): a buffer update replaces its tensor there too
        number_of = {position: number for number, (position, *_) in enumerate(direct.inputs)}
        #: per parameter, the address of its state tensor (a user input's is filled in per call)
        self.addresses = [0 if arguments[position] is None else arguments[position].data_ptr()
                          for position, *_ in direct.inputs]
        self.number_of = number_of
        #: (parameter number, index in the call's flat inputs) of each user input the graph reads
        self.user_params = tuple((number_of[position], index) for index, position in enumerate(user_positions)
                                 if position in number_of)
        #: the layouts the executable takes user inputs in, by index in the flat inputs
        self.user_layouts = {index: direct.inputs[number][3:] for number, index in self.user_params}
        #: the outputs made -> what the program returns
        if len(computed) == 1 and out_spec is not None and out_spec.is_leaf():
            only = computed[0]
            self.results: Any = lambda made: made[only]
        else:
            returned = _returner(out_spec)
            if len(computed) == 1:
                only = computed[0]
                self.results = lambda made: returned((made[only],))
            else:
                pick = itemgetter(*computed) if computed else (lambda made: ())
                self.results = lambda made: returned(pick(made))
        self.updates = updates
        self.input_updates = input_updates  # (made output, index in the call's flat inputs)
        #: ``DirectCall.outputs_call`` when the program returns that call's one output as it is (a tensor, not in a
        #: structure), of 1 MiB or more, and updates no buffer or input, else None. Its own check of the tensors
        #: comes after the program's guard: on a large kernel's cold caches the frames it saves win (15-90 us a
        #: call on row (a)), on a tiny MLP's warm ones the second check loses (~1 us, 4%: session 29)
        self.one_output = direct.outputs_call if (
            len(computed) == 1 and out_spec is not None and out_spec.is_leaf() and not updates and not input_updates
            and direct.one_output_bytes >= PLACED_OUTPUT_MIN_BYTES
        ) else None

    @staticmethod
    def of(compiled: CompiledGraph, arguments: list[Any], user_positions: tuple[int, ...], user_outputs: list[int],
           out_spec: pytree.TreeSpec | None, updates: tuple[tuple[int, str, int], ...],
           input_updates: tuple[tuple[int, int], ...] = ()) -> _DirectProgram | None:
        """The direct call when every output the program returns or updates is computed (not an input returned
        as it is, nor a constant), else None (every call then takes :class:`CompiledGraph`'s path)."""
        direct = compiled.direct
        if direct is None:
            return None
        outputs = [output for output, _ in compiled.outputs]
        wanted = [*user_outputs, *(index for index, *_ in updates), *(index for index, _ in input_updates)]
        if not wanted or not all(isinstance(outputs[index], ComputedOutput) for index in wanted):
            return None
        return _DirectProgram(direct, arguments, user_positions, [outputs[index].index for index in user_outputs],
                              out_spec,
                              tuple((outputs[index].index, fqn, position) for index, fqn, position in updates),
                              tuple((outputs[index].index, position) for index, position in input_updates))

    def takes(self, tensors: list[torch.Tensor]) -> bool:
        """Whether the executable reads these (checked) user inputs as they are laid out."""
        for index, (shape, strides) in self.user_layouts.items():
            have = tensors[index].stride()
            if any(size != 1 and a != b for size, a, b in zip(shape, have, strides)):
                return False
        return True

    def moved_state(self, position: int, tensor: torch.Tensor) -> None:
        """The state tensor at argument ``position`` replaced by ``tensor`` (a buffer update)."""
        self.arguments[position] = tensor
        number = self.number_of.get(position)
        if number is not None:
            self.addresses[number] = tensor.data_ptr()

    def __call__(self, flat: tuple[Any, ...] | list[Any], state: dict[str, torch.Tensor]) -> Any:
        addresses = self.addresses.copy()
        for number, index in self.user_params:
            addresses[number] = flat[index].data_ptr()
        try:
            made = self.launch(addresses)
        except LinalgInputError as error:  # what eager raises, as CompiledGraph's calls do
            raise torch.linalg.LinAlgError(str(error)) from error
        for index, fqn, position in self.updates:
            state[fqn] = tensor = made[index]
            self.moved_state(position, tensor)
        for index, position in self.input_updates:  # the guard passed tensors that do not require grad
            flat[position].copy_(made[index])
        return self.results(made)


def _checked_input(value: Any, spec: ProgramInput, grad_enabled: bool) -> torch.Tensor:
    """``value`` if it is a tensor the program can take as ``spec`` (made readable as data when it needs to be),
    else an InputError naming the input and what it expected."""
    expected = f"a CPU tensor {spec.describe()}"
    if not isinstance(value, torch.Tensor):
        raise InputError(f"input '{spec.target}': expected {expected}, got {type(value).__name__}")
    if type(value) not in _PLAIN_TENSORS:
        raise InputError(f"input '{spec.target}': expected {expected}, got a {type(value).__name__} (a tensor "
                         "subclass; pass a plain tensor)")
    if value.dtype != spec.dtype or tuple(value.shape) != spec.shape:
        raise InputError(f"input '{spec.target}': expected {expected}, got "
                         f"{str(value.dtype).removeprefix('torch.')}{list(value.shape)} (the program was exported "
                         "with static shapes and dtypes)")
    if value.device.type != "cpu":
        raise InputError(f"input '{spec.target}': expected {expected}, got a tensor on {value.device}")
    if value.requires_grad:
        if grad_enabled:
            raise InputError(f"input '{spec.target}' requires grad: a compiled program computes inference only "
                             "(no gradients); call it under torch.no_grad() or pass a detached tensor")
        value = value.detach()
    if value.is_conj() or value.is_neg():
        value = value.resolve_conj().resolve_neg()
    return value


class _Signature:
    """How a call's arguments become the program's flat user inputs: the exported forward's argument names,
    positional or by keyword, flattened with the program's input spec."""

    def __init__(self, program: ExportedProgram):
        spec = program.call_spec.in_spec
        self.in_spec = spec
        self.args_count = spec.child(0).num_children
        self.kwarg_names = tuple(spec.child(1).context)
        signature = program.module_call_graph[0].signature if program.module_call_graph else None
        names = getattr(signature, "forward_arg_names", None)
        if not names or len(names) != self.args_count + len(self.kwarg_names) or \
                set(names[self.args_count:]) != set(self.kwarg_names):
            names = [f"arg_{i}" for i in range(self.args_count)] + list(self.kwarg_names)
        self.names = tuple(names)
        leaves = all(child.is_leaf() for part in (spec.child(0), spec.child(1)) for child in part.children())
        #: the Python values the program fixed at export, by flat position: a call passes them unchanged
        self.fixed = fixed_inputs(program)
        #: the number of positional arguments a call may pass as the flat inputs themselves (-1: none)
        self.flat_positional = len(self.names) if leaves and self.names[self.args_count:] == self.kwarg_names \
            and not self.fixed else -1

    def bind(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> list[Any]:
        if len(args) > len(self.names):
            raise InputError(f"the program takes {len(self.names)} inputs ({', '.join(self.names)}), got "
                             f"{len(args)} positional arguments")
        values = dict(zip(self.names, args))
        for key, value in kwargs.items():
            if key not in self.names:
                raise InputError(f"unexpected input '{key}': the program takes {', '.join(self.names)}")
            if key in values:
                raise InputError(f"input '{key}' given twice (positionally and by keyword)")
            values[key] = value
        missing = [name for name in self.names if name not in values]
        if missing:
            raise InputError(f"missing input{'s' if len(missing) > 1 else ''} {', '.join(map(repr, missing))}: "
                             f"the program takes {', '.join(self.names)}")
        tree = (tuple(values[name] for name in self.names[:self.args_count]),
                {name: values[name] for name in self.kwarg_names})
        leaves, spec = pytree.tree_flatten(tree)
        if spec != self.in_spec:
            raise InputError(f"the inputs' structure {_structure(spec)} is not the exported program's "
                             f"{_structure(self.in_spec)}")
        if not self.fixed:
            return leaves
        for position, (name, value) in self.fixed.items():
            given = leaves[position]
            if type(given) is not type(value) or given != value:
                raise InputError(f"input '{name}': the program was exported with {name}={value!r} fixed, got "
                                 f"{given!r} (export again to use another value)")
        return [leaf for position, leaf in enumerate(leaves) if position not in self.fixed]


def _structure(spec: pytree.TreeSpec) -> str:
    return " ".join(str(spec).split())


def _picker(indices: list[int], count: int) -> Any:
    """``outputs -> [outputs[i] for i in indices]`` (of ``count`` outputs), at C speed."""
    if indices == list(range(count)):
        return lambda outputs: outputs
    if len(indices) == 1:
        only = indices[0]
        return lambda outputs: [outputs[only]]
    pick = itemgetter(*indices) if indices else (lambda outputs: ())
    return lambda outputs: list(pick(outputs))


def _returner(out_spec: pytree.TreeSpec | None) -> Any:
    """``flat user outputs -> what the program returns`` (its output spec), with the common shapes made cheap."""
    if out_spec is None:
        return lambda outputs: outputs
    if out_spec.is_leaf():
        return lambda outputs: outputs[0]
    if out_spec.type is tuple and all(child.is_leaf() for child in out_spec.children()):
        return tuple
    return lambda outputs: pytree.tree_unflatten(list(outputs), out_spec)


__all__ = ["CompiledProgram", "compile_program"]
