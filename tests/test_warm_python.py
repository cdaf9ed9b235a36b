"""tests/warm_python.py: a forked child is what ``python SCRIPT ARGS`` would be, as the fresh-process tests rely on."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

CHILD = """
import atexit, json, os, sys, threading, time
import torch
modules = sorted(m for m in sys.modules if m == "neuroncc" or m.startswith("neuroncc."))
atexit.register(lambda: print("atexit", flush=True))
print(json.dumps({"argv": sys.argv, "path0": sys.path[0], "cwd": os.getcwd(), "value": os.environ.get("NEURONCC_X"),
                  "neuron": str(torch.ones(1, device="neuron").device), "modules": modules,
                  "stdin": sys.stdin.read()}), flush=True)
def late():
    time.sleep(0.3)
    print("thread", flush=True)
threading.Thread(target=late).start()  # a non-daemon thread: the interpreter waits for it before atexit
sys.exit(int(sys.argv[1]))
"""


def _environ(**extra: str) -> dict[str, str]:
    return {**{k: v for k, v in os.environ.items() if not k.startswith("NEURONCC_")}, **extra}


def test_a_child_has_its_own_argv_cwd_environment_exit_status_and_ending(warm_python, tmp_path):
    done = warm_python.run([sys.executable, "-c", CHILD, "3", "more"], env=_environ(NEURONCC_X="child"),
                           cwd=tmp_path)
    assert done.returncode == 3, done.stderr
    report, *rest = done.stdout.splitlines()
    assert rest == ["thread", "atexit"]
    report = json.loads(report)
    assert report["argv"] == ["-c", "3", "more"] and report["path0"] == "" and report["cwd"] == str(tmp_path)
    assert report["value"] == "child" and report["stdin"] == ""
    # the device extension loaded in the child (torch's autoload, under the child's environment)
    assert report["neuron"] == "neuron:0" and "neuroncc.device.registration" in report["modules"]
    script = tmp_path / "script.py"
    script.write_text("import sys; print(sys.path[0]); raise KeyError('boom')\n")
    done = warm_python.run([sys.executable, str(script)], env=_environ())
    assert done.returncode == 1 and done.stdout.strip() == str(tmp_path) and "KeyError: 'boom'" in done.stderr


def test_a_child_without_autoload_has_no_neuroncc(warm_python):
    code = "import sys; print(any(m.startswith('neuroncc') for m in sys.modules))"
    done = warm_python.run([sys.executable, "-c", code], env=_environ(TORCH_DEVICE_BACKEND_AUTOLOAD="0"))
    assert (done.returncode, done.stdout.strip()) == (0, "False")


def test_a_variable_read_at_torch_import_is_refused(warm_python):
    with pytest.raises(ValueError, match="TORCH_LOGS"):
        warm_python.run([sys.executable, "-c", "pass"], env=_environ(TORCH_LOGS="dynamo"))


def test_a_child_that_outlives_its_timeout_is_killed(warm_python):
    with pytest.raises(subprocess.TimeoutExpired):
        warm_python.run([sys.executable, "-c", "import time; time.sleep(60)"], env=_environ(), timeout=0.5)
    done = warm_python.run([sys.executable, "-c", "print('next')"], env=_environ())  # the server goes on
    assert (done.returncode, done.stdout) == (0, "next\n")


def test_the_other_server_hashes_strings_with_another_seed(warm_python):
    """Two new interpreters draw two string hash seeds: a cache written by one and read by the other is checked
    across seeds only if the reading process runs on ``other``."""
    if os.environ.get("PYTHONHASHSEED", "random") != "random":
        pytest.skip("a fixed PYTHONHASHSEED: every new interpreter has that seed too")
    code = "print(hash('neuroncc'))"
    hashes = [python.run([sys.executable, "-c", code], env=_environ()).stdout for python in
              (warm_python, warm_python, warm_python.other)]
    assert hashes[0] == hashes[1] != hashes[2]
    assert warm_python.other.other is warm_python
