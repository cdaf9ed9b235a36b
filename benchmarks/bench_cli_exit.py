"""Whole ``neuroncc`` commands, start to exit, with the fast exit (neuroncc/cli/process_exit.py) and without it.

    python benchmarks/bench_cli_exit.py [--rounds 5] [--demo-rounds 3] [--only version,opt,...]

Each command runs as a shell runs it (the ``neuroncc`` console script next to this python, else
``python -m neuroncc.cli``; stdout to a file), timed by its wall time in this process. The two modes are
interleaved within every round (their order alternating by round); the table has each mode's median and min-max
and the median of the per-round differences (without - with), the time the fast exit saves. Commands:

    version        ``neuroncc --version``
    opt            ``neuroncc opt tests/filecheck/canonicalize.nir -p canonicalize --split-input-file``
    compile-hit    ``neuroncc compile classifier.pt2``, the program in the cache (``$NEURONCC_CACHE_DIR``)
    compile-miss   the same into an empty cache each time: the cache writer is still publishing at the end
    run            ``neuroncc run classifier.pt2 --random --check``, the program in the cache
    demo           ``neuroncc demo``

(``classifier.pt2`` is the demo's model, exported once.) ``PYTHONUNBUFFERED`` is removed from the commands'
environment, as a user's shell has it.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DISABLE = "NEURONCC_DISABLE_FAST_EXIT"
COMMANDS = ("version", "opt", "compile-hit", "compile-miss", "run", "demo")


def neuroncc_command() -> list[str]:
    """The console script next to this python when it is installed with the fast exit's entry, else ``-m``."""
    script = Path(sys.executable).with_name("neuroncc")
    entry = [e for e in metadata.entry_points(group="console_scripts") if e.name == "neuroncc"]
    if script.exists() and entry and entry[0].value == "neuroncc.cli:run_and_exit":
        return [str(script)]
    print("(the installed neuroncc script is not the fast exit's entry: timing python -m neuroncc.cli)")
    return [sys.executable, "-m", "neuroncc.cli"]


def timed(argv: list[str], env: dict[str, str], cwd: Path) -> float:
    with open(cwd / "stdout.txt", "wb") as out:
        start = time.perf_counter()
        done = subprocess.run(argv, env=env, cwd=cwd, stdout=out, stderr=subprocess.PIPE, timeout=900)
        seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} exited {done.returncode}: {done.stderr.decode()[-2000:]}")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--demo-rounds", type=int, default=3)
    parser.add_argument("--only", default=",".join(COMMANDS))
    args = parser.parse_args()
    only = args.only.split(",")
    base = [*neuroncc_command()]
    scratch = Path(tempfile.mkdtemp(prefix="bench-cli-exit-"))
    try:
        env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED" and not k.startswith("NEURONCC_")}
        env.update(NEURONCC_CACHE_DIR=str(scratch / "cache"), PYTHONPATH=str(REPO))
        model = scratch / "classifier.pt2"
        subprocess.run([sys.executable, "-c", "import sys; from neuroncc.examples.classifier import export_example; "
                        "export_example(sys.argv[1], seed=0)", str(model)], env=env, check=True)
        nir = REPO / "tests" / "filecheck" / "canonicalize.nir"
        argvs = {"version": ["--version"], "opt": ["opt", str(nir), "-p", "canonicalize", "--split-input-file"],
                 "compile-hit": ["compile", str(model), "-q"], "compile-miss": ["compile", str(model), "-q"],
                 "run": ["run", str(model), "--random", "--check", "-q"], "demo": ["demo", "-q"]}
        timed(base + argvs["compile-hit"], env, scratch)  # the cache the hits read (untimed)
        print(f"{'command':<14} {'fast exit s':>22} {'Python teardown s':>22} {'saved s':>8} {'ratio':>6}")
        for name in COMMANDS:
            if name not in only:
                continue
            rounds = args.demo_rounds if name == "demo" else args.rounds
            times: dict[bool, list[float]] = {True: [], False: []}
            for round_ in range(rounds):
                for fast in ((True, False) if round_ % 2 == 0 else (False, True)):
                    run_env = {**env, DISABLE: "0" if fast else "1"}
                    if name == "compile-miss":
                        cache = scratch / "miss-cache"
                        shutil.rmtree(cache, ignore_errors=True)
                        run_env["NEURONCC_CACHE_DIR"] = str(cache)
                    times[fast].append(timed(base + argvs[name], run_env, scratch))
            fast_median, slow_median = statistics.median(times[True]), statistics.median(times[False])
            saved = statistics.median(s - f for f, s in zip(times[True], times[False]))
            print(f"{name:<14} {fast_median:>7.2f} ({min(times[True]):.2f}-{max(times[True]):.2f})"
                  f" {slow_median:>12.2f} ({min(times[False]):.2f}-{max(times[False]):.2f}) {saved:>8.2f}"
                  f" {fast_median / slow_median:>6.2f}", flush=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
