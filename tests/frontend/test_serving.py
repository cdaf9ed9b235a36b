"""Serving an exported program without TorchDynamo (neuroncc/frontend/serving.py): ``neuroncc.compile_program``
gives eager's results through the program's own signature (positional and keyword inputs, pytree outputs),
keeps buffer updates in its state, refuses wrong inputs with a typed error naming the input, and a second,
fresh process loads the compiled program from the compile cache without compiling anything."""

from __future__ import annotations

import copy
import json
import os
import sys
from pathlib import Path

import pytest
import torch

import neuroncc
from neuroncc.frontend.serving import CompiledProgram


def _tiny_mlp() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10)).eval()


class _Normalized(torch.nn.Module):
    """Keyword inputs (one keyword-only), a buffer updated per call (BatchNorm in train mode) and a tuple-and-dict
    output."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 3)
        self.norm = torch.nn.BatchNorm1d(3)

    def forward(self, x: torch.Tensor, scale: torch.Tensor, *, bias: torch.Tensor):
        y = self.norm(self.linear(x)) * scale + bias
        return y, {"total": y.sum(0), "peak": y.amax()}


def _normalized_inputs() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return torch.randn(5, 4), torch.randn(3), torch.randn(3)


@pytest.fixture(scope="module")
def tiny():
    torch.manual_seed(0)
    model, x = _tiny_mlp(), torch.randn(8, 64)
    return model, x, neuroncc.compile_program(torch.export.export(model, (x,)))


@pytest.fixture(scope="module")
def normalized():
    torch.manual_seed(0)
    model = _Normalized().train()
    x, scale, bias = _normalized_inputs()
    program = torch.export.export(copy.deepcopy(model), (x, scale), {"bias": bias})
    return model, neuroncc.compile_program(program)


def test_the_tiny_mlp_gives_eagers_results_on_every_call(tiny):
    model, x, served = tiny
    assert isinstance(served, CompiledProgram)
    with torch.no_grad():
        for _ in range(3):  # the first call is checked in Python, the later ones by the C++ guard
            torch.testing.assert_close(served(x), model(x))
        other = torch.randn(8, 64)
        torch.testing.assert_close(served(other), model(other))
    assert served._guard is not None and served._direct is not None  # the lean path was taken
    assert not served(x).requires_grad


def test_after_the_first_call_inputs_are_checked_by_the_guard_alone(tiny, monkeypatch):
    from neuroncc.frontend import serving

    model, x, served = tiny
    checked = []
    check = serving._checked_input
    monkeypatch.setattr(serving, "_checked_input", lambda *args: checked.append(args[1].target) or check(*args))
    with torch.no_grad():
        served(x)
        count = len(checked)
        for _ in range(3):
            served(torch.randn(8, 64))
        assert len(checked) == count  # no Python check: the C++ guard passed them
        served(x.double().float()[:, :].t().contiguous().t())  # another layout: checked in Python again
        assert len(checked) == count + 1


class _Scaled(torch.nn.Module):
    """One output of 2 MiB from an input and two parameters (the state before the input)."""

    def __init__(self) -> None:
        super().__init__()
        self.w, self.b = torch.nn.Parameter(torch.randn(1024)), torch.nn.Parameter(torch.randn(1024))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.gelu(x * self.w + self.b)


def test_a_large_one_output_program_enters_the_one_frame_call_with_fresh_outputs(tiny, normalized, monkeypatch):
    from neuroncc.frontend import serving

    torch.manual_seed(0)
    model, x = _Scaled().eval(), torch.randn(512, 1024)
    served = neuroncc.compile_program(torch.export.export(model, (x,)))
    # the tiny MLP's 320-byte output and a buffer update keep the launch path
    assert served._one is not None and tiny[2]._one is None and normalized[1]._one is None
    with torch.no_grad():
        served(x)  # (the first call makes the guard)
        monkeypatch.setattr(serving._DirectProgram, "__call__", lambda *args: pytest.fail("the launch path ran"))
        first, second = served(x), served(torch.randn(512, 1024))
        torch.testing.assert_close(first, model(x))
        assert first.data_ptr() != second.data_ptr() and not first.requires_grad
        with pytest.raises(neuroncc.InputError, match="requires grad"):  # the guard still comes first
            with torch.enable_grad():
                served(x.clone().requires_grad_())


def test_bf16_and_the_general_path_of_other_targets():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 4)).eval()
    x = torch.randn(8, 16)
    model_bf16 = copy.deepcopy(model).bfloat16()
    bf16 = neuroncc.compile_program(torch.export.export(model_bf16, (x.bfloat16(),)))
    interp = neuroncc.compile_program(torch.export.export(model, (x,)), target="interp")
    assert bf16._direct is not None and interp._direct is None  # bf16 crosses as its bits; interp as arrays
    with torch.no_grad():
        for _ in range(2):
            torch.testing.assert_close(bf16(x.bfloat16()), model_bf16(x.bfloat16()))
            torch.testing.assert_close(interp(x), model(x))
        with pytest.raises(neuroncc.InputError, match="expected a CPU tensor float32"):
            interp(x.bfloat16())


def test_inputs_of_another_layout_or_mode_give_the_same_results(tiny):
    model, x, served = tiny
    transposed = torch.randn(64, 8).t()  # the right shape, strides the executable does not take
    with torch.no_grad():
        torch.testing.assert_close(served(transposed), model(transposed))
        torch.testing.assert_close(served(input=x), model(x))
    with torch.inference_mode():
        torch.testing.assert_close(served(x), model(x))
        torch.testing.assert_close(served(x), model(x))


def test_buffer_updates_kwargs_and_pytree_outputs_follow_eager(normalized):
    model, served = normalized
    eager = copy.deepcopy(model)
    for call in range(4):
        x, scale, bias = _normalized_inputs()
        # keywords in another order, then everything positional (the exported forward's argument names)
        ours = served(x, bias=bias, scale=scale) if call % 2 else served(x, scale, bias)
        theirs = eager(x, scale, bias=bias)
        assert isinstance(ours, tuple) and isinstance(ours[1], dict)
        torch.testing.assert_close(ours, tuple(t for t in theirs), rtol=1e-5, atol=1e-5)
    for name in ("running_mean", "running_var", "num_batches_tracked"):
        torch.testing.assert_close(served.state[f"norm.{name}"], getattr(eager.norm, name), rtol=1e-5, atol=1e-6)
    assert int(served.state["norm.num_batches_tracked"]) == 4


def test_the_state_is_the_programs_own_copy_and_edits_in_place_show():
    torch.manual_seed(0)
    model, x = _tiny_mlp(), torch.randn(8, 64)
    served = neuroncc.compile_program(torch.export.export(model, (x,)))
    with torch.no_grad():
        served(x)
        model[2].bias.zero_()  # the model's weights are not the program's
        assert not torch.equal(served(x), model(x))
        served.state["2.bias"].zero_()  # the program's, edited in place: the next call reads them
        torch.testing.assert_close(served(x), model(x))
    with pytest.raises(TypeError):
        served.state["2.bias"] = torch.zeros(10)


def _wrong_calls(x: torch.Tensor) -> list[tuple[str, tuple, dict, str]]:
    return [
        ("dtype", (x.double(),), {}, r"input 'input': expected a CPU tensor float32\[8, 64\], got float64\[8, 64\]"),
        ("shape", (x[:4],), {}, r"input 'input': expected a CPU tensor float32\[8, 64\], got float32\[4, 64\]"),
        ("missing", (), {}, r"missing input 'input'"),
        ("not a tensor", (x.tolist(),), {}, r"input 'input': expected a CPU tensor float32\[8, 64\], got list"),
        ("a number", (3.0,), {}, r"input 'input': expected .* got float"),
        ("too many", (x, x), {}, r"takes 1 inputs \(input\), got 2 positional"),
        ("unknown keyword", (x,), {"mask": x}, r"unexpected input 'mask'"),
        ("given twice", (x,), {"input": x}, r"input 'input' given twice"),
        ("requires grad", (x.clone().requires_grad_(),), {}, r"input 'input' requires grad"),
    ]


@pytest.mark.parametrize("case", range(len(_wrong_calls(torch.zeros(8, 64)))),
                         ids=[c[0] for c in _wrong_calls(torch.zeros(8, 64))])
def test_wrong_inputs_raise_a_typed_error_naming_the_input(tiny, case):
    _, x, served = tiny
    served(x)  # the C++ guard is in place: a wrong call must still be caught
    _, args, kwargs, message = _wrong_calls(x)[case]
    with pytest.raises(neuroncc.InputError, match=message):
        served(*args, **kwargs)


def test_a_nested_input_structure_that_differs_is_a_typed_error(normalized):
    _, served = normalized
    x, scale, bias = _normalized_inputs()
    with pytest.raises(neuroncc.InputError, match="missing input 'bias'"):
        served(x, scale)
    with pytest.raises(neuroncc.InputError, match="structure"):
        served((x,), scale, bias=bias)


def test_an_input_that_requires_grad_is_read_as_data_under_no_grad(tiny):
    model, x, served = tiny
    wants_grad = x.clone().requires_grad_()
    with torch.no_grad():
        out = served(wants_grad)
        torch.testing.assert_close(out, model(x))
    assert not out.requires_grad


def test_an_archive_path_and_a_bad_argument(tmp_path, tiny):
    model, x, _ = tiny
    path = tmp_path / "tiny-mlp.pt2"
    torch.export.save(torch.export.export(model, (x,)), path)
    served = neuroncc.compile_program(path)
    with torch.no_grad():
        torch.testing.assert_close(served(x), model(x))
    with pytest.raises(neuroncc.InputError, match="no such file"):
        neuroncc.compile_program(tmp_path / "missing.pt2")
    with pytest.raises(neuroncc.InputError, match="ExportedProgram or the path"):
        neuroncc.compile_program(model)
    with pytest.raises(neuroncc.InputError, match="unknown target 'gpu'"):
        neuroncc.compile_program(path, target="gpu")
    # a misspelled option compiled with the default, without a word
    with pytest.raises(neuroncc.InputError, match=r"compile_program: unknown option .thredas. \(did you mean .threads"):
        neuroncc.compile_program(path, options={"thredas": 1})


_CHILD = """
import json, sys, torch, neuroncc
decomposed = []
run_decompositions = torch.export.ExportedProgram.run_decompositions
torch.export.ExportedProgram.run_decompositions = lambda *a, **k: decomposed.append(1) or run_decompositions(*a, **k)
served = neuroncc.compile_program(sys.argv[1])
torch.manual_seed(1)
out = served(torch.randn(8, 64))
stats = neuroncc.stats()
records = neuroncc.frontend.stats.compile_records()
print(json.dumps({"cache": served.cache, "misses": stats["cache_misses"], "hits": stats["cache_hits"],
                  "compiles": len(records), "passes": sum(len(r.record.pass_seconds) for r in records),
                  "decomposed": len(decomposed),
                  "out": out.flatten().tolist()}))
"""


def test_a_second_process_loads_the_program_from_the_cache_and_compiles_nothing(tmp_path, warm_python):
    torch.manual_seed(0)
    model, x = _tiny_mlp(), torch.randn(8, 64)
    path = tmp_path / "tiny.pt2"
    torch.export.save(torch.export.export(model, (x,)), path)
    environ = {k: v for k, v in os.environ.items() if k not in ("NEURONCC_DISABLE_CACHE", "NEURONCC_REMOTE_CACHE")}
    environ["NEURONCC_CACHE_DIR"] = str(tmp_path / "cache")
    runs = []
    for python in (warm_python, warm_python.other):  # the second reads what the first wrote
        completed = python.run([sys.executable, "-c", _CHILD, str(path)], env=environ, timeout=300,
                               cwd=Path(__file__).parents[2])  # a fresh process (tests/warm_python.py)
        assert completed.returncode == 0, completed.stderr[-3000:]
        runs.append(json.loads(completed.stdout.strip().splitlines()[-1]))
    first, second = runs
    assert (first["cache"], first["misses"], first["hits"], first["compiles"]) == ("miss", 1, 0, 1)
    # the program cache's hit (frontend/program_cache.py): the artifact loaded before anything is decomposed
    assert (second["cache"], second["misses"], second["hits"], second["compiles"], second["passes"]) == \
        ("hit", 0, 1, 0, 0)
    assert (first["decomposed"], second["decomposed"]) == (1, 0), "the second process decomposed the program"
    assert second["out"] == first["out"]
