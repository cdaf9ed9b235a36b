import subprocess
import sys
from pathlib import Path

import pytest
import torch

import neuroncc
import neuroncc.device

neuroncc.device.register()  # normally done by torch's autoload; explicit so the tests also run without it

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _fresh_tracking():
    """Every test starts with zeroed counters, forgotten op tracking, the default fallback mode and seed."""
    neuroncc.reset_stats()
    neuroncc.set_fallback_mode("cpu")
    torch.manual_seed(0)
    yield
    neuroncc.set_fallback_mode("cpu")


@pytest.fixture
def two_devices():
    """Two neuron devices for the test; the count and the current device as before after it."""
    count = torch.neuron.device_count()
    neuroncc.device.set_device_count(2)
    yield
    neuroncc.device.set_device_count(count)
    torch.neuron.set_device(0)


def run_python(code: str, env: dict[str, str] | None = None, timeout: float = 300,
               python=None) -> subprocess.CompletedProcess:
    """Run ``code`` in a fresh process (this venv, the worktree's neuroncc) and return the finished process: a
    new interpreter, or a child forked from ``python`` (the ``warm_python`` fixture, tests/warm_python.py: torch
    imported, neuroncc not yet; not for tests of what ``import torch`` itself does)."""
    import os

    environment = {k: v for k, v in os.environ.items() if not k.startswith(("NEURONCC_", "TORCH_DEVICE"))}
    environment.update(env or {})
    if python is not None:
        return python.run([sys.executable, "-c", code], env=environment, timeout=timeout, cwd=ROOT)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout,
                          cwd=ROOT, env=environment)
