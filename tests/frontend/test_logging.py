"""neuroncc's log lines: TORCH_LOGS="neuroncc" (through PyTorch's logging registry) and NEURONCC_LOG print one
line per compiled graph (ops, launches, cache hit/miss and why, time per stage), per recompile with the input
that changed, and per fallback op."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap

import pytest
import torch

import neuroncc  # noqa: F401
from neuroncc.driver.log_settings import configure_log_from_environ
from neuroncc.errors import InputError
from neuroncc.frontend.backend import changed_inputs
from warm_python import WarmPython

SCRIPT = textwrap.dedent("""
    import torch
    import neuroncc

    def f(x):
        return torch.nn.functional.layer_norm(x, x.shape[-1:]).relu()

    compiled = torch.compile(f, backend="neuron", dynamic=False)
    compiled(torch.randn(ROWS, 3))
    compiled(torch.randn(2, 5))
    compiled(torch.randn(2, 5, dtype=torch.float64))
""")


def _run(tmp_path, rows: int = 2, python: WarmPython | None = None, **env) -> str:
    """SCRIPT's stderr in a fresh process: a new interpreter, or forked from ``python`` (tests/warm_python.py:
    torch imported, so TORCH_LOGS, which torch reads at its import, needs a new interpreter)."""
    script = tmp_path / "model.py"
    script.write_text(SCRIPT.replace("ROWS", str(rows)))
    environment = {k: v for k, v in os.environ.items() if k not in ("TORCH_LOGS", "NEURONCC_LOG")}
    environment.update(env, NEURONCC_CACHE_DIR=str(tmp_path / "cache"))
    if python is not None:
        done = python.run([sys.executable, str(script)], env=environment, timeout=300, cwd=tmp_path)
    else:
        done = subprocess.run([sys.executable, str(script)], env=environment, capture_output=True, text=True,
                              timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stderr


@pytest.mark.parametrize("env", [{"TORCH_LOGS": "neuroncc"}, {"NEURONCC_LOG": "info"}], ids=["TORCH_LOGS", "NEURONCC_LOG"])
def test_compile_and_recompile_lines(tmp_path, env):
    err = _run(tmp_path, **env)
    compiled = [line for line in err.splitlines() if "neuroncc: compiled @" in line]
    assert len(compiled) == 3, err
    assert "@g0_0_inference for cpu: " in compiled[0] and " ops -> 1 kernel;" in compiled[0]
    assert "cache miss (no stored entry of this target to compare)" in compiled[0]
    assert "passes " in compiled[0] and "fuse " in compiled[0] and "codegen " in compiled[0]
    recompiles = [line for line in err.splitlines() if "neuroncc: recompiling" in line]
    assert len(recompiles) == 2, err
    assert "input 'l_x_' shape [2, 3] -> [2, 5]" in recompiles[0]
    assert "input 'l_x_' dtype float32 -> float64" in recompiles[1]


def test_a_miss_is_explained_by_the_closest_stored_entry(tmp_path, warm_python):
    # entries are published in the background (with their optimized code, a second after a quick start), and
    # a process exits only once they are: a second process's miss is explained against the first one's entries
    _run(tmp_path, python=warm_python, NEURONCC_LOG="info")
    err = _run(tmp_path, rows=4, python=warm_python.other, NEURONCC_LOG="info")
    compiled = [line for line in err.splitlines() if "neuroncc: compiled @" in line]
    assert "closest stored entry, @g0_0_inference, differs in: graph, inputs" in compiled[0], compiled[0]


def test_second_process_logs_cache_hits(tmp_path, warm_python):
    _run(tmp_path, python=warm_python, NEURONCC_LOG="info")
    err = _run(tmp_path, python=warm_python.other, NEURONCC_LOG="info")  # every graph from the graph cache
    hits = [line for line in err.splitlines() if "neuroncc: graph cache hit for" in line]
    assert len(hits) == 3 and "neuroncc: compiled @" not in err, err
    # AOTAutograd, compile-cache hits
    err = _run(tmp_path, python=warm_python.other, NEURONCC_LOG="info", NEURONCC_DISABLE_GRAPH_CACHE="1")
    compiled = [line for line in err.splitlines() if "neuroncc: compiled @" in line]
    assert len(compiled) == 3 and all("cache hit" in line for line in compiled), err


def test_nothing_logged_without_a_setting(tmp_path, warm_python):
    assert "neuroncc: compiled" not in _run(tmp_path, python=warm_python)


def test_changed_inputs_names_the_input():
    before = (("x", (2, 3), "float32"), ("w", (3, 3), "float32"))
    assert changed_inputs(before, (("x", (2, 3), "float32"), ("w", (3, 4), "float32"))) == \
        "input 'w' shape [3, 3] -> [3, 4]"
    assert changed_inputs(before, before[:1]) == "2 -> 1 tensor inputs"


def test_bad_neuroncc_log_value_is_an_input_error():
    with pytest.raises(InputError, match="NEURONCC_LOG='loud'"):
        configure_log_from_environ({"NEURONCC_LOG": "loud"})


@torch.library.custom_op("neuroncc_logging::running_total", mutates_args=())
def running_total(x: torch.Tensor, dim: int) -> torch.Tensor:
    return torch.cumsum(x, dim=dim)


@running_total.register_fake
def _(x, dim):
    return torch.empty_like(x)


def test_fallback_op_is_logged(caplog):
    compiled = torch.compile(lambda x: running_total(x * 2, 1), backend="neuron", dynamic=False,
                             options={"fallback": "cpu"})
    with caplog.at_level(logging.INFO, logger="neuroncc"), pytest.warns(UserWarning):
        compiled(torch.randn(3, 4))
    lines = [r.getMessage() for r in caplog.records if "fallback in graph" in r.getMessage()]
    assert len(lines) == 1 and "neuroncc_logging.running_total.default(float32[3, 4], 1)" in lines[0], lines
    assert "runs on eager PyTorch" in lines[0]
