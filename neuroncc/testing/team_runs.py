"""Which OpenMP team each kernel phase ran on: what the thread-count tests observe instead of timings.

``recorded_team_runs(monkeypatch)`` wraps ``OpenMPTeam.run`` (every phase of an executable goes through its team
runner, inline at one thread or split) and yields the list it appends ``TeamRun``s to; torch's thread count is
restored after. ``ran_on(sizes, threads)`` says whether the recorded team sizes are those of ``threads``."""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator
from typing import Any, NamedTuple

import pytest
import torch

from neuroncc.executors.cpu import threads as cpu_threads


class TeamRun(NamedTuple):
    size: int  # the team's thread count
    on_main: bool  # called from the main thread (the user's), not e.g. the autograd engine's


def recorded_team_runs(monkeypatch: Any) -> Iterator[list[TeamRun]]:
    """The body of a pytest fixture: skips where there is no libgomp (kernels then run on the Python pool)."""
    if cpu_threads.get_team(2) is None:
        pytest.skip("no libgomp: kernels run on the Python pool")
    runs: list[TeamRun] = []
    run = cpu_threads.OpenMPTeam.run
    main = threading.main_thread().ident

    def recording(self, *args, **kwargs):
        runs.append(TeamRun(self.threads, threading.get_ident() == main))
        return run(self, *args, **kwargs)

    monkeypatch.setattr(cpu_threads.OpenMPTeam, "run", recording)
    before = torch.get_num_threads()
    yield runs
    torch.set_num_threads(before)


def ran_on(runs: Iterable[TeamRun], threads: int) -> bool:
    """At 2 the large phases split across a 2-thread team; at 1 no phase goes near a team of more (a phase of a
    1-thread executable runs inline)."""
    sizes = {run.size for run in runs}
    return sizes == {2} if threads == 2 else not sizes - {1}
