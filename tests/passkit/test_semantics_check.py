"""assert_pass_preserves_semantics: a broken pass is caught, its failing graph shrunk and printed as .nir."""

from dataclasses import dataclass
from typing import ClassVar

import pytest
from hypothesis import settings

from neuroncc.errors import PassError
from neuroncc.ir import Function, parse
from neuroncc.passes import Pass, PassContext
from neuroncc.passes.rewrite import Rule, rewrite_to_fixed_point
from neuroncc.testing.random_graphs import graphs
from neuroncc.testing.semantics import PassSemanticsError, assert_pass_preserves_semantics

FAST = settings(max_examples=200, deadline=None, database=None, derandomize=True)


@dataclass(frozen=True)
class SubToAdd(Pass):
    """Deliberately wrong: x - y -> x + y."""

    name: ClassVar[str] = "sub-to-add"

    def apply(self, fn: Function, ctx: PassContext) -> Function:
        return rewrite_to_fixed_point(fn, (Rule("sub", lambda site: site.emit("add", *site.operands)),))


@dataclass(frozen=True)
class CrashOnExp(Pass):
    name: ClassVar[str] = "crash-on-exp"

    def apply(self, fn: Function, ctx: PassContext) -> Function:
        if any(op.name == "exp" for op in fn.ops):
            raise ZeroDivisionError("oops")
        return fn


@dataclass(frozen=True)
class RefuseMatmuls(Pass):
    name: ClassVar[str] = "refuse-matmuls"

    def apply(self, fn: Function, ctx: PassContext) -> Function:
        if any(op.name in ("mm", "bmm") for op in fn.ops):
            raise PassError("refuse-matmuls: no matmuls here")
        return fn


@dataclass(frozen=True)
class ReverseOps(Pass):
    """Breaks the IR: ops come before the values they read."""

    name: ClassVar[str] = "reverse-ops"

    def apply(self, fn: Function, ctx: PassContext) -> Function:
        return fn.with_ops(reversed(fn.ops))


@dataclass(frozen=True)
class DropOutputs(Pass):
    name: ClassVar[str] = "drop-outputs"

    def apply(self, fn: Function, ctx: PassContext) -> Function:
        return fn.with_ops(fn.ops, outputs=fn.outputs[:1])


def pasted_graph(message: str) -> Function:
    """The `// -----` case the failure message offers, parsed (so it really is ready to paste)."""
    start = message.index("// -----\n")
    end = message.index("\n}\n", start) + 3
    return parse(message[start:end])


def failure(pipeline, strategy=None) -> str:
    with pytest.raises(PassSemanticsError) as info:
        assert_pass_preserves_semantics(pipeline, graphs() if strategy is None else strategy, settings=FAST)
    return str(info.value), getattr(info.value, "__notes__", [])


def test_a_wrong_rewrite_is_shrunk_to_a_minimal_graph_printed_as_nir():
    message, notes = failure(SubToAdd())
    assert message.startswith("pipeline 'sub-to-add' changed the results on random_inputs(fn, seed=0): result #")
    assert "The graph, ready to paste into a filecheck test:\n\n// -----\n// sub-to-add: changed the results" in message
    assert "// CHECK-LABEL: func @random\nfunc @random(" in message
    fn = pasted_graph(message)
    assert [op.name for op in fn.ops if op.name != "full"] == ["sub"]  # shrunk: just the wrong op (and a splat)
    assert len(fn.params) <= 2 and len(fn.outputs) == 1
    assert "The IR after 'sub-to-add':" in message and "add" in message.split("The IR after")[1]
    assert any(note.startswith("(hypothesis shrank the failing graph to") for note in notes)


def test_a_crashing_pass_is_reported_with_its_graph():
    message, _ = failure(CrashOnExp())
    assert message.startswith("pipeline 'crash-on-exp' crashed on this graph: ZeroDivisionError: oops")
    assert [op.name for op in pasted_graph(message).ops] == ["exp"]


def test_a_pass_error_on_a_valid_graph_is_a_failure():
    from neuroncc.testing.random_graphs import _draw_matmul

    message, _ = failure(RefuseMatmuls(), graphs(families=((_draw_matmul, 1),)))
    assert "failed on this valid graph: PassError: refuse-matmuls: no matmuls here" in message
    assert [op.name for op in pasted_graph(message).ops][-1] in ("mm", "bmm")


def test_invalid_ir_after_a_pass_is_a_failure():
    message, _ = failure(ReverseOps(), graphs(min_ops=2))
    assert message.startswith("pipeline 'reverse-ops' failed on this valid graph: VerifyError: IR is invalid after "
                              "pass 'reverse-ops': func @random: op ")
    assert "is not defined before its use" in message
    assert len(pasted_graph(message).ops) == 2  # reduced to two ops, one reading the other


def test_a_pass_that_drops_results_is_a_failure():
    message, _ = failure(DropOutputs())
    assert "changed the results on random_inputs(fn, seed=0): 2 results before, 1 after" in message
    assert len(pasted_graph(message).outputs) == 2


def test_one_graph_returns_the_transformed_function():
    fn = parse("func @f(%x: tensor<3xf32>) -> (tensor<3xf32>) {\n"
               "  %one = full {dtype = f32, shape = [], value = 1.0} : tensor<f32>\n"
               "  %0 = mul %x, %one : tensor<3xf32>\n  return %0\n}\n")
    after = assert_pass_preserves_semantics("canonicalize", fn)
    assert after.ops == () and after.outputs == after.params
    with pytest.raises(PassSemanticsError, match="changed the results on random_inputs"):
        assert_pass_preserves_semantics(SubToAdd(), parse(
            "func @g(%x: tensor<3xf32>, %y: tensor<3xf32>) -> (tensor<3xf32>) {\n"
            "  %0 = sub %x, %y : tensor<3xf32>\n  return %0\n}\n"))


def test_a_strategy_is_required():
    with pytest.raises(TypeError, match="a Function or a hypothesis strategy"):
        assert_pass_preserves_semantics("canonicalize", [1, 2])
