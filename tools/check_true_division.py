"""Generated float32 division kernels against numpy's division, over many random (x, c) pairs (session 45,
``codegen/llvm/division.py``): a per-row (column) divisor, the loop-invariant case LLVM once hoisted a reciprocal
for, and a per-element divisor. Each round draws [4096, 1024] pairs of one kind in turn: uniform bit patterns (every
exponent, NaN, infinities, denormals, zeros); quotients steered near FLT_MAX and the denormal boundary; ordinary
magnitudes with special values sprinkled in. NaN results compare as NaN, everything else bit for bit.

    /work/bin/heavy s python tools/check_true_division.py [ROUNDS] [SEED] [--reciprocal]

``--reciprocal``: the kernels every division made before session 45 (``arcp``: x * RN(1/c) for the column).
Session 45 (Zen 4): 0 mismatches in 302M pairs per kind; with ``--reciprocal`` 21% of the column's.
"""

from __future__ import annotations

import sys

import numpy as np

from neuroncc.codegen.llvm import division
from neuroncc.executors.cpu.launcher import build_cpu_executable
from neuroncc.ir import Builder, DType, TensorType

ROWS, COLS = 4096, 1024
SPECIALS = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 3.0, 7.0, 0.1, 2.0 ** -149, -(2.0 ** -149),
                     2.0 ** -126, 2.0 ** -127, np.finfo(np.float32).max, -np.finfo(np.float32).max, 2.0 ** 127,
                     2.0 ** -24, 1e-45, 3e38], np.float32)


def graph(divisor_shape: tuple[int, int]):
    b = Builder("true_division")
    x = b.param(TensorType((ROWS, COLS), DType.f32), "x")
    return b.build([b.op("div", x, b.param(TensorType(divisor_shape, DType.f32), "c"))])


def operands(rng: np.random.Generator, kind: int, shape: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
    if kind == 0:
        return (rng.integers(0, 2 ** 32, (ROWS, COLS), dtype=np.uint32).view(np.float32),
                rng.integers(0, 2 ** 32, shape, dtype=np.uint32).view(np.float32))
    if kind == 1:  # x of any exponent; half the divisors put x / c near 2**127 or 2**-126
        x = (rng.uniform(1, 2, (ROWS, COLS)) * 2.0 ** rng.integers(-149, 128, (ROWS, COLS))
             * rng.choice([-1, 1], (ROWS, COLS))).astype(np.float32)
        c = (rng.uniform(1, 2, shape) * 2.0 ** rng.integers(-149, 128, shape)).astype(np.float32)
        target = rng.choice([-1, 0, 1], shape) + np.where(rng.random(shape) < 0.5, 127, -126)
        scale = np.abs(x[:, :1] if shape[1] == 1 else x) * 2.0 ** -target * rng.uniform(0.5, 2, shape)
        with np.errstate(over="ignore"):
            return x, np.where(rng.random(shape) < 0.5, c, scale.astype(np.float32)).astype(np.float32)
    x = (rng.standard_normal((ROWS, COLS)) * 10.0 ** rng.integers(-8, 8, (ROWS, COLS))).astype(np.float32)
    c = (rng.standard_normal(shape) * 10.0 ** rng.integers(-8, 8, shape)).astype(np.float32)
    x.reshape(-1)[rng.integers(0, x.size, 20000)] = rng.choice(SPECIALS, 20000)
    c.reshape(-1)[rng.integers(0, c.size, max(c.size // 50, 21))] = rng.choice(SPECIALS, max(c.size // 50, 21))
    return x, c


def main() -> None:
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    rounds, seed = (int(args[0]) if args else 12), (int(args[1]) if len(args) > 1 else 45)
    if "--reciprocal" in sys.argv:
        division.multiplies_by_the_reciprocal = lambda region, op: True
    rng = np.random.default_rng(seed)
    shapes = {"column": (ROWS, 1), "same shape": (ROWS, COLS)}
    executables = {name: build_cpu_executable(graph(shape), {"threads": 2}) for name, shape in shapes.items()}
    checked, wrong = dict.fromkeys(shapes, 0), dict.fromkeys(shapes, 0)
    for round_ in range(rounds):
        for name, shape in shapes.items():
            x, c = (np.ascontiguousarray(a, np.float32) for a in operands(rng, round_ % 3, shape))
            (got,) = executables[name](x, c)
            with np.errstate(all="ignore"):
                want = x / c
            same = (got.view(np.int32) == want.view(np.int32)) | (np.isnan(got) & np.isnan(want))
            checked[name] += x.size
            wrong[name] += int((~same).sum())
    for name in shapes:
        print(f"{name} divisor: {wrong[name]} mismatches in {checked[name] / 1e6:.1f}M pairs")


if __name__ == "__main__":
    main()
