"""The cpu launch plan's arena follows the plan-memory pass: intermediates that are never live together share
space, a kernel result takes a dying operand's slot only where the kernel's plan allows it, and the slots of
values returned in the end leave no gap."""

from __future__ import annotations

import numpy as np

from neuroncc.codegen.llvm import jit
from neuroncc.codegen.llvm.program import plan_launch
from neuroncc.codegen.llvm.regions import wrap_remaining_ops
from neuroncc.executors.cpu.launcher import build_cpu_executable
from neuroncc.ir import Builder, DType, TensorType, interpret
from neuroncc.passes.plan_memory import plan as plan_memory
from neuroncc.passes.plan_memory import value_indices

F32 = TensorType((16, 16), DType.f32)  # 1024 bytes


def _chain():
    """x -> exp -> neg -> abs -> add x: three 1 KB intermediates, each dead once the next is computed."""
    b = Builder("chain")
    x = b.param(F32, "x")
    d = b.op("abs", b.op("neg", b.op("exp", x)))
    return wrap_remaining_ops(b.build([b.op("add", d, x)]))


def _arena_offsets(launch, fn):
    index = value_indices(fn)
    return {index[v]: launch.buffers[launch.values[index[v]].buffer].index for op in fn.ops for v in op.results
            if launch.buffers[launch.values[index[v]].buffer].kind == "arena"}


def test_the_launch_plan_places_values_where_plan_memory_does(rng):
    fn = _chain()
    memory = plan_memory(fn)
    launch, _ = plan_launch(fn, *jit.host_cpu())  # no plan given: the pass's own
    assert memory.arena_bytes < memory.naive_bytes  # the chain reuses its slots
    assert launch.arena_bytes == memory.arena_bytes  # was naive_bytes: every intermediate had its own slot
    assert _arena_offsets(launch, fn) == {v: memory.offsets[v] for v in _arena_offsets(launch, fn)}
    xs = rng.standard_normal((16, 16)).astype(np.float32)
    np.testing.assert_allclose(build_cpu_executable(fn, {"threads": 1})(xs)[0], interpret(fn, [xs])[0],
                               rtol=1.3e-6, atol=1e-6)


def test_an_in_place_slot_is_kept_only_where_the_kernel_reads_before_it_writes(rng):
    b = Builder("in_place")
    x = b.param(F32, "x")
    n = b.op("neg", b.op("exp", x))  # reads each element of exp's result once, then writes it: may share
    t = b.op("add", n, b.op("permute", n, dims=(1, 0)))  # reads n transposed too: may not
    fn = wrap_remaining_ops(b.build([b.op("abs", t)]))
    index = value_indices(fn)
    a, n, t = [index[op.result] for op in fn.ops if op.name == "kernel"][:3]

    class Plan:  # all three in one slot, as the pass's in-place reuse would put them
        offsets = {a: 0, n: 0, t: 0}
        sizes = {a: 1024, n: 1024, t: 1024}
        arena_bytes = 1024

    launch, _ = plan_launch(fn, *jit.host_cpu(), Plan())
    offsets = _arena_offsets(launch, fn)
    assert (offsets[a], offsets[n], offsets[t]) == (0, 0, 1024)  # t moved to a slot of its own
    assert launch.arena_bytes == 2048
    xs = rng.standard_normal((16, 16)).astype(np.float32)
    exe = build_cpu_executable(fn, {"threads": 1, "memory_plan": Plan()})
    np.testing.assert_allclose(exe(xs)[0], interpret(fn, [xs])[0], rtol=1.3e-6, atol=1e-6)


def test_the_slot_of_a_value_returned_in_the_end_leaves_no_gap(rng):
    b = Builder("returned")
    x = b.param(F32, "x")
    k = b.op("exp", x)  # returned as a view, read by another step: its storage becomes the output's
    fn = wrap_remaining_ops(b.build([b.op("reshape", k, shape=(256,)), b.op("neg", b.op("abs", k))]))
    launch, _ = plan_launch(fn, *jit.host_cpu())
    assert [buffer.kind for buffer in launch.buffers].count("arena") == 1  # abs's result
    assert launch.arena_bytes == plan_memory(fn).arena_bytes == 1024  # was 2048: exp's unused slot first
    xs = rng.standard_normal((16, 16)).astype(np.float32)
    for got, want in zip(build_cpu_executable(fn, {"threads": 1})(xs), interpret(fn, [xs])):
        np.testing.assert_allclose(got, want, rtol=1.3e-6, atol=1e-6)
