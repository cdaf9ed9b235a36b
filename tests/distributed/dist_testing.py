"""Run a scenario on N real processes over gloo on loopback (127.0.0.1, a free port, bounded timeouts), as
torchrun would: each rank gets RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT, runs
``rank_main.py SCENARIO`` and prints its result as JSON on its last line. A rank that fails, or a run that
outlives its deadline, fails the test with every rank's stderr tail (all processes are killed first)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).parent
ROOT = HERE.parents[1]
RANK_MAIN = HERE / "rank_main.py"
#: A whole multi-process run (interpreter start, torch import, compiles) must end within this many seconds.
RUN_TIMEOUT_S = 240.0


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def environment(rank: int, world: int, port: int, extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TORCHELASTIC", "PYTEST_XDIST"))}
    python_path = os.pathsep.join(p for p in (str(HERE), str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    env.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(world),
               MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), GLOO_SOCKET_IFNAME="lo", PYTHONPATH=python_path,
               OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    env.update(extra or {})
    return env


def start_ranks(scenario: str, world: int, *args: str, extra_env: dict[str, str] | None = None,
                cwd: Path | None = None) -> list[subprocess.Popen]:
    port = free_port()
    return [subprocess.Popen([sys.executable, str(RANK_MAIN), scenario, *args], cwd=cwd or ROOT,
                             env=environment(rank, world, port, extra_env), stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
            for rank in range(world)]


def finish(processes: list[subprocess.Popen], timeout: float = RUN_TIMEOUT_S) -> list[tuple[int, str, str]]:
    """(return code, stdout, stderr) of every rank; all are killed at the deadline."""
    deadline = time.monotonic() + timeout
    outputs = []
    try:
        for process in processes:
            remaining = max(deadline - time.monotonic(), 0.1)
            try:
                stdout, stderr = process.communicate(timeout=remaining)
            except subprocess.TimeoutExpired:
                for p in processes:
                    p.kill()
                stdout, stderr = process.communicate()
                stderr += f"\n[killed: the run outlived its {timeout:g} s deadline]"
            outputs.append((process.returncode, stdout, stderr))
    finally:
        for p in processes:
            if p.poll() is None:
                p.kill()
                p.wait()
    return outputs


def run_ranks(scenario: str, world: int, *args: str, extra_env: dict[str, str] | None = None,
              timeout: float = RUN_TIMEOUT_S) -> list[dict]:
    """Every rank's JSON result; fails naming the ranks that did not finish well."""
    outputs = finish(start_ranks(scenario, world, *args, extra_env=extra_env), timeout)
    failed = [(rank, code, err) for rank, (code, _, err) in enumerate(outputs) if code != 0]
    if failed:
        report = "\n".join(f"--- rank {rank} exited {code}:\n{err[-3000:]}" for rank, code, err in failed)
        raise AssertionError(f"{len(failed)} of {world} ranks failed in scenario {scenario}:\n{report}")
    return [json.loads(out.strip().splitlines()[-1]) for _, out, _ in outputs]
