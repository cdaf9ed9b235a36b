"""The interface between the cpu executable and the runners of its steps (``executors/cpu/step_host.py``)."""

from __future__ import annotations

import ctypes
import re
from pathlib import Path

import numpy as np

from neuroncc.executors.cpu.launcher import build_cpu_executable
from neuroncc.executors.cpu.step_host import ErrorFlag, StepHost
from neuroncc.ir import Builder, DType, TensorType

ROOT = Path(__file__).resolve().parents[2]


def test_the_executable_implements_the_step_host():
    b = Builder("step_host")
    x = b.param(TensorType((8, 16), DType.f32), "x")
    exe = build_cpu_executable(b.build([b.op("exp", x)]), {"threads": 1})
    members = {name for name in vars(StepHost) if not name.startswith("_")} | set(StepHost.__annotations__)
    assert members >= {"plan", "error", "static_address", "scratch_address", "region_constant", "arrays",
                       "run_extern"}
    assert [name for name in sorted(members) if not hasattr(exe, name)] == []
    np.testing.assert_allclose(exe(np.ones((8, 16), np.float32))[0], np.full((8, 16), np.e, np.float32), rtol=1e-6)


def test_step_runners_use_only_the_step_host():
    """The step runners reach the executable through ``StepHost``, never its private state."""
    for name in ("steps", "adopt"):
        source = (ROOT / "neuroncc" / "executors" / "cpu" / f"{name}.py").read_text()
        assert not re.findall(r"\bexe\._[a-z]", source), name


def test_the_error_flag_is_taken_once():
    flag = ErrorFlag()
    assert not flag.take()
    ctypes.c_int32.from_address(flag.address).value = 1  # what a kernel does on an index out of range
    assert flag.take()
    assert not flag.take()
