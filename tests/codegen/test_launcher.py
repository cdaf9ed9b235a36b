"""The host launcher: outputs, layouts, input checking, memory plans, save/load, the cpu target."""

from __future__ import annotations

import json

import numpy as np
import pytest
from codegen_helpers import run_both

from neuroncc.codegen.llvm.regions import wrap_remaining_ops
from neuroncc.errors import ArtifactError, InputError
from neuroncc.ir import Builder, DType, TensorType, interpret, parse, print_function
from neuroncc.driver.compile import DEFAULT_TARGET, compile_graph
from neuroncc.codegen.llvm.launch_plan import PLAN_VERSION
from neuroncc.executors.cpu.launcher import CODE_FILES, CpuExecutable, build_cpu_executable, load_cpu_executable
from neuroncc.testing.choices import choose


def mlp_like():
    b = Builder("g")
    x = b.param(TensorType((6, 8), DType.f32), "x")
    w = b.param(TensorType((8, 5), DType.f32), "w")
    h = b.op("relu", b.op("mm", x, w))
    s = b.op("exp", h)
    t = b.op("permute", s, dims=(1, 0))
    return b.build([s, t, x, b.op("reshape", x, shape=(48,)), s, b.op("sum", t, dims=(1,))])


def test_outputs_are_fresh_and_views_are_copied(rng):
    fn = mlp_like()
    x, w = rng.standard_normal((6, 8)).astype(np.float32), rng.standard_normal((8, 5)).astype(np.float32)
    exe, out = run_both(fn, [x, w])
    assert out[2] is not x and not np.shares_memory(out[2], x)
    assert out[0] is not out[4] and not np.shares_memory(out[0], out[4])
    again = exe(x, w)
    assert not any(np.shares_memory(a, c) for a in out for c in again)  # nothing aliases a reused arena
    for a, c in zip(out, again):
        np.testing.assert_array_equal(a, c)


def test_strided_output_types_and_inputs():
    b = Builder("strided")
    x = b.param(TensorType((4, 3), DType.f32, strides=(1, 4)), "x")
    y = b.op("exp", x)
    fn = b.build([y])
    from neuroncc.ir.graph import Function, Value

    y_t = Value(TensorType((4, 3), DType.f32, strides=(1, 4)), "y")
    op = fn.ops[0]
    strided = Function(fn.name, fn.params, (type(op)(op.name, op.operands, (y_t,), op.attrs, op.regions),), (y_t,))
    base = np.arange(12, dtype=np.float32).reshape(3, 4) / 10
    (out,) = build_cpu_executable(strided, {"threads": 1})(base.T)
    assert out.strides == (4, 16)
    np.testing.assert_allclose(out, np.exp(base.T), rtol=1e-6)


def test_bad_inputs_raise_typed_errors():
    exe = build_cpu_executable(mlp_like(), {})
    with pytest.raises(InputError, match="takes 2 inputs"):
        exe(np.zeros((6, 8), np.float32))
    with pytest.raises(InputError, match="input #1 has shape"):
        exe(np.zeros((6, 8), np.float32), np.zeros((8, 4), np.float32))
    out = exe(np.zeros((6, 8), np.float64), np.zeros((8, 5), np.int64))  # converted to the graph's dtypes
    assert out[0].dtype == np.float32


def test_memory_plan_offsets_are_used(rng):
    b = Builder("chain")
    x = b.param(TensorType((16, 16), DType.f32), "x")
    a = b.op("exp", x)
    c = b.op("neg", a)
    d = b.op("abs", c)
    fn = wrap_remaining_ops(b.build([b.op("add", d, x)]))  # the planner sees the kernel-form graph
    a, c, d = (op.result for op in fn.ops[:3])

    class Plan:  # a/d may share a slot: a is dead once c is computed
        offsets = {a: 0, c: 1024, d: 0}

    exe = build_cpu_executable(fn, {"memory_plan": Plan()})
    arena = [s for s in exe.plan.buffers if s.kind == "arena"]
    assert sorted(s.index for s in arena) == [0, 0, 1024]

    class InPlace:  # c on top of its own dying input a (by value number): kept, neg reads a[i] before writing
        offsets = {1: 0, 2: 0, 3: 1024}
        sizes = {1: 1024, 2: 1024, 3: 1024}
        arena_bytes = 2048

    exe_in_place = build_cpu_executable(fn, {"memory_plan": InPlace()})
    offsets = [s.index for s in exe_in_place.plan.buffers if s.kind == "arena"]
    assert offsets == [0, 0, 1024]  # refused where the kernel's plan does not allow it: tests/codegen/test_arena.py
    np.testing.assert_allclose(exe_in_place(np.ones((16, 16), np.float32))[0],
                               interpret(fn, [np.ones((16, 16), np.float32)])[0], rtol=1.3e-6)
    xs = rng.standard_normal((16, 16)).astype(np.float32)
    np.testing.assert_allclose(exe(xs)[0], interpret(fn, [xs])[0], rtol=1.3e-6, atol=1e-5)


def test_save_and_load_without_recompiling(tmp_path, rng, monkeypatch, code_form):
    fn = mlp_like()
    exe = build_cpu_executable(fn, {})
    files = exe.save(tmp_path / "artifact")
    # names relative to the directory
    assert sorted(files) == sorted([CODE_FILES[code_form], "kernels.ll", "plan.json", "runtime.json"])
    json.loads((tmp_path / "artifact" / "plan.json").read_text())
    from neuroncc.codegen.llvm import jit

    monkeypatch.setattr(jit, "compile_ir", lambda *a: pytest.fail("load must not recompile"))
    loaded = load_cpu_executable(tmp_path / "artifact", fn)
    assert isinstance(loaded, CpuExecutable)
    # the compile cache stores exe.function as text and loads with the re-parsed graph
    reparsed = load_cpu_executable(tmp_path / "artifact", parse(print_function(exe.function)))
    assert reparsed.plan.function_hash == exe.plan.function_hash
    x, w = rng.standard_normal((6, 8)).astype(np.float32), rng.standard_normal((8, 5)).astype(np.float32)
    for a, c in zip(exe(x, w), loaded(x, w)):
        np.testing.assert_array_equal(a, c)


def test_load_rejects_other_graphs_and_corrupt_files(tmp_path, code_form):
    fn = mlp_like()
    build_cpu_executable(fn, {}).save(tmp_path / "a")
    b = Builder("other")
    b.param(TensorType((2,), DType.f32), "x")
    with pytest.raises(ArtifactError, match="different graph"):
        load_cpu_executable(tmp_path / "a", b.build([b.params[0]]))
    with pytest.raises(ArtifactError):
        load_cpu_executable(tmp_path / "missing", fn)
    (tmp_path / "a" / CODE_FILES[code_form]).write_bytes(b"not an object file")
    with pytest.raises(ArtifactError, match="corrupt"):
        load_cpu_executable(tmp_path / "a", fn)
    (tmp_path / "a" / CODE_FILES[code_form]).unlink()
    with pytest.raises(ArtifactError, match="cannot read kernel object code"):
        load_cpu_executable(tmp_path / "a", fn)
    (tmp_path / "a" / "plan.json").write_text(json.dumps({"version": PLAN_VERSION}))
    with pytest.raises(ArtifactError, match="malformed"):
        load_cpu_executable(tmp_path / "a", fn)


def test_cpu_is_the_default_target(rng):
    assert DEFAULT_TARGET == "cpu"
    exe = compile_graph(mlp_like())
    # The default pipeline fuses mm+relu+exp and the sum into few kernels; none may fall back to the interpreter.
    assert isinstance(exe, CpuExecutable) and exe.stats["native_kernels"] >= 1
    assert exe.stats["interpreted_kernels"] == 0


def test_reused_extern_views_follow_new_inputs_and_outputs(rng, monkeypatch):
    """Extern steps keep their views of buffers whose address does not change (arena, constants); inputs and
    outputs move between calls (and an input may be updated in place), and every call must see its own."""
    # the extern path: products on MKL (small ones are generated code, CpuTarget.small_mm_max_macs)
    choose(monkeypatch, small_mm_max_macs=0)
    b = Builder("g")
    x = b.param(TensorType((6, 8), DType.f32), "x")
    w = b.param(TensorType((8, 8), DType.f32), "w")
    h = b.op("tanh", b.op("mm", x, w))  # a matmul kernel with an epilogue: an extern inside a native kernel
    h2 = b.op("mm", h, w)  # a matmul over an arena intermediate
    fn = b.build([b.op("exp", h2), h2])
    exe = compile_graph(fn, target="cpu", cache=None)  # the cpu pipeline fuses each mm with its epilogue
    assert sum(step.extern is not None for step in exe.plan.steps) == 2
    kept = []
    for _ in range(3):
        x, w = rng.standard_normal((6, 8)).astype(np.float32), rng.standard_normal((8, 8)).astype(np.float32)
        kept.append((x, w))  # alive, so the next call's inputs are at new addresses
        for _ in range(2):
            got = exe(x, w)
            for mine, reference in zip(got, interpret(fn, [x, w])):
                np.testing.assert_allclose(mine, reference, rtol=1e-5, atol=1e-5)
            x *= 0.5  # the same input array, updated in place
