"""A/B in one process: exp's scale on AVX-512 by the integer n (``llvm.ldexp``: vpaddd, vcvtdq2ps, vscalefps; the
form before session 18 exppass, rebuilt by patching ``mathlib._exp_in_range``) against the float n (vscalefps of it,
``vector_variants.scaled_by_float``), two builds each, called interleaved, medians per build and new/old.

Rows and method: ``variant_ab.py`` (softmax, L2-resident softmax, gelu*sigmoid, cross-entropy; the softmax outputs
checked bit-identical). Run under ``/work/bin/heavy x`` (docs/performance.md)."""

import argparse
import contextlib
import sys

sys.path.insert(0, "benchmarks")

import variant_ab  # noqa: E402  (first: it sets the cache environment before neuroncc is imported)
import bench_softmax_parts as bsp  # noqa: E402
from neuroncc.codegen.llvm import mathlib  # noqa: E402


def _old_exp_in_range(b, xc, target):
    n, whole = mathlib._round_to_integer(b, b.fmul(xc, mathlib._c(1.4426950408889634), flags=mathlib.FAST))
    r = b.fsub(xc, b.fmul(n, mathlib._c(0.693359375), flags=mathlib.FAST), flags=mathlib.FAST)
    r = b.fsub(r, b.fmul(n, mathlib._c(-2.12194440e-4), flags=mathlib.FAST), flags=mathlib.FAST)
    return mathlib._scale(b, mathlib._exp_reduced(b, r), whole, target)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    variant_ab.add_arguments(parser)
    variant_ab.compare({"old": lambda: bsp.patched(mathlib, "_exp_in_range", _old_exp_in_range),
                        "new": contextlib.nullcontext}, parser.parse_args())


if __name__ == "__main__":
    main()
