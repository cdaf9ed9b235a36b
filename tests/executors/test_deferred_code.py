"""A graph build returns before LLVM has finished its kernels; the first call binds the code
(executors/cpu/deferred_code.py, ``CpuExecutable.bind_code``).

The code is waited for before anything uses it, a failure in the background surfaces where the code is
wanted as the build's own typed error (on every call), builds on several threads at once stay correct, and a
process that forks while a build is pending neither deadlocks nor gives the child a build that never ends.
"""

from __future__ import annotations

import io
import os
import threading
import time

import numpy as np
import pytest
import torch

import neuroncc
from neuroncc.codegen.llvm import jit
from neuroncc.errors import CodegenError
from neuroncc.executors.cpu import deferred_code
from neuroncc.executors.cpu.launcher import build_cpu_executable
from neuroncc.ir import Builder, DType, TensorType
from neuroncc.passes import run_pipeline
from neuroncc.passes.pipeline import default_pipeline

GRAPH_BUILD = {"quick_first": "modules"}  # torch.compile's graphs' builds (frontend/aten_compiler.py)


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(16)


def _sum_and_exp(name: str = "sum_exp", shape: tuple[int, int] = (37, 129)):
    """Row sums (reassociated: optimized at once) and exp (tier independent: quick tier first)."""
    b = Builder(name)
    x = b.param(TensorType(shape, DType.f32), "x")
    return run_pipeline(default_pipeline("cpu"), b.build([b.op("sum", x, dims=(1,)), b.op("exp", x)]))


def _inputs(rng, shape=(37, 129)):
    return [rng.standard_normal(shape).astype(np.float32)]


def _slow_compiles(monkeypatch, seconds: float) -> None:
    """Every LLVM module takes ``seconds`` longer on the compile workers: the build is surely pending."""
    compile_module = jit._compile_module

    def slow(*args, **kwargs):
        time.sleep(seconds)
        return compile_module(*args, **kwargs)

    monkeypatch.setattr(jit, "_compile_module", slow)


def test_a_graph_build_binds_its_code_at_the_first_call_with_the_results_of_a_waited_build(rng, monkeypatch):
    fn = _sum_and_exp()
    waited = build_cpu_executable(fn)
    assert waited.code_pending is None and waited.module is not None
    _slow_compiles(monkeypatch, 0.2)
    deferred = build_cpu_executable(fn, GRAPH_BUILD)
    assert deferred.code_pending is not None and deferred.module is None, "returned before LLVM finished"
    args = _inputs(rng)
    for got, want in zip(deferred(*args), waited(*args)):
        np.testing.assert_array_equal(got, want)
    assert deferred.code_pending is None and deferred.module is not None
    # the plan records the code as a waited build's does: a cache artifact of either means the same
    assert deferred.plan.code_form == waited.plan.code_form and deferred.plan.object_sha256


def _failing_compiles(monkeypatch) -> None:
    def broken(*args, **kwargs):
        raise CodegenError("generated LLVM IR does not verify: broken on purpose")

    monkeypatch.setattr(jit, "_compile_module", broken)


def test_a_compile_error_in_the_background_surfaces_at_the_first_call_as_the_builds_own_error(rng, monkeypatch,
                                                                                             tmp_path):
    _failing_compiles(monkeypatch)
    fn = _sum_and_exp("broken")
    with pytest.raises(CodegenError, match="broken on purpose") as waited:
        build_cpu_executable(fn)  # a waited build raises it at once
    deferred = build_cpu_executable(fn, GRAPH_BUILD)  # returns: the error is not known yet
    for _ in range(2):  # on every call, never a hang or a half-bound executable
        with pytest.raises(CodegenError, match="broken on purpose") as first:
            deferred(*_inputs(rng))
        assert str(first.value) == str(waited.value)
    with pytest.raises(CodegenError, match="broken on purpose"):
        deferred.save(tmp_path)  # nothing of it reaches the cache


def test_a_compile_error_in_the_background_surfaces_at_the_compiled_models_first_call(monkeypatch):
    monkeypatch.setenv("NEURONCC_DISABLE_CACHE", "1")
    monkeypatch.setenv("NEURONCC_DISABLE_GRAPH_CACHE", "1")
    torch._dynamo.reset()
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.LayerNorm(32))
    x = torch.randn(8, 16)
    _failing_compiles(monkeypatch)
    run = torch.compile(model, backend="neuron", dynamic=False)
    with torch.no_grad(), pytest.raises(neuroncc.CodegenError, match="broken on purpose"):
        run(x)
    torch._dynamo.reset()


def test_two_graphs_build_at_once_on_two_threads_and_each_binds_its_own_code(rng, monkeypatch):
    _slow_compiles(monkeypatch, 0.05)
    graphs = [_sum_and_exp("first", (37, 129)), _sum_and_exp("second", (19, 70))]
    built: dict[int, object] = {}
    errors: list[BaseException] = []

    def build(index: int) -> None:
        try:
            built[index] = build_cpu_executable(graphs[index], GRAPH_BUILD)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=build, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    assert not errors and len(built) == 2
    for index, shape in enumerate([(37, 129), (19, 70)]):
        args = _inputs(rng, shape)
        want = build_cpu_executable(graphs[index])(*args)
        for got, expected in zip(built[index](*args), want):
            np.testing.assert_array_equal(got, expected)


def test_a_fork_while_a_build_is_pending_waits_for_it_and_the_child_runs_the_code(rng, monkeypatch):
    fn = _sum_and_exp("forked")
    args = _inputs(rng)
    want = build_cpu_executable(fn)(*args)
    _slow_compiles(monkeypatch, 0.3)
    deferred = build_cpu_executable(fn, GRAPH_BUILD)
    assert not deferred.code_pending.done()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: the fork hook waited, so the code is there (or the call would hang)
        try:
            os.close(read)
            done = deferred.code_pending.done()
            buffer = io.BytesIO()
            np.savez(buffer, done=np.array(done), *deferred(*args))
            with os.fdopen(write, "wb") as out:
                out.write(buffer.getvalue())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as source:
        arrays = np.load(io.BytesIO(source.read()), allow_pickle=False)
    done, got = bool(arrays["done"]), [arrays[f"arr_{i}"] for i in range(len(want))]
    _, status = os.waitpid(pid, 0)
    assert status == 0 and done, "the parent waited for the pending build before it forked"
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)
    for a, b in zip(deferred(*args), want):  # and the parent's own executable is unharmed
        np.testing.assert_array_equal(a, b)


def test_waiting_for_pending_builds_returns_at_once_when_there_are_none():
    deferred_code.wait_for_pending()
    start = time.perf_counter()
    deferred_code.wait_for_pending()
    assert time.perf_counter() - start < 1.0
