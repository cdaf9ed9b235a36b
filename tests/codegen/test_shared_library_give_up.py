"""A process that cannot link or load a kernel library gives the shared-library form up loudly: one
SharedLibraryWarning and one log line naming the step and why (the linker's command and stderr, the loader's
error and file), the reason kept for neuroncc's reports, and correct results from MCJIT's code after
(codegen/llvm/native_library.py's ``give_up``). Session 31 twice lost the form in a test process without a trace."""

from __future__ import annotations

import logging
import re
import warnings

import numpy as np
import pytest
from codegen_helpers import background_builds_finished

from neuroncc.codegen.llvm import jit, native_library
from neuroncc.codegen.llvm.native_library import CodeForm
from neuroncc.errors import SharedLibraryWarning
from neuroncc.executors.cpu.launcher import build_cpu_executable
from neuroncc.ir import Builder, DType, TensorType, interpret
from neuroncc.passes import run_pipeline
from neuroncc.passes.pipeline import default_pipeline

needs_linker = pytest.mark.skipif(native_library.linker() is None, reason="no linker (ld) on PATH")


def gelu_graph():
    b = Builder("gelu_rows")
    x = b.param(TensorType((16, 32), DType.f32), "x")
    return run_pipeline(default_pipeline("cpu"), b.build([b.op("gelu", x)]))


@pytest.fixture
def shared_form_until_now(monkeypatch):
    """This process has not given the shared-library form up (an earlier test may have: its list is this test's),
    and no build of an earlier test's links in the background while this one breaks linking."""
    background_builds_finished()
    monkeypatch.setattr(native_library, "_BROKEN", [])
    assert native_library.code_form() is CodeForm.SHARED_LIBRARY


def _computes_correctly_after(rng) -> None:
    exe = build_cpu_executable(gelu_graph(), {})
    assert isinstance(exe.module, jit.JitModule) and exe.plan.code_form == "objects"
    x = rng.standard_normal((16, 32)).astype(np.float32)
    np.testing.assert_allclose(exe(x)[0], interpret(exe.function, [x])[0], rtol=1e-5, atol=1e-6)


@needs_linker
def test_a_failed_link_warns_with_the_linkers_command_and_stderr(monkeypatch, tmp_path, rng, caplog,
                                                                  shared_form_until_now):
    fake_ld = tmp_path / "fake-ld"
    fake_ld.write_text("#!/bin/sh\necho 'fake-ld: cannot find -lbroken-on-purpose' >&2\nexit 3\n")
    fake_ld.chmod(0o755)
    monkeypatch.setattr(native_library, "linker", lambda: str(fake_ld))
    with caplog.at_level(logging.WARNING, logger="neuroncc.codegen"), \
            pytest.warns(SharedLibraryWarning) as warned:
        exe = build_cpu_executable(gelu_graph(), {})
    messages = [str(w.message) for w in warned if w.category is SharedLibraryWarning]
    assert len(messages) == 1
    assert re.search(r"linking \d+ kernel object\(s\) into a library failed: OSError: `\S*fake-ld -shared .*"
                     r"--whole-archive \S+kernels\.a` exited with 3: fake-ld: cannot find -lbroken-on-purpose",
                     messages[0]), messages[0]
    assert native_library.given_up() == (messages[0].removeprefix("neuroncc: ").split("; this process")[0],)
    assert any("cannot find -lbroken-on-purpose" in r.getMessage() for r in caplog.records)
    x = rng.standard_normal((16, 32)).astype(np.float32)
    np.testing.assert_allclose(exe(x)[0], interpret(exe.function, [x])[0], rtol=1e-5, atol=1e-6)
    monkeypatch.setattr(native_library, "linker", lambda: "/usr/bin/ld")  # a linker again: the form stays given up
    assert native_library.code_form() is CodeForm.OBJECTS
    _computes_correctly_after(rng)


@needs_linker
def test_a_library_that_fails_to_load_warns_with_the_loaders_error_and_file(monkeypatch, rng, shared_form_until_now):
    # a "library" the loader refuses (not ELF), from a memory file and from the private file both
    monkeypatch.setattr(jit, "link", lambda objects: b"\x7fNOT-AN-ELF-FILE" + bytes(64))
    with pytest.warns(SharedLibraryWarning) as warned:
        exe = build_cpu_executable(gelu_graph(), {})
    messages = [str(w.message) for w in warned if w.category is SharedLibraryWarning]
    assert len(messages) == 1
    message = messages[0]
    assert "loading the kernel library failed: ArtifactError: cannot load the kernel library" in message
    assert re.search(r"/proc/self/[./]*fd/\d+", message), message  # the memory file the loader opened
    assert re.search(r"neuroncc-so-\d+-\w+/\d+\.so", message), message  # and the private file after it
    assert "ELF" in message or "header" in message, message  # the loader's own words
    assert len(native_library.given_up()) == 1
    x = rng.standard_normal((16, 32)).astype(np.float32)
    np.testing.assert_allclose(exe(x)[0], interpret(exe.function, [x])[0], rtol=1e-5, atol=1e-6)
    _computes_correctly_after(rng)


def test_giving_up_under_warnings_as_errors_raises_the_reason(shared_form_until_now):
    # how a test run finds a give-up: -W error::neuroncc.errors.SharedLibraryWarning fails where it happens
    with warnings.catch_warnings():
        warnings.simplefilter("error", SharedLibraryWarning)
        with pytest.raises(SharedLibraryWarning, match="the reason"):
            native_library.give_up("the reason")
    assert native_library.given_up() == ("the reason",)
