"""Differential checks of passes against the reference interpreter.

    from neuroncc.testing.random_graphs import graphs
    from neuroncc.testing.semantics import assert_pass_preserves_semantics

    def test_my_pass_preserves_semantics():
        assert_pass_preserves_semantics("my-pass", graphs())          # 500 random graphs, shrunk on failure

    assert_pass_preserves_semantics(MyPass(), fn)                     # one graph

Given a hypothesis strategy of graphs, the check runs under :data:`PROPERTY_SETTINGS` (500 examples, no
deadline); when a graph fails, hypothesis shrinks it to a minimal one and the failure message prints that
graph as ``.nir`` text ready to paste into ``tests/filecheck/<pass>.nir``, followed by what differed and
the IR after the pass.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from neuroncc.errors import NeuronccError
from neuroncc.ir import DType, Function, interpret, print_function, verify
from neuroncc.passes.manager import Pass, PassContext, Pipeline
from neuroncc.passes.pipeline import as_pipeline
from neuroncc.testing.reduce import reduce_graph, size

#: Hypothesis settings for pass property tests: 500 small graphs per pass, no per-example deadline (CI
#: machines are noisy); the example database keeps replaying a failure until it is fixed.
PROPERTY_SETTINGS = settings(
    max_examples=500, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)


class PassSemanticsError(AssertionError):
    """A pass changed what a graph computes, broke the IR, or failed on a valid graph.

    ``graph`` is the input graph; ``kind`` says how it failed (``results``, ``parameters``, ``interpreter``,
    or ``raised <ExceptionType>``), so that a reduced graph can be checked to fail the same way.
    """

    def __init__(self, message: str, graph: Function, kind: str):
        super().__init__(message)
        self.graph, self.kind = graph, kind


def random_inputs(fn: Function, seed: int = 0) -> list[np.ndarray]:
    """Inputs for ``fn`` in the interpreter's storage form: floats (and both parts of complex numbers) ~ N(0, 1),
    small ints, random bools."""
    rng = np.random.default_rng(seed)
    arrays = []
    for param in fn.params:
        t = param.type
        if t.dtype.is_float:
            array = rng.standard_normal(t.shape)
        elif t.dtype.is_complex:
            array = rng.standard_normal(t.shape) + 1j * rng.standard_normal(t.shape)
        elif t.dtype.is_bool:
            array = rng.random(t.shape) < 0.5
        elif t.dtype is DType.u8:
            array = rng.integers(0, 8, t.shape)
        else:
            array = rng.integers(-8, 8, t.shape)
        arrays.append(np.asarray(array).astype(t.dtype.numpy))
    return arrays


def assert_same_results(expected: Sequence[np.ndarray], actual: Sequence[np.ndarray], *, rtol: float = 0.0,
                        atol: float = 0.0, context: str = "") -> None:
    """Equal shapes, dtypes and values (NaN where the other has NaN); exact unless tolerances are given."""
    assert len(expected) == len(actual), f"{context}{len(expected)} results before, {len(actual)} after"
    for index, (want, got) in enumerate(zip(expected, actual)):
        where = f"{context}result #{index}"
        assert want.shape == got.shape, f"{where}: shape {got.shape}, expected {want.shape}"
        assert want.dtype == got.dtype, f"{where}: dtype {got.dtype}, expected {want.dtype}"
        if rtol or atol:
            np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, equal_nan=True, err_msg=where)
        else:
            equal_nan = want.dtype.kind in "fc"
            assert np.array_equal(want, got, equal_nan=equal_nan), f"{where} differs:\n{want}\nvs\n{got}"


def paste_ready(fn: Function, pipeline: Pipeline, problem: str) -> str:
    """``fn`` as a ``// -----`` case for ``tests/filecheck/<pass>.nir``, with a comment saying what went wrong."""
    comment = problem.splitlines()[0] if problem else "fails"
    return (f"// -----\n// {pipeline}: {comment}\n// CHECK-LABEL: func @{fn.name}\n"
            f"{print_function(fn)}\n")


class GraphCase:
    """A generated graph that hypothesis prints as ``.nir`` text (in "Falsifying example: ..." notes)."""

    def __init__(self, fn: Function):
        self.fn = fn

    def __repr__(self) -> str:
        return "\n" + print_function(self.fn) + "\n"


def check_pass_on(pipeline: Pipeline, fn: Function, inputs: Sequence[np.ndarray] | None, seeds: Sequence[int],
                  rtol: float, atol: float) -> Function:
    """Run ``pipeline`` on ``fn`` and compare the interpreter before and after; the new function.

    Raises :class:`PassSemanticsError` (whose message holds ``fn`` ready to paste into a test) on failure.
    numpy's RuntimeWarnings (the mean of an empty slice is NaN, as intended) are not shown.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return _check_pass_on(pipeline, fn, inputs, seeds, rtol, atol)


def _check_pass_on(pipeline: Pipeline, fn: Function, inputs: Sequence[np.ndarray] | None, seeds: Sequence[int],
                   rtol: float, atol: float) -> Function:
    verify(fn)
    input_sets = [list(inputs)] if inputs is not None else [random_inputs(fn, seed) for seed in seeds]
    expected = [interpret(fn, arrays) for arrays in input_sets]  # the input graph must run (else: not a pass bug)

    def fail(kind: str, problem: str, after: Function | None = None) -> PassSemanticsError:
        message = (f"pipeline '{pipeline}' {problem}\n\nThe graph, ready to paste into a filecheck test:\n\n"
                   f"{paste_ready(fn, pipeline, problem)}")
        if after is not None:
            message += f"\nThe IR after '{pipeline}':\n\n{print_function(after)}\n"
        return PassSemanticsError(message, fn, kind)

    try:
        after = pipeline.run(fn, PassContext(verify_each=True))
    except NeuronccError as exc:
        raise fail(f"raised {type(exc).__name__}", f"failed on this valid graph: {type(exc).__name__}: {exc}") from exc
    except Exception as exc:  # a crash inside the pass: the same report, with the original traceback chained
        raise fail(f"raised {type(exc).__name__}", f"crashed on this graph: {type(exc).__name__}: {exc}") from exc
    if [t.shape for t in after.input_types] != [t.shape for t in fn.input_types] or \
            [t.dtype for t in after.input_types] != [t.dtype for t in fn.input_types]:
        raise fail("parameters", "changed the function's parameters", after)
    for seed_index, (arrays, want) in enumerate(zip(input_sets, expected)):
        inputs_used = "the given inputs" if inputs is not None else f"random_inputs(fn, seed={seeds[seed_index]})"
        try:
            got = interpret(after, arrays)
        except NeuronccError as exc:
            raise fail("interpreter", f"produced IR the interpreter cannot run on {inputs_used}: {exc}", after) from exc
        try:
            assert_same_results(want, got, rtol=rtol, atol=atol)
        except AssertionError as exc:
            detail = str(exc).replace("\n", " ")
            raise fail("results", f"changed the results on {inputs_used}: {detail}", after) from None
    return after


def assert_pass_preserves_semantics(pipeline: str | Pass | Pipeline | Sequence[Pass],
                                    graphs: Function | st.SearchStrategy[Function],
                                    inputs: Sequence[np.ndarray] | None = None, *, seeds: Sequence[int] = (0,),
                                    rtol: float = 0.0, atol: float = 0.0,
                                    settings: settings | None = None, reduce: bool = True) -> Function | int:
    """Check that ``pipeline`` keeps what graphs compute, bit for bit unless tolerances are given.

    ``graphs`` is one :class:`Function` (returns the function after the pipeline) or a hypothesis strategy
    of functions such as :func:`neuroncc.testing.random_graphs.graphs` (runs under ``settings``, default
    :data:`PROPERTY_SETTINGS`; returns how many graphs were checked). The verifier runs after every pass;
    each graph is interpreted on ``inputs`` or on :func:`random_inputs` for each of ``seeds``, before and
    after. A failure raises :class:`PassSemanticsError` holding the failing graph as ``.nir`` text ready to
    paste into a test: shrunk by hypothesis, then (with ``reduce``) cut down further by
    :func:`neuroncc.testing.reduce.reduce_graph` to a graph that still fails the same way.
    """
    resolved = as_pipeline(pipeline)
    if isinstance(graphs, Function):
        return check_pass_on(resolved, graphs, inputs, seeds, rtol, atol)
    if not isinstance(graphs, st.SearchStrategy):
        raise TypeError(f"graphs must be a Function or a hypothesis strategy of them, got {type(graphs).__name__}")

    checked = 0

    @(settings or PROPERTY_SETTINGS)
    @given(graphs.map(GraphCase))
    def preserves_semantics(case: GraphCase) -> None:
        nonlocal checked
        checked += 1
        check_pass_on(resolved, case.fn, inputs, seeds, rtol, atol)

    try:
        preserves_semantics()
    except PassSemanticsError as found:
        if not reduce:
            raise
        raise reduced_failure(found, lambda g: check_pass_on(resolved, g, inputs, seeds, rtol, atol)) from None
    return checked


def reduced_failure(found: PassSemanticsError, check: Callable[[Function], object]) -> PassSemanticsError:
    """The failure of the smallest graph that :func:`reduce_graph` finds failing like ``found``."""
    def fails_alike(fn: Function) -> bool:
        try:
            check(fn)
        except PassSemanticsError as exc:
            return exc.kind == found.kind
        except Exception:  # the candidate itself is broken (e.g. the interpreter rejects it): not alike
            return False
        return False

    reduced = reduce_graph(found.graph, fails_alike)
    try:
        check(reduced)
    except PassSemanticsError as exc:
        before, after = size(found.graph)[0], size(reduced)[0]
        if (before, after) != (after, after):
            exc.add_note(f"(hypothesis shrank the failing graph to {before} ops; reduction cut it to {after})")
        return exc
    return found
