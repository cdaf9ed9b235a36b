"""Helpers shared by the NKI simulator tests (imported as a plain module; pytest puts this folder on sys.path)."""

from __future__ import annotations

import numpy as np

import neuroncc.nki as nki
from neuroncc.nki.dtypes import round_to_bfloat16


def run(fn, *args, target=None, **kwargs):
    """Simulate ``fn`` (a plain function written as a kernel) on numpy inputs."""
    return nki.simulate(nki.jit(fn), target=target)(*args, **kwargs)


def bf16(values):
    """``values`` rounded to bfloat16 (float32 array): what a bfloat16 tensor holds."""
    return round_to_bfloat16(np.asarray(values, dtype=np.float32))


TOLERANCE = {"float32": dict(rtol=1e-5, atol=1e-5), "bfloat16": dict(rtol=1e-2, atol=1e-2)}
