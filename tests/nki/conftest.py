"""Fixtures for the NKI simulator tests."""

from __future__ import annotations

import numpy as np
import pytest

from neuroncc.nki.target import TARGET_ENV_VAR


@pytest.fixture(autouse=True)
def _no_target_override(monkeypatch):
    """Tests choose their target explicitly; a developer's environment must not change them."""
    monkeypatch.delenv(TARGET_ENV_VAR, raising=False)


@pytest.fixture
def rng():
    return np.random.default_rng(1234)
