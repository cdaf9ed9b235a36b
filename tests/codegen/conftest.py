import numpy as np
import pytest
from codegen_helpers import background_builds_finished


@pytest.fixture(params=["shared-library", "objects"])
def code_form(request, monkeypatch):
    """Each test using it runs twice: kernels linked into a shared library (this machine has a linker), and as
    objects for MCJIT (no linker found: the fallback, forced)."""
    from neuroncc.codegen.llvm import native_library

    form = native_library.CodeForm(request.param)
    if form is native_library.CodeForm.OBJECTS:
        background_builds_finished()  # one of an earlier test's, linking meanwhile, would find no linker
        monkeypatch.setattr(native_library, "linker", lambda: None)
    elif native_library.linker() is None:
        pytest.skip("no linker (ld) on PATH")
    return form


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(1234)
