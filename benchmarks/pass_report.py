"""What the pass pipeline does to a transformer block: kernel counts, memory plan, pipeline time.

    PYTHONPATH=. python benchmarks/pass_report.py [--batch 1 2] [--target nki]

The block is d_model 512, 8 heads, seq 256, MLP x4 (neuroncc.testing.models), forward and training step
(forward + backward in one joint graph). Kernel counts and bytes are exact; the pipeline time is the median
of 5 runs. Inductor generates 7 fused kernels + 6 GEMMs for the forward block (torch 2.13, CPU).
"""

from __future__ import annotations

import argparse
import statistics
import time

from neuroncc.passes import default_pipeline, kernel_summary, plan, run_pipeline
from neuroncc.passes.manager import PassContext
from neuroncc.testing import models


def mib(nbytes: int) -> str:
    return f"{nbytes / 2**20:.1f} MiB"


def report(name: str, fn, pipeline: str) -> None:
    times = []
    for _ in range(5):
        start = time.perf_counter()
        fused = run_pipeline(pipeline, fn, PassContext())
        times.append(time.perf_counter() - start)
    summary = kernel_summary(fused)
    unfused = plan(run_pipeline("canonicalize", fn))  # every op's result in its own buffer, reused by liveness
    memory = plan(fused)
    print(f"{name}: {len(fn.ops)} ops -> {summary.launches} launches ({summary.fused_kernels} fused kernels, "
          f"{summary.gemms} GEMMs of which {summary.matmul_kernels} with a fused epilogue); "
          f"pipeline {statistics.median(times) * 1e3:.0f} ms")
    print(f"  memory: arena {mib(memory.arena_bytes)}, peak live {mib(memory.peak_bytes)}, without reuse "
          f"{mib(memory.naive_bytes)} ({1 - memory.arena_bytes / memory.naive_bytes:.0%} less), "
          f"{len(memory.in_place)} in-place kernels; unfused graph: peak {mib(unfused.peak_bytes)}, "
          f"without reuse {mib(unfused.naive_bytes)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--target", default="cpu", choices=["cpu", "nki", "interp"])
    args = parser.parse_args()
    pipeline = default_pipeline(args.target)
    print(f"pipeline ({args.target}): {pipeline}")
    for batch in args.batch:
        report(f"forward  batch {batch}", models.transformer_block(batch=batch), pipeline)
        report(f"training batch {batch}", models.transformer_block_training(batch=batch), pipeline)


if __name__ == "__main__":
    main()
