"""``neuroncc demo``: the first thing a new user runs. One full run in a fresh process, own cwd and HOME."""

import re

from cli_testing import files_under, run_process


def test_demo_trains_like_eager_and_hits_the_cache_on_a_rerun(tmp_path):
    cwd, home, out = tmp_path / "cwd", tmp_path / "home", tmp_path / "out"
    cwd.mkdir()
    home.mkdir()
    result = run_process("demo", "--steps", "3", "-o", str(out), cwd=cwd, home=home, cache=tmp_path / "env-cache")
    assert result.returncode == 0, result.stdout + result.stderr
    text = result.stdout
    rows = re.findall(r"^\s+(\d+)\s+(\d+\.\d+)\s+(\d+\.\d+)\s+(\S+)$", text, re.M)
    assert [int(step) for step, *_ in rows] == [1, 2, 3]
    for _, ours, eager, difference in rows:
        assert abs(float(ours) - float(eager)) <= 1e-4 and float(difference) <= 1e-4
    assert re.search(r"max \|parameter difference\| after 3 steps: \S+ \(\S+\): ok", text)
    # our optimizer step is compiled as a user would, on step 1: the medians leave that step out on both sides
    assert "our optimizer.step compiled by torch.compile" in text
    assert re.search(r"time per step \(median of steps 2-3, forward \+ backward \+ AdamW\): neuroncc \S+ \S+, "
                     r"eager \S+ \S+\n\s+\(our step 1 took \S+ \S+: it compiled the optimizer step\)", text)
    assert re.search(r"forward: \d+ ops -> \d+ launches", text) and re.search(r"backward: \d+ ops", text)
    assert "2 cache hits, 0 compiles" in text
    # 6 NKI: both graphs emitted for trn2 and estimated, kernel by kernel (the slowest few shown)
    assert re.search(r"^6 NKI\s+cost-model estimate of the generated NKI kernels on trn2", text, re.M)
    for kind in ("forward", "backward"):
        match = re.search(rf"^\s+{kind}: (\d+) kernels, (\d+\.\d) us estimated \((.+)\)$", text, re.M)
        assert match and int(match[1]) > 0 and float(match[2]) > 0, text
        assert sum(int(n) for n in re.findall(r"(\d+) \S+-bound", match[3])) == int(match[1])
    assert len(re.findall(r"^\s+\w+\s+\d+\.\d\d us  \S+-bound$", text, re.M)) == 6
    assert "not available" not in text
    # 7 device: the same model trained eagerly on the neuron device agrees with CPU, nothing falls back
    assert re.search(r"^7 device\s+the same model trained eagerly on the neuron device", text, re.M)
    device_rows = re.findall(r"^\s+(\d+)\s+(\d+\.\d+)\s+(\d+\.\d+)\s+(\S+)\s+\d+\.\d ms$", text, re.M)
    assert [int(step) for step, *_ in device_rows] == [1, 2, 3]
    assert re.search(r"max \|parameter difference\|: \S+ \(\S+\): ok", text)
    assert re.search(r"aten ops ran on the device \(\d+ calls\): \d+ kernels compiled on first use, \d+ loaded "
                     r"from the cache; 0 ops fell back to CPU", text)
    assert text.rstrip().splitlines()[-1].endswith("neuroncc and eager PyTorch agree")
    assert result.stderr == ""  # no warnings, no progress (stderr is not a terminal)
    # Everything went to -o DIR: the exported model and the demo's cache (not $NEURONCC_CACHE_DIR, not HOME):
    # the two compiled graphs and the device's op kernels.
    assert (out / "classifier.pt2").is_file()
    assert len(list((out / "cache" / "entries").iterdir())) > 2
    assert files_under(cwd) == [] and files_under(home) == []
    assert not (tmp_path / "env-cache").exists()


def test_demo_in_its_temporary_directory_warns_nothing_and_leaves_nothing(tmp_path):
    """Without -o the demo's files (its cache among them) live in a temporary directory removed at exit: what the
    device indexed there is written before the directory goes, not at the process's exit into a missing
    directory (a CacheWarning on the user's terminal, session 30)."""
    cwd, home = tmp_path / "cwd", tmp_path / "home"
    cwd.mkdir()
    home.mkdir()
    result = run_process("demo", "--steps", "2", cwd=cwd, home=home, cache=tmp_path / "env-cache")
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.rstrip().splitlines()[-1].endswith("neuroncc and eager PyTorch agree")
    assert result.stderr == ""
    assert files_under(cwd) == [] and files_under(home) == []
    assert not (tmp_path / "env-cache").exists()
