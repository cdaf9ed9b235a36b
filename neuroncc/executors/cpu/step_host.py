"""What a step runner may use of the executable it runs in (:class:`StepHost`), and the kernels' error flag.

The launcher (:class:`~neuroncc.executors.cpu.launcher.CpuExecutable`) implements :class:`StepHost`; the
runners of its steps (``steps.py``: native kernels and direct BLAS calls; ``adopt.py``: externs supplying
their result buffers) see it through this interface only.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from neuroncc.codegen.llvm.launch_plan import CpuLaunchPlan, StepSpec
from neuroncc.executors.cpu.threads import OpenMPTeam, ThreadPool
from neuroncc.ir.graph import Function


class ErrorFlag:
    """The int32 that a kernel sets when a run-time check fails (an index out of range, an integer divisor of 0)."""

    def __init__(self) -> None:
        self._flag = np.zeros(1, dtype=np.int32)

    @property
    def address(self) -> int:
        """Its address: the kernels' error argument slot."""
        return self._flag.ctypes.data

    def take(self) -> int:
        """What a kernel set the flag to since the last take (0: nothing; ``launch_plan.FailedCheck``), cleared."""
        failed = int(self._flag[0])
        if failed:
            self._flag[0] = 0
        return failed


class StepHost(Protocol):
    """The executable as its step runners see it."""

    function: Function  # the top-level graph run (kernels wrapped); steps index its ops
    plan: CpuLaunchPlan
    module: Any  # the loaded kernel phases (jit.LoadedCode: address(symbol)), None when nothing is native
    pool: ThreadPool
    team: OpenMPTeam | None  # None when threading is "python" (or libgomp is not found)
    error: ErrorFlag

    def static_address(self, buffer: int) -> int | None:
        """The address of buffer ``buffer`` when it is the same on every call (arena, constant), else None."""
        ...

    def scratch_address(self, offset: int) -> int:
        """The address of arena byte ``offset`` (kernels' scratch slots)."""
        ...

    def region_constant(self, op_index: int, ref: int) -> np.ndarray:
        """The data of constant op ``ref`` of the region of kernel op ``op_index``, kept alive by the
        executable (kernels read it through its address)."""
        ...

    def arrays(self, ids: tuple[int, ...], flats: list[Any]) -> list[np.ndarray]:
        """Views of values ``ids`` over this call's buffers (``flats``: flat storage by buffer number)."""
        ...

    def run_extern(self, step: StepSpec, flats: list[Any]) -> None:
        """Run top-level extern step ``step`` through ATen into its result buffers."""
        ...
