"""A/B in one process: the interleave count of loops computing polynomial math (``loop_hints.math_interleave``,
``CpuTarget.polynomial_interleave``: 4 with AVX2, 2 with AVX-512 since session 19) at the given counts, rebuilt by
patching ``loop_hints.math_interleave``, two builds each, called interleaved, medians per build and count/base.

Rows and method: ``variant_ab.py`` (softmax, L2-resident softmax, gelu*sigmoid, cross-entropy; every count's
softmax output compared bit for bit with the base's). Run under ``/work/bin/heavy x`` (docs/performance.md)."""

import argparse
import sys

sys.path.insert(0, "benchmarks")

import variant_ab  # noqa: E402  (first: it sets the cache environment before neuroncc is imported)
import bench_softmax_parts as bsp  # noqa: E402
from neuroncc.codegen.llvm import loop_hints  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    variant_ab.add_arguments(parser)
    parser.add_argument("--counts", default="4,2,8", help="interleave counts, the first the base (default 4,2,8)")
    args = parser.parse_args()
    variants = {f"interleave-{count}": (lambda count=count: bsp.patched(loop_hints, "math_interleave",
                                                                       lambda target: count))
                for count in (int(c) for c in args.counts.split(","))}
    variant_ab.compare(variants, args)


if __name__ == "__main__":
    main()
