"""The kernel plan's loop shapes (``codegen/llvm/kernel_plan.py``) and the planner's steps (``schedule.py``).

Each kind of kernel gets the loop shape its refinement makes, with the launcher's answers (``n_outer``,
``work``, ``serial``); the planner's steps return new plans and leave their input alone; a plan cannot be
changed once made; each kernel runs natively and matches the reference interpreter.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import numpy as np
import pytest
from codegen_helpers import run_both

from neuroncc.codegen.llvm import refine, transpose
from neuroncc.codegen.llvm.views import Layout
from neuroncc.codegen.llvm.schedule import plan_kernel
from neuroncc.codegen.llvm.context import EmitContext
from neuroncc.codegen.llvm.emit import KernelEmitter
from neuroncc.codegen.llvm.kernel_plan import (
    BlockedMap, ChunkedRows, CombineColumns, CombinePartials, KeptDims, PartialReduce, RowLoop, ScatterLoop,
    SplitColumns, TransposedMap,
)
from neuroncc.codegen.llvm.regions import fuse_whole_function
from neuroncc.codegen.llvm.schedule import block_matmul_rows, form_phases, lay_out
from neuroncc.hardware.host import host_cpu
from neuroncc.ir import Builder, DType, TensorType
from neuroncc.passes.tile import CPU_INNER_BLOCK

ROOT = Path(__file__).resolve().parents[2]


def _region_and_layouts(fn):
    (op,) = [op for op in fn.ops if op.name == "kernel"]
    region = op.regions[0]
    layouts = [Layout.of(slot, v.type) for slot, v in enumerate(list(region.params) + list(region.outputs))]
    return region, layouts[: len(region.params)], layouts[len(region.params):]


def _plan(fn):
    return plan_kernel(*_region_and_layouts(fn))


def _graph(name, params, build):
    b = Builder(name)
    values = [b.param(TensorType(shape, dtype), f"p{k}") for k, (shape, dtype) in enumerate(params)]
    return fuse_whole_function(b.build(build(b, *values)))


def softmax(b, x):
    e = b.op("exp", b.op("sub", x, b.op("amax", x, dims=(1,), keepdim=True)))
    return [b.op("div", e, b.op("sum", e, dims=(1,), keepdim=True))]


def long_vector(b, x):
    return [b.op("neg", x)]


def bias_gradient(b, mask, g):
    x = b.op("where", mask, b.op("full", shape=(), dtype=DType.f32, value=0.0), g)
    return [x, b.op("sum", x, dims=(0,))]


def loss(b, x):
    return [b.op("sum", b.op("mul", x, x), dims=(0, 1))]


def batch_norm_statistics(b, x):
    return [b.op("mean", x, dims=(0, 2, 3))]


def column_sum(b, x):
    return [b.op("sum", b.op("exp", x), dims=(0,))]


def transposed(b, x):
    return [b.op("neg", b.op("copy", b.op("permute", x, dims=(1, 0))))]


def scatter(b, x, index, src):
    return [b.op("scatter", x, index, src, dim=0, reduce="add")]


F32 = DType.f32
#: (graph, parameters, expected loop shapes, expected (n_outer, serial) per phase, inputs)
CASES = {
    "softmax: one row loop, three passes per row, exp cached": (
        softmax, [((64, 300), F32)], [RowLoop], [(64, False)]),
    "1-d map: blocks of the only dim": (
        long_vector, [((100000,), F32)], [BlockedMap], [(-(-100000 // CPU_INNER_BLOCK), False)]),
    "bias gradient: column partials per chunk of rows, merged": (
        bias_gradient, [((96, 40), DType.bool), ((96, 40), F32)], [ChunkedRows, CombineColumns],
        [(16, False), (1, True)]),
    "loss: partial sums over ranges of rows, merged": (
        loss, [((300, 400), F32)], [PartialReduce, CombinePartials], [(3, False), (1, True)]),
    "batch-norm statistics: the kept channel dim in parallel": (
        batch_norm_statistics, [((8, 16, 10, 10), F32)], [KeptDims], [(16, False)]),
    "column sum alone: blocks of columns": (
        column_sum, [((512, 1024), F32)], [SplitColumns], [(8, False)]),
    "transpose: blocks of output rows": (
        transposed, [((512, 256), F32)], [TransposedMap], [(256 // 64, False)]),
    "scatter: the base copy, then serial writes": (
        scatter, [((6, 5), F32), ((4, 5), DType.i64), ((4, 5), F32)], [RowLoop, ScatterLoop],
        [(6, False), (1, True)]),
}


def _inputs(rng, params):
    arrays = []
    for shape, dtype in params:
        if dtype is DType.bool:
            arrays.append(rng.random(shape) < 0.5)
        elif dtype is DType.i64:
            arrays.append(rng.integers(0, 6, shape))
        else:
            arrays.append(rng.standard_normal(shape).astype(np.float32))
    return arrays


@pytest.mark.parametrize("case", CASES, ids=list(CASES))
def test_each_kernel_gets_its_loop_shape_and_matches_the_interpreter(case, rng):
    build, params, shapes, launch = CASES[case]
    fn = _graph(case.split(":")[0], params, build)
    plan = _plan(fn)
    assert [type(phase) for phase in plan.phases] == shapes
    assert [(phase.n_outer, phase.serial) for phase in plan.phases] == launch
    assert all(phase.work >= 0 for phase in plan.phases)
    run_both(fn, _inputs(rng, params))


def test_the_launcher_answers_follow_the_loop_shape():
    (phase,) = _plan(_graph("softmax", [((64, 300), F32)], softmax)).phases
    assert phase.outer == (64,) and phase.trip_counts == (64,)
    assert phase.work == 3 * 300 and len(phase.row_cache) == 1  # max, sum-exp, write; exp(x - max) cached
    chunked, combine = _plan(_graph("bias", [((96, 40), DType.bool), ((96, 40), F32)], bias_gradient)).phases
    assert chunked.rows.outer == (96,) and len(chunked.sums) == 1 and combine.sums == chunked.sums
    assert chunked.work == (40 + 40) * (96 // 16)  # per row: the map's 40 and its 40 column partials
    assert combine.work == 16 * 40
    partial, merge = _plan(_graph("loss", [((300, 400), F32)], loss)).phases
    assert partial.slot == merge.slot and partial.parts == merge.parts == 3 and partial.work == 300 * 400 // 3


def _planner_steps():
    """The planner's steps after ``form_phases``, in ``plan_kernel``'s order."""
    return [lambda p: refine.block_long_rows(p, CPU_INNER_BLOCK), refine.cache_rows, refine.split_columns,
            refine.parallel_kept_dims, refine.accumulate_column_partials, refine.split_full_reductions,
            refine.cache_written_rows, transpose.block_transposed_rows, block_matmul_rows]


@pytest.mark.parametrize("case", CASES, ids=list(CASES))
def test_planner_steps_return_new_plans_and_leave_their_input_alone(case):
    build, params, _, _ = CASES[case]
    region, param_layouts, output_layouts = _region_and_layouts(_graph(case.split(":")[0], params, build))
    plan = form_phases(*lay_out(region, param_layouts, output_layouts))
    for step in _planner_steps():
        before = (plan.phases, plan.extra, [dict(getattr(p, "row_cache", {})) for p in plan.phases])
        refined = step(plan)
        assert (plan.phases, plan.extra, [dict(getattr(p, "row_cache", {})) for p in plan.phases]) == before
        plan = refined
    assert plan == plan_kernel(region, param_layouts, output_layouts)


def test_plans_and_loop_shapes_cannot_be_changed():
    plan = _plan(_graph("softmax", [((64, 300), F32)], softmax))
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.phases = ()  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.phases[0].outer = (1,)  # type: ignore[misc]


def test_the_emitter_implements_the_emission_context():
    emitter = KernelEmitter(_plan(_graph("softmax", [((64, 300), F32)], softmax)), "k", host_cpu())
    members = {name for name in vars(EmitContext) if not name.startswith("_")} | set(EmitContext.__annotations__)
    assert members >= {"b", "ptrs", "target", "value_at", "alloca", "fresh_values", "loop", "nest"}
    assert [name for name in sorted(members) if not hasattr(emitter, name)] == []


def test_lowerings_and_stage_emitters_use_only_the_public_emission_context():
    """Per-op lowerings and stage emitters reach the emitter through ``EmitContext``, never its private state."""
    public = {name for name in vars(EmitContext) if not name.startswith("_")} | set(EmitContext.__annotations__)
    used = re.compile(r"\b(?:em|ctx)\.([A-Za-z_]\w*)")
    for name in ("access", "elementwise", "mathlib", "philox", "reductions", "stages", "transpose"):
        source = (ROOT / "neuroncc" / "codegen" / "llvm" / f"{name}.py").read_text()
        assert sorted(set(used.findall(source)) - public) == [], name
