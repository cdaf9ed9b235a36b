"""``neuroncc run`` (in-process): inputs, --check against eager PyTorch, timings, saved outputs."""

import numpy as np
import pytest
import torch
from cli_testing import run_in_process

import neuroncc
from neuroncc.frontend.compiled import CompiledGraph
from neuroncc.frontend.serving import CompiledProgram
from torch.export import ExportedProgram


def test_random_inputs_match_eager(classifier_pt2, capsys):
    """The example model on the default target (native code for cpu) against eager PyTorch."""
    result = run_in_process(capsys, "run", str(classifier_pt2), "--random", "--check", "--repeat", "3")
    assert result.returncode == 0, result.stderr
    assert "tokens int64[32, 8], labels int64[32]  (random, seed 0)" in result.stdout
    assert "max abs error" in result.stdout and "check passed" in result.stdout
    assert "over 3 calls" in result.stdout


def test_npz_inputs_and_saved_outputs(two_outputs_pt2, capsys, tmp_path):
    x, y = np.random.default_rng(0).standard_normal((2, 3, 4), dtype=np.float32)
    np.savez(tmp_path / "in.npz", x=x, y=y)
    result = run_in_process(capsys, "run", str(two_outputs_pt2), "--target", "interp", "--inputs",
                            str(tmp_path / "in.npz"), "--check", "--save-outputs", str(tmp_path / "out.npz"))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "output 1 _to_copy: bfloat16[3, 4]" in result.stdout
    expected = torch.export.load(two_outputs_pt2).module()(torch.from_numpy(x), torch.from_numpy(y))
    with np.load(tmp_path / "out.npz", allow_pickle=False) as saved:
        np.testing.assert_allclose(saved["add"], expected["sum"].detach().numpy(), rtol=1e-6, atol=1e-6)
        np.testing.assert_array_equal(saved["_to_copy"], expected["product"].float().numpy())


def test_buffer_updates_run_like_eager(norm_pt2, capsys):
    """A training-mode BatchNorm program: the running stats are outputs written back to the state."""
    result = run_in_process(capsys, "run", str(norm_pt2), "--target", "interp", "--check", "--repeat", "2")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "check passed" in result.stdout


def test_check_failure_exits_1_with_the_errors(good_pt2, capsys, monkeypatch):
    original = CompiledProgram.__call__

    def off_by_a_bit(self, *args, **kwargs):
        return original(self, *args, **kwargs) + 1e-2

    monkeypatch.setattr(CompiledProgram, "__call__", off_by_a_bit)
    result = run_in_process(capsys, "run", str(good_pt2), "--target", "interp", "--check")
    assert result.returncode == 1
    assert "MISMATCH" in result.stdout and "check FAILED: 1 of 1 outputs" in result.stdout
    assert "max abs error 0.01" in result.stdout


def test_repeat_times_the_served_call(classifier_pt2, capsys, monkeypatch):
    """``--repeat`` calls the program as neuroncc.compile_program serves it: one CompiledProgram, built once
    (one CompiledGraph), called 1 + N times on the direct (data-pointer) path after its first call."""
    built, calls, direct = [], [], []
    init, call = CompiledGraph.__init__, CompiledProgram.__call__

    def counting_init(self, *args, **kwargs):
        built.append(self)
        init(self, *args, **kwargs)

    def counting_call(self, *args, **kwargs):
        calls.append(self)
        direct.append(self._guard is not None and self._guard.check(*args))
        return call(self, *args, **kwargs)

    monkeypatch.setattr(CompiledGraph, "__init__", counting_init)
    monkeypatch.setattr(CompiledProgram, "__call__", counting_call)
    result = run_in_process(capsys, "run", str(classifier_pt2), "--random", "--repeat", "5", "-q")
    assert result.returncode == 0, result.stderr
    assert "over 5 calls" in result.stdout
    assert len(built) == 1, f"{len(built)} CompiledGraphs built for 6 calls"
    assert len(calls) == 6 and len(set(map(id, calls))) == 1
    assert direct == [False] + [True] * 5  # the first call checks in Python; the timed ones pass the C++ guard


def test_run_compiles_what_compile_program_loads(two_outputs_pt2, capsys):
    """``run`` and ``neuroncc.compile_program`` import a program alike (bf16 crosses as its bits on cpu): the
    executable ``run`` compiled is the one compile_program then loads from the cache."""
    result = run_in_process(capsys, "run", str(two_outputs_pt2), "--check", "--repeat", "2", "-q")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "compiled and cached" in result.stdout and "check passed" in result.stdout
    served = neuroncc.compile_program(two_outputs_pt2)
    assert served.cache == "hit" and served._direct is not None  # the data-pointer call, bf16 included


@pytest.mark.parametrize("seed", ["0", "7"])
def test_seed_decides_the_random_inputs(good_pt2, capsys, tmp_path, seed):
    out = tmp_path / "out.npz"
    run_in_process(capsys, "run", str(good_pt2), "--target", "interp", "--seed", seed, "--save-outputs", str(out))
    generator = torch.Generator().manual_seed(int(seed))
    x = torch.randn((2, 4), generator=generator)
    expected = torch.export.load(good_pt2).module()(x)
    with np.load(out) as saved:
        np.testing.assert_allclose(saved["add"], expected.detach().numpy(), rtol=1e-6, atol=1e-6)


def test_program_picks_one_of_several(multi_pt2, capsys):
    result = run_in_process(capsys, "run", str(multi_pt2), "--target", "interp", "--program", "large", "--check")
    assert result.returncode == 0, result.stderr
    assert "output 0 addmm: float32[3, 5]" in result.stdout and "check passed" in result.stdout
    unnamed = run_in_process(capsys, "run", str(multi_pt2), "--target", "interp")
    assert unnamed.returncode == 2 and "holds several programs (large, small)" in unnamed.stderr


def test_a_warm_run_hits_without_decomposing(good_pt2, capsys, monkeypatch):
    """The program cache (frontend/program_cache.py): a warm run loads the compiled program before decomposing it."""
    decompositions = []
    original = ExportedProgram.run_decompositions

    def counted(self, *args, **kwargs):
        decompositions.append(self)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(ExportedProgram, "run_decompositions", counted)
    model = good_pt2
    cold = run_in_process(capsys, "run", str(model), "--random", "--check", "-q")
    assert cold.returncode == 0, cold.stdout + cold.stderr
    assert "compiled and cached" in cold.stdout and len(decompositions) == 1
    warm = run_in_process(capsys, "run", str(model), "--random", "--check", "-q")
    assert warm.returncode == 0, warm.stdout + warm.stderr
    assert "loaded from the compile cache" in warm.stdout and "check passed" in warm.stdout
    assert len(decompositions) == 1, "the warm run decomposed the program"
    key_line = [line for line in cold.stdout.splitlines() if "key " in line]
    assert key_line and key_line[0].split("key ")[1] in warm.stdout  # the same artifact
