"""How a link starts ``ld``: never reading the live environment, and once more after a transient failure to start
(``native_library._run_linker``; docs/reliability.md, "Starting the linker beside other threads")."""

from __future__ import annotations

import errno
import os
import subprocess
import threading
from collections.abc import Mapping
from types import SimpleNamespace

import pytest

from neuroncc.codegen.llvm import jit, native_library
from neuroncc.codegen.llvm.native_library import CodeForm

needs_linker = pytest.mark.skipif(native_library.linker() is None, reason="no linker (ld) on PATH")

#: Links in the stress test: before the fix nearly every link beside the writing thread failed (session 38: 260
#: of 270 in 20 s), so a few links are enough; each takes ~10-80 ms beside the writer.
STRESS_LINKS = 8


def _objects() -> list[bytes]:
    return jit.compile_ir(["define i32 @one() {\n  ret i32 1\n}\n"], form=CodeForm.SHARED_LIBRARY).objects


def _recording_run(monkeypatch, fail_with: list[int]) -> list[dict]:
    """``native_library``'s ``subprocess.run`` recorded; the first calls raise OSError with ``fail_with``'s errnos."""
    calls = []

    def run(arguments, **kwargs):
        calls.append(kwargs)
        if len(calls) <= len(fail_with):
            raise OSError(fail_with[len(calls) - 1], os.strerror(fail_with[len(calls) - 1]), arguments[0])
        return subprocess.run(arguments, **kwargs)

    monkeypatch.setattr(native_library, "subprocess",
                        SimpleNamespace(run=run, DEVNULL=subprocess.DEVNULL, PIPE=subprocess.PIPE))
    return calls


@needs_linker
def test_a_link_beside_a_thread_adding_environment_variables_starts_the_linker(monkeypatch):
    """``subprocess`` starts ``ld`` by ``vfork``; without ``env=`` the child's exec read the live ``environ``
    array, which a thread adding a variable moves and frees: ``OSError: [Errno 14] Bad address: '/usr/bin/ld'``
    (one test worker in every suite run of sessions 36-37, the variable set by the tests' autouse
    ``monkeypatch.setenv`` beside a build an earlier test left linking)."""
    monkeypatch.setattr(native_library, "_TRANSIENT_SPAWN_ERRORS", frozenset())  # no second try to hide one
    objects = _objects()
    failures, finished = [], threading.Event()

    def linking():
        try:
            for _ in range(STRESS_LINKS):
                try:
                    native_library.link(objects)
                except OSError as exc:
                    failures.append(exc)
        finally:
            finished.set()

    names = [f"NEURONCC_TEST_SPAWN_{number}" for number in range(16)]
    thread = threading.Thread(target=linking)
    thread.start()
    try:
        while not finished.is_set():
            for name in names:
                os.environ[name] = "1"  # a new variable: setenv moves the array
            for name in names:
                del os.environ[name]
    finally:
        thread.join()
        for name in names:
            os.environ.pop(name, None)
    assert failures == []


@needs_linker
def test_the_linker_gets_a_copy_of_the_environment(monkeypatch):
    objects = _objects()  # (compiled before the spawn is replaced: compile_ir links too)
    calls = _recording_run(monkeypatch, [])
    monkeypatch.setenv("NEURONCC_TEST_SPAWN", "seen")
    native_library.link(objects)
    [kwargs] = calls
    assert type(kwargs["env"]) is dict and kwargs["env"] == dict(os.environ)
    assert kwargs["env"]["NEURONCC_TEST_SPAWN"] == "seen"


def test_the_environment_copy_is_taken_again_when_a_variable_goes_meanwhile():
    """A name listed, then removed by another thread before its value is read: copied again, not a KeyError."""
    reads = []

    class Vanishing(Mapping):  # like os.environ: dict() lists the names, then reads each value
        def __init__(self, values):
            self.values = values

        def __getitem__(self, name):
            reads.append(name)
            if len(reads) == 1:
                raise KeyError(name)
            return self.values[name]

        def __iter__(self):
            return iter(self.values)

        def __len__(self):
            return len(self.values)

    assert native_library.environment_copy(Vanishing({"A": "1", "B": "2"})) == {"A": "1", "B": "2"}
    assert len(reads) == 3


@needs_linker
def test_a_spawn_that_fails_for_a_transient_reason_runs_once_more(monkeypatch):
    objects = _objects()
    calls = _recording_run(monkeypatch, [errno.EFAULT])
    library = native_library.link(objects)
    assert library.startswith(b"\x7fELF") and len(calls) == 2


@needs_linker
@pytest.mark.parametrize("errnos", [[errno.EFAULT, errno.EAGAIN], [errno.ENOENT]], ids=["twice", "not-transient"])
def test_a_spawn_failing_again_or_for_good_is_the_links_error(monkeypatch, errnos):
    objects = _objects()
    calls = _recording_run(monkeypatch, errnos)
    with pytest.raises(OSError) as raised:
        native_library.link(objects)
    assert raised.value.errno == errnos[-1] and len(calls) == len(errnos)
