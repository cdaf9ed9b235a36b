"""Test table entries for the complex ops: view_as_real, view_as_complex, conj, and the FFTs
(fft_r2c, fft_c2r, fft_c2c) against torch.view_as_real/complex, torch.conj and ATen's ``_fft_*``.

FFT sizes are drawn small (0..8, odd and even); values stay moderate, and the tolerance scales with the
transform length (float32 pocketfft against the float64 reference)."""

from __future__ import annotations

import torch
from hypothesis import strategies as st

from neuroncc.ir import DType, TensorType

from .spec import OpSpec
from .support import Case, Tol, operand, rngs, shapes

F32, C64 = DType.f32, DType.c64
NORM_CODES = {"none": 0, "by_root_n": 1, "by_n": 2}


def t(shape, dtype):
    return TensorType(tuple(shape), dtype)


@st.composite
def _one(draw: st.DrawFn, dtype: DType, *, last: int | None = None) -> Case:
    rng = draw(rngs())
    shape = draw(shapes())
    if last is not None:
        shape = shape + (last,)
    return Case([operand(rng, shape, dtype, specials=draw(st.booleans()))])


@st.composite
def _fft_cases(draw: st.DrawFn, op: str) -> Case:
    rng = draw(rngs())
    rank = draw(st.integers(1, 3))
    shape = list(draw(st.lists(st.integers(1, 8), min_size=rank, max_size=rank)))
    dims = draw(st.lists(st.integers(0, rank - 1), min_size=1, max_size=min(rank, 2), unique=True))
    attrs: dict = {"dims": tuple(dims)}
    if draw(st.booleans()):
        attrs["norm"] = draw(st.sampled_from(list(NORM_CODES)))
    if op == "fft_r2c":
        if draw(st.booleans()):
            attrs["onesided"] = draw(st.booleans())
        return Case([operand(rng, shape, F32, low=-2, high=2)], attrs)
    if op == "fft_c2r":
        n = draw(st.integers(1, 8))
        attrs["last_dim_size"] = n
        shape[dims[-1]] = n // 2 + 1
    else:
        attrs["forward"] = draw(st.booleans())
    return Case([operand(rng, shape, C64, low=-2, high=2)], attrs)


def _aten_fft(op: str):
    def run(xs, attrs):
        x, dims, norm = xs[0], list(attrs["dims"]), NORM_CODES[attrs["norm"]]
        if op == "fft_r2c":
            return torch.ops.aten._fft_r2c(x, dims, norm, attrs["onesided"])
        if op == "fft_c2r":
            return torch.ops.aten._fft_c2r(x, dims, norm, attrs["last_dim_size"])
        return torch.ops.aten._fft_c2c(x, dims, norm, attrs["forward"])

    return run


_FFT_TOL = Tol(rtol=40, atol=40)
_DIMS = {"dims": (0,)}

SPECS = {
    "view_as_real": OpSpec(lambda: _one(C64), lambda xs, attrs: torch.view_as_real(xs[0]), Tol(),
                           (((t((2,), F32),), {}), ((), {}))),
    "view_as_complex": OpSpec(lambda: _one(F32, last=2), lambda xs, attrs: torch.view_as_complex(torch.empty(xs[0].shape).copy_(xs[0])),
                              Tol(), (((t((2, 3), F32),), {}), ((t((2,), C64),), {}), ((t((), F32),), {}))),
    "conj": OpSpec(lambda: _one(C64), lambda xs, attrs: torch.conj_physical(xs[0]), Tol(),
                   (((t((2,), F32),), {}),)),
    "fft_r2c": OpSpec(lambda: _fft_cases("fft_r2c"), _aten_fft("fft_r2c"), _FFT_TOL, (
        ((t((4,), C64),), _DIMS),  # a real input
        ((t((4,), F32),), {"dims": ()}),
        ((t((4, 2), F32),), {"dims": (0, 0)}),
        ((t((4, 2), F32),), {"dims": (-1,)}),
        ((t((4,), F32),), {"dims": (0,), "norm": "ortho"}),
    )),
    "fft_c2r": OpSpec(lambda: _fft_cases("fft_c2r"), _aten_fft("fft_c2r"), _FFT_TOL, (
        ((t((4,), F32),), {"dims": (0,), "last_dim_size": 6}),
        ((t((4,), C64),), {"dims": (0,), "last_dim_size": 8}),  # 8 real points need 5 frequencies
        ((t((4,), C64),), {"dims": (0,), "last_dim_size": 0}),
        ((t((4,), C64),), {"dims": (0,)}),  # last_dim_size is required
    )),
    "fft_c2c": OpSpec(lambda: _fft_cases("fft_c2c"), _aten_fft("fft_c2c"), _FFT_TOL, (
        ((t((4,), F32),), {"dims": (0,), "forward": True}),
        ((t((4,), C64),), {"dims": (1,), "forward": True}),
        ((t((4,), C64),), _DIMS),  # forward is required
    )),
}
