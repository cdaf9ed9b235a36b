"""The device and compiled functions from several Python threads (neuroncc/frontend/tracing.py's lock order).

Each test pins the moment two threads meet (a hook inside one thread's trace runs the other thread's call), so
the failure it guards against happens on every run, not by chance; every wait is bounded (a deadlock fails the
test instead of hanging the suite). Results are compared with CPU eager.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import torch
import torch.fx._symbolic_trace as symbolic_trace

import neuroncc
from neuroncc.device import dispatch

aten = torch.ops.aten
TIMEOUT = 60  # seconds a thread may take before the test calls it a deadlock


def _run_in_thread(fn: Callable[[], Any]) -> Any:
    """``fn()`` on another thread, its result or its exception raised here; a thread that does not finish in
    TIMEOUT fails the test."""
    outcome: dict[str, Any] = {}

    def body() -> None:
        try:
            outcome["value"] = fn()
        except BaseException as error:  # noqa: BLE001 - handed to the test's thread
            outcome["error"] = error

    thread = threading.Thread(target=body, daemon=True)
    thread.start()
    thread.join(TIMEOUT)
    assert not thread.is_alive(), f"{fn} did not finish in {TIMEOUT} s: a deadlock"
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


@pytest.fixture
def inside_a_trace(monkeypatch):
    """``hook(action)``: ``action()`` runs once inside the next FX trace on this thread (any tracer: the
    device's, AOTAutograd's), after the trace has begun; its result is in ``hook.results``."""
    original = symbolic_trace.Tracer.create_args_for_root
    owner = threading.get_ident()
    pending: list[Callable[[], Any]] = []
    results: list[Any] = []

    def create_args_for_root(self, *args, **kwargs):
        if pending and threading.get_ident() == owner:
            action = pending.pop()
            try:
                results.append(action())
            except Exception as error:  # noqa: BLE001 - raised by the test (not into the trace, which would hide it)
                results.append(error)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(symbolic_trace.Tracer, "create_args_for_root", create_args_for_root)

    def hook(action: Callable[[], Any]) -> None:
        pending.append(action)

    hook.results = results
    return hook


def _first(results: list[Any]) -> Any:
    assert results, "no trace happened where the test expects one"
    if isinstance(results[0], Exception):
        raise results[0]
    return results[0]


def _compiled_sin() -> tuple[Callable[..., Any], torch.Tensor]:
    """A function compiled (and called once) on CPU tensors."""
    fn = torch.compile(lambda t: torch.sin(t) * 2 + 1, backend="neuron", dynamic=False)
    x = torch.randn(8, 3)
    torch.testing.assert_close(fn(x), torch.sin(x) * 2 + 1)
    return fn, x


def test_a_compiled_call_on_another_thread_runs_while_the_device_traces_a_new_signature(inside_a_trace):
    fn, x = _compiled_sin()
    module_call = torch.nn.Module.__call__

    def other_thread() -> Any:
        # torch.fx's tracing flag and patches are process-wide: the device's trace must leave neither
        return _run_in_thread(lambda: (fn(x), torch.nn.Module.__call__ is module_call,
                                       symbolic_trace.is_fx_tracing()))

    inside_a_trace(other_thread)
    cpu = torch.randn(3, 7, 11)
    got = torch.nn.functional.hardswish(cpu.to("neuron"))  # a signature the device traces (no direct lowering)
    result, unpatched, tracing = _first(inside_a_trace.results)  # none: the device no longer traces hardswish
    torch.testing.assert_close(result, torch.sin(x) * 2 + 1)
    assert unpatched and not tracing
    torch.testing.assert_close(got.cpu(), torch.nn.functional.hardswish(cpu))


def test_a_compiled_call_on_another_thread_runs_while_a_new_shape_compiles_at_call_time(inside_a_trace):
    fn, x = _compiled_sin()
    dynamic = torch.compile(lambda t: torch.cos(t).sum(0), backend="neuron", dynamic=True)
    first = torch.randn(5, 4)
    torch.testing.assert_close(dynamic(first), torch.cos(first).sum(0))
    inside_a_trace(lambda: _run_in_thread(lambda: fn(x)))
    second = torch.randn(9, 4)  # a new specialization: AOTAutograd traces it in this call
    torch.testing.assert_close(dynamic(second), torch.cos(second).sum(0))
    torch.testing.assert_close(_first(inside_a_trace.results), torch.sin(x) * 2 + 1)


def test_two_threads_meeting_one_new_signature_build_its_program_once(inside_a_trace, monkeypatch):
    from neuroncc.device import programs

    builds = []
    build_program = programs.build_program
    monkeypatch.setattr("neuroncc.device.entries.build_program",
                        lambda *args, **kwargs: builds.append(1) or build_program(*args, **kwargs))
    waiting = threading.Event()
    prepare = dispatch.DeviceOp._prepare

    def announced(self, *args, **kwargs):
        if threading.get_ident() != owner:
            waiting.set()  # the other thread missed the signature and asks for the lock
        return prepare(self, *args, **kwargs)

    monkeypatch.setattr(dispatch.DeviceOp, "_prepare", announced)
    owner = threading.get_ident()
    cpu = torch.randn(5, 13)
    device = cpu.to("neuron")
    outcome: dict[str, Any] = {}

    def same_signature_on_another_thread() -> None:
        thread = threading.Thread(target=lambda: outcome.setdefault("value", torch.nn.functional.hardswish(device)),
                                  daemon=True)
        thread.start()
        outcome["thread"] = thread
        assert waiting.wait(TIMEOUT)
        thread.join(0.2)  # it waits for this thread's entry (it must not build the program again)

    inside_a_trace(same_signature_on_another_thread)
    before = neuroncc.stats()
    got = torch.nn.functional.hardswish(device)
    _first(inside_a_trace.results)
    outcome["thread"].join(TIMEOUT)
    assert not outcome["thread"].is_alive()
    want = torch.nn.functional.hardswish(cpu)
    torch.testing.assert_close(got.cpu(), want)
    torch.testing.assert_close(outcome["value"].cpu(), want)
    after = neuroncc.stats()
    # made once: not built again, nor found again through the signature index the first thread recorded
    assert len(builds) == 1 and after["eager_index_hits"] == before["eager_index_hits"]
    assert after["eager_kernels_compiled"] + after["eager_kernels_loaded"] == \
        before["eager_kernels_compiled"] + before["eager_kernels_loaded"] + 1


def test_a_backward_meeting_new_signatures_on_the_engine_thread_does_not_wait_for_a_compile():
    """A thread compiling holds TorchDynamo's compile lock and can wait for a backward (AOTAutograd traces one
    on the engine thread of the tensors' device): the engine thread's device ops must not wait for that lock."""
    from torch._dynamo.convert_frame import compile_lock

    cpu = torch.randn(6, 17, requires_grad=True)
    device = cpu.detach().to("neuron").requires_grad_()

    def compile_waiting_for_a_backward() -> None:
        with compile_lock:  # this thread "compiles", and waits for the backward below
            loss = (torch.nn.functional.hardswish(device) * torch.arange(17.0, device="neuron")).sum()
            loss.backward()  # it runs on the engine's thread: new signatures there

    _run_in_thread(compile_waiting_for_a_backward)
    (torch.nn.functional.hardswish(cpu) * torch.arange(17.0)).sum().backward()
    torch.testing.assert_close(device.grad.cpu(), cpu.grad)


def test_an_adam_step_on_the_device_while_another_thread_compiles():
    """torch.compiler.is_compiling() is process-wide: while any thread compiles, torch.optim's Adam on another
    thread passes its step sizes as a 1-d CPU tensor to ``_foreach_addcdiv_`` (as it would on CUDA)."""
    torch.manual_seed(0)
    cpu_params = [torch.randn(7, 3, requires_grad=True), torch.randn(3, requires_grad=True)]
    device_params = [p.detach().to("neuron").requires_grad_() for p in cpu_params]
    for params in (cpu_params, device_params):
        optimizer = torch.optim.Adam(params, lr=0.1, foreach=True)
        for step in range(2):
            sum((p * (step + 1)).pow(2).sum() for p in params).backward()
            with torch.compiler._compile_session_context():  # as while another thread compiles
                optimizer.step()
            optimizer.zero_grad()
    for cpu, device in zip(cpu_params, device_params):
        torch.testing.assert_close(device.detach().cpu(), cpu.detach())


def test_a_thread_pool_serving_eager_and_compiled_models_matches_cpu():
    """Four threads: an eager model on the device and a compiled one on device tensors, each request a new
    shape; every result is CPU eager's, and no signature is built twice (none comes from the signature index)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(12, 24), torch.nn.LayerNorm(24), torch.nn.GELU(),
                                torch.nn.Linear(24, 5)).eval()
    device_model = copy.deepcopy(model).to("neuron")
    compiled = torch.compile(device_model, backend="neuron", dynamic=False)
    requests = [torch.randn(rows, 12) for rows in (1, 2, 3, 4, 5, 6)]
    before = neuroncc.stats()["eager_index_hits"]

    def serve(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        with torch.no_grad():
            eager = torch.softmax(device_model(x.to("neuron")), -1).cpu()
            return eager, compiled(x.to("neuron")).cpu()

    with ThreadPoolExecutor(4) as pool:
        results = [future.result(TIMEOUT) for future in [pool.submit(serve, x) for x in requests]]
    with torch.no_grad():
        for x, (eager, graph) in zip(requests, results):
            torch.testing.assert_close(eager, torch.softmax(model(x), -1))
            torch.testing.assert_close(graph, model(x))
    assert neuroncc.stats()["eager_index_hits"] == before
