"""A separate process for the cache tests: compile a .nir through the cache, run it, report as JSON.

    python cache_child.py FILE.nir TARGET [--crash-at STEP] [--stall-at STEP:SECONDS] [--barrier DIR:COUNT]
                          [--background]

The cache directory comes from $NEURONCC_CACHE_DIR. Without --crash-at/--stall-at the compile goes through
``compile_graph``'s environment path (as the front end's does); with them, through an explicit CompileCache whose
checkpoint kills (SIGKILL) or stalls this process at that step of a miss; ``--background`` makes that cache
publish on the writer thread (as the environment's does), so the later steps happen there.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
import warnings
from pathlib import Path

import numpy as np

from cache_testing import read_nir, sample_inputs, wait_at_barrier
from neuroncc.ir import interpret
from neuroncc.driver.cache import CompileCache
from neuroncc.driver.process_cache import CACHE_STATS
from neuroncc.driver.compile import FROM_ENVIRONMENT, compile_graph


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("nir")
    parser.add_argument("target")
    parser.add_argument("--crash-at")
    parser.add_argument("--stall-at")
    parser.add_argument("--barrier")
    parser.add_argument("--background", action="store_true")
    args = parser.parse_args()
    fn = read_nir(Path(args.nir))
    inputs = sample_inputs(fn)
    expected = interpret(fn, inputs)

    stall_step, _, stall_seconds = (args.stall_at or "").partition(":")

    def checkpoint(step: str) -> None:
        if step == args.crash_at:
            os.kill(os.getpid(), signal.SIGKILL)
        if step == stall_step:
            time.sleep(float(stall_seconds))

    cache = FROM_ENVIRONMENT
    if args.crash_at or args.stall_at:
        cache = CompileCache(CompileCache.directory_from_environ(os.environ), checkpoint=checkpoint,
                             publish_in_background=args.background)
    if args.barrier:  # start all processes' compiles together
        wait_at_barrier(args.barrier)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        executable = compile_graph(fn, target=args.target, cache=cache)
        outputs = executable(*inputs)
    ok = all(np.allclose(out, ref, rtol=1e-5, atol=1e-5) and out.shape == ref.shape
             for out, ref in zip(outputs, expected)) and len(outputs) == len(expected)
    stats = CACHE_STATS.snapshot()
    print(json.dumps({"ok": ok, "compiles": stats["compiles"], "hits": stats["hits"],
                      "bad_entries": stats["bad_entries"], "warnings": [str(w.message) for w in caught]}))


if __name__ == "__main__":
    sys.exit(main())
