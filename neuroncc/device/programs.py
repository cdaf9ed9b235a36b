"""One op call as an IR program: the one-op FX graph, imported through the front end, floats lifted.

    call (op, dtypes, shapes, strides, non-float arguments)
      -> meta run of the op (the user's errors surface here, as eager raises them)
      -> FX graph: built directly when every (element) op has a lowering, else traced with make_fx through
         the decomposition table and functionalization (in-place and out= ops become a functional op plus
         copies into the written arguments)
      -> neuroncc IR (frontend.importer) -> Python floats lifted into parameters

Lifting: the graph is built twice, with two different sentinel values in the place of each Python float
(exactly representable in float32, unlikely anywhere else). Where the imported IR holds a sentinel as a 0-d
``full`` constant, that constant becomes a parameter; if the two lifted programs print the same, the kernel
provably does not depend on the floats' values (no lowering derived another constant from one), and it is
compiled once for every value. Otherwise the program is built again with the call's real floats, and the
kernel is keyed by them. The first build's floats are stand-ins (stand_ins.py) that record every Python
branch on them (``if beta == 0``): the kernel serves only the values that branch the same way
(``Program.guards``); the others are built with their real floats. A constant the builds derived from the
stand-ins (``0.5 * beta``: stand_ins.py's expressions) is lifted too, as a parameter whose value each call
computes from its floats (``Program.derived``), as the decomposition computed it.
"""

from __future__ import annotations

import dataclasses
import functools
import operator
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx as fx
from torch._decomp import decomposition_table as torch_decompositions
from torch.utils._pytree import tree_flatten, tree_leaves

from neuroncc.device import build_lock, layouts, op_forms
from neuroncc.device.stand_ins import Expression, Guards, StandIn, evaluate, plain, stand_ins, watching, \
    watching_table
from neuroncc.device.autocast import ALL_AUTOCAST_KEYS
from neuroncc.device.op_forms import OpForm
from neuroncc.device.signature import rebuild
from neuroncc.errors import NeuronccError, TypeInferenceError, UnsupportedOpError
from neuroncc.frontend.lowering.decompositions import decomposition_table
from neuroncc.frontend.importer import LOWERINGS, GraphOutput, import_graph
from neuroncc.frontend.lowering.context import LoweringBug
from neuroncc.frontend.tracing import make_fx_here as _make_fx_here
from neuroncc.ir import Attrs, Category, Function, Op, TensorType, Trait, Value, print_function

aten = torch.ops.aten


def make_fx_here(fn: Any, table: Any) -> Any:
    """``frontend.tracing.make_fx_here``, after checking this build may trace (``build_lock.py``: a light build
    gives way to one under TorchDynamo's compile lock)."""
    build_lock.before_tracing()
    return _make_fx_here(fn, table)


class CannotCompile(Exception):
    """neuroncc cannot compile this call; ``reason`` says why (the device runs it on CPU instead).
    ``refused``: the op's meta kernel raised, which is most often the user's error (CPU's kernel raises it
    as eager words it)."""

    def __init__(self, reason: str, refused: bool = False):
        super().__init__(reason)
        self.reason = reason
        self.refused = refused


@dataclass(frozen=True)
class Program:
    """An op call's IR program and how a call's values bind to it.

    ``inputs[i]`` feeds IR parameter ``i``: a call tensor index (>= 0) or ``-1 - k`` for lifted float ``k``.
    ``outputs`` are the new results (flattened; ``result_tree`` rebuilds the op's return value from them).
    ``writes`` pairs a call tensor index with the IR output holding its new value (in-place and out= ops).
    ``lifted`` says the floats are parameters (else the program holds their values); ``guards``, which values
    of them the program serves (the Python branches on them its build took); ``derived``, the values of the
    floats ``n, n + 1, ...`` past the call's ``n`` (stand_ins.Expression of its floats: a constant the build
    derived from them, ``0.5 * beta``). ``function`` is None
    for a program found through the signature index (signature_index.py): its kernel was compiled before,
    and a call needs only the binding.
    """

    function: Function | None
    inputs: tuple[int, ...]
    outputs: tuple[GraphOutput, ...]
    result_tree: Any
    writes: tuple[tuple[int, int], ...]
    lifted: bool
    guards: Guards = Guards()
    derived: tuple[Expression, ...] = ()


class _FloatSlot:
    """Stands for the ``index``-th float of a call while the graph's arguments are assembled."""

    __slots__ = ("index",)

    def __init__(self, index: int):
        self.index = index


def sentinels(count: int, which: int) -> list[float]:
    """Float32-exact values, distinct per position: 1.x for the first build, 3.x for the second, spaced
    differently, so that what a build derives from two floats (their difference: linspace's step, their ratio)
    differs between the builds as the floats do and is not taken for a value-free constant (with one spacing,
    ``linspace(0.0, 1.5, 7)`` on the device kept the sentinels' step, 3e-7, for every call, session 45)."""
    if which == 0:
        return [1.0 + (2 * k + 1) * 2.0 ** -20 for k in range(count)]
    return [3.0 + (2 * k + 1) * 5 * 2.0 ** -20 for k in range(count)]


def build_program(form: OpForm, args: tuple[Any, ...], kwargs: dict[str, Any], tensors: list[torch.Tensor],
                  floats: list[float], lift: bool = True) -> Program:
    """The program for a call (raises CannotCompile, or the user's error from the meta run). ``lift=False``
    builds it with the call's floats as constants."""
    metas, slot_args, slot_kwargs = _meta_call(args, kwargs, tensors, floats)
    meta_result = _run_on_meta(form.op, slot_args, slot_kwargs, floats)
    result_tree = tree_flatten(meta_result)[1]
    # the results' strides: eager's on CPU (memory formats propagate as there), not the program's last node's
    results = layouts.new_result_layouts(form, layouts.eager_result(form.op, slot_args, slot_kwargs,
                                                                    lambda v: _concrete(v, floats), meta_result))
    strides = [None if result is None else result[1] for result in results]
    # over the tensors' bytes in memory order where the op allows it (a channels_last ReLU: flat buffers)
    shapes = layouts.memory_order_shapes(form, slot_args, slot_kwargs, metas, strides)
    if shapes is not None:
        program = _build(form, *_meta_call(args, kwargs, tensors, floats, shapes), floats, lift, result_tree,
                         strides, meta_result)
        logical = {tuple(t.shape): shape for t, (shape, _) in zip(tensors, shapes) if tuple(t.shape) != shape}
        outputs = layouts.in_memory_order(program.outputs, results, logical)
        if outputs is not None:
            return dataclasses.replace(program, outputs=outputs)
    return _build(form, metas, slot_args, slot_kwargs, floats, lift, result_tree, strides, meta_result)


def _build(form: OpForm, metas: list[torch.Tensor], slot_args: list[Any], slot_kwargs: dict[str, Any],
           floats: list[float], lift: bool, result_tree: Any, strides: list[tuple[int, ...] | None],
           meta_result: Any) -> Program:
    """build_program's program over ``metas`` (the call's tensors, or their bytes in memory order)."""
    if form.writes:
        direct = form.functional is not None and all(r is not None for r in form.returns)
    else:
        direct = form.functional is not None
    calls = []
    if direct:
        calls = _element_calls(form, slot_args, slot_kwargs, floats)
        direct = all(op in LOWERINGS for op, _, _, _ in calls)

    def build(values: list[float]) -> fx.GraphModule | DirectGraph:
        if direct:
            return _direct_graph(form, metas, slot_args, slot_kwargs, calls, values)
        return _traced_graph(form, metas, slot_args, slot_kwargs, values)

    if floats and lift:
        lifted = _lifted(build, len(floats), result_tree, strides, real=floats, derive=True)
        if lifted is not None:
            return _same_dtypes(form, lifted, meta_result)
    return _same_dtypes(form, _program(build(floats), result_tree, strides), meta_result)


#: Ops whose meta kernel gives float32 statistics for a bf16/f16 input with weights of its dtype where CPU's
#: kernel gives the input's dtype (native_batch_norm's save_mean/save_invstd, native_layer_norm's mean/rstd:
#: every such BatchNorm training step and LayerNorm ran on CPU, with a DeviceFallbackWarning).
_CPU_KEEPS_INPUT_DTYPE = frozenset({aten.native_batch_norm.default, aten.native_layer_norm.default})


def _same_dtypes(form: OpForm, program: Program, meta_result: Any) -> Program:
    """``program``, if its results have the op's dtypes. A decomposition that promotes where the op does not
    (an integer avg_pool's true division) would hand the user a float tensor: that call runs on CPU."""
    if form.writes:  # results written into the call's tensors take their dtypes
        return program
    for output, meta in zip(program.outputs, tree_flatten(meta_result)[0]):
        spec = getattr(output, "spec", None)
        if form.op in _CPU_KEEPS_INPUT_DTYPE and isinstance(meta, torch.Tensor) and meta.dtype is torch.float32:
            continue
        if spec is not None and isinstance(meta, torch.Tensor) and spec.dtype != meta.dtype:
            raise CannotCompile(f"its decomposition computes {spec.dtype} where the op returns {meta.dtype}")
    return program


def out_layouts(form: OpForm, args: tuple[Any, ...], kwargs: dict[str, Any], tensors: list[torch.Tensor],
                floats: list[float]) -> list[tuple[torch.Size, tuple[int, ...]] | None]:
    """The shapes and strides the op gives its ``out=`` tensors (it resizes them when their shapes differ, as
    eager does): run on meta tensors, whose out tensors it resizes. A resized tensor is laid out as the op's
    functional result on CPU (TensorIterator's rule: ``abs`` of a channels_last tensor, which reaches the device
    as ``abs.out`` into an empty tensor, is channels_last; the meta kernel resizes contiguously)."""
    _, slot_args, slot_kwargs = _meta_call(args, kwargs, tensors, floats)
    _run_on_meta(form.op, slot_args, slot_kwargs, floats)
    functional = _functional_result(form, slot_args, slot_kwargs, floats)
    shapes = []
    for position, name in enumerate(form.out_arguments):
        value = op_forms.argument(form.op, name, slot_args, slot_kwargs)
        if not isinstance(value, torch.Tensor):
            shapes.append(None)
            continue
        like = functional[position] if position < len(functional) else None
        strides = like.stride() if isinstance(like, torch.Tensor) and like.shape == value.shape else value.stride()
        shapes.append((value.shape, strides))
    return shapes


def _functional_result(form: OpForm, args: list[Any], kwargs: dict[str, Any], floats: list[float]) -> list[Any]:
    """The leaves of the op's functional form's result on CPU (meta tensors in CPU's layout; [] if none)."""
    if form.foreach or form.functional is None or form.functional is form.op:
        return []
    functional_args, functional_kwargs = op_forms.without(form.op, form.out_arguments, args, kwargs)
    try:
        result = _run_on_meta(form.functional, functional_args, functional_kwargs, floats)
    except CannotCompile:
        return []
    return tree_leaves(layouts.eager_result(form.functional, functional_args, functional_kwargs,
                                            lambda v: _concrete(v, floats), result))


def _meta_call(args: tuple[Any, ...], kwargs: dict[str, Any], tensors: list[torch.Tensor], floats: list[float],
               shapes: list[layouts.Presented] | None = None) -> tuple[list[torch.Tensor], list[Any], dict[str, Any]]:
    """Meta tensors of the call's tensors (with ``shapes``: as presented there, layouts.memory_order_shapes),
    and its arguments over them with float slots."""
    if shapes is None:
        metas = [torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="meta") for t in tensors]
    else:
        metas = [torch.empty(shape, dtype=t.dtype, device="meta") if strides is None else
                 torch.empty_strided(shape, strides, dtype=t.dtype, device="meta")
                 for t, (shape, strides) in zip(tensors, shapes, strict=True)]
    slot_args, slot_kwargs = rebuild(args, kwargs, lambda i, t: metas[i], [_FloatSlot(k) for k in range(len(floats))])
    return metas, slot_args, slot_kwargs


_META = torch.device("meta")


def _run_on_meta(op: Any, args: list[Any], kwargs: dict[str, Any], floats: list[float]) -> Any:
    """Run ``op`` on meta tensors with the real floats: shape and dtype errors are the user's, raised as eager
    raises them; an op without a meta kernel, or whose output shape depends on values, cannot be compiled."""
    real_args, real_kwargs = _concrete(args, floats), {k: _concrete(v, floats) for k, v in kwargs.items()}
    try:
        return op(*real_args, **real_kwargs)
    except NotImplementedError as error:
        raise CannotCompile(f"it has no meta kernel ({str(error).splitlines()[0][:120]})") from error
    except (torch._subclasses.fake_tensor.DynamicOutputShapeException,
            torch._subclasses.fake_tensor.DataDependentOutputException) as error:
        raise CannotCompile("its output shape depends on the input values") from error
    except (RuntimeError, TypeError, ValueError, IndexError) as error:
        raise CannotCompile(f"its meta kernel refused these arguments ({str(error).splitlines()[0][:160]})",
                            refused=True) from error


def _concrete(value: Any, floats: list[float] | list[Any]) -> Any:
    """``value`` for a meta run: floats in their slots, a factory's device meta (not back onto the device)."""
    if isinstance(value, _FloatSlot):
        return floats[value.index]
    if isinstance(value, torch.device) and value.type != "cpu":
        return _META
    if isinstance(value, list):
        return [_concrete(item, floats) for item in value]
    return value


def _element_calls(form: OpForm, args: list[Any], kwargs: dict[str, Any],
                   floats: list[float]) -> list[tuple[Any, list[Any], dict[str, Any], Any]]:
    """(op, args with slots, kwargs with slots, meta result) per element call."""
    calls = []
    try:
        elements = op_forms.element_calls(form, args, kwargs, lambda v: _concrete(v, floats))
    except (RuntimeError, AttributeError, TypeError, IndexError) as error:
        raise CannotCompile(f"no element op for it ({str(error).splitlines()[0][:120]})") from error
    for op, call_args, call_kwargs in elements:
        try:
            result = op(*_concrete(call_args, floats), **{k: _concrete(v, floats) for k, v in call_kwargs.items()})
        except NotImplementedError as error:
            raise CannotCompile(f"no meta kernel for {op}") from error
        calls.append((op, call_args, call_kwargs, result))
    return calls


@dataclass(frozen=True)
class DirectGraph:
    """A directly built one-op graph as the importer takes it: it reads ``.graph`` (and a module's attributes
    for ``get_attr`` nodes, which a direct graph has none of). An ``fx.GraphModule`` would generate and compile
    the graph's Python code, which nothing runs: ~0.3 ms of each new signature's ~2 ms program build."""

    graph: fx.Graph


def _direct_graph(form: OpForm, metas: list[torch.Tensor], args: list[Any], kwargs: dict[str, Any],
                  calls: list[tuple[Any, list[Any], dict[str, Any], Any]], floats: list[float]) -> DirectGraph:
    graph = fx.Graph()
    nodes: dict[int, fx.Node] = {}
    for index, meta in enumerate(metas):
        placeholder = graph.placeholder(f"t{index}")
        placeholder.meta["val"] = meta
        nodes[id(meta)] = placeholder

    def arg(value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            return nodes[id(value)]
        if isinstance(value, _FloatSlot):
            return floats[value.index]
        if isinstance(value, list):
            return [arg(item) for item in value]
        return value

    leaves: list[fx.Node] = []
    for op, call_args, call_kwargs, result in calls:
        node = graph.call_function(op, tuple(arg(a) for a in call_args), {k: arg(v) for k, v in call_kwargs.items()})
        node.meta["val"] = result
        if isinstance(result, list | tuple):
            for position, item in enumerate(result):
                item_node = graph.call_function(operator.getitem, (node, position))
                item_node.meta["val"] = item
                leaves.append(item_node)
        else:
            leaves.append(node)
    if form.writes:
        for target, value in zip(op_forms.writes_results(form, args, kwargs), leaves, strict=True):
            graph.call_function(aten.copy_.default, (nodes[id(target)], value))
        leaves = []
    graph.output(tuple(leaves))
    return DirectGraph(graph)


def _traced_graph(form: OpForm, metas: list[torch.Tensor], args: list[Any], kwargs: dict[str, Any],
                  floats: list[float]) -> fx.GraphModule:
    """make_fx through the decomposition table, functionalized, on CPU fake tensors of the call's layout."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    mode = FakeTensorMode()
    with mode:
        fakes = [torch.empty_strided(m.shape, m.stride(), dtype=m.dtype) for m in metas]
    positions = {id(meta): index for index, meta in enumerate(metas)}

    def run(*inputs: torch.Tensor) -> Any:
        def value(item: Any) -> Any:
            if isinstance(item, torch.Tensor):
                return inputs[positions[id(item)]]
            if isinstance(item, _FloatSlot):
                return floats[item.index]
            if isinstance(item, list):
                return [value(x) for x in item]
            return item

        call_args, call_kwargs = [value(a) for a in args], {k: value(v) for k, v in kwargs.items()}
        if form.functional is None:
            result = form.op(*call_args, **call_kwargs)
            results = result if isinstance(result, tuple) else (result,)
            return tuple(r for r, written in zip(results, form.returns) if written is None)
        results = [op(*a, **k) for op, a, k in op_forms.element_calls(form, call_args, call_kwargs)]
        if not form.writes:
            return results if form.foreach else results[0]
        flat, _ = tree_flatten(results)
        for target, new in zip(op_forms.writes_results(form, call_args, call_kwargs), flat, strict=True):
            target.copy_(new)
        return ()

    table = _tracing_table(tuple(op for op in (form.op, form.functional) if op is not None))
    try:
        with _clean_dispatch_state(), mode:
            # traced where other threads do not see it (their torch.compile'd calls): frontend/tracing.py
            return make_fx_here(torch.func.functionalize(run, remove="mutations_and_views"), table)(*fakes)
    except CannotCompile:
        raise
    except Exception as error:  # a decomposition or functionalization that does not apply to this call
        raise CannotCompile(f"tracing it failed: {type(error).__name__}: {str(error).splitlines()[0][:200]}") \
            from error


_NO_KEYS = torch._C.DispatchKeySet(torch._C.DispatchKey.Undefined)  # the empty set


def _clean_dispatch_state() -> Any:
    """The dispatcher state a call is traced in: no key forced on, every autocast key off (autocast disabled).

    The device's kernels run inside the dispatcher, in the thread-local state of whatever called them. Inside
    a user's TorchDispatchMode (``FlopCounterMode``, a logging mode) Functionalize and the keys above Python
    are excluded, and functionalize() then fails (every op fell back to CPU). Inside ``torch.autocast("cpu")``
    AutocastCPU is on, and the trace on CPU fake tensors cast to bfloat16 inside the kernel: a kernel that the
    signature cache then reused outside the region (``addbmm`` on neuron tensors returned bfloat16)."""
    return torch._C._ForceDispatchKeyGuard(_NO_KEYS, ALL_AUTOCAST_KEYS)


@functools.lru_cache(maxsize=256)
def _tracing_table(ops: tuple[Any, ...]) -> dict[Any, Any]:
    """The front end's decomposition table, plus PyTorch's own decomposition of the call's op where that table
    has none. torch.compile sees the user's Python-level call, which often decomposes before it reaches such
    an op (``interpolate`` through the ``.vec`` overloads); the device is handed the op itself."""
    base = decomposition_table()
    extra = {op: torch_decompositions[op] for op in ops if op not in base and op in torch_decompositions}
    return watching_table({**base, **extra} if extra else base)


def _program(gm: fx.GraphModule | DirectGraph, result_tree: Any, strides: list[tuple[int, ...] | None],
             sentinel_values: list[float] | None = None, donate: bool = False,
             derivable: Derivable | None = None) -> Program:
    """Import ``gm``, its new results in eager's ``strides``; with ``sentinel_values``, lift the constants holding
    them into parameters (and with ``derivable``, the constants derived from them: :class:`Derivable`).
    ``donate``: the kernels may compute each written tensor in its own memory (import_graph's ``donate``; the
    caller's binding then passes no output memory for it)."""
    try:
        # bf16 tensors cross as their bits (i16 parameters and outputs): the kernel reads and writes the
        # tensors' own memory, as torch.compile's cpu kernels do, instead of float32 copies made per call
        imported = import_graph(gm, "eager", bf16_bits=True,
                                host_devices=("cpu", torch._C._get_privateuse1_backend_name()), donate=donate)
    except (UnsupportedOpError, TypeInferenceError, LoweringBug) as error:
        raise CannotCompile(str(error).splitlines()[0] if isinstance(error, UnsupportedOpError) and
                            "reason:" not in str(error) else _reason(error)) from error
    inputs = tuple(imported.param_positions)
    function = imported.function
    derived: tuple[Expression, ...] = ()
    if sentinel_values is not None:
        function, lifted_inputs, derived = _lift(function, sentinel_values, derivable)
        inputs += lifted_inputs
    return Program(function, inputs, layouts.laid_out(imported.outputs, strides), result_tree,
                   tuple(imported.mutations), lifted=sentinel_values is not None, derived=derived)


def _reason(error: Exception) -> str:
    text = str(error)
    for line in text.splitlines():
        if line.strip().startswith("reason:"):
            return line.strip().removeprefix("reason:").strip()
    return text.splitlines()[0] if text else type(error).__name__


@dataclass(frozen=True)
class Derivable:
    """What a build's stand-ins derived (``watching.derived``: by value) and the other build's sentinels: a
    constant of the program holding one of those values is lifted as a derived float, unless its expression
    gives the same value for the other build's sentinels (``beta - beta``: not a function of the floats), or
    two different expressions gave the value (which one the constant holds is unknown)."""

    by_value: dict[float, list[StandIn]]
    other_sentinels: list[float]

    def expression(self, value: float) -> Expression | None:
        made = self.by_value.get(value)
        if not made or len({stand_in.expression for stand_in in made}) != 1:
            return None
        expression = made[0].expression
        try:
            other = evaluate(expression, self.other_sentinels)
        except (ArithmeticError, ValueError):
            return expression
        return None if other == value else expression


def _lifted(build: Any, count: int, result_tree: Any, strides: list[tuple[int, ...] | None],
            donate: bool = False, real: list[float] | None = None, derive: bool = False) -> Program | None:
    """The program with the floats as parameters, if both sentinel builds agree (see the module docstring).
    With the call's ``real`` floats, the first build's are stand-ins, and the program (with its guards) only
    if those floats take the branches the stand-ins took. ``derive``: both builds' floats are stand-ins, and
    the constants they derive are lifted too (``Program.derived``; its binding computes them per call)."""
    programs = []
    guards = Guards()
    for which in (0, 1):
        values = sentinels(count, which)
        try:
            if real is not None and (which == 0 or derive):
                # (imported inside: a lowering's branch on a float is a guard too, its arithmetic derives)
                with watching(stand_ins(values)) as watch:
                    derivable = Derivable(watch.derived, sentinels(count, 1 - which)) if derive else None
                    program = _program(build(watch.values), result_tree, strides, values, donate, derivable)
                if which == 0:
                    guards = watch.guards
                    if not guards.holds(real):
                        return None
            else:
                program = _program(build(values), result_tree, strides, values, donate)
        except (CannotCompile, NeuronccError, RuntimeError, ValueError, TypeError):
            return None
        programs.append(program)
    first, second = programs
    if first.inputs != second.inputs or first.derived != second.derived or \
            print_function(first.function, canonical=True) != print_function(second.function, canonical=True):
        return None
    if not any(i < 0 for i in first.inputs):
        return None
    if first.derived:
        try:
            [evaluate(expression, real) for expression in first.derived]
        except (ArithmeticError, ValueError):
            return None  # (the call's own floats cannot derive them: 1 / 0.0; built with them instead)
    return dataclasses.replace(first, guards=guards) if guards else first


def _lift(fn: Function, values: list[float], derivable: Derivable | None = None
          ) -> tuple[Function, tuple[int, ...], tuple[Expression, ...]]:
    """``fn`` with every ``full`` whose value is a sentinel made of a new 0-d parameter (appended): the parameter
    itself for a 0-d one, its ``expand`` to the shape for a larger one (``fill_``, ``torch.full``: one kernel
    for every value, not one per value); and every sentinel held in an attribute the op also takes as an operand
    (``OpDef.operand_attrs``: ``clamp``'s bounds) passed so; the program inputs of those parameters (``-1 - k``
    for float ``k``); and, with ``derivable``, the same for values derived from the sentinels, each a float
    ``len(values) + j`` of the call computed by the ``j``-th expression returned."""
    index_of = {value: k for k, value in enumerate(values)}
    derived: list[Expression] = []
    params: dict[tuple[int, Any], Value] = {}
    replaced: dict[Value, Value] = {}
    kept = []

    def float_index(value: Any) -> int | None:
        """The call float (or derived float) that ``value`` is, or None for a constant."""
        if not isinstance(value, float):
            return None
        if value in index_of:
            return index_of[value]
        expression = derivable.expression(value) if derivable is not None else None
        if expression is None:
            return None
        derived.append(expression)
        index_of[value] = len(values) + len(derived) - 1
        return index_of[value]

    def param(k: int, dtype: Any) -> Value:
        if (k, dtype) not in params:
            params[(k, dtype)] = Value(TensorType((), dtype), f"scalar{k}")
        return params[(k, dtype)]

    for op in fn.ops:
        # a fill (full): the one value the attributes give every element (constants are stored data, not lifted)
        value = op.opdef.splat_value(op.attrs) if op.opdef.category is Category.CONSTANT and not op.has(Trait.STORED) \
            else None
        value = plain(value)  # a stand-in's lookup is no branch on it
        result_type = op.results[0].type if op.results else None
        k = float_index(value) if result_type is not None else None
        if k is not None:
            lifted = param(k, result_type.dtype)
            if result_type.shape == ():
                replaced[op.results[0]] = lifted
            else:
                kept.append(Op("expand", (lifted,), op.results, Attrs(shape=list(result_type.shape))))
        elif op.opdef.operand_attrs and result_type is not None:
            kept.append(_attrs_as_operands(op, float_index, lambda k: param(k, result_type.dtype)))
        else:
            kept.append(op)
    if not params:
        return fn, (), ()
    lifted_fn = Function(fn.name, fn.params + tuple(params.values()), tuple(kept), fn.outputs, fn.metadata)
    return lifted_fn.replace_uses(replaced), tuple(-1 - k for k, _ in params), tuple(derived)


def _attrs_as_operands(op: Op, float_index: Any, param: Any) -> Op:
    """``op`` with each of its ``operand_attrs`` that holds a lifted float (``float_index(value)``: its index)
    passed as the 0-d parameter ``param(k)`` of float ``k`` instead (the op's ``lifted`` attribute names them,
    in ``operand_attrs`` order)."""
    names = op.opdef.operand_attrs
    indices = [float_index(plain(op.attrs[name])) for name in names]
    lifted = [k for k, index in enumerate(indices) if index is not None]
    if not lifted:
        return op
    extra = [param(indices[k]) for k in lifted]
    attrs = Attrs({**dict(op.attrs), **{names[k]: None for k in lifted}, "lifted": tuple(lifted)})
    return Op(op.name, (*op.operands, *extra), op.results, attrs)


def traced_program(run: Any, tensors: list[torch.Tensor], count: int) -> Program:
    """The program of ``run(inputs, floats)``: a Python function of torch ops over (fakes of) ``tensors`` that
    writes its results into them with ``copy_`` and returns nothing, its ``count`` floats lifted into kernel
    arguments (fused_optimizers.py's multi-tensor steps). Each written tensor is computed in its own memory
    (donated): the caller passes tensors that do not overlap. Raises CannotCompile when it cannot be traced or
    a float's value shapes the program."""
    metas = [torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="meta") for t in tensors]

    def build(values: list[float]) -> fx.GraphModule:
        from torch._subclasses.fake_tensor import FakeTensorMode

        mode = FakeTensorMode()
        with mode:
            fakes = [torch.empty_strided(m.shape, m.stride(), dtype=m.dtype) for m in metas]

        def traced(*inputs: torch.Tensor) -> tuple[()]:
            run(list(inputs), values)
            return ()

        with _clean_dispatch_state(), mode:
            return make_fx_here(torch.func.functionalize(traced, remove="mutations_and_views"),
                                decomposition_table())(*fakes)

    result_tree = tree_flatten(None)[1]
    if not count:
        return _program(build([]), result_tree, [], donate=True)
    program = _lifted(build, count, result_tree, [], donate=True)
    if program is None:
        raise CannotCompile("its floats could not be made kernel arguments")
    return program
