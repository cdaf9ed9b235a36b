"""Donated outputs computed in their parameter's buffer (codegen/llvm/in_place.py, program.py): the numbers.

tests/filecheck/in-place.nir says which donations each case's launch plan takes; here every case runs against
the reference interpreter, the inputs the kernels overwrite hold the outputs afterwards, the others are left
alone, and forcing the refused cases in place gives wrong numbers (so the guards are what keeps them right).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from neuroncc.codegen.llvm import program
from neuroncc.codegen.llvm.launch_plan import CpuLaunchPlan
from neuroncc.driver.compile import compile_graph
from neuroncc.errors import VerifyError
from neuroncc.executors.cpu.address_call import AddressCall
from neuroncc.executors.cpu.launcher import load_cpu_executable
from neuroncc.ir import interpret, parse, verify

CASES_FILE = Path(__file__).resolve().parent.parent / "filecheck" / "in-place.nir"


def _cases() -> dict[str, str]:
    cases = {}
    for text in CASES_FILE.read_text().split("// -----"):
        fn = parse(text)
        cases[fn.name] = text
    return cases


CASES = _cases()
#: the donations each case's plan takes (output position -> param position), as in-place.nir says
TAKEN = {"sgd": {0: 0}, "read_after_at_the_same_index": {0: 0}, "adam_like": {1: 1, 2: 2}, "transposed_read": {},
         "centered": {}, "reduced_after": {}, "overwrite_unread": {}, "read_later": {}, "returned_too": {}}


def _inputs(fn, rng) -> list[np.ndarray]:
    # positive values: pow and sqrt of Adam-like updates stay finite
    return [rng.uniform(0.5, 1.5, size=p.type.shape).astype(p.type.dtype.numpy) for p in fn.params]


def _compile(fn):
    return compile_graph(fn, target="cpu", cache=None)


@pytest.mark.parametrize("name", sorted(CASES))
def test_results_match_the_interpreter_and_only_taken_donations_overwrite_inputs(name, rng):
    fn = parse(CASES[name])
    exe = _compile(fn)
    assert exe.in_place == TAKEN[name]
    inputs = _inputs(fn, rng)
    expected = interpret(fn, [a.copy() for a in inputs])
    given = [a.copy() for a in inputs]
    results = exe(*given)
    for position, (got, want) in enumerate(zip(results, expected)):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6, err_msg=f"output {position}")
    for param, array in enumerate(given):
        written = [o for o, p in exe.in_place.items() if p == param]
        if written:
            assert np.shares_memory(results[written[0]], array)
            np.testing.assert_allclose(array, expected[written[0]], rtol=1e-6, atol=1e-6)
        else:
            np.testing.assert_array_equal(array, inputs[param])


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_address_call_writes_the_donated_input_and_leaves_the_output_address_alone(name, rng):
    fn = parse(CASES[name])
    exe = _compile(fn)
    inputs = _inputs(fn, rng)
    expected = interpret(fn, [a.copy() for a in inputs])
    given = [np.ascontiguousarray(a.copy()) for a in inputs]
    outputs = [np.full(np.shape(e), np.nan, dtype=np.asarray(e).dtype) for e in expected]
    AddressCall(exe)([a.ctypes.data for a in given], [o.ctypes.data for o in outputs])
    for position, want in enumerate(expected):
        if position in exe.in_place:
            assert np.isnan(outputs[position]).all()  # not written: the value is in the input
            np.testing.assert_allclose(given[exe.in_place[position]], want, rtol=1e-6, atol=1e-6)
        else:
            np.testing.assert_allclose(outputs[position], want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("name", ["adam_like", "transposed_read", "reduced_after"])
def test_forcing_a_refused_donation_in_place_gives_wrong_numbers(name, rng, monkeypatch):
    """The kernel-level guard is what keeps these right: taken anyway, the kernels read values they wrote."""
    monkeypatch.setattr(program, "writes_in_place", lambda plan, param, output: True)
    fn = parse(CASES[name])
    exe = _compile(fn)
    assert set(exe.in_place) == {o for o, _ in fn.metadata["donated"]}
    inputs = _inputs(fn, rng)
    expected = interpret(fn, [a.copy() for a in inputs])
    results = exe(*[a.copy() for a in inputs])
    assert any(not np.allclose(r, e, rtol=1e-5, atol=1e-6) for r, e in zip(results, expected))


def test_the_launch_plan_keeps_its_in_place_outputs_through_json_and_artifacts(tmp_path, rng):
    fn = parse(CASES["adam_like"])
    exe = _compile(fn)
    plan = CpuLaunchPlan.from_json(exe.plan.to_json())
    assert dict(plan.in_place) == exe.in_place == {1: 1, 2: 2}
    exe.save(tmp_path)
    loaded = load_cpu_executable(tmp_path, exe.function)
    assert loaded.in_place == exe.in_place
    inputs = _inputs(fn, rng)
    expected = interpret(fn, [a.copy() for a in inputs])
    given = [a.copy() for a in inputs]
    for got, want in zip(loaded(*given), expected):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(given[1], expected[1], rtol=1e-6, atol=1e-6)


def test_a_donated_input_that_crosses_as_a_copy_is_written_in_the_copy(rng):
    """An input in another layout than its parameter's is staged in a copy: the caller's array is untouched
    and the returned value is right (the front end then copies it in)."""
    fn = parse(CASES["sgd"])
    exe = _compile(fn)
    p = np.asfortranarray(rng.standard_normal((8, 16)).astype(np.float32))
    g = rng.standard_normal((8, 16)).astype(np.float32)
    before = p.copy()
    (result,) = exe(p, g)
    np.testing.assert_array_equal(p, before)
    np.testing.assert_allclose(result, before - 0.5 * g, rtol=1e-6)


@pytest.mark.parametrize("donated, message", [
    ("[[0, 1]]", "cannot be donated"),  # a [64] output into a 0-dim parameter
    ("[[0, 0], [0, 0]]", "appears twice"),
    ("[[3, 0]]", "names no output"),
    ("[0]", r"is not \(output, parameter\)"),
])
def test_the_verifier_refuses_malformed_donations(donated, message):
    text = """func @f(%p: tensor<64xf32>, %s: tensor<f32>) -> (tensor<64xf32>) attributes {donated = DONATED} {
  %0 = add %p, %s : tensor<64xf32>
  return %0
}""".replace("DONATED", donated)
    with pytest.raises(VerifyError, match=message):
        verify(parse(text, verify=False))
