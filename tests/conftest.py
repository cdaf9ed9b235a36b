import os

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile("ci", max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("dev", max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path, monkeypatch):
    """Every test gets its own compile cache so tests never see each other's artifacts."""
    monkeypatch.setenv("NEURONCC_CACHE_DIR", str(tmp_path / "neuroncc-cache"))


@pytest.fixture
def layout_copies(monkeypatch):
    """The graph outputs the torch front end copies into eager's strides: (shape, strides, eager's strides)."""
    from neuroncc.frontend import convert

    copies = []
    with_strides = convert.with_strides

    def counting(tensor, stride):
        result = with_strides(tensor, stride)
        if result.data_ptr() != tensor.data_ptr():
            copies.append((tuple(tensor.shape), tensor.stride(), stride))
        return result

    monkeypatch.setattr(convert, "with_strides", counting)
    return copies
