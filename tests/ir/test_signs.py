"""The sign analysis (``ir/signs.py``): which values it says are <= 0, from a function's ops and from the facts
about its parameters (function and region metadata), and how those facts print, verify and follow parameters."""

from __future__ import annotations

import pytest

from neuroncc.errors import VerifyError
from neuroncc.ir import REGISTRY, Attrs, Builder, DType, Function, TensorType, parse, print_function, verify
from neuroncc.ir.signs import at_least_zero, at_most_zero, facts_for

ROWS = TensorType((4, 10), DType.f32)
PER_ROW = TensorType((4, 1), DType.f32)


def _graph(build, metadata=None) -> tuple[Function, object]:
    """A function of x [4, 10] (and m, l [4, 1]) whose output is ``build(b, x, m, l)``: (the function, its output)."""
    b = Builder("signs", metadata)
    x, m, l = b.param(ROWS, "x"), b.param(PER_ROW, "m"), b.param(PER_ROW, "l")
    out = build(b, x, m, l)
    fn = b.build([out])
    return fn, fn.outputs[0]


def _log_sum_exp_parts(b, x, dims=(1,)):
    maximum = b.op("amax", x, dims=(1,), keepdim=True)
    total = b.op("sum", b.op("exp", b.op("sub", x, maximum)), dims=dims, keepdim=True)
    return maximum, b.op("log", total)


def _log_softmax(b, x, m, l):
    maximum, log_sum = _log_sum_exp_parts(b, x)
    return b.op("sub", b.op("sub", x, maximum), log_sum)


def _x_minus_logsumexp(b, x, m, l):
    maximum, log_sum = _log_sum_exp_parts(b, x)
    return b.op("sub", x, b.op("add", log_sum, maximum))


def _x_minus_torch_logsumexp(b, x, m, l, guard=float("inf")):
    """torch's decomposition of logsumexp: the max is replaced by 0 where it is +-inf."""
    maximum = b.op("amax", x, dims=(1,), keepdim=True)
    infinite = b.op("eq", b.op("abs", maximum), b.op("full", shape=(), dtype=DType.f32, value=guard))
    shift = b.op("where", infinite, b.op("full", shape=(), dtype=DType.f32, value=0.0), maximum)
    log_sum = b.op("log", b.op("sum", b.op("exp", b.op("sub", x, shift)), dims=(1,), keepdim=True))
    return b.op("sub", x, b.op("add", log_sum, shift))


NONPOSITIVE = {
    "x - amax(x)": lambda b, x, m, l: b.op("sub", x, b.op("amax", x, dims=(1,), keepdim=True)),
    "x - amax(x) - log(sum(exp(x - amax(x))))": _log_softmax,
    "x - logsumexp(x)": _x_minus_logsumexp,
    "x - logsumexp(x), torch's form": _x_minus_torch_logsumexp,
    "-exp(x)": lambda b, x, m, l: b.op("neg", b.op("exp", x)),
}

EITHER_SIGN = {
    "x - mean(x)": lambda b, x, m, l: b.op("sub", x, b.op("mean", x, dims=(1,), keepdim=True)),
    "x - amax(exp(x))": lambda b, x, m, l: b.op("sub", x, b.op("amax", b.op("exp", x), dims=(1,), keepdim=True)),
    "amax(x) - x": lambda b, x, m, l: b.op("sub", b.op("amax", x, dims=(1,), keepdim=True), x),
    "x - amax(x) + log(...)": lambda b, x, m, l: b.op("add", b.op("sub", x, b.op("amax", x, dims=(1,), keepdim=True)),
                                                      _log_sum_exp_parts(b, x)[1]),
    # the log-sum of a sum over other dims than the max's may be below 1: its log below 0
    "x - amax(x) - log(sum over all dims)": lambda b, x, m, l: b.op(
        "sub", b.op("sub", x, b.op("amax", x, dims=(1,), keepdim=True)), _log_sum_exp_parts(b, x, dims=(0, 1))[1]),
    "x - logsumexp(x), torch's form guarding 5 instead of inf": lambda b, x, m, l: _x_minus_torch_logsumexp(
        b, x, m, l, guard=5.0),
    "x - m (no facts)": lambda b, x, m, l: b.op("sub", x, m),
    "x - m - l (no facts)": lambda b, x, m, l: b.op("sub", b.op("sub", x, m), l),
}


@pytest.mark.parametrize("form", NONPOSITIVE)
def test_nonpositive_forms(form):
    fn, value = _graph(NONPOSITIVE[form])
    assert at_most_zero(fn, value)


@pytest.mark.parametrize("form", EITHER_SIGN)
def test_forms_of_either_sign(form):
    fn, value = _graph(EITHER_SIGN[form])
    assert not at_most_zero(fn, value)


def test_log_of_a_sum_of_exponentials_from_its_max_is_nonnegative():
    fn, value = _graph(lambda b, x, m, l: _log_sum_exp_parts(b, x)[1])
    assert at_least_zero(fn, value)
    fn, value = _graph(lambda b, x, m, l: b.op("log", b.op("sum", b.op("exp", x), dims=(1,), keepdim=True)))
    assert not at_least_zero(fn, value)  # sum(exp(x)) may be below 1


@pytest.mark.parametrize(("metadata", "expected"), [
    ({"upper_bounds": ((1, 0),), "nonnegative": (2,)}, True),  # a saved max and log-sum: log-softmax's gradient
    ({"upper_bounds": ((1, 0),)}, False),  # l's sign unknown
    ({"nonnegative": (2,)}, False),  # m is not known to bound x
    ({"upper_bounds": ((2, 0),), "nonnegative": (1,)}, False),  # the facts are about the other parameters
])
def test_facts_about_parameters(metadata, expected):
    fn, value = _graph(EITHER_SIGN["x - m - l (no facts)"], metadata)
    assert at_most_zero(fn, value) is expected


def test_facts_print_parse_and_reach_regions():
    fn, _ = _graph(EITHER_SIGN["x - m - l (no facts)"], {"upper_bounds": ((1, 0),), "nonnegative": (2,)})
    b = Builder("outer", fn.metadata)
    x, m, l = b.param(ROWS, "x"), b.param(PER_ROW, "m"), b.param(PER_ROW, "l")
    # the region reads (l, x, m): the facts follow the parameters to their new positions
    region = Function("k", (fn.params[2], fn.params[0], fn.params[1]), fn.ops, fn.outputs,
                      facts_for(fn, (fn.params[2], fn.params[0], fn.params[1])))
    assert dict(region.metadata) == {"nonnegative": (0,), "upper_bounds": ((2, 1),)}
    kernel = b.emit("kernel", (l, x, m), REGISTRY.get("kernel").normalize_attrs({"name": "k"}), (region,), (ROWS,))
    outer = b.build([kernel.result])
    verify(outer)
    text = print_function(outer)
    assert "region(%l_1: tensor<4x1xf32>, %x_1: tensor<4x10xf32>, %m_1: tensor<4x1xf32>) attributes " \
           "{nonnegative = [0], upper_bounds = [[2, 1]]} {" in text
    parsed = parse(text)
    assert parsed == outer
    parsed_region = parsed.ops[0].regions[0]
    assert at_most_zero(parsed_region, parsed_region.outputs[0])
    assert facts_for(fn, (fn.params[0],)) == Attrs()  # x alone: no fact names only x


@pytest.mark.parametrize(("metadata", "message"), [
    ({"nonnegative": (3,)}, "nonnegative names 3"),
    ({"upper_bounds": ((0, 1),)}, "a [4, 10] bound cannot be a keepdim max of [4, 1]"),
    ({"upper_bounds": ((1,),)}, "is not (float parameter, float parameter)"),
])
def test_the_verifier_checks_the_facts(metadata, message):
    fn, _ = _graph(EITHER_SIGN["x - m (no facts)"], metadata)
    with pytest.raises(VerifyError, match=message.replace("[", r"\[").replace("]", r"\]").replace("(", r"\(")
                       .replace(")", r"\)")):
        verify(fn)


def test_shared_operands_are_not_walked_again():
    # exp(x) + exp(x), doubled 60 times: a walk without memory would take 2**60 steps
    b = Builder("doubling")
    total = b.op("exp", b.param(ROWS, "x"))
    for _ in range(60):
        total = b.op("add", total, total)
    fn = b.build([total])
    assert at_least_zero(fn, total)


def test_a_long_chain_is_answered_no_without_recursing_through_it():
    # exp(x) + exp(x) + ... 5000 deep: >= 0, but deeper than the analysis looks (it errs on the side of no)
    b = Builder("chain")
    e = b.op("exp", b.param(ROWS, "x"))
    total = e
    for _ in range(5000):
        total = b.op("add", total, e)
    fn = b.build([total])
    assert not at_least_zero(fn, total)
