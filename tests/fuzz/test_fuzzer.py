"""The fuzzer itself: programs are deterministic and valid, the comparison tolerates rounding but not bugs,
and a deliberately wrong backend is caught, classified, shrunk and written out as a failing test."""

import importlib.util
import math

import pytest
import torch

from neuroncc.errors import UnsupportedOpError
from neuroncc.testing.fuzz import (
    FuzzConfig,
    Input,
    Program,
    Spec,
    Stmt,
    check_program,
    compare_tensor,
    execute,
    generate_program,
    make_inputs,
)
from neuroncc.testing.fuzz_shrink import shrink, write_regression


def _sigmoid_as_tanh(gm, example_inputs):
    """A miscompiling backend: every sigmoid runs as tanh."""
    for node in gm.graph.nodes:
        if node.target in (torch.sigmoid, torch.nn.functional.sigmoid):
            node.target = torch.tanh
    gm.recompile()
    return gm.forward


def _has_matmul(gm):
    return any(getattr(node.target, "__name__", "") == "matmul" for node in gm.graph.nodes)


def _crash_on_matmul(gm, example_inputs):
    """A crashing backend: any matmul raises a plain RuntimeError."""
    if _has_matmul(gm):
        raise RuntimeError("backend bug: matmul")
    return gm.forward


def _refuse_matmul(gm, example_inputs):
    """A well-behaved backend that cannot do matmul."""
    if _has_matmul(gm):
        raise UnsupportedOpError("no matmul")
    return gm.forward


def _register(fn, name):
    if name not in torch._dynamo.list_backends(exclude_tags=()):
        torch._dynamo.register_backend(fn, name=name)
    return name


def _first_program_with(op_name, seed=11):
    for index in range(500):
        program = generate_program(seed, index)
        if any(s.op == op_name for s in program.stmts):
            return index, program
    raise AssertionError(f"no program with {op_name}")


def test_generation_is_deterministic():
    for index in range(20):
        assert generate_program(5, index).source() == generate_program(5, index).source()
    assert generate_program(5, 0).source() != generate_program(6, 0).source()


def test_programs_run_in_eager_with_the_inferred_types():
    for index in range(60):
        program = generate_program(1, index)
        inputs = make_inputs(program.inputs, program.data_seed, program.specials)
        outcome = execute(program.function(), inputs, backward=True)
        specs = {s.name: s.spec for s in program.stmts}
        for name, tensor in zip(program.outputs, outcome.outputs):
            assert tuple(tensor.shape) == specs[name].shape, program.source()
            assert str(tensor.dtype) == f"torch.{specs[name].dtype}", program.source()


def test_generator_covers_the_op_table():
    from neuroncc.testing.fuzz_ops import OPS

    seen = {s.op for index in range(400) for s in generate_program(2, index).stmts}
    missing = {op.name for op in OPS} - seen
    assert len(missing) <= 6, f"ops the generator never emits: {sorted(missing)}"


def test_input_data_is_deterministic_and_bounded():
    program = generate_program(0, 3, FuzzConfig(int_input_probability=1.0))
    first = make_inputs(program.inputs, 42, specials=False)
    second = make_inputs(program.inputs, 42, specials=False)
    for a, b, item in zip(first, second, program.inputs):
        assert torch.equal(a, b)
        if item.spec.high is not None:
            assert int(a.min()) >= 0 and int(a.max()) < item.spec.high


def test_compare_accepts_rounding_and_rejects_errors():
    want = torch.linspace(-3, 3, 50)
    assert compare_tensor(want * (1 + 1e-6), want, want.double()) is None  # float32 rounding
    assert compare_tensor(want * 1.01, want, want.double()) is not None  # a 1% error
    nan = want.clone()
    nan[3] = math.nan
    assert compare_tensor(want, nan, None) is not None  # NaN where eager has none
    assert compare_tensor(want.to(torch.int64), want.to(torch.int64) + (want > 2), None) is not None
    bf16 = torch.randn(64).to(torch.bfloat16)
    one_ulp = (bf16.float() * (1 + 2**-8)).to(torch.bfloat16)
    assert compare_tensor(one_ulp, bf16, bf16.double()) is None  # one bf16 rounding step


def test_compare_judges_by_float64_when_eager_is_no_closer():
    exact = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64)
    eager = torch.tensor([1.01, 2.0, 3.0])  # eager itself is 1% off (cancellation in eager)
    compiled = torch.tensor([0.995, 2.0, 3.0])  # compiled is no worse
    assert compare_tensor(compiled, eager, exact) is None
    assert compare_tensor(torch.tensor([1.2, 2.0, 3.0]), eager, exact) is not None


def test_a_miscompile_is_found_shrunk_and_written_as_a_failing_test(tmp_path):
    backend = _register(_sigmoid_as_tanh, "neuroncc_fuzz_test_sigmoid_as_tanh")
    index, program = _first_program_with("sigmoid")
    (finding,) = check_program(program, ("interp",), backend=backend)
    assert finding.status == "mismatch", finding
    small, backward = shrink(program, finding, backend=backend, budget=60)
    assert len(small.stmts) <= len(program.stmts)
    assert "sigmoid" in {s.op for s in small.stmts}
    path = write_regression(tmp_path, small, finding, backward=backward, backend=backend, seed=11, index=index)
    spec = importlib.util.spec_from_file_location("regression_under_test", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    test = next(getattr(module, name) for name in dir(module) if name.startswith("test_"))
    with pytest.raises(AssertionError):
        test()
    # The same program is fine on a correct backend: the test fails because of the bug, not by itself.
    from neuroncc.testing.fuzz import check_regression

    check_regression(module.program, module.INPUTS, data_seed=small.data_seed, specials=small.specials,
                     target="interp", backward=backward, backend="eager")


def test_crashes_and_refusals_are_told_apart():
    crash = _register(_crash_on_matmul, "neuroncc_fuzz_test_crash_on_matmul")
    refuse = _register(_refuse_matmul, "neuroncc_fuzz_test_refuse_matmul")
    _, program = _first_program_with("matmul")
    (crashed,) = check_program(program, ("interp",), backend=crash, backward=False)
    assert crashed.status == "crash" and "backend bug: matmul" in crashed.detail
    (refused,) = check_program(program, ("interp",), backend=refuse, backward=False)
    assert refused.status == "refused" and not refused.is_bug


def test_a_mismatch_pytorchs_own_traced_graph_has_is_not_counted_as_a_bug():
    """prod's traced backward (products of the others) differs from eager's grad * result / input at NaN/inf:
    aot_eager with the core decompositions has it too, so it is 'aot-differs'; a real miscompile is not."""
    x = Spec((4,), "float32")
    program = Program((Input("x0", x),), (Stmt("v0", "prod", (("a", "x0"), ("dim", 0)), Spec((), "float32")),),
                      ("v0",), data_seed=next(seed for seed in range(100) if _specials_everywhere(x, seed)),
                      specials=True)
    (finding,) = check_program(program, ("interp",), backend="aot_eager")
    assert finding.status == "aot-differs" and not finding.is_bug, finding
    assert "NaN positions differ" in finding.detail


def _specials_everywhere(spec, seed):
    """Data where eager's prod gradient is NaN everywhere but the traced one is not (a NaN and an inf)."""
    (tensor,) = make_inputs([spec], seed, specials=True)
    return bool(tensor.isnan().any() and tensor.isinf().any())
