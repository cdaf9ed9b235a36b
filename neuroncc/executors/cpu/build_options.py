"""The cpu launcher's build options, read and checked (launcher.py's docstring says what each does).

A bad value is an InputError naming the option."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from neuroncc.errors import InputError
from neuroncc.executors.cpu.threads import default_threads


def _count_option(options: Mapping[str, Any], name: str, default: int) -> int:
    """A positive thread count option (``default`` when absent); anything else is an InputError."""
    value = options.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InputError(f"option {name} must be a positive integer, got {value!r}")
    return value


def thread_count(options: Mapping[str, Any]) -> int:
    """The threads a call runs on (``threads``; default: torch's thread count, else the CPU count)."""
    return _count_option(options, "threads", default_threads())


def threads_fixed(options: Mapping[str, Any]) -> bool:
    """Whether the ``threads`` option fixes the thread count. Without it an executable runs on torch's thread
    count of the moment (``CpuExecutable.for_threads``): the compile cache and the graph cache hand one
    executable to every later compile of the same graph, whatever ``torch.set_num_threads`` says by then."""
    return options.get("threads") is not None


def threading_mode(options: Mapping[str, Any]) -> str:
    """``openmp`` (ATen's thread team, the default) or ``python`` (neuroncc's persistent pool)."""
    mode = options.get("threading", "openmp")
    if mode not in ("openmp", "python"):
        raise InputError(f"option threading must be 'openmp' or 'python', got {mode!r}")
    return mode


def memory_plan(options: Mapping[str, Any]) -> Any:
    """The memory plan to place intermediates by (``memory_plan``), or None."""
    return options.get("memory_plan")


def compile_workers(options: Mapping[str, Any]) -> int:
    """LLVM compile workers (``compile_threads``; default: the thread count)."""
    return _count_option(options, "compile_threads", thread_count(options))


#: ``quick_first`` value of torch.compile's graphs: each module that computes the same bits at both tiers
#: starts at the quick tier, whatever the work (executors/cpu/tiers.py)
QUICK_MODULES = "modules"


def quick_first(options: Mapping[str, Any]) -> bool | str:
    """``quick_first``: False, True or :data:`QUICK_MODULES` (executors/cpu/tiers.py)."""
    value = options.get("quick_first", False)
    if not isinstance(value, bool) and value != QUICK_MODULES:
        raise InputError(f"option quick_first must be True, False or {QUICK_MODULES!r}, got {value!r}")
    return value


__all__ = ["QUICK_MODULES", "compile_workers", "memory_plan", "quick_first", "thread_count", "threading_mode",
           "threads_fixed"]
