"""``torch.export`` programs (.pt2) -> neuroncc IR: the shared loader of ``neuroncc compile/run/inspect/demo``.

    load_program(path)                   the archive, read without unpickling (neuroncc.frontend.pt2)
    import_inference(program, name)      run_decompositions(our table) -> importer -> InferenceGraph
    trace_training(program, name, ...)   AOTAutograd joint export (aot_export_joint_with_descriptors) ->
                                         min-cut partition -> forward and backward graphs -> importer

Both paths decompose with the torch backend's table (:mod:`neuroncc.frontend.lowering.decompositions`) under the SDPA
backend the target wants (:func:`neuroncc.frontend.lowering.attention.attention_tracing`: ATen's flash attention as
one op for cpu/interp, the math backend for nki-sim), so an exported model lowers to the same IR as the same
model under ``torch.compile``.
Parameters, buffers and lifted constants stay graph *inputs* (fed from the program's state at run time), as
AOTAutograd lifts them: the compiled code and its cache key do not depend on the weights' values.
"""

from __future__ import annotations

import contextlib
import math
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.fx as fx
import torch.utils._pytree as pytree
from torch.export import ExportedProgram
from torch.export.graph_signature import ConstantArgument, InputKind, OutputKind, TensorArgument

from neuroncc.errors import DynamicShapeError, InputError, UnsupportedOpError
from neuroncc.frontend.compiled import CompiledGraph
from neuroncc.frontend.diagnostics import FLOAT64_WARNING, Float64Warning, uses_float64
from neuroncc.frontend.lowering.decompositions import REMOVED_DECOMPOSITIONS, decomposition_table
from neuroncc.frontend.importer import ImportedGraph, import_graph
from neuroncc.frontend.lowering.attention import attention_tracing
from neuroncc.frontend.pt2 import load_exported_program
from neuroncc.frontend.saved_facts import SavedFacts, forward_facts, with_saved_facts
from neuroncc.frontend.saved_layouts import report_output_strides, saved_activations, take_input_layouts
from neuroncc.driver.compile import DEFAULT_TARGET
from neuroncc.executors.executable import Executable

#: User inputs larger than this (all together) are refused before anything is allocated for them.
MAX_INPUT_BYTES = 4 << 30

#: Checks torch.export leaves in the graph (``x.to(dtype)`` asserts x's dtype, data-dependent sizes their
#: range). Static shapes and dtypes make them true by construction (inputs are checked before a run), and they
#: compute nothing, so they are dropped before import.
RUNTIME_ASSERTIONS = frozenset({
    torch.ops.aten._assert_tensor_metadata.default,
    torch.ops.aten._assert_scalar.default,
    torch.ops.aten.sym_constrain_range_for_size.default,
})

#: What feeds each kind of exported-program input.
STATE_KINDS = {InputKind.PARAMETER: "parameter", InputKind.BUFFER: "buffer",
               InputKind.CONSTANT_TENSOR: "constant"}


@dataclass(frozen=True, slots=True)
class DynamicDim:
    """A size of an exported program's input that ``torch.export.Dim`` left symbolic."""

    dim: int
    symbol: str  # torch.export's name for it (``s31``); dims sharing a symbol are equal
    low: int
    high: int | None  # None: unbounded
    direct: bool  # the size is the symbol itself (not a derived size such as 2 * s31)

    def describe(self) -> str:
        bounds = f"{self.low}..{self.high if self.high is not None else 'inf'}"
        return f"dim {self.dim} is dynamic ({self.symbol}, {bounds})" if self.direct else \
            f"dim {self.dim} is dynamic ({self.symbol})"

    def admits(self, size: int) -> bool:
        return not self.direct or (self.low <= size and (self.high is None or size <= self.high))


@dataclass(frozen=True, slots=True)
class ProgramInput:
    """One input of an exported graph: a user input or a piece of the program's state, with its type."""

    name: str  # the placeholder's name in the graph
    kind: str  # "input" (given by the caller), "parameter", "buffer" or "constant"
    target: str  # the user input's name, or the state's fully qualified name
    shape: tuple[int, ...]  # a dynamic dim's size is the exported example's (see ``dynamic``)
    dtype: torch.dtype
    dynamic: tuple[DynamicDim, ...] = ()  # the sizes torch.export.Dim left symbolic

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * torch.empty((), dtype=self.dtype).element_size()

    def describe(self) -> str:
        sizes = [str(size) for size in self.shape]
        for dim in self.dynamic:
            sizes[dim.dim] = dim.symbol
        return f"{str(self.dtype).removeprefix('torch.')}[{', '.join(sizes)}]"

    def fits(self, shape: Sequence[int]) -> bool:
        """Whether a tensor of ``shape`` may be this input (dynamic dims within their bounds)."""
        dynamic = {dim.dim: dim for dim in self.dynamic}
        return len(shape) == len(self.shape) and all(
            dynamic[d].admits(size) if d in dynamic else size == want
            for d, (size, want) in enumerate(zip(shape, self.shape)))


@dataclass(frozen=True)
class InferenceGraph:
    """An exported program's (decomposed) inference graph imported to IR, and what calling it needs (it is run by
    :class:`~neuroncc.frontend.serving.CompiledProgram`, which holds the state)."""

    program: ExportedProgram  # the decomposed program (its state is the weights to run with)
    imported: ImportedGraph
    inputs: tuple[ProgramInput, ...]  # in graph placeholder order
    output_names: tuple[str, ...]  # the user outputs, in order
    buffer_mutations: tuple[tuple[int, str], ...]  # (graph output index, buffer fqn) written back per call
    #: (graph output index, position among the user inputs) of each input the program updates in place: the new
    #: value is copied into the caller's tensor after each call, as eager PyTorch leaves it
    input_mutations: tuple[tuple[int, int], ...] = ()

    @property
    def user_inputs(self) -> tuple[ProgramInput, ...]:
        return tuple(i for i in self.inputs if i.kind == "input")

    def initial_state(self) -> dict[str, torch.Tensor]:
        """Fresh copies of the parameters, buffers and constants the graph reads, by fqn."""
        # Non-persistent buffers live with the constants; everything else in the state dict.
        tensors = {**self.program.constants, **self.program.state_dict}
        return {spec.target: tensors[spec.target].detach().clone() for spec in self.inputs if spec.kind != "input"}


@dataclass(frozen=True)
class TrainingGraphs:
    """The forward and backward graphs of an exported program, and the differentiable step running them.

    ``step(*parameters, *buffers, *user_inputs)`` returns the program's outputs; ``backward()`` on them runs
    the compiled backward graph. ``parameter_names``/``buffer_names`` give the order of the leading arguments;
    ``module`` is the program as an eager module (its parameters and buffers are the initial values).
    """

    module: torch.nn.Module
    forward: ImportedGraph
    backward: ImportedGraph
    step: Callable[..., Any]
    parameter_names: tuple[str, ...]
    buffer_names: tuple[str, ...]


def load_program(path: str | Path, name: str | None = None) -> ExportedProgram:
    """A ``torch.export.save`` archive (its program ``name`` when it holds several), loaded without
    unpickling; one :class:`InputError` if it is unusable."""
    return load_exported_program(path, name)


def export_decompositions() -> Any:
    """``ExportedProgram.run_decompositions``'s table: torch.export's defaults (every CompositeImplicit op,
    which AOTAutograd also traces through) plus the torch backend's table, minus what the backend removes."""
    table = torch.export.default_decompositions()
    table.update(decomposition_table())
    for op in REMOVED_DECOMPOSITIONS:
        table.pop(op, None)
    return table


@contextlib.contextmanager
def torch_internal_warnings_hidden() -> Iterator[None]:
    """torch's internal deprecation noise (pytree FutureWarnings raised inside torch itself, or by ``copyreg``
    when a program's module is deep-copied) kept off the user's terminal: nothing the user can act on."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=FutureWarning, module=r"(torch|copyreg)(\.|$)")
        warnings.filterwarnings("ignore", category=DeprecationWarning, module=r"torch(\.|$)")
        yield


@contextlib.contextmanager
def _tracing(target: str | None) -> Iterator[None]:
    """The context both traces run in: the target's SDPA backend (``None``: eager's own choice), torch's
    internal warnings hidden."""
    attention = attention_tracing(target) if target is not None else contextlib.nullcontext()
    with attention, torch_internal_warnings_hidden():
        yield


def import_inference(program: ExportedProgram, name: str, target: str = DEFAULT_TARGET) -> InferenceGraph:
    """Decompose ``program`` with neuroncc's table and import its graph as the IR function ``name`` for
    ``target``: it decides how attention is traced, and on cpu bf16 tensors cross as their bits (see
    :func:`~neuroncc.frontend.importer.import_graph`'s ``bf16_bits``), so ``neuroncc compile/run`` and
    ``neuroncc.compile_program`` import (and cache) one program as the same function."""
    _refuse_unsupported_signature(program)
    with _tracing(target):
        try:
            decomposed = program.run_decompositions(export_decompositions())
        except (AssertionError, RuntimeError) as exc:
            if "_assert_tensor_metadata" not in str(exc):
                raise
            raise UnsupportedOpError(_inconsistent_metadata(exc)) from None
    signature = decomposed.graph_signature
    inputs = program_inputs(decomposed)
    if uses_float64(decomposed.graph_module, ()):  # as the torch backend warns, once per compiled graph
        warnings.warn(f"program '{name}': {FLOAT64_WARNING}", Float64Warning, stacklevel=2)
    _drop_runtime_assertions(decomposed.graph_module)
    _drop_fixed_placeholders(decomposed)
    # the cpu target's kernels read bf16 tensors' bits; the other targets take float32 copies (as in aten_compiler)
    imported = import_graph(decomposed.graph_module, name, bf16_bits=target == "cpu")
    output_names, mutations, input_mutations = [], [], []
    user_position = {spec.name: position for position, spec in enumerate(i for i in inputs if i.kind == "input")}
    for index, spec in enumerate(signature.output_specs):
        if spec.kind == OutputKind.BUFFER_MUTATION:
            mutations.append((index, spec.target))
        elif spec.kind == OutputKind.USER_OUTPUT:
            output_names.append(getattr(spec.arg, "name", f"output{len(output_names)}"))
        elif spec.kind == OutputKind.USER_INPUT_MUTATION and spec.target in user_position:
            input_mutations.append((index, user_position[spec.target]))
        else:
            raise UnsupportedOpError(f"exported program output '{getattr(spec.arg, 'name', spec.arg)}' is a "
                                     f"{spec.kind.name.lower()}; neuroncc runs programs whose outputs are user "
                                     "outputs, buffer updates and in-place updates of inputs")
    return InferenceGraph(decomposed, imported, inputs, tuple(output_names), tuple(mutations),
                          tuple(input_mutations))


@contextlib.contextmanager
def _onednn_off() -> Iterator[None]:
    """``torch.backends.mkldnn.flags(enabled=False)`` without its other flags (setting them printed a TF32
    warning about Intel GPUs on every ``--train``)."""
    enabled = torch._C._get_mkldnn_enabled()
    torch._C._set_mkldnn_enabled(False)
    try:
        yield
    finally:
        torch._C._set_mkldnn_enabled(enabled)


def _inconsistent_metadata(exc: Exception) -> str:
    """Why a program whose recorded dtype checks fail on its own values cannot be imported."""
    first_line = str(exc).strip().splitlines()[0]
    return (f"exported program contradicts itself: a dtype check torch.export recorded fails on the program's "
            f"own values ({first_line}); torch's own module of it fails the same way. A strict=True export of a "
            "torch.autocast region inside forward records such checks: export it with strict=False (the default)")


def trace_training(program: ExportedProgram, name: str,
                   compile_imported: Callable[[str, ImportedGraph], Executable],
                   target: str = DEFAULT_TARGET) -> TrainingGraphs:
    """Export the joint forward+backward graph of ``program`` and partition it (min-cut, as the backend does).

    ``compile_imported(kind, imported)`` ("forward"/"backward", the imported graph named ``<name>_<kind>``)
    returns the executable each graph runs with. The returned step must be called after this function
    returns: AOTAutograd's export context (an ExitStack) is closed by then, as its API requires. ``target``
    decides how attention is traced (see :func:`neuroncc.frontend.lowering.attention.attention_tracing`).
    """
    from torch._functorch.aot_autograd import (
        aot_compile_joint_with_descriptors,
        aot_export_joint_with_descriptors,
    )

    from neuroncc.frontend.joint_cse import partition_joint

    _refuse_unsupported_signature(program)
    # Python values fixed at export would be traced as graph inputs: the joint graph takes the tensors alone.
    module = flat_module(program) if fixed_inputs(program) else program.module()
    _drop_self_copies(module._inner if isinstance(module, FlatModule) else module)
    if not any(p.requires_grad for p in module.parameters()):
        raise InputError(f"program '{name}' has nothing to train: it has no parameters that require grad "
                         "(so no backward graph)")
    user_inputs = [i for i in program_inputs(program) if i.kind == "input"]
    check_input_sizes(user_inputs, name)
    # Only their types matter: AOTAutograd traces with fake tensors.
    example_inputs = [torch.zeros(i.shape, dtype=i.dtype) for i in user_inputs]
    args, kwargs = (example_inputs, {}) if isinstance(module, FlatModule) else \
        unflatten_user_inputs(program, list(example_inputs))
    imported: dict[str, ImportedGraph] = {}
    facts: dict[str, SavedFacts] = {}  # what the forward's ops say about its saved activations

    def compiler(kind: str) -> Callable[[fx.GraphModule, Sequence[Any]], CompiledGraph]:
        def compile_one(gm: fx.GraphModule, example: Sequence[Any]) -> CompiledGraph:
            _drop_runtime_assertions(gm)
            if kind == "backward":
                take_input_layouts(gm, example)
            saved = saved_activations(gm) if kind == "forward" else frozenset()
            graph = import_graph(gm, f"{name}_{kind}")
            if kind == "forward":
                facts["forward"] = forward_facts(gm, graph)
            elif "forward" in facts:
                graph = with_saved_facts(graph, gm, facts["forward"])
            imported[kind] = graph
            compiled = CompiledGraph(graph, compile_imported(kind, graph), saved, source=gm)
            report_output_strides(compiled, saved)
            return compiled
        return compile_one

    # oneDNN off while tracing: PyTorch's aten.lstm decomposition otherwise takes its oneDNN layer op
    # (mkldnn_rnn_layer, and mkldnn_rnn_layer_backward as its derivative) for CPU float32/bf16 inputs that do
    # not require grad, weights that do included; off, it is the LSTM's own math (linear + cells), as on devices
    with _tracing(target), _onednn_off(), contextlib.ExitStack() as stack:
        joint = aot_export_joint_with_descriptors(stack, module, tuple(args), kwargs,
                                                  decompositions=decomposition_table())
        step = aot_compile_joint_with_descriptors(joint, partition_fn=partition_joint,
                                                  fw_compiler=compiler("forward"),
                                                  bw_compiler=compiler("backward"))
    if "backward" not in imported:
        raise InputError(f"program '{name}' has no backward graph: none of its outputs depends on a parameter")
    parameter_names = tuple(n for n, _ in module.named_parameters())
    buffer_names = tuple(n for n, _ in module.named_buffers())
    return TrainingGraphs(module, imported["forward"], imported["backward"], step, parameter_names, buffer_names)


def _drop_self_copies(gm: fx.GraphModule) -> None:
    """Erase the ``copy_(buffer, new)`` torch's module of an exported graph ends with where ``new`` is the buffer
    itself, updated by an in-place op (``count.add_(1)``): a no-op that bumps the buffer's version after autograd
    saved it, so that the backward of anything reading the updated buffer (a counter in a product) raised
    "modified by an inplace operation" (the exported module's own backward does too)."""
    def self_copy(node: fx.Node) -> bool:
        if node.op != "call_function" or node.target is not torch.ops.aten.copy_.default or node.users:
            return False
        target, source = node.args[0], node.args[1]
        if not (isinstance(source, fx.Node) and isinstance(source.target, torch._ops.OpOverload) and source.args
                and source.args[0] is target):
            return False
        written = source.target._schema.arguments[0].alias_info  # the op writes its first operand: returns it
        return written is not None and written.is_write

    _erase_unused(gm, self_copy)


def check_input_sizes(inputs: Sequence[ProgramInput], where: str, limit: int = MAX_INPUT_BYTES) -> None:
    """Refuse inputs whose declared sizes add up to more than ``limit`` bytes (an absurd or hostile program)."""
    total = 0
    for spec in inputs:
        total += spec.nbytes
        if total > limit:
            raise InputError(f"{where}: input '{spec.target}' has an absurd size {spec.describe()} (the inputs need "
                             f"over {limit >> 30} GiB; neuroncc refuses to allocate them)")


def call_eager(program: ExportedProgram, user_inputs: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """Run the (undecomposed) program with eager PyTorch; returns its flattened user outputs."""
    return call_eager_with_state(program, user_inputs).outputs


@dataclass(frozen=True)
class EagerRun:
    """One call of a program's eager module: its flat user outputs, its buffers after the call (by fqn) and
    the flat user inputs it ran on after the call (an input the program updates in place holds its new value)."""

    outputs: list[torch.Tensor]
    buffers: dict[str, torch.Tensor]
    inputs: list[torch.Tensor]


def call_eager_with_state(program: ExportedProgram, user_inputs: Sequence[torch.Tensor],
                          float64: bool = False) -> EagerRun:
    """Run the (undecomposed) program's eager module once, from the program's state, on ``user_inputs`` (which
    it updates in place if the program does): the state torch's exported program leaves behind.

    ``float64``: the floating parameters, buffers and inputs in float64 (copies: the program's own tensors and
    ``user_inputs`` are left as they are), a reference near the exact answer for judging a float16/bfloat16
    program's results (its eager run rounds as much as ours)."""
    module = program.module()
    state = {name: tensor.detach().double() if float64 and tensor.is_floating_point() else tensor
             for name, tensor in [*module.named_parameters(), *module.named_buffers()]}
    buffers = {name: state[name] for name, _ in module.named_buffers()}
    if float64:
        user_inputs = [t.double() if isinstance(t, torch.Tensor) and t.is_floating_point() else t
                       for t in user_inputs]
    args, kwargs = unflatten_user_inputs(program, list(user_inputs))
    with _tracing(None):  # functional_call swaps the float64 copies in: the buffers' updates land in them
        result = torch.func.functional_call(module, state, args, kwargs) if float64 else module(*args, **kwargs)
    return EagerRun([leaf for leaf in pytree.tree_leaves(result)], buffers, list(user_inputs))


def call_eager_float64(program: ExportedProgram, user_inputs: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """The program's user outputs computed in float64 (see :func:`call_eager_with_state`)."""
    return call_eager_with_state(program, user_inputs, float64=True).outputs


def unflatten_user_inputs(program: ExportedProgram, flat: list[Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The (args, kwargs) a call of ``program``'s module takes, from its flat user tensors (in_spec order; the
    Python values the program fixed at export, :func:`fixed_inputs`, are put in their places)."""
    flat = list(flat)
    for position, (_, value) in sorted(fixed_inputs(program).items()):
        flat.insert(position, value)
    spec = program.call_spec.in_spec
    if spec is None:
        return tuple(flat), {}
    args, kwargs = pytree.tree_unflatten(flat, spec)
    return tuple(args), dict(kwargs)


class FlatModule(torch.nn.Module):
    """An exported program's eager module called with its flat user tensors alone (positionally, in the program's
    order): the pytree structure and the Python values fixed at export are filled in. It holds the module's
    submodules, parameters and buffers under their own names (no prefix), so its state dict is the program's."""

    def __init__(self, program: ExportedProgram):
        super().__init__()
        inner = program.module()
        for name, child in inner.named_children():
            self.add_module(name, child)
        for name, parameter in inner.named_parameters(recurse=False):
            self.register_parameter(name, parameter)
        for name, buffer in inner.named_buffers(recurse=False):
            self.register_buffer(name, buffer)
        object.__setattr__(self, "_program", program)  # plain attributes: not submodules
        object.__setattr__(self, "_inner", inner)
        # the checks torch.export leaves (``x.to(dtype)`` asserts x's dtype) compute nothing and fail on the
        # float64 copy evaluate runs (and torch.compile reported them as fallbacks): dropped, as for the import
        _drop_runtime_assertions(inner)

    def forward(self, *tensors: torch.Tensor) -> Any:
        args, kwargs = unflatten_user_inputs(self._program, list(tensors))
        return self._inner(*args, **kwargs)

    def _apply(self, fn: Callable[..., Any], recurse: bool = True) -> FlatModule:
        """``.double()``, ``.to()``, ...: the module's own parameters and buffers are replaced by new tensors;
        the inner module (which the forward runs) is given them too, else it would read the old ones (evaluate's
        float64 reference read float32 buffers a program updates: ``index_copy_`` refused the mix)."""
        super()._apply(fn, recurse)
        self._inner._parameters.update(self._parameters)
        self._inner._buffers.update(self._buffers)
        return self


def flat_module(program: ExportedProgram) -> FlatModule:
    """``program.module()`` called with the flat user tensors ``neuroncc run``/``evaluate`` draw or read."""
    return FlatModule(program)


#: Python values an exported program may take as inputs fixed at export (``use_cache=False``, ``dim=1``).
FIXED_VALUE_TYPES = (type(None), bool, int, float, str)


def fixed_inputs(program: ExportedProgram) -> dict[int, tuple[str, Any]]:
    """The user inputs ``program`` fixed at export (a Python value passed to ``torch.export.export``, such as a
    Hugging Face model's ``use_cache=False``), by position among its flat user inputs: (name, value). A call
    must pass the same value (the exported module checks it), and the compiled graph does not read it."""
    fixed, position = {}, 0
    for spec in program.graph_signature.input_specs:
        if spec.kind != InputKind.USER_INPUT:
            continue
        if isinstance(spec.arg, ConstantArgument):
            fixed[position] = (spec.arg.name, spec.arg.value)
        position += 1
    return fixed


def _refuse_unsupported_signature(program: ExportedProgram) -> None:
    for spec in program.graph_signature.input_specs:
        fixed = isinstance(spec.arg, ConstantArgument) and isinstance(spec.arg.value, FIXED_VALUE_TYPES)
        if spec.kind == InputKind.USER_INPUT and not isinstance(spec.arg, TensorArgument) and not fixed:
            what = (f"a Python {type(spec.arg.value).__name__} fixed at export" if isinstance(spec.arg, ConstantArgument)
                    else f"not a tensor but a dynamic Python number ({type(spec.arg).__name__})")
            raise UnsupportedOpError(f"exported program input '{getattr(spec.arg, 'name', spec.arg)}' is {what}; "
                                     "neuroncc compiles programs whose inputs are tensors or Python values (None, "
                                     "bool, int, float, str) fixed at export: pass it as a tensor, or export it "
                                     "without a dynamic shape")
        if spec.kind not in STATE_KINDS and spec.kind != InputKind.USER_INPUT:
            raise UnsupportedOpError(f"exported program input '{spec.arg.name}' is a "
                                     f"{spec.kind.name.lower()}; neuroncc supports tensor inputs, parameters, "
                                     "buffers and constant tensors")


def _drop_fixed_placeholders(program: ExportedProgram) -> None:
    """Erase the placeholders of the inputs fixed at export (their values are baked into the graph, which
    never reads them), so the graph's placeholders are its tensors."""
    fixed = {spec.arg.name for spec in program.graph_signature.input_specs
             if spec.kind == InputKind.USER_INPUT and isinstance(spec.arg, ConstantArgument)}
    _erase_unused(program.graph_module, lambda node: node.op == "placeholder" and node.name in fixed)


def _drop_runtime_assertions(gm: fx.GraphModule) -> None:
    _erase_unused(gm, lambda node: node.op == "call_function" and node.target in RUNTIME_ASSERTIONS)


def _erase_unused(gm: fx.GraphModule, selected: Callable[[fx.Node], bool]) -> None:
    """Erase the nodes ``selected`` picks that nothing reads; recompile the module if any went."""
    erased = False
    for node in list(gm.graph.nodes):
        if selected(node) and not node.users:
            gm.graph.erase_node(node)
            erased = True
    if erased:
        gm.recompile()


def program_inputs(program: ExportedProgram, *, dynamic: bool = False) -> tuple[ProgramInput, ...]:
    """Every input of ``program``'s graph (user inputs and state), in placeholder order, typed from the graph's
    metadata. Nothing is allocated: a program may declare absurd sizes, which callers check first. A dynamic size
    (``torch.export.Dim``) raises :class:`DynamicShapeError` naming it, unless ``dynamic``: then the input carries
    it (:class:`DynamicDim`) and the exported example's size (see :func:`specialize`)."""
    _refuse_unsupported_signature(program)
    placeholders = {n.name: n for n in program.graph_module.graph.nodes if n.op == "placeholder"}
    inputs = tuple(_program_input(program, spec, placeholders[spec.arg.name])
                   for spec in program.graph_signature.input_specs if not isinstance(spec.arg, ConstantArgument))
    if not dynamic:
        for spec in inputs:
            if spec.dynamic:
                dims = ", ".join(dim.describe() for dim in spec.dynamic)
                raise DynamicShapeError(
                    f"exported program input '{spec.target}' has dynamic sizes ({dims}); neuroncc compiles static "
                    "shapes: `neuroncc run` runs it at the sizes of --inputs X.npz (or of the exported example), "
                    "else export without dynamic_shapes")
    return inputs


def _program_input(program: ExportedProgram, spec: Any, node: fx.Node) -> ProgramInput:
    meta = node.meta.get("val")
    if not isinstance(meta, torch.Tensor):
        raise UnsupportedOpError(f"exported program input '{node.name}' is not a tensor")
    kind = "input" if spec.kind == InputKind.USER_INPUT else STATE_KINDS[spec.kind]
    target = spec.arg.name if kind == "input" else spec.target
    shape, dynamic = [], []
    for d, size in enumerate(meta.shape):
        if isinstance(size, int):
            shape.append(size)
            continue
        dim = _dynamic_dim(program, d, size)
        hint = size.node.hint if isinstance(size.node.hint, int) else None
        if hint is None:
            raise DynamicShapeError(f"exported program input '{target}' {dim.describe()} and the program keeps no "
                                    "example size for it; neuroncc compiles static shapes: export without "
                                    "dynamic_shapes")
        shape.append(hint)
        dynamic.append(dim)
    return ProgramInput(node.name, kind, target, tuple(shape), meta.dtype, tuple(dynamic))


def _dynamic_dim(program: ExportedProgram, d: int, size: torch.SymInt) -> DynamicDim:
    expr = size.node.expr
    bounds = program.range_constraints.get(expr) if expr.is_Symbol else None
    if bounds is None:
        return DynamicDim(d, str(expr), 0, None, direct=False)
    low, high = bounds.lower, bounds.upper  # sympy integers, or torch's int_oo for an unbounded dim
    return DynamicDim(d, str(expr), int(low) if low.is_Integer else 0, int(high) if high.is_Integer else None,
                      direct=True)


def specialize(program: ExportedProgram, user_inputs: Sequence[torch.Tensor], where: str) -> ExportedProgram:
    """``program`` with its dynamic sizes (``torch.export.Dim``) fixed to those of ``user_inputs`` (flat, in the
    program's order): ``program`` itself when it has none, else the program re-exported at these sizes (every
    size static, as neuroncc compiles). The sizes are checked against the dims' bounds and against each other
    first (dims sharing a symbol must be equal); a mismatch is an :class:`InputError` naming the input and dim."""
    expected = [spec for spec in program_inputs(program, dynamic=True) if spec.kind == "input"]
    if not any(spec.dynamic for spec in expected):
        return program
    seen: dict[str, tuple[str, int, int]] = {}  # symbol -> (input, dim, size) where it was first met
    for spec, tensor in zip(expected, user_inputs, strict=True):
        for dim in spec.dynamic:
            size = int(tensor.shape[dim.dim])
            if not dim.admits(size):
                raise InputError(f"{where}: input '{spec.target}' has size {size} in dim {dim.dim}, outside the "
                                 f"program's bounds ({dim.describe()})")
            first = seen.setdefault(dim.symbol, (spec.target, dim.dim, size)) if dim.direct else None
            if first is not None and first[2] != size:
                raise InputError(f"{where}: input '{spec.target}' has size {size} in dim {dim.dim}, but dim "
                                 f"{first[1]} of input '{first[0]}' is {first[2]} and the program exported both "
                                 f"as one dynamic size ({dim.symbol})")
    args, kwargs = unflatten_user_inputs(program, list(user_inputs))
    try:
        with _tracing(None):
            return torch.export.export(program.module(), args, kwargs)
    except Exception as exc:  # torch's checks of the inputs against the program's constraints, and tracing
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise InputError(f"{where}: cannot fix the program's dynamic sizes to these inputs' "
                         f"({type(exc).__name__}: {first_line})") from None
