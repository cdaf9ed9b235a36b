"""The cpu launch plan's arena follows the plan-memory pass: intermediates that are never live together share
space, a kernel result takes a dying operand's slot only where the kernel's plan allows it, and the slots of
values returned in the end leave no gap."""

from __future__ import annotations

import numpy as np
import pytest

from neuroncc.codegen.llvm import extern_layouts, jit, refine
from neuroncc.codegen.llvm.program import memory_plan_for_launch, plan_launch
from neuroncc.codegen.llvm.regions import wrap_remaining_ops
from neuroncc.executors.cpu.launcher import build_cpu_executable
from neuroncc.hardware.host import host_cpu
from neuroncc.ir import Attrs, Builder, DType, TensorType, interpret
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


def _relu_backward(rows: int = 32, cols: int = 64, transpose_a: bool = False):
    """mm -> kernel[mask, product] -> [where(mask, 0, product), its column sum] -> mm: the transformer training
    step's ReLU backward between its matmuls (``fused_1_where_sum``). ``transpose_a`` keeps the first product
    off oneDNN on every host (which would supply it in a per-call buffer of its own, not an arena slot)."""
    r = Builder("fused_where_sum")
    batched = (4, rows // 4, cols)
    mask, product = r.param(TensorType(batched, DType.bool), "mask"), r.param(TensorType((rows, cols), DType.f32))
    zero = r.op("full", shape=(), dtype=DType.f32, value=0.0)
    grad = r.op("where", mask, zero, r.op("reshape", product, shape=batched))
    region = r.build([grad, r.op("sum", r.op("reshape", grad, shape=(rows, cols)), dims=(0,), keepdim=True)])
    b = Builder("relu_backward")
    a = b.param(TensorType((16, rows) if transpose_a else (rows, 16), DType.f32), "a")
    w = b.param(TensorType((16, cols), DType.f32), "w")
    mask, c = b.param(TensorType(batched, DType.bool), "mask"), b.param(TensorType((cols, 8), DType.f32), "c")
    product = b.op("mm", a, w, transpose_a=transpose_a)
    grad, bias = b.emit("kernel", [mask, product], Attrs(name="fused_where_sum"), regions=[region]).results
    return wrap_remaining_ops(b.build([b.op("mm", b.op("reshape", grad, shape=(rows, cols)), c), bias]))


def _honoured(launch, fn):
    """(result, operand) pairs of kernels whose result starts where that operand does in the launch plan."""
    index = value_indices(fn)

    def start(value):
        spec = launch.values[index[value]]
        buffer = launch.buffers[spec.buffer]
        return (buffer.kind, buffer.index) if spec.offset == 0 and buffer.kind == "arena" else None

    return tuple((index[r], index[v]) for op in fn.ops if op.name == "kernel" for r in op.results
                 for v in op.operands if start(r) is not None and start(r) == start(v))


@pytest.mark.parametrize("row_cache", [True, False])
def test_plan_memory_decides_in_place_and_the_launch_plan_honours_exactly_its_pairs(row_cache, rng, monkeypatch):
    """The region lets the gradient take the dying product's slot. The kernel's plan agrees when the column sum
    loads the gradient from the row cache; without that cache (the code of before) the sum recomputes it from
    the product after the product was overwritten, so the kernel's plan says no, and then the memory plan has
    no such pair either (it had, and the launch moved the gradient to a slot after the arena)."""
    if not row_cache:
        monkeypatch.setattr(refine, "_reads_a_param_of_its_size", lambda plan, value: False)
    fn = _relu_backward()
    kernel = next(op for op in fn.ops if op.name == "kernel")
    index = value_indices(fn)
    pair = (index[kernel.results[0]], index[kernel.operands[1]])
    assert plan_memory(fn).in_place == (pair,)  # the region's answer
    launch, _ = plan_launch(fn, *jit.host_cpu())
    asked = memory_plan_for_launch(fn, *jit.host_cpu())
    assert asked.in_place == _honoured(launch, fn) == ((pair,) if row_cache else ())
    apart = plan_memory(fn, lambda *pair: False)  # every value in a slot of its own
    saved = plan_launch(fn, *jit.host_cpu(), apart)[0].arena_bytes - launch.arena_bytes
    assert saved == (asked.sizes[pair[1]] if row_cache else 0)
    inputs = [rng.standard_normal((32, 16)).astype(np.float32), rng.standard_normal((16, 64)).astype(np.float32),
              rng.random((4, 8, 64)) < 0.5, rng.standard_normal((64, 8)).astype(np.float32)]
    got = build_cpu_executable(fn, {"threads": 1})(*inputs)
    for a, want in zip(got, interpret(fn, inputs)):
        np.testing.assert_allclose(a, want, rtol=1e-5, atol=1e-5)
    for a, b in zip(got, build_cpu_executable(fn, {"threads": 1, "memory_plan": apart})(*inputs)):  # same bits
        assert np.array_equal(a.view(np.uint8), b.view(np.uint8))


def test_a_product_supplied_by_aten_is_not_written_over(monkeypatch):
    """Where oneDNN takes the first product (a host with AVX-512 does at these shapes), ATen supplies it each
    call in a buffer of its own: the arena has no slot for the gradient to take, so the memory plan pairs
    nothing and the launch plan agrees (the plan used to pair them and the launch kept them apart)."""
    monkeypatch.setattr(extern_layouts, "onednn_shapes_eligible", lambda *args: True)
    fn = _relu_backward()
    cpu = jit.host_cpu()
    launch, _ = plan_launch(fn, *cpu)
    product = next(op for op in fn.ops if op.name == "mm").result
    assert launch.buffers[launch.values[value_indices(fn)[product]].buffer].supplied
    assert memory_plan_for_launch(fn, *cpu).in_place == _honoured(launch, fn) == ()


def test_a_result_computed_over_its_operand_is_not_streamed():
    """Non-temporal stores would evict each line the kernel has just read (ReLU's backward in place: 15% slower
    than with plain stores); the same kernel into a slot of its own streams its large output."""
    fn = _relu_backward(2048, 1024, transpose_a=True)  # mask 2 MiB, product and gradient 8 MiB each
    if not host_cpu().streams_outputs(18 << 20):
        pytest.skip("this host's last-level cache holds the kernel: nothing is streamed")
    cpu = jit.host_cpu()
    launch, texts = plan_launch(fn, *cpu)
    assert memory_plan_for_launch(fn, *cpu).in_place == _honoured(launch, fn) != ()
    _, apart = plan_launch(fn, *cpu, plan_memory(fn, lambda *pair: False))
    assert not any("!nontemporal" in text for text in texts)
    assert any("!nontemporal" in text for text in apart)
