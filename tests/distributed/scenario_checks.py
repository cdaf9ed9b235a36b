"""Running a scenario's named checks in every rank (the scenarios_* modules): each check's verdict by name, so one
launch of the processes reports every check rather than stopping at the first failure."""

from __future__ import annotations

import traceback
from collections.abc import Callable

import torch.distributed as dist


def run_checks(checks: dict[str, Callable[[], None]]) -> dict[str, str]:
    """``{name: "ok" or the end of the check's traceback}``, the checks run in order."""
    results = {}
    for name, check in checks.items():
        try:
            check()
            results[name] = "ok"
        except Exception:
            results[name] = traceback.format_exc(limit=8)[-2500:]
        dist.barrier()  # a failed check leaves no collective half-matched for the next one
    return results
