"""The launcher's threading decision counts transcendental work heavier (``codegen/llvm/launch_cost.py``).

Plain kernels of the issue #18 classifier's size (a layer norm over [512, 64]: 131K elements touched) ran
slower on two threads than on one; kernels computing exp or erf over as many elements ran twice as fast.
"""

from __future__ import annotations

import numpy as np

from neuroncc.codegen.llvm.launch_cost import TRANSCENDENTAL_WEIGHT
from neuroncc.codegen.llvm.regions import fuse_whole_function
from neuroncc.executors.cpu.launcher import build_cpu_executable
from neuroncc.executors.cpu.threads import PARALLEL_MIN_WORK, TEAM_MIN_WORK, ThreadPool
from neuroncc.ir import Builder, DType, TensorType, interpret
from neuroncc.testing.models import layer_norm_graph


def _phases(fn):
    exe = build_cpu_executable(fuse_whole_function(fn), {"threads": 2})
    (step,) = [s for s in exe.plan.steps if s.kind == "kernel"]
    return exe, step.phases


class _Team:
    """The OpenMP team's decision without libgomp (the same rule: OpenMPTeam.runs_inline)."""

    threads = 2

    def runs_inline(self, n: int, work: int = 1) -> bool:
        return n < 2 or n * max(work, 1) < TEAM_MIN_WORK


def test_a_plain_layer_norm_of_the_classifier_runs_on_one_thread():
    exe, (phase,) = _phases(layer_norm_graph(512, 64))
    assert phase.n_outer * phase.work == 512 * (3 * 64 + 1)  # mean, variance, write; not weighted
    assert _Team().runs_inline(phase.n_outer, phase.work)
    assert ThreadPool(2).runs_inline(phase.n_outer, phase.work)


def test_a_transcendental_kernel_of_the_same_size_splits():
    b = Builder("erf")
    x = b.param(TensorType((512, 128), DType.f32), "x")
    fn = b.build([b.op("erf", x)])
    exe, (phase,) = _phases(fn)
    assert phase.n_outer * phase.work == 512 * 128 * TRANSCENDENTAL_WEIGHT
    assert not _Team().runs_inline(phase.n_outer, phase.work)
    assert ThreadPool(2).runs_inline(phase.n_outer, phase.work)  # the pool's wake-up costs 40-50 us
    data = np.random.default_rng(0).standard_normal((512, 128)).astype(np.float32)
    np.testing.assert_allclose(exe(data)[0], interpret(fn, [data])[0], rtol=1.3e-6, atol=1e-5)


def test_thresholds_keep_transcendental_phases_where_they_were():
    # before the weighting: the team split from 32K elements, the pool from 256K, whatever the phase computed
    assert TEAM_MIN_WORK // TRANSCENDENTAL_WEIGHT == 1 << 15
    assert PARALLEL_MIN_WORK // TRANSCENDENTAL_WEIGHT == 1 << 18


def test_a_map_over_long_rows_counts_every_element_of_its_blocks():
    # rows longer than the block are mapped a block at a time (kernel_plan.BlockedMap): each outer iteration
    # touches a block of elements per stage, not none (it was 0 and such kernels never split; cross-entropy's
    # gradient over [512, 32000] once its sum over the classes is folded away: 1.8x slower on 2 threads)
    b = Builder("long_rows")
    x = b.param(TensorType((8, 40000), DType.f32), "x")
    exe, (phase,) = _phases(b.build([b.op("add", b.op("mul", x, x), x)]))
    assert phase.n_outer > 8  # blocked
    assert phase.n_outer * phase.work >= 8 * 40000
    assert not _Team().runs_inline(phase.n_outer, phase.work)
