"""A separate process for the remote cache tests: compile .nir files through the cache the environment names
(``NEURONCC_CACHE_DIR``, ``NEURONCC_REMOTE_CACHE``, ``NEURONCC_REMOTE_CACHE_KEY``), run each, report as JSON.

    python remote_child.py FILE.nir [FILE.nir ...] --target cpu [--barrier DIR:COUNT] [--stall-at-compile S]
                           [--pause-after-first DIR]

``--pause-after-first DIR``: after the first file, create DIR/paused and wait for DIR/go (the test kills the
server meanwhile). ``--stall-at-compile S``: whoever compiles sleeps S seconds first (racing tests).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import warnings
from pathlib import Path

import numpy as np

from cache_testing import read_nir, sample_inputs, wait_at_barrier
from neuroncc.driver.process_cache import CACHE_STATS
from neuroncc.driver.cache import cache_from_environ
from neuroncc.driver.compile import compile_graph
from neuroncc.ir import interpret


def _wait_for(path: Path, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} never appeared")
        time.sleep(0.01)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("nir", nargs="+")
    parser.add_argument("--target", default="cpu")
    parser.add_argument("--barrier")
    parser.add_argument("--stall-at-compile", type=float, default=0.0)
    parser.add_argument("--pause-after-first")
    args = parser.parse_args()

    def checkpoint(step: str) -> None:
        if step == "compile" and args.stall_at_compile:
            time.sleep(args.stall_at_compile)

    results = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cache = cache_from_environ(os.environ, checkpoint=checkpoint)
        if args.barrier:  # start all processes' compiles together
            wait_at_barrier(args.barrier)
        for index, nir in enumerate(args.nir):
            if index == 1 and args.pause_after_first:
                Path(args.pause_after_first, "paused").touch()
                _wait_for(Path(args.pause_after_first, "go"))
            fn = read_nir(Path(nir))
            inputs = sample_inputs(fn)
            expected = interpret(fn, inputs)
            start = time.perf_counter()
            outputs = compile_graph(fn, target=args.target, cache=cache)(*inputs)
            results.append({
                "ok": len(outputs) == len(expected) and all(
                    out.shape == ref.shape and np.allclose(out, ref, rtol=1e-5, atol=1e-5)
                    for out, ref in zip(outputs, expected)),
                "seconds": time.perf_counter() - start})
    stats = CACHE_STATS.snapshot()
    print(json.dumps({"ok": all(r["ok"] for r in results), "results": results,
                      **{name: stats[name] for name in ("compiles", "hits", "remote_hits", "remote_bad_entries",
                                                        "remote_stores", "bad_entries")},
                      "warnings": [str(w.message) for w in caught]}))


if __name__ == "__main__":
    sys.exit(main())
