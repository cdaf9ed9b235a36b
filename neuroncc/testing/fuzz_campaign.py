"""A fuzzing campaign: programs ``0..n-1`` of one seed, checked on every available target, in parallel.

Each failure is shrunk and written as a regression test under ``out_dir``, named after the target, the
kind of failure and the ops of the shrunk program, so that one bug found by many programs gives one file.
"""

from __future__ import annotations

import hashlib
import importlib.util
import multiprocessing
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from neuroncc.testing.fuzz import FuzzConfig, FuzzStats, check_program, generate_program
import warnings

#: Where each target's implementation lives; a target whose module is missing has not landed yet.
TARGET_MODULES = {"interp": "neuroncc.executors.executable", "cpu": "neuroncc.executors.cpu.launcher",
                  "nki-sim": "neuroncc.executors.nki_sim.executable"}


def available_targets(requested: Sequence[str] | None = None) -> tuple[list[str], dict[str, str]]:
    """(targets to run, {target: why not}) for the requested targets (default: all known)."""
    chosen, missing = [], {}
    for target in requested or list(TARGET_MODULES):
        module = TARGET_MODULES.get(target)
        if module is None:
            missing[target] = "unknown target"
        elif importlib.util.find_spec(module) is None:
            missing[target] = f"{module} is not in this tree yet"
        else:
            chosen.append(target)
    return chosen, missing


def neuron_backend_available() -> bool:
    return importlib.util.find_spec("neuroncc.frontend.backend") is not None


@dataclass(frozen=True)
class Campaign:
    seed: int
    targets: tuple[str, ...]
    backend: str = "neuron"
    backward: bool = True
    out_dir: Path | None = None
    shrink_budget: int = 150
    config: FuzzConfig = FuzzConfig()


def _signature(program_ops: Sequence[str], target: str, status: str, detail: str) -> str:
    kind = detail.split(":", 1)[0] if status == "crash" else status
    digest = hashlib.sha256(f"{target}|{kind}|{sorted(set(program_ops))}".encode()).hexdigest()[:8]
    return digest


def run_range(campaign: Campaign, start: int, stop: int) -> FuzzStats:
    """Programs ``start..stop-1``: check, shrink failures, write regression tests."""

    from neuroncc.testing.fuzz_shrink import shrink, write_regression

    warnings.simplefilter("ignore")
    stats = FuzzStats()
    for index in range(start, stop):
        program = generate_program(campaign.seed, index, campaign.config)
        findings = check_program(program, campaign.targets, backend=campaign.backend, backward=campaign.backward)
        stats.add(index, findings)
        for finding in findings:
            if not finding.is_bug:
                continue
            small, backward = shrink(program, finding, backend=campaign.backend,
                                     backward=campaign.backward and finding.phase == "fwd+bwd",
                                     budget=campaign.shrink_budget)
            path = ""
            if campaign.out_dir is not None:
                signature = _signature([s.op for s in small.stmts], finding.target, finding.status, finding.detail)
                path = str(write_regression(campaign.out_dir, small, finding, backward=backward,
                                            backend=campaign.backend, seed=campaign.seed, index=index,
                                            signature=signature))
            stats.bugs.append((index, finding, path))
    return stats


def _run_chunk(args: tuple[Campaign, int, int]) -> FuzzStats:
    import torch

    torch.set_num_threads(1)
    return run_range(*args)


def run_campaign(campaign: Campaign, count: int, *, jobs: int = 1, chunk: int = 20,
                 progress: Callable[[FuzzStats, float], None] = lambda s, t: None) -> FuzzStats:
    """Programs ``0..count-1`` in ``jobs`` processes; ``progress`` sees the running totals after each chunk."""
    ranges = [(campaign, start, min(start + chunk, count)) for start in range(0, count, chunk)]
    total = FuzzStats()
    started = time.monotonic()
    if jobs <= 1:
        for item in ranges:
            total.merge(run_range(*item))
            progress(total, time.monotonic() - started)
        return total
    with multiprocessing.get_context("spawn").Pool(jobs, maxtasksperchild=10) as pool:
        for stats in pool.imap_unordered(_run_chunk, ranges):
            total.merge(stats)
            progress(total, time.monotonic() - started)
    return total
