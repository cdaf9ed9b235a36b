"""``neuroncc run`` on programs as users export them: their own output types (a Hugging Face ``ModelOutput``, a
registered dataclass) read in a process that never imported them, dynamic sizes (``torch.export.Dim``) run at
concrete sizes, complex inputs, and inputs eager PyTorch itself refuses. Every result is checked against the
exported program's eager module."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import torch
import torch.utils._pytree as pytree
from cli_testing import ForkServer, edit_json, rewrite, run_in_process

import neuroncc
from neuroncc.frontend.exported import load_program


class KeyedOutput(dict):
    """A ``ModelOutput`` stand-in: transformers registers each subclass with its keys as the pytree context,
    under the name ``module.Class``, when the module defining it is imported."""


pytree.register_pytree_node(KeyedOutput, lambda o: (list(o.values()), list(o.keys())),
                            lambda values, keys: KeyedOutput(zip(keys, values)),
                            serialized_type_name=f"{__name__}.KeyedOutput")


@dataclasses.dataclass
class Heads:
    scores: torch.Tensor
    hidden: torch.Tensor
    unused: torch.Tensor | None = None


torch.export.register_dataclass(Heads, serialized_type_name=f"{__name__}.Heads")


class OwnTypes(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)

    def forward(self, x):
        h = self.linear(x)
        return KeyedOutput(logits=h.sum(-1), heads=Heads(torch.softmax(h, -1), torch.tanh(h)))


def _export(path, module, args, kwargs=None, **how):
    torch.manual_seed(0)
    program = torch.export.export(module, args, kwargs, **how)
    torch.export.save(program, path)
    return program


@pytest.fixture(scope="module")
def own_types_pt2(tmp_path_factory):
    return _saved(tmp_path_factory, "own_types", OwnTypes(), (torch.randn(3, 4),))


def _saved(tmp_path_factory, name, module, args, **how):
    path = tmp_path_factory.mktemp("pt2") / f"{name}.pt2"
    _export(path, module, args, **how)
    return path


@pytest.fixture(scope="module")
def cli_server(tmp_path_factory):
    server = ForkServer(tmp_path_factory.mktemp("forkserver"))
    yield server
    server.close()


def test_own_output_types_run_in_a_process_that_never_imported_them(own_types_pt2, cli_server, tmp_path):
    """The forked command has not imported this module, so KeyedOutput and Heads are unknown to its pytree
    registry (as transformers' ModelOutputs are to a fresh ``neuroncc run``): the program still loads, runs and
    matches eager, output by output, and writes its outputs."""
    (tmp_path / "home").mkdir()
    out = tmp_path / "out.npz"
    result = cli_server.run("run", str(own_types_pt2), "--target", "interp", "--check", "--save-outputs", str(out),
                            "-q", cwd=tmp_path, home=tmp_path / "home", cache=tmp_path / "cache")
    assert result.returncode == 0, result.stderr
    assert "check passed" in result.stdout and result.stdout.count("check    output") == 3
    x = torch.randn((3, 4), generator=torch.Generator().manual_seed(0))  # --random's draw for seed 0
    expected = pytree.tree_leaves(torch.export.load(own_types_pt2).module()(x))
    with np.load(out) as saved:
        for ours, theirs in zip(saved.values(), expected, strict=True):
            np.testing.assert_allclose(ours, theirs.detach().numpy(), rtol=1e-6, atol=1e-6)


def test_unknown_output_types_become_dicts_of_their_fields(own_types_pt2, tmp_path):
    """In this process the types are known: the loader keeps them. Renamed to names no module registers (what a
    process without the user's code sees), each keyed type comes back as a dict of its fields."""
    assert type(load_program(own_types_pt2).module()(torch.randn(3, 4))) is KeyedOutput

    def rename(program):
        for entry in program["graph_module"]["module_call_graph"]:
            if entry["signature"]:
                spec = entry["signature"]["out_spec"]
                entry["signature"]["out_spec"] = spec.replace(__name__, "not_imported_anywhere")

    renamed = rewrite(own_types_pt2, tmp_path / "renamed.pt2", edit_json("models/", rename))
    x = torch.randn(3, 4)
    served = neuroncc.compile_program(renamed, target="interp")(x)
    expected = torch.export.load(own_types_pt2).module()(x)
    assert set(served) == {"logits", "heads"} and set(served["heads"]) == {"scores", "hidden"}
    torch.testing.assert_close(served["logits"], expected["logits"].detach())
    torch.testing.assert_close(served["heads"]["scores"], expected["heads"].scores.detach())
    torch.testing.assert_close(served["heads"]["hidden"], expected["heads"].hidden.detach())


class MatMul(torch.nn.Module):
    def forward(self, x, y):
        return torch.relu(x @ y)


@pytest.fixture(scope="module")
def dynamic_pt2(tmp_path_factory):
    """An MLP with a dynamic batch dim (1..64; exported at 4), and a matmul whose inner dim is one shared size."""
    mlp = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4)).eval()
    batch = torch.export.Dim("batch", min=1, max=64)
    inner = torch.export.Dim("inner")
    return {"mlp": _saved(tmp_path_factory, "mlp", mlp, (torch.randn(4, 8),), dynamic_shapes=({0: batch},)),
            "matmul": _saved(tmp_path_factory, "matmul", MatMul(), (torch.randn(3, 6), torch.randn(6, 5)),
                             dynamic_shapes={"x": {1: inner}, "y": {0: inner}})}


def test_dynamic_batch_runs_at_the_arrays_size(dynamic_pt2, capsys, tmp_path):
    x = np.random.default_rng(1).standard_normal((7, 8), dtype=np.float32)
    np.savez(tmp_path / "in.npz", input=x)
    result = run_in_process(capsys, "run", str(dynamic_pt2["mlp"]), "--inputs", str(tmp_path / "in.npz"), "--check",
                            "--save-outputs", str(tmp_path / "out.npz"), "-q")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "dynamic  input dim 0 = 7" in result.stdout and "check passed" in result.stdout
    expected = torch.export.load(dynamic_pt2["mlp"]).module()(torch.from_numpy(x)).detach().numpy()
    with np.load(tmp_path / "out.npz") as saved:
        (ours,) = saved.values()
    np.testing.assert_allclose(ours, expected, rtol=1e-5, atol=1e-5 * np.abs(expected).max())
    random = run_in_process(capsys, "run", str(dynamic_pt2["mlp"]), "--target", "interp", "--check", "-q")
    assert random.returncode == 0 and "input dim 0 = 4" in random.stdout  # the exported example's size


@pytest.mark.parametrize("case", ["out of bounds", "shared dim differs", "compile"])
def test_dynamic_sizes_that_cannot_run_are_one_line(dynamic_pt2, capsys, tmp_path, case):
    rng = np.random.default_rng(2)
    if case == "out of bounds":
        np.savez(tmp_path / "in.npz", input=rng.standard_normal((65, 8), dtype=np.float32))
        argv, needle = ["run", str(dynamic_pt2["mlp"]), "--inputs", str(tmp_path / "in.npz")], "dim 0 is dynamic (s"
    elif case == "shared dim differs":
        np.savez(tmp_path / "in.npz", x=rng.standard_normal((3, 6), dtype=np.float32),
                 y=rng.standard_normal((7, 5), dtype=np.float32))
        argv, needle = ["run", str(dynamic_pt2["matmul"]), "--inputs", str(tmp_path / "in.npz")], "one dynamic size"
    else:
        argv, needle = ["compile", str(dynamic_pt2["mlp"])], "dim 0 is dynamic (s"
    result = run_in_process(capsys, *argv, "--target", "interp", "-q")
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.count("\n") == 1 and needle in result.stderr, result.stderr


class FloorDivide(torch.nn.Module):
    def forward(self, a, b):
        return a // b


class Squared(torch.nn.Module):
    def forward(self, z):
        return (z * z).real, z.abs()


def test_eager_refusing_the_inputs_is_a_typed_error(capsys, tmp_path):
    """Random integers are 0 or 1: an integer division by zero, which eager PyTorch raises on, and so does the
    compiled program (before --check runs eager), naming the op and saying where the inputs came from."""
    path = tmp_path / "div.pt2"
    ints = torch.randint(1, 9, (4, 4), dtype=torch.int32)
    _export(path, FloorDivide(), (ints, ints))
    result = run_in_process(capsys, "run", str(path), "--target", "interp", "--check", "-q")
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.count("\n") == 1 and "integer division by zero" in result.stderr, result.stderr
    assert "random integers are drawn from {0, 1}: give fitting ones with --inputs X.npz" in result.stderr
    np.savez(tmp_path / "in.npz", a=np.full((4, 4), 7, np.int32), b=np.full((4, 4), 2, np.int32))
    given = run_in_process(capsys, "run", str(path), "--target", "interp", "--check", "-q", "--inputs",
                           str(tmp_path / "in.npz"))
    assert given.returncode == 0 and "check passed" in given.stdout, given.stdout + given.stderr


def test_complex_inputs_random_and_from_npz(capsys, tmp_path):
    path = tmp_path / "complex.pt2"
    _export(path, Squared(), (torch.randn(3, 4, dtype=torch.complex64),))
    random = run_in_process(capsys, "run", str(path), "--target", "interp", "--check", "-q")
    assert random.returncode == 0 and "z complex64[3, 4]" in random.stdout, random.stdout + random.stderr
    z = (np.arange(12) - 5.5 + 1j * np.arange(12)[::-1]).astype(np.complex64).reshape(3, 4)
    np.savez(tmp_path / "in.npz", z=z)
    given = run_in_process(capsys, "run", str(path), "--target", "interp", "--check", "-q", "--inputs",
                           str(tmp_path / "in.npz"))
    assert given.returncode == 0 and "check passed" in given.stdout, given.stdout + given.stderr


class SoftmaxCumsum(torch.nn.Module):
    def forward(self, x):
        return torch.softmax(x, -1).cumsum(-1)


def test_float64_programs_say_they_compute_in_float32(capsys, tmp_path):
    """As under torch.compile (one Float64Warning per graph): the served path and ``run`` say so too."""
    from neuroncc.frontend.diagnostics import Float64Warning

    path = tmp_path / "double.pt2"
    program = _export(path, SoftmaxCumsum(), (torch.randn(3, 4, dtype=torch.float64),))
    with pytest.warns(Float64Warning, match="computes float64 tensors in float32"):
        neuroncc.compile_program(program, target="interp")
    result = run_in_process(capsys, "run", str(path), "--target", "interp", "--check", "-q")
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stderr.startswith("neuroncc: warning: program 'double': neuroncc computes float64 tensors in "
                                    "float32") and result.stderr.count("\n") == 1, result.stderr


class Scaled(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 3)

    def forward(self, x, factor: int, *, use_cache: bool = True, mode: str | None = None):
        y = self.linear(x) * factor
        return (y.cumsum(-1) if use_cache else y) if mode is None else y.flip(-1)


def test_python_values_fixed_at_export(capsys, tmp_path):
    """``torch.export.export(model, (x, 3), {"use_cache": False})``, as Hugging Face decoders are exported: the
    values are fixed in the program; ``run`` passes them, the served program checks a call passes the same."""
    path = tmp_path / "scaled.pt2"
    x = torch.randn(2, 4)
    program = _export(path, Scaled(), (x, 3), {"use_cache": False, "mode": None})
    result = run_in_process(capsys, "run", str(path), "--check", "-q", "--repeat", "2")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "x float32[2, 4], factor=3 (fixed at export), use_cache=False (fixed at export)" in result.stdout
    served = neuroncc.compile_program(program, target="interp")
    torch.testing.assert_close(served(x, 3, use_cache=False, mode=None),
                               program.module()(x, 3, use_cache=False, mode=None))
    with pytest.raises(neuroncc.InputError, match="exported with use_cache=False fixed, got True"):
        served(x, 3, use_cache=True, mode=None)


class DictIn(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)

    def forward(self, inputs, *, scale: float = 1.0):
        return torch.tanh(self.linear(inputs["a"]) * scale + inputs["b"][0])


@pytest.mark.parametrize("command", [["evaluate", "--repeat", "1"], ["evaluate", "--train", "--repeat", "1"],
                                     ["compile", "--train", "--no-cache"]])
def test_pytree_inputs_and_fixed_values_evaluate_and_train(capsys, tmp_path, command):
    """evaluate called the module with the flat tensors (a TypeError for dict inputs, an internal error), and the
    joint export traced a fixed Python value as a graph input (refused as a NoneType input)."""
    path = tmp_path / "dict_in.pt2"
    _export(path, DictIn(), ({"a": torch.randn(3, 4), "b": (torch.randn(3, 4),)},), {"scale": 0.5})
    result = run_in_process(capsys, command[0], str(path), *command[1:], "--target", "interp", "-q")
    assert result.returncode == 0, result.stdout + result.stderr
    assert ("verdict      PASS" if command[0] == "evaluate" else "forward + backward") in result.stdout
    assert "warning" not in result.stderr, result.stderr  # torch's internal deprecation noise stays hidden


class ResidualMLP(torch.nn.Module):
    """Six float16 residual layers: two correct programs end beyond ``assert_close``'s float16 tolerance of each
    other, equally far from float64 (eager's rounding differs from neuroncc's by an ulp, amplified per layer)."""

    def __init__(self, layers=6, width=128):
        super().__init__()
        self.norm = torch.nn.LayerNorm(width)
        self.layers = torch.nn.ModuleList(torch.nn.Linear(width, width) for _ in range(layers))

    def forward(self, x):
        for layer in self.layers:
            x = torch.nn.functional.gelu(layer(self.norm(x))) + x
        return x


def test_float16_outputs_are_judged_against_float64(capsys, tmp_path):
    torch.manual_seed(0)
    path = tmp_path / "f16.pt2"
    _export(path, ResidualMLP().half(), (torch.randn(8, 128).half(),))
    result = run_in_process(capsys, "run", str(path), "--random", "--check", "-q")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "check passed" in result.stdout, result.stdout


def test_low_precision_check_rejects_results_further_from_float64_than_eager():
    """``_check`` itself, on made-up results: eager and ours equally far from the exact values on either side
    (beyond assert_close's float16 tolerance of each other) pass; ours 30x further, or with a NaN eager does not
    have, fail; float32 outputs keep assert_close's verdict."""
    from neuroncc.cli.run import _check

    exact = torch.linspace(-1, 1, 101, dtype=torch.float64)
    step = 1e-3 * torch.where(torch.arange(101) % 2 == 0, 1.0, -1.0).double()
    eager = (exact + step).half()
    verdicts = {}
    for name, ours in {"level": (exact - step).half(), "further": (exact + 30 * step).half(),
                       "nan": (exact - step).half().index_fill(0, torch.tensor([3]), float("nan"))}.items():
        verdicts[name] = _check([ours], [eager], ("y",), lambda: [exact])
    assert verdicts == {"level": 0, "further": 1, "nan": 1}
    assert _check([(exact - step).float()], [(exact + step).float()], ("y",), lambda: [exact]) == 1


class UpdatesState(torch.nn.Module):
    """Train-mode BatchNorm (running statistics, a counter), a KV cache written with ``index_copy_``, a bfloat16
    moving average, and two inputs updated in place (one written with ``copy_``)."""

    def __init__(self):
        super().__init__()
        self.norm = torch.nn.BatchNorm1d(4)
        self.register_buffer("cache", torch.zeros(2, 6, 4))
        self.register_buffer("ema", torch.zeros(4, dtype=torch.bfloat16))

    def forward(self, x, position, scratch, steps):
        h = self.norm(x)
        self.cache.index_copy_(1, position, h.view(2, -1, 4))
        self.ema.mul_(0.5).add_(h.mean(0).to(torch.bfloat16))
        scratch.copy_(h * 2)
        steps.add_(1)
        return self.cache.sum(1) + self.ema.float(), scratch.relu()


def _state_program(path):
    example = (torch.randn(4, 4), torch.tensor([1, 4]), torch.zeros(4, 4), torch.zeros((), dtype=torch.int64))
    return _export(path, UpdatesState().train(), example)


def test_run_check_compares_updated_buffers_and_inputs(capsys, tmp_path):
    """``run --check`` compares the state the program leaves after one call (buffers and inputs it updates in
    place) with what eager's exported module leaves, line by line; the in-place input updates were refused."""
    path = tmp_path / "state.pt2"
    _state_program(path)
    np.savez(tmp_path / "in.npz", x=np.random.default_rng(0).standard_normal((4, 4), dtype=np.float32),
             position=np.array([1, 4]), scratch=np.zeros((4, 4), np.float32), steps=np.array(0))
    result = run_in_process(capsys, "run", str(path), "--inputs", str(tmp_path / "in.npz"), "--check", "-q",
                            "--repeat", "2")
    assert result.returncode == 0, result.stdout + result.stderr
    checked = [line.split(":")[0].strip() for line in result.stdout.splitlines() if line.startswith("  check")]
    assert [name.rsplit(" ", 1)[0] for name in checked[:2]] == ["check    output 0", "check    output 1"]
    assert sorted(checked[2:]) == sorted([
        *(f"check    buffer {fqn}" for fqn in ("norm.running_mean", "norm.running_var", "norm.num_batches_tracked",
                                               "cache", "ema")),
        "check    input scratch (updated in place)", "check    input steps (updated in place)"])
    assert "check passed: every output and updated buffer or input matches eager PyTorch" in result.stdout


def test_served_program_updates_its_state_and_inputs_as_eager(tmp_path):
    """Three calls of ``compile_program``'s callable leave the buffers and the caller's tensors as three calls of
    the exported module do (a counter input included)."""
    program = _state_program(tmp_path / "state.pt2")
    for target in ("interp", "cpu"):
        served = neuroncc.compile_program(program, target=target)
        _three_calls_as_eager(program, served)
        # on cpu the calls after the first passed the C++ guard and took the direct call (data pointers)
        assert (served._guard is not None) == (target == "cpu")


def _three_calls_as_eager(program, served):
    eager = program.module()
    ours_steps, eager_steps = torch.zeros((), dtype=torch.int64), torch.zeros((), dtype=torch.int64)
    for call in range(3):
        x, position = torch.randn(4, 4), torch.tensor([call, 5 - call])
        ours_scratch, eager_scratch = torch.zeros(4, 4), torch.zeros(4, 4)
        ours = served(x, position, ours_scratch, ours_steps)
        torch.testing.assert_close(ours, eager(x, position, eager_scratch, eager_steps))
        torch.testing.assert_close(ours_scratch, eager_scratch)
    assert int(ours_steps) == int(eager_steps) == 3
    buffers = dict(eager.named_buffers())
    for fqn in ("norm.running_mean", "norm.running_var", "norm.num_batches_tracked", "cache", "ema"):
        torch.testing.assert_close(served.state[fqn], buffers[fqn])


class RootCache(torch.nn.Module):
    """A parameter and an updated buffer on the root module (not in a submodule)."""

    def __init__(self):
        super().__init__()
        self.scale = torch.nn.Parameter(torch.randn(4))
        self.register_buffer("cache", torch.zeros(2, 6, 4))

    def forward(self, x, position):
        self.cache.index_copy_(1, position, x * self.scale)
        return self.cache.sum(1)


def test_evaluate_float64_reference_reads_the_roots_own_state(capsys, tmp_path):
    """evaluate's float64 copy (``.double()``) replaced the root module's tensors in the flat module only: the
    program's module read the float32 buffer (``index_copy_`` refused float64 values into it: an internal
    error) and the float32 parameter (a reference computed partly in float32)."""
    from neuroncc.frontend.exported import flat_module

    path = tmp_path / "root.pt2"
    program = _export(path, RootCache(), (torch.randn(2, 3, 4), torch.tensor([0, 2, 5])))
    double = flat_module(program).double()
    x = torch.randn(2, 3, 4, dtype=torch.float64)
    expected = (x * program.module().scale.detach().double()).sum(1)
    torch.testing.assert_close(double(x, torch.tensor([0, 2, 5])), expected)
    result = run_in_process(capsys, "evaluate", str(path), "--repeat", "1", "--target", "interp", "-q")
    assert result.returncode == 0 and "verdict      PASS" in result.stdout, result.stdout + result.stderr


class AutocastInside(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)

    def forward(self, x):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            h = self.linear(x).relu()
        return h.float() * 2


def test_strict_export_of_an_autocast_region_is_one_line(capsys, tmp_path):
    """strict=True records ``h.float()``'s dtype check as float32 where the region made h bfloat16: torch's own
    module of the program fails, and ``run`` was an internal error; strict=False (the default) runs."""
    for strict, code in ((True, 2), (False, 0)):
        path = tmp_path / f"autocast_{strict}.pt2"
        _export(path, AutocastInside(), (torch.randn(3, 4),), strict=strict)
        result = run_in_process(capsys, "run", str(path), "--check", "-q")
        assert result.returncode == code, result.stdout + result.stderr
    assert result.stdout.endswith("check passed: every output matches eager PyTorch\n")
    refused = run_in_process(capsys, "run", str(tmp_path / "autocast_True.pt2"), "-q")
    assert refused.stderr.count("\n") == 1 and "contradicts itself" in refused.stderr, refused.stderr
    assert "export it with strict=False" in refused.stderr


def test_evaluate_a_program_updating_its_inputs_with_a_dtype_cast(capsys, tmp_path):
    """evaluate ran neuroncc, eager float32 and eager float64 one after the other on the same input tensors, so
    the later runs saw inputs the earlier updated in place (a FAIL on a correct result); and the float64 copy
    failed the dtype check ``.to(torch.bfloat16)`` leaves (an internal error), which torch.compile also reported
    as an op run on eager PyTorch."""
    path = tmp_path / "state.pt2"
    _state_program(path)
    np.savez(tmp_path / "in.npz", x=np.random.default_rng(0).standard_normal((4, 4), dtype=np.float32),
             position=np.array([1, 4]), scratch=np.zeros((4, 4), np.float32), steps=np.array(0))
    result = run_in_process(capsys, "evaluate", str(path), "--inputs", str(tmp_path / "in.npz"), "--repeat", "1",
                            "--target", "interp", "-q")
    assert result.returncode == 0 and "verdict      PASS" in result.stdout, result.stdout + result.stderr
    assert "fallbacks    none" in result.stdout and not result.stderr, result.stdout + result.stderr


def test_evaluate_judges_the_updated_buffers_and_inputs(capsys, tmp_path, monkeypatch):
    """evaluate compares the state one call leaves (the buffers and inputs it updates in place), each by name,
    as it compares outputs: it compared only outputs, so a wrong running statistic or counter passed."""
    from neuroncc.evaluation import runner

    path = tmp_path / "state.pt2"
    _state_program(path)
    np.savez(tmp_path / "in.npz", x=np.random.default_rng(0).standard_normal((4, 4), dtype=np.float32),
             position=np.array([1, 4]), scratch=np.zeros((4, 4), np.float32), steps=np.array(0))
    argv = ("evaluate", str(path), "--inputs", str(tmp_path / "in.npz"), "--repeat", "1", "--target", "interp",
            "-q", "--json")
    result = run_in_process(capsys, *argv)
    assert result.returncode == 0, result.stdout + result.stderr
    found = [(d["kind"], d["name"], d["within"]) for d in json.loads(result.stdout)["differences"]]
    assert found[:2] == [("output", "output 0", True), ("output", "output 1", True)]
    assert sorted(found[2:]) == sorted([
        *(("buffer", fqn, True) for fqn in ("norm.running_mean", "norm.running_var", "norm.num_batches_tracked",
                                            "cache", "ema")),
        ("input", "scratch", True), ("input", "steps", True)])  # x and position are read, not updated

    step = runner._step

    def corrupting(fn, module, args, train, cotangents):  # neuroncc's run leaves a wrong statistic and counter
        def wrong(*tensors):
            returned = fn(*tensors)
            module.norm.running_mean.add_(1e-3)
            tensors[3].add_(1)
            return returned
        return step(wrong if fn is not module else fn, module, args, train, cotangents)

    monkeypatch.setattr(runner, "_step", corrupting)
    result = run_in_process(capsys, *argv[:-1])
    assert result.returncode == 1, result.stdout + result.stderr
    failed = [line.split()[1:3] for line in result.stdout.splitlines() if line.startswith("    FAIL")]
    assert failed == [["buffer", "norm.running_mean"], ["input", "steps"]], result.stdout
    assert "verdict      FAIL" in result.stdout


class Embed(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.table = torch.nn.Embedding(10, 4)

    def forward(self, ids):
        return self.table(ids).sum(-1)


@pytest.mark.parametrize("target", ["cpu", "interp"])
def test_an_index_out_of_range_in_the_inputs_is_one_line_naming_the_input(capsys, tmp_path, target):
    path = tmp_path / "embed.pt2"
    _export(path, Embed(), (torch.tensor([1, 2, 3]),))
    np.savez(tmp_path / "in.npz", ids=np.array([1, 12, 3]))
    result = run_in_process(capsys, "run", str(path), "--target", target, "--inputs", str(tmp_path / "in.npz"), "-q")
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr, result.stderr
    assert "aten.embedding.default at " in result.stderr and "(in forward)" in result.stderr
    assert "index 12 is out of bounds for dimension 0 with size 10 (operand 'indices', the input 'ids', int64[3])" \
        in result.stderr, result.stderr


class Buckets(torch.nn.Module):
    def forward(self, values, width):
        return values // width


@pytest.mark.parametrize("target", ["cpu", "interp"])
def test_an_integer_division_by_zero_in_the_inputs_is_one_line_naming_the_divisor(capsys, tmp_path, target):
    path = tmp_path / "buckets.pt2"
    _export(path, Buckets(), (torch.tensor([10, 11]), torch.tensor([3, 4])))
    np.savez(tmp_path / "in.npz", values=np.array([10, 11]), width=np.array([3, 0]))
    result = run_in_process(capsys, "run", str(path), "--target", target, "--inputs", str(tmp_path / "in.npz"), "-q")
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr, result.stderr
    assert "aten.div.Tensor_mode at " in result.stderr and "(in forward)" in result.stderr, result.stderr
    assert "integer division by zero (divisor: operand 'other', the input 'width', int64[2])" in result.stderr, \
        result.stderr
