"""Shared helpers for the NKI simulator tests."""

from __future__ import annotations

import numpy as np
import pytest

import neuroncc.nki as nki
from neuroncc.runtime.nki.dtypes import round_to_bfloat16
from neuroncc.runtime.nki.target import TARGET_ENV_VAR


@pytest.fixture(autouse=True)
def _no_target_override(monkeypatch):
    """Tests choose their target explicitly; a developer's environment must not change them."""
    monkeypatch.delenv(TARGET_ENV_VAR, raising=False)


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


def run(fn, *args, target=None, **kwargs):
    """Simulate ``fn`` (a plain function written as a kernel) on numpy inputs."""
    return nki.simulate(nki.jit(fn), target=target)(*args, **kwargs)


def bf16(values):
    """``values`` rounded to bfloat16 (float32 array): what a bfloat16 tensor holds."""
    return round_to_bfloat16(np.asarray(values, dtype=np.float32))


TOLERANCE = {"float32": dict(rtol=1e-5, atol=1e-5), "bfloat16": dict(rtol=1e-2, atol=1e-2)}
