"""Op traits: declared once on the op, asked by the consumers, and true of the ops' numpy references.

1. No consumer keeps lists of op names. Outside the modules whose job is per-op rules (:data:`RULE_MODULES`,
   each with why), no op name is compared with a string literal or a literal collection, no literal
   collection of op names is built, and no ``match`` dispatches on op names (checked on the source with
   ``ast``). A property is asked of the op (``op.has(Trait.VIEW)``); a specific op's lowering is an entry in a
   rule table keyed by the op.
2. Each trait agrees with the op's numpy reference where that is checkable, in both directions where the
   property can be observed: commutative ops give the same result with swapped operands and the others do
   not, views share their operand's memory in the reference and other data movement copies, and so on.
3. The rule tables that consumers keep for the ops of a trait cover exactly those ops.
"""

from __future__ import annotations

import ast
import re
import zlib
from pathlib import Path

import numpy as np
import pytest

from neuroncc.ir import REGISTRY, Builder, Category, DenseAttr, DType, Op, TensorType, Trait
from neuroncc.ir.dtypes import bf16_words, round_to_bf16
from neuroncc.ir.interpreter import run_op
from neuroncc.ir.ops.reduction import reduced_shape

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "neuroncc"
OP_NAMES = frozenset(REGISTRY.names())

# ---- 1. no name lists in consumers -------------------------------------------------------------------

#: Where naming ops is the module's job (paths relative to the repository; a directory covers its modules).
RULE_MODULES = {
    "neuroncc/ir/ops": "the op definitions themselves (type rules name their op)",
    "neuroncc/frontend/lowering": "aten -> IR lowering rules, which name the ops they build",
    "neuroncc/nki": "the NKI simulator: `add`, `exp`, ... there are NKI language names, not IR ops",
    "neuroncc/testing/graph_state.py": "random graph strategies: the ops they draw",
    "neuroncc/testing/random_graphs.py": "random graph strategies: the ops they draw",
    "neuroncc/testing/graph_families.py": "random graph families: the ops they draw",
    "neuroncc/testing/opinfo_policy.py": "the OpInfo sweep's policy: torch OpInfo names, some spelled like IR ops",
    "neuroncc/passes/kernel_names.py": "how kernels are named: patterns of ops, and the ops a name leaves out",
    "neuroncc/passes/canonicalize_rules.py": "the canonicalization rule table (one rule registered per op)",
    "neuroncc/codegen/llvm/elementwise.py": "the LLVM lowering per elementwise op (and which need no rounding)",
    "neuroncc/codegen/llvm/access.py": "the LLVM lowering per movement/index/creation op (and which check indices)",
    "neuroncc/codegen/llvm/nan_payloads.py": "which ops' x86 lowering returns a NaN operand quieted, payload kept "
                                             "(IEEE arithmetic, sums), and which pass it through (a per-op fact)",
    "neuroncc/passes/one_hot_sums.py": "one pattern, sum(where(iota == target, s, 0)) through its views: the ops "
                                       "the fold matches",
    "neuroncc/codegen/llvm/online.py": "one pattern of four named ops, sum(exp(x - amax(x))), emitted as one pass",
    "neuroncc/codegen/llvm/norm_affine.py": "one pattern, LayerNorm's ((x - mean(x)) * r) * w + b cast to bf16: the "
                                            "ops the fused multiply-add matches",
    "neuroncc/codegen/llvm/one_hot_rows.py": "one pattern, eq(iota, target) along a row through its views: the ops "
                                             "the split matches",
    "neuroncc/codegen/nki/op_rules.py": "the NKI emission rule per op (the reductions share one rule)",
    "neuroncc/codegen/nki/host_ops.py": "the ops the NKI lowering leaves to the host, per op",
    "neuroncc/codegen/nki/attention.py": "the fused attention lowering: the op pattern it matches (mm, softmax, mm)",
    "neuroncc/device/autocast_policy.py": "autocast's cast policy per aten op (PyTorch's AutocastCPU lists): aten "
                                          "overload names, some spelled like IR ops",
    "neuroncc/device/registration.py": "the aten ops the device registers kernels for at import (their composite "
                                       "kernels would not reach it): aten names, some spelled like IR ops",
}


def _strings(node: ast.AST) -> list[str] | None:
    """The strings of a literal string or collection of strings (tuple, list, set, frozenset(...)), else None."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)) and node.elts \
            and all(isinstance(e, ast.Constant) and isinstance(e.value, str) for e in node.elts):
        return [e.value for e in node.elts]  # type: ignore[attr-defined]
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
            and node.func.id in ("frozenset", "set", "tuple") and len(node.args) == 1:
        return _strings(node.args[0])
    return None


def _is_a_name(node: ast.AST) -> bool:
    """``op.name``, ``self.op.name``, ``name``, ``op_name``: what holds an op's name in a comparison."""
    return (isinstance(node, ast.Attribute) and node.attr == "name") or \
        (isinstance(node, ast.Name) and (node.id == "name" or node.id.endswith("_name")))


def name_list_uses(source: str) -> list[tuple[int, str]]:
    """(line, what) for each op-name comparison with a literal, literal collection of op names, or ``match`` on
    op names in ``source`` (the first finding of each line)."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            for side in sides:
                literal = _strings(side)
                if literal and set(literal) & OP_NAMES and any(_is_a_name(s) for s in sides if s is not side):
                    found.append((node.lineno, f"compares an op name with {ast.unparse(side)}"))
                    break
        elif isinstance(node, (ast.Tuple, ast.List, ast.Set, ast.Call)):
            literal = _strings(node)
            if literal and len(literal) >= 2 and len(set(literal) & OP_NAMES) >= 2:
                found.append((node.lineno, f"lists op names: {ast.unparse(node)[:80]}"))
        elif isinstance(node, ast.Match) and _is_a_name(node.subject):
            found.append((node.lineno, "matches on an op name"))
    first: dict[int, str] = {}
    for line, what in sorted(found):
        first.setdefault(line, what)
    return sorted(first.items())


def _covered(relative: str) -> bool:
    return any(relative == entry or relative.startswith(entry + "/") for entry in RULE_MODULES)


SOURCES = sorted(PACKAGE.rglob("*.py"))


def test_no_consumer_keeps_op_name_lists():
    problems = []
    for path in SOURCES:
        relative = path.relative_to(ROOT).as_posix()
        if _covered(relative):
            continue
        problems += [f"{relative}:{line}: {what}" for line, what in name_list_uses(path.read_text(encoding="utf-8"))]
    assert not problems, ("ask the op (op.has(Trait.X)) or put the op's lowering in its rule table:\n"
                          + "\n".join(problems))


@pytest.mark.parametrize("entry", sorted(e for e in RULE_MODULES if e.endswith(".py")))
def test_every_rule_module_exemption_is_still_needed(entry):
    assert name_list_uses((ROOT / entry).read_text(encoding="utf-8")), f"{entry} names no ops: drop its exemption"


@pytest.mark.parametrize("source", [
    'if op.name == "mm":\n    pass\n',
    'if self.op.name != "addmm":\n    pass\n',
    'x = op.name in ("argmax", "argmin")\n',
    'x = name not in {"scatter", "index_put"}\n',
    'VIEWS = frozenset({"reshape", "permute"})\n',
    'EXPENSIVE = ("exp", "log", "tanh")\n',
    'match op.name:\n    case "mm":\n        pass\n',
])
def test_the_checker_catches(source):
    assert name_list_uses(source), source


@pytest.mark.parametrize("source", [
    'if op.has(Trait.VIEW):\n    pass\n',
    'if op.name == name:\n    pass\n',  # a rewrite driver matching the op its rule names
    'if path.name == "__init__.py":\n    pass\n',
    'if op.name in ELEMENTWISE:\n    pass\n',  # asking a rule table keyed by op
    'y = b.op("add", x, x)\n',  # building an op
    'if attrs["reduce"] == "add":\n    pass\n',  # an attribute value, not an op name
])
def test_the_checker_allows(source):
    assert name_list_uses(source) == []


# ---- running ops on sample inputs ------------------------------------------------------------------------

RNG = np.random.default_rng(15)


@pytest.fixture(autouse=True)
def _seed_per_test(request):
    """Each test draws the same inputs whatever the order tests run in (xdist)."""
    global RNG
    RNG = np.random.default_rng(zlib.crc32(request.node.nodeid.encode()))


def run(name: str, *arrays: np.ndarray, **attrs) -> tuple[np.ndarray, ...]:
    """The op's results on ``arrays`` (its reference, run as the interpreter runs it)."""
    b = Builder("sample")
    params = [b.param(TensorType(a.shape, _dtype(a))) for a in arrays]
    op = b.emit(name, params, REGISTRY.get(name).normalize_attrs(attrs))
    with np.errstate(all="ignore"):
        return run_op(op, list(arrays))


def _dtype(array: np.ndarray) -> DType:
    return {np.dtype(np.float32): DType.f32, np.dtype(np.int64): DType.i64, np.dtype(np.bool_): DType.bool,
            np.dtype(np.int32): DType.i32, np.dtype(np.complex64): DType.c64}[array.dtype]


def _random(shape: tuple[int, ...], dtype: DType) -> np.ndarray:
    if dtype is DType.bool:
        return RNG.random(shape) < 0.5
    if dtype.is_int:
        values = RNG.integers(1, 7, shape) * RNG.choice([-1, 1], shape)  # no zero divisors
        return values.astype(dtype.numpy)
    if dtype.is_complex:
        return (RNG.normal(0.0, 2.0, shape) + 1j * RNG.normal(0.0, 2.0, shape)).astype(np.complex64)
    return RNG.normal(0.0, 2.0, shape).astype(np.float32)


def _accepts(name: str, dtype: DType) -> bool:
    opdef = REGISTRY.get(name)
    types = (TensorType((3,), dtype),) * opdef.arity[0]
    if name == "where":
        types = (TensorType((3,), DType.bool),) + types[1:]
    try:
        opdef.infer_types(types, opdef.normalize_attrs(_ELEMENTWISE_ATTRS.get(name, {})))
    except Exception:  # noqa: BLE001 - the type rule refuses the dtype
        return False
    return True


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and bool(np.array_equal(a, b, equal_nan=a.dtype.kind == "f"))


#: Attributes the elementwise ops without defaults need.
_ELEMENTWISE_ATTRS = {"cast": {"dtype": DType.i64}, "bitcast": {"dtype": DType.i32}, "clamp": {"min": -1, "max": 1}}
ELEMENTWISE = [d.name for d in REGISTRY.by_category(Category.ELEMENTWISE)]
BINARY = [name for name in ELEMENTWISE if REGISTRY.get(name).arity == (2, 2)]
DTYPES = (DType.f32, DType.i64, DType.bool)


# ---- 2. each trait agrees with the references -----------------------------------------------------------


@pytest.mark.parametrize("name", BINARY)
def test_commutative_ops_are_those_that_ignore_operand_order(name):
    swapped_equal = []
    for dtype in (d for d in DTYPES if _accepts(name, d)):
        for _ in range(3):
            a, b = _random((4, 5), dtype), _random((4, 5), dtype)
            swapped_equal.append(_same(run(name, a, b)[0], run(name, b, a)[0]))
    assert swapped_equal
    assert REGISTRY.get(name).has(Trait.COMMUTATIVE) == all(swapped_equal)


def _pointwise_operands(name: str, dtype: DType, shape: tuple[int, ...]) -> list[np.ndarray]:
    count = REGISTRY.get(name).arity[0]
    operands = [_random(shape, dtype) for _ in range(count)]
    if name == "where":
        operands[0] = _random(shape, DType.bool)
    return operands


@pytest.mark.parametrize("name", sorted(REGISTRY.having(Trait.POINTWISE)))
def test_pointwise_ops_compute_each_element_from_the_same_element_of_each_operand(name):
    attrs = _ELEMENTWISE_ATTRS.get(name, {})
    dtype = next(d for d in DTYPES + (DType.c64,) if _accepts(name, d))  # conj takes only c64
    operands = _pointwise_operands(name, dtype, (12,))
    order = RNG.permutation(12)  # permuting the elements of every operand permutes the result the same way
    assert _same(run(name, *[x[order] for x in operands], **attrs)[0], run(name, *operands, **attrs)[0][order])
    if len(operands) > 1:  # a smaller operand is read at the broadcast of the result's index
        full = _pointwise_operands(name, dtype, (4, 3))
        row = full[-1][:1].copy()
        assert _same(run(name, *full[:-1], row, **attrs)[0],
                     run(name, *full[:-1], np.broadcast_to(row, (4, 3)).copy(), **attrs)[0])


@pytest.mark.parametrize("name, attrs", [
    ("flip", {"dims": (0,)}), ("sort", {"dim": 0}), ("cummax", {"dim": 0}), ("cummin", {"dim": 0}),
    ("logcumsumexp", {"dim": 0}), ("permute", {"dims": (0,)}),
])
def test_ops_that_are_not_pointwise_depend_on_where_elements_are(name, attrs):
    assert not REGISTRY.get(name).has(Trait.POINTWISE)
    x = _random((12,), DType.f32)
    order = RNG.permutation(12)
    if name == "permute":  # a one-dim permute is the identity: it is a view, not pointwise (a copy is)
        assert REGISTRY.get(name).has(Trait.VIEW)
        return
    assert not _same(run(name, x[order], **attrs)[0], run(name, x, **attrs)[0][order])


@pytest.mark.parametrize("name", sorted(REGISTRY.having(Trait.TRANSCENDENTAL)))
def test_transcendental_ops_evaluate_a_math_function_on_the_cpu(name):
    # the trait's reason: tens of instructions (a polynomial) or a libm call per element, where an add is one
    from neuroncc.codegen.llvm.views import Layout
    from neuroncc.codegen.llvm.emit import emit_kernel
    from neuroncc.codegen.llvm.schedule import plan_kernel

    b = Builder("k")
    params = [b.param(TensorType((64,), DType.f32)) for _ in range(REGISTRY.get(name).arity[0])]
    result = b.op(name, *params)
    region = b.build([result])
    plan = plan_kernel(region, [Layout.of(i, p.type) for i, p in enumerate(params)],
                       [Layout.of(len(params), result.type)])
    text = "".join(emit_kernel(plan, "k")[0])
    called = set(re.findall(r'call [^@\n]*@"?([\w.]+)', text))
    phases = set(re.findall(r'define [^@\n]*@"?(k[\w.]*)', text))  # the kernel's own functions
    math = called - phases - {c for c in called if c.startswith("llvm.")}  # libm (sinf) or a polynomial (ncc.math.exp)
    assert math, called


@pytest.mark.parametrize("name", sorted(REGISTRY.having(Trait.CONCATENATION)))
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_concatenations_lay_their_operands_end_to_end_along_dim(name, dim):
    pieces = [_random((2, n, 3), DType.f32) for n in (1, 4, 2)] if dim == 1 else \
        [_random((2, 4, 3), DType.f32) for _ in range(3)]
    result = run(name, *pieces, dim=dim)[0]
    start = 0
    for piece in pieces:  # each operand is the result's slice along dim, in operand order
        size = piece.shape[dim]
        assert _same(np.take(result, range(start, start + size), axis=dim), piece)
        start += size
    assert result.shape[dim] == start


@pytest.mark.parametrize("opdef", REGISTRY.by_category(Category.REDUCTION), ids=lambda d: d.name)
def test_sum_reductions_are_the_linear_ones(opdef):
    attrs = {"dim": 1} if "dim" in opdef.attrs else {"dims": (1,)}
    x, y = _random((6, 8), DType.f32), _random((6, 8), DType.f32)  # amax is linear only where x and y peak together
    result = run(opdef.name, x, **attrs)[0]
    if result.dtype.kind != "f":  # any/all give bools, argmax/argmin indices
        assert not opdef.has(Trait.SUM_REDUCTION)
        return
    combined = run(opdef.name, 2 * x + 3 * y, **attrs)[0]
    linear = np.allclose(combined, 2 * result + 3 * run(opdef.name, y, **attrs)[0], rtol=1e-4, atol=1e-4)
    assert opdef.has(Trait.SUM_REDUCTION) == linear


X = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
#: (operands, attributes) of a sample of every data-movement op.
MOVEMENT_SAMPLES = {
    "reshape": ((X,), {"shape": (6, 4)}),
    "permute": ((X,), {"dims": (2, 0, 1)}),
    "expand": ((X[:, :1].copy(),), {"shape": (2, 3, 4)}),
    "slice": ((X,), {"dim": 1, "start": 1, "end": 3}),
    "select": ((X,), {"dim": 1, "index": 2}),
    "squeeze": ((X[:, :1].copy(),), {"dims": (1,)}),
    "unsqueeze": ((X,), {"dim": 1}),
    "split": ((X,), {"dim": 2, "sizes": (1, 3)}),
    "as_strided": ((X,), {"shape": (2, 2), "strides": (3, 1), "offset": 1}),
    "cat": ((X, X), {"dim": 0}),
    "constant_pad": ((X,), {"pad": (1, 1)}),
    "copy": ((X,), {}),
    "flip": ((X,), {"dims": (1,)}),
    "slice_scatter": ((X, np.ones((2, 2, 4), np.float32)), {"dim": 1, "start": 1, "end": 3}),
    "select_scatter": ((X, np.ones((2, 4), np.float32)), {"dim": 1, "index": 0}),
    "repeat": ((X,), {"repeats": (1, 2, 1)}),
}
#: (operand, attributes) of a sample of each view that reinterprets the element type.
REINTERPRET_SAMPLES = {
    "view_as_real": (X.reshape(2, 3, 2, 2).copy().view(np.complex64)[..., 0], {}),
    "view_as_complex": (X.reshape(2, 3, 2, 2).copy(), {}),
}
#: The views of elements of the operand's type (the element-type views have a test of their own).
VIEWS = sorted(REGISTRY.having(Trait.VIEW) - REGISTRY.having(Trait.REINTERPRET))


def test_every_movement_op_has_a_sample():
    assert set(MOVEMENT_SAMPLES) | set(REINTERPRET_SAMPLES) == {d.name for d in REGISTRY.by_category(Category.MOVEMENT)}


@pytest.mark.parametrize("name", sorted(REINTERPRET_SAMPLES))
def test_reinterpreting_views_read_their_operands_bytes_as_another_element_type(name):
    operand, attrs = REINTERPRET_SAMPLES[name]
    (result,) = run(name, operand, **attrs)
    assert REGISTRY.get(name).has(Trait.REINTERPRET) and REGISTRY.get(name).has(Trait.VIEW)
    assert np.shares_memory(result, operand) and result.dtype != operand.dtype
    assert result.tobytes() == operand.tobytes()  # the same bytes in the same order
    copied = run(name, np.ascontiguousarray(operand[::-1]), **attrs)[0]  # and not a fixed answer
    assert not _same(copied, result)


def test_only_the_element_type_views_change_the_element_type():
    for name in sorted(MOVEMENT_SAMPLES):
        operands, attrs = MOVEMENT_SAMPLES[name]
        assert all(r.dtype == operands[0].dtype for r in run(name, *operands, **attrs))
        assert not REGISTRY.get(name).has(Trait.REINTERPRET)


@pytest.mark.parametrize("name", sorted(MOVEMENT_SAMPLES))
def test_views_are_the_movement_ops_whose_results_share_the_operands_memory(name):
    operands, attrs = MOVEMENT_SAMPLES[name]
    results = run(name, *operands, **attrs)
    shares = [np.shares_memory(r, operands[0]) for r in results]
    assert REGISTRY.get(name).has(Trait.VIEW) == all(shares), shares
    if all(shares):  # the elements at positions the attributes alone fix: any other operand, same positions
        numbered = np.arange(operands[0].size, dtype=np.float32).reshape(operands[0].shape)
        positions = [r.astype(np.int64) for r in run(name, numbered, *operands[1:], **attrs)]
        other = _random(operands[0].shape, DType.f32)
        for result, where in zip(run(name, other, *operands[1:], **attrs), positions):
            assert _same(result, other.reshape(-1)[where])


def _strided(buffer: np.ndarray, offset: int, shape: tuple[int, ...], strides: tuple[int, ...]) -> np.ndarray:
    return np.lib.stride_tricks.as_strided(buffer[offset:], shape, [s * buffer.itemsize for s in strides])


@pytest.mark.parametrize("name", VIEWS)
def test_strided_views_are_a_window_on_any_layout_of_their_operand(name):
    from neuroncc.ir.view_windows import StridedView, apply_view

    operands, attrs = MOVEMENT_SAMPLES[name]
    x = operands[0]
    results = run(name, x, **attrs)
    # the operand stored contiguously, and stored transposed (its dims reversed in memory)
    transposed = np.ascontiguousarray(x.transpose())
    layouts = [(x.reshape(-1), StridedView.contiguous(x.shape)),
               (transposed.reshape(-1), StridedView(x.shape, tuple(s // x.itemsize for s in transposed.T.strides)))]
    if not REGISTRY.get(name).has(Trait.STRIDED_VIEW):
        # split has several results; as_strided reads the operand's row-major order, not its storage
        assert len(results) > 1 or not _same(results[0], _strided(layouts[1][0], attrs["offset"], attrs["shape"],
                                                                    attrs["strides"]))
        return
    b = Builder("sample")
    op = b.emit(name, [b.param(TensorType(x.shape, DType.f32))], REGISTRY.get(name).normalize_attrs(attrs))
    for buffer, source in layouts:
        window = apply_view(op, source)
        if window is None:  # a reshape merging dims that are not stored contiguously: the one case that copies
            assert op.has(Trait.RESHAPE) and source.strides != StridedView.contiguous(x.shape).strides
            continue
        assert _same(_strided(buffer, window.offset, window.shape, window.strides), results[0])


@pytest.mark.parametrize("name", VIEWS)
def test_reshape_views_keep_the_row_major_order(name):
    operands, attrs = MOVEMENT_SAMPLES[name]
    results = run(name, *operands, **attrs)
    keeps = len(results) == 1 and _same(results[0].reshape(-1), operands[0].reshape(-1))
    assert REGISTRY.get(name).has(Trait.RESHAPE) == keeps


@pytest.mark.parametrize("name", VIEWS)
def test_broadcast_views_read_their_operand_broadcast(name):
    operands, attrs = MOVEMENT_SAMPLES[name]
    results = run(name, *operands, **attrs)
    try:
        broadcast = len(results) == 1 and _same(results[0], np.broadcast_to(operands[0], results[0].shape))
    except ValueError:  # the shapes do not broadcast
        broadcast = False
    assert REGISTRY.get(name).has(Trait.BROADCAST) == broadcast


def test_the_view_traits_nest():
    assert REGISTRY.having(Trait.RESHAPE) | REGISTRY.having(Trait.BROADCAST) <= REGISTRY.having(Trait.STRIDED_VIEW)
    assert REGISTRY.having(Trait.STRIDED_VIEW) <= REGISTRY.having(Trait.VIEW)
    assert all(REGISTRY.get(n).category is Category.MOVEMENT for n in REGISTRY.having(Trait.VIEW))


def _batch(name: str) -> tuple[int, ...]:
    """The batch dims the product takes: none when its type rule accepts matrices, else one (bmm)."""
    opdef = REGISTRY.get(name)
    matrices = (TensorType((4,), DType.f32),) * (opdef.arity[0] - 2) + (TensorType((3, 5), DType.f32),
                                                                          TensorType((5, 4), DType.f32))
    try:
        opdef.infer_types(matrices, opdef.normalize_attrs({}))
    except Exception:  # noqa: BLE001 - it wants batches
        return (2,)
    return ()


@pytest.mark.parametrize("name", sorted(REGISTRY.having(Trait.MATRIX_PRODUCT)))
@pytest.mark.parametrize("transpose_a, transpose_b", [(False, False), (True, False), (False, True)])
def test_matrix_products_multiply_their_last_two_operands(name, transpose_a, transpose_b):
    batch = _batch(name)
    a = _random(batch + ((5, 3) if transpose_a else (3, 5)), DType.f32)  # stored transposed when flagged
    b = _random(batch + ((4, 5) if transpose_b else (5, 4)), DType.f32)
    product = (np.swapaxes(a, -1, -2) if transpose_a else a) @ (np.swapaxes(b, -1, -2) if transpose_b else b)
    flags = {"transpose_a": transpose_a, "transpose_b": transpose_b}
    if REGISTRY.get(name).arity[0] == 3:  # a bias comes first
        bias = _random((4,), DType.f32)
        result = run(name, bias, a, b, beta=0.5, alpha=2.0, **flags)[0]
        np.testing.assert_allclose(result, 0.5 * bias + 2.0 * product, rtol=1e-5, atol=1e-5)
    else:
        np.testing.assert_allclose(run(name, a, b, **flags)[0], product, rtol=1e-5, atol=1e-5)


#: Operand shapes of each op that declares ``words`` (bf16 values as i16 words), and the attributes it needs.
WORDS_SAMPLES = {
    "mm": ([(3, 5), (4, 5)], {"transpose_b": True}),
    "bmm": ([(2, 3, 5), (2, 5, 4)], {}),
    "addmm": ([(4,), (3, 5), (5, 4)], {"beta": 0.5, "alpha": 2.0}),
    "convolution": ([(2, 4, 7, 7), (6, 2, 3, 3), (6,)], {"stride": (2,), "padding": (1,), "dilation": (1,),
                                                         "groups": 2}),
    "convolution_backward": ([(2, 6, 4, 4), (2, 4, 7, 7), (6, 2, 3, 3)], {"stride": (2,), "padding": (1,),
                                                                          "dilation": (1,), "groups": 2}),
}


def test_every_op_declaring_words_has_a_sample():
    assert set(WORDS_SAMPLES) == {d.name for d in REGISTRY if "words" in d.attrs}


@pytest.mark.parametrize("name", sorted(WORDS_SAMPLES))
def test_ops_on_words_compute_what_the_op_computes_on_the_bf16_values_whose_words_they_are(name):
    """``words = true``: the i16 operands are bf16 values' words and each result is the words of the bf16 result
    the op gives on those values (rounded once), what bf16-product-words' bitcasts around the op take it for."""
    shapes, attrs = WORDS_SAMPLES[name]
    values = [round_to_bf16(_random(shape, DType.f32)) for shape in shapes]
    values[0].reshape(-1)[1] = np.nan

    def results(arrays, dtype, **more):
        b = Builder("sample")
        params = [b.param(TensorType(a.shape, dtype)) for a in arrays]
        return run_op(b.emit(name, params, REGISTRY.get(name).normalize_attrs({**attrs, **more})), list(arrays))

    on_values, on_words = results(values, DType.bf16), results([bf16_words(v) for v in values], DType.i16, words=True)
    assert len(on_words) == len(on_values) >= 1
    for got, want in zip(on_words, on_values):
        assert got.dtype == np.int16 and np.array_equal(got, bf16_words(want))
    assert any(np.isnan(v).any() for v in on_values)  # (a NaN reached a result: its words are kept too)


def test_indexed_writes_change_their_operand_only_where_the_indices_point():
    x = _random((4, 5), DType.f32)
    index = np.array([[3, 0, 1, 1, 2]], dtype=np.int64)  # row 0 of src to rows 3, 0, 1, 1, 2 of each column
    written = run("scatter", x, index, np.full((1, 5), 100.0, np.float32), dim=0)[0]
    touched = np.zeros(x.shape, bool)
    touched[index[0], np.arange(5)] = True
    assert _same(written[~touched], x[~touched]) and np.all(written[touched] == 100.0)
    rows = np.array([2, 0], dtype=np.int64)
    put = run("index_put", x, np.full((2, 5), -7.0, np.float32), rows, dims=(0,))[0]
    assert _same(put[[1, 3]], x[[1, 3]]) and np.all(put[[0, 2]] == -7.0)
    assert REGISTRY.having(Trait.INDEXED_WRITE) == {"scatter", "index_put"}


def test_stored_ops_are_those_whose_result_is_an_attribute():
    for opdef in REGISTRY:
        dense = [key for key, spec in opdef.attrs.items() if spec.kind == "dense"]
        assert opdef.has(Trait.STORED) == bool(dense), opdef.name
    data = _random((3, 2), DType.f32)
    assert _same(run("constant", value=DenseAttr(data, DType.f32))[0], data)


@pytest.mark.parametrize("opdef", REGISTRY.by_category(Category.REDUCTION), ids=lambda d: d.name)
@pytest.mark.parametrize("keepdim", [False, True])
def test_reduced_dims_are_the_dims_the_reference_reduces(opdef, keepdim):
    x = _random((2, 3, 4), DType.f32)
    samples = [{"dim": 1}, {"dim": None}] if "dim" in opdef.attrs else [{"dims": (0, 2)}, {"dims": ()}]
    for attrs in samples:
        normalized = opdef.normalize_attrs({**attrs, "keepdim": keepdim})
        dims = opdef.reduced_dims(normalized, x.ndim)
        assert run(opdef.name, x, **normalized)[0].shape == reduced_shape(x.shape, dims, keepdim)


def test_only_reductions_have_reduced_dims():
    for opdef in REGISTRY:
        assert (opdef.reduces is not None) == (opdef.category is Category.REDUCTION), opdef.name


@pytest.mark.parametrize("name, attrs, splat", [
    ("full", {"shape": (2, 3), "dtype": DType.f32, "value": 2.5}, 2.5),
    ("constant", {"value": DenseAttr(np.full((2, 2), 3.0, np.float32), DType.f32)}, 3.0),
    ("constant", {"value": DenseAttr(np.full((2,), np.nan, np.float32), DType.f32)}, "nan"),
    ("constant", {"value": DenseAttr(np.arange(4, dtype=np.float32), DType.f32)}, None),
    ("iota", {"length": 1, "start": 4, "dtype": DType.i64}, 4),
    ("iota", {"length": 3, "start": 4, "dtype": DType.i64}, None),
])
def test_the_splat_value_is_the_one_value_the_reference_fills(name, attrs, splat):
    opdef = REGISTRY.get(name)
    found = opdef.splat_value(opdef.normalize_attrs(attrs))
    values = run(name, **attrs)[0].reshape(-1)
    if splat is None:
        assert found is None and len(set(values.tolist())) > 1
    elif splat == "nan":
        assert np.isnan(found) and np.all(np.isnan(values))
    else:
        assert found == splat and np.all(values == splat)


# ---- 3. the consumers' per-op tables cover the ops of each trait --------------------------------------


def test_the_consumers_rule_tables_cover_the_ops_of_their_trait():
    from neuroncc.codegen.llvm.access import SCATTERS
    from neuroncc.codegen.llvm.reductions import COMBINERS
    from neuroncc.codegen.llvm.views import VIEW_LAYOUTS
    from neuroncc.codegen.nki.plan import is_transfer
    from neuroncc.codegen.nki.stages import TRANSFERS
    from neuroncc.ir.view_windows import WINDOW_RULES

    assert set(WINDOW_RULES) == REGISTRY.having(Trait.STRIDED_VIEW)
    assert set(VIEW_LAYOUTS) == REGISTRY.having(Trait.VIEW)
    assert set(SCATTERS) == REGISTRY.having(Trait.INDEXED_WRITE)
    # the cpu extern reads and writes the words of every op that declares them (bf16-product-words)
    from neuroncc.executors.cpu.extern import _ATEN_PRODUCTS, _CONVOLUTIONS
    assert set(_ATEN_PRODUCTS) | set(_CONVOLUTIONS) == {d.name for d in REGISTRY if "words" in d.attrs}
    assert set(COMBINERS) == {d.name for d in REGISTRY.by_category(Category.REDUCTION)}
    # NKI moves data that is neither a strided view nor a copy with DMA (splits become slices first)
    transfers = {d.name for d in REGISTRY if is_transfer(Op(d.name, (), ()))} - {"split"}
    assert set(TRANSFERS) == transfers
