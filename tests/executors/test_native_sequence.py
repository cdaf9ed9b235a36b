"""Native launch sequences: runs of native steps executed by one call of the compiled interpreter.

The interpreter's instructions are checked one by one on memory numpy owns (against numpy), then whole
executables: every step of a small graph in one sequence, bitwise the step-by-step path, following inputs that
move between calls, and stepping aside when a BLAS step must decline; a kernel split on the OpenMP team inside
a sequence (TEAM), as the Python runner splits it.
"""

from __future__ import annotations

import ctypes

import numpy as np
import pytest
import torch

from neuroncc.driver.compile import compile_graph
from neuroncc.executors.cpu import blas, native_sequence
from neuroncc.executors.cpu import threads as threads_module
from neuroncc.executors.cpu.native_sequence import (
    BUFFER, CALL, GEMM, ROWS, SET, SLOT, TEAM, WIDTH, NativeSequence, gemm_words,
)
from neuroncc.executors.cpu.steps import PHASE_FN
from neuroncc.executors.tracing import TimelineRecorder, installed
from neuroncc.ir import Builder, DType, TensorType
from neuroncc.testing.choices import choose


@pytest.fixture(autouse=True)
def products_on_blas(monkeypatch):
    """These tests are of the extern path (MKL, oneDNN): with AVX-512 the small products they use would be
    generated code instead (CpuTarget.small_mm_max_macs)."""
    choose(monkeypatch, small_mm_max_macs=0)

needs_blas = pytest.mark.skipif(blas.library().sgemm is None, reason="torch's library exports no sgemm_")


def _run(words, addresses):
    program = (ctypes.c_int64 * len(words))(*words)
    table = (ctypes.c_int64 * len(addresses))(*addresses)
    native_sequence.interpreter()(program, len(words), table)


def test_set_writes_a_buffer_address_plus_offset_into_a_slot():
    slots = (ctypes.c_int64 * 3)()
    words = [SET, ctypes.addressof(slots) + 8, 1, 24, SET, ctypes.addressof(slots) + 16, 0, 0]
    assert len(words) == 2 * WIDTH[SET]
    _run(words, [1000, 5000])
    assert list(slots) == [0, 5024, 1000]


def test_call_passes_the_argument_array_and_the_outer_range():
    seen = []

    @PHASE_FN
    def phase(args, start, end):
        seen.append((args, start, end))

    _run([CALL, ctypes.cast(phase, ctypes.c_void_p).value, 4096, 7, CALL, ctypes.cast(phase, ctypes.c_void_p).value,
          8192, 1], [])
    assert seen == [(4096, 0, 7), (8192, 0, 1)]


@pytest.mark.parametrize("rows", [1, 2, 5, 8, 13])
@pytest.mark.parametrize("whole", [False, True], ids=["one-row", "whole-matrix"])
def test_rows_copies_a_bias_into_every_row(rows, whole):
    cols = 3
    source = np.arange(rows * cols if whole else cols, dtype=np.float32) + 1
    target = np.zeros((rows, cols), dtype=np.float32)
    slot = (ctypes.c_int64 * 1)(target.ctypes.data)
    words = [ROWS, BUFFER, 0, 0, SLOT, ctypes.addressof(slot), 0, cols * 4, rows, cols * 4 if whole else 0]
    assert len(words) == WIDTH[ROWS]
    _run(words, [source.ctypes.data])
    expected = source.reshape(rows, cols) if whole else np.broadcast_to(source, (rows, cols))
    np.testing.assert_array_equal(target, expected)


@needs_blas
@pytest.mark.parametrize("m, k, n", [(8, 16, 16), (1, 7, 5), (6, 8, 5), (33, 65, 17)])
def test_gemm_and_its_bias_are_bitwise_the_python_blas_call(m, k, n):
    rng = np.random.default_rng(m * 100 + n)
    x, w = rng.standard_normal((m, k)).astype(np.float32), rng.standard_normal((k, n)).astype(np.float32)
    bias = rng.standard_normal(n).astype(np.float32)
    layouts = [((n,), (1,)), ((m, k), (k, 1)), ((k, n), (n, 1))]
    call = blas.prepare("addmm", {"alpha": 0.5, "beta": 2.0}, layouts, ((m, n), (n, 1)), ["f32"] * 4)
    assert call is not None and call.native is not None and call.native.bias is not None
    expected = np.zeros((m, n), dtype=np.float32)
    assert call([bias.ctypes.data, x.ctypes.data, w.ctypes.data, expected.ctypes.data])
    got = np.zeros((m, n), dtype=np.float32)
    words = gemm_words(call, [(BUFFER, i, 0) for i in range(4)])
    assert len(words) == WIDTH[ROWS] + WIDTH[GEMM] and words[WIDTH[ROWS]] == GEMM
    _run(words, [bias.ctypes.data, x.ctypes.data, w.ctypes.data, got.ctypes.data])
    np.testing.assert_array_equal(got, expected)
    torch.testing.assert_close(torch.from_numpy(got), torch.addmm(torch.from_numpy(bias), torch.from_numpy(x),
                                                                  torch.from_numpy(w), alpha=0.5, beta=2.0))


def _mlp_graph(steps=4):
    b = Builder("mlp")
    x = b.param(TensorType((8, 16), DType.f32), "x")
    weights = [b.param(TensorType((16, 16), DType.f32), f"w{i}") for i in range(steps)]
    bias = b.param(TensorType((16,), DType.f32), "bias")
    for w in weights:
        x = b.op("tanh", b.op("addmm", bias, x, w, alpha=1.0, beta=1.0))
    return b.build([x]), 2 + steps  # x, the weights, the bias


def _inputs(rng, count):
    return [rng.standard_normal((8, 16)).astype(np.float32)] + \
        [(rng.standard_normal((16, 16)) * 0.3).astype(np.float32) for _ in range(count - 2)] + \
        [rng.standard_normal(16).astype(np.float32)]


@needs_blas
def test_a_small_graph_runs_as_one_sequence_bitwise_the_step_loop_and_follows_moving_inputs():
    fn, count = _mlp_graph()
    exe = compile_graph(fn, target="cpu", cache=None, options={"threads": 1})
    assert len(exe._step_calls) >= 4
    assert len(exe._calls) == 1 and isinstance(exe._calls[0], NativeSequence)
    rng = np.random.default_rng(0)
    kept = []
    for _ in range(3):
        inputs = _inputs(rng, count)
        kept.append(inputs)  # alive: the next call's inputs live at new addresses
        got = exe(*inputs)[0]
        stepped = exe._call(tuple(inputs), exe._step_calls)[0]
        np.testing.assert_array_equal(got, stepped)
        x, *ws, bias = (torch.from_numpy(a) for a in inputs)
        for w in ws:
            x = torch.tanh(torch.addmm(bias, x, w))
        torch.testing.assert_close(torch.from_numpy(got), x, rtol=1e-5, atol=1e-5)


@needs_blas
def test_a_sequence_steps_aside_when_blas_must_decline():
    fn, count = _mlp_graph(2)
    exe = compile_graph(fn, target="cpu", cache=None, options={"threads": 1})
    assert isinstance(exe._calls[0], NativeSequence)
    inputs = _inputs(np.random.default_rng(1), count)
    before = exe(*inputs)[0]
    previous = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("medium")  # ATen may then use a faster, less precise product
    try:
        calls = []
        exe._calls[0].step_calls = [lambda f, a, c=c: (calls.append(c), c(f, a)) for c in exe._calls[0].step_calls]
        after = exe(*inputs)[0]
    finally:
        torch.set_float32_matmul_precision(previous)
    assert len(calls) == len(exe._step_calls)  # each step ran through Python, so each BLAS step could decline
    torch.testing.assert_close(torch.from_numpy(after), torch.from_numpy(before), rtol=1e-3, atol=1e-3)


@needs_blas
def test_a_traced_call_still_sees_every_step():
    fn, count = _mlp_graph(2)
    exe = compile_graph(fn, target="cpu", cache=None, options={"threads": 1})
    inputs = _inputs(np.random.default_rng(2), count)
    with installed(TimelineRecorder()) as recorder:
        exe(*inputs)
    kinds = [step.info.kind for step in recorder.steps]
    assert kinds.count("graph") == 1 and len(kinds) == 1 + len(exe._step_calls)


def _team_graph():
    """tanh over [512, 128] (64K transcendental elements: split on a team of two), then its product with a
    weight (a BLAS step with a tanh epilogue): two steps, the first across threads."""
    b = Builder("team")
    x = b.param(TensorType((512, 128), DType.f32), "x")
    w = b.param(TensorType((128, 16), DType.f32), "w")
    return b.build([b.op("tanh", b.op("mm", b.op("tanh", x), w))])


@needs_blas
def test_a_kernel_split_on_the_team_runs_inside_the_sequence_bitwise_the_step_loop():
    exe = compile_graph(_team_graph(), target="cpu", cache=None, options={"threads": 2})
    if exe.team is None:
        pytest.skip("no libgomp: kernels split on the Python thread pool, which sequences leave to Python")
    assert len(exe._step_calls) == 2
    assert not exe.team.runs_inline(512, 8 * 128)  # the premise: tanh's rows split at 2 threads
    assert len(exe._calls) == 1 and isinstance(exe._calls[0], NativeSequence)
    assert len(exe._calls[0].tasks) == 1
    rng = np.random.default_rng(3)
    kept = []
    for _ in range(3):  # the task's chunk counter starts again at each call; inputs move between calls
        x = rng.standard_normal((512, 128)).astype(np.float32)
        w = (rng.standard_normal((128, 16)) * 0.1).astype(np.float32)
        kept.append((x, w))
        got = exe(x, w)[0]
        np.testing.assert_array_equal(got, exe._call((x, w), exe._step_calls)[0])
        expected = torch.tanh(torch.tanh(torch.from_numpy(x)) @ torch.from_numpy(w))
        torch.testing.assert_close(torch.from_numpy(got), expected, rtol=1e-5, atol=1e-5)


def test_team_words_follow_the_python_runners_split():
    exe = compile_graph(_team_graph(), target="cpu", cache=None, options={"threads": 2})
    if exe.team is None:
        pytest.skip("no libgomp")
    kernel = exe._runners[0]
    tasks = []
    words = native_sequence.phase_words(kernel, tasks)
    (_, address, n_outer, work, _), = kernel.phases
    chunk, threads, spread = exe.team.split(n_outer, work, exe.team_guided_chunks)
    assert words == [TEAM, exe.team.gomp_parallel_address, threads_module.team_entry(), ctypes.addressof(tasks[0]),
                     threads]
    assert list(tasks[0]) == [address, kernel.args_address, 0, n_outer, chunk, 0, spread]
    assert len(words) == WIDTH[TEAM] and 1 < threads <= 2 and chunk < n_outer
