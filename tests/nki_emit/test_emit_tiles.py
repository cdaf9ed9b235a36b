"""The NKI kernels obey the tile pass's decisions (tests/filecheck/tile-nki.nir shows the source): other
decisions give other kernels with the same results, and a kernel tiled for one generation is tiled again for
the one it is emitted for."""

from __future__ import annotations

import numpy as np
from emit_helpers import F32, check_against_interpreter, graph, lower

from neuroncc.codegen.nki import emit_program
from neuroncc.executors.nki_sim.costs import estimate_costs


def test_other_tiles_give_other_kernels_and_the_same_results(rng):
    pipeline = "canonicalize,fuse,layout{target=trn2},tile{target=trn2 tile=[64,256]},plan-memory"
    b, (x, w) = graph("scaled", ((256, 1024), F32), ((1024,), F32))
    scaled = b.build([b.op("mul", b.op("exp", x), w)])
    assert "nl.ndarray((128, 1024), dtype=nl.float32" in check_against_interpreter(scaled, rng).source
    assert "nl.ndarray((64, 256), dtype=nl.float32" in check_against_interpreter(scaled, rng, pipeline=pipeline).source
    b, (x,) = graph("softmax", ((256, 1024), F32))
    e = b.op("exp", b.op("sub", x, b.op("amax", x, dims=[1], keepdim=True)))
    softmax = b.build([b.op("div", e, b.op("sum", e, dims=[1], keepdim=True))])
    # the reduced rows stay whole; the partitions follow the decision
    assert "nl.ndarray((64, 1024), dtype=nl.float32" in check_against_interpreter(softmax, rng,
                                                                                  pipeline=pipeline).source


def test_matmul_blocks_obeyed_with_the_same_results(rng):
    b, (x, w) = graph("mm", ((300, 700), F32), ((700, 260), F32))
    fn = b.build([b.op("relu", b.op("mm", x, w))])
    default = check_against_interpreter(fn, rng, atol=1e-4)
    small = check_against_interpreter(
        fn, rng, atol=1e-4, pipeline="canonicalize,fuse,layout{target=trn2},tile{target=trn2 tile=[64,128]}")
    assert "output blocks of 384 x 260, K blocks of 768" in default.source
    assert "nl.ndarray((64, 128), dtype=nl.float32, buffer=nl.psum)" in small.source


def test_a_kernel_tiled_for_one_generation_is_tiled_again_for_another():
    b, (x,) = graph("wide", ((128, 131072), F32))
    lowered = lower(b.build([b.op("tanh", b.op("exp", x))]))  # the nki pipeline: tiled for trn2
    (kernel,) = lowered.ops
    assert kernel.attrs["target"] == "trn2" and kernel.attrs["tile"] == (128, 4096)
    assert "nl.ndarray((128, 4096)" in emit_program(lowered, "trn2").source
    assert "nl.ndarray((128, 8192)" in emit_program(lowered, "trn3").source  # trn3's larger SBUF budget
    costs = {target: estimate_costs(lowered, target).total_us for target in ("trn2", "trn3")}
    assert np.isfinite(list(costs.values())).all() and costs["trn3"] < costs["trn2"]
