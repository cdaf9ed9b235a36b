"""An executable runs its kernels on torch's thread count of the moment unless the ``threads`` option fixed it
(``CpuExecutable.for_threads``): the compile cache and the graph cache give one executable to every later
compile of a graph, whatever ``torch.set_num_threads`` says by then (docs/performance-history.md, session 18
threads)."""

from __future__ import annotations

import numpy as np

from neuroncc.codegen.llvm.regions import fuse_whole_function
from neuroncc.executors.cpu.launcher import build_cpu_executable
from neuroncc.testing.models import layer_norm_graph


def _inputs(rows: int = 256, cols: int = 1024):
    rng = np.random.default_rng(0)
    return [rng.standard_normal(shape).astype(np.float32) for shape in ((rows, cols), (cols,), (cols,))]


def test_for_threads_gives_the_same_plan_code_and_arena_on_another_thread_count():
    built = build_cpu_executable(fuse_whole_function(layer_norm_graph(256, 1024)), {})
    assert not built.fixed_threads
    other = built.for_threads(built.threads + 1)
    assert other.threads == built.threads + 1 and other.fixed_threads is False
    assert other.plan is built.plan and other.module is built.module
    assert other._arena.ctypes.data == built._arena.ctypes.data and other._lock is built._lock
    assert built.for_threads(built.threads + 1) is other  # made once per count
    assert other.for_threads(built.threads) is built  # and back to the executable itself
    inputs = _inputs()
    for got, want in zip(other(*inputs), built(*inputs), strict=True):
        np.testing.assert_array_equal(got, want)


def test_the_threads_option_fixes_the_count():
    built = build_cpu_executable(fuse_whole_function(layer_norm_graph(256, 1024)), {"threads": 2})
    assert built.fixed_threads
    assert built.for_threads(1) is built and built.for_threads(2) is built


def test_follows_threads_only_where_a_phase_would_split():
    big = build_cpu_executable(fuse_whole_function(layer_norm_graph(2048, 1024)), {})
    small = build_cpu_executable(fuse_whole_function(layer_norm_graph(4, 16)), {})
    fixed = build_cpu_executable(fuse_whole_function(layer_norm_graph(2048, 1024)), {"threads": 2})
    assert big.follows_threads() and not small.follows_threads() and not fixed.follows_threads()
