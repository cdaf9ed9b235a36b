"""Shared helpers for the LLVM backend tests: build, run, and compare against the reference interpreter."""

from __future__ import annotations

import dataclasses

import numpy as np
from llvmlite import ir

from neuroncc.codegen.llvm import jit
from neuroncc.codegen.llvm.emit import emit_kernel
from neuroncc.codegen.llvm.mathlib import math_call
from neuroncc.codegen.llvm.scalars import F32
from neuroncc.codegen.llvm.schedule import plan_kernel
from neuroncc.codegen.llvm.views import Layout
from neuroncc.hardware.host import CpuTarget

from neuroncc.executors.cpu.launcher import build_cpu_executable
from neuroncc.ir import Builder, DType, Function, TensorType, interpret
from neuroncc.passes import run_pipeline
from neuroncc.passes.pipeline import default_pipeline

# torch.testing.assert_close defaults per dtype
TOLERANCES = {DType.f32: (1.3e-6, 1e-5), DType.bf16: (1.6e-2, 1e-5), DType.f16: (1e-3, 1e-5)}


def assert_matches(actual: np.ndarray, expected: np.ndarray, dtype: DType, what: str = "") -> None:
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape} != {expected.shape}"
    assert actual.dtype == expected.dtype, f"{what}: dtype {actual.dtype} != {expected.dtype}"
    if dtype in TOLERANCES:
        rtol, atol = TOLERANCES[dtype]
        np.testing.assert_allclose(actual, expected, rtol=rtol, atol=atol, equal_nan=True, err_msg=what)
    else:
        np.testing.assert_array_equal(actual, expected, err_msg=what)


def run_both(fn: Function, inputs: list[np.ndarray], threads: int = 2, native: bool = True):
    """Run ``fn`` natively and in the interpreter; check every kernel compiled natively (unless told not to)."""
    exe = build_cpu_executable(fn, {"threads": threads})
    if native:
        assert exe.stats["interpreted_kernels"] == 0, exe.stats["interpreted_reasons"]
    got = exe(*inputs)
    want = interpret(fn, inputs)
    for position, (actual, expected, value) in enumerate(zip(got, want, fn.outputs)):
        assert_matches(actual, expected, value.type.dtype, f"output #{position} ({value.hint or ''})")
    return exe, got


def special_floats(rng: np.random.Generator, shape: tuple[int, ...], scale: float = 3.0) -> np.ndarray:
    """Random normals with NaN, +-Inf, +-0 and extreme values sprinkled in."""
    x = (rng.standard_normal(shape) * scale).astype(np.float32)
    flat = x.reshape(-1)
    specials = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 88.0, -100.0, 1e-30, 1e30, -1e30], np.float32)
    if flat.size >= 2 * specials.size:
        flat[: specials.size] = specials
    return x


def many_kernels():
    """Softmax, a LayerNorm-like normalization and matmul epilogues: several kernels after fusion."""
    b = Builder("many")
    x = b.param(TensorType((16, 32), DType.f32), "x")
    w = b.param(TensorType((32, 24), DType.f32), "w")
    e = b.op("exp", b.op("sub", x, b.op("amax", x, dims=(1,), keepdim=True)))
    soft = b.op("div", e, b.op("sum", e, dims=(1,), keepdim=True))
    centered = b.op("sub", x, b.op("mean", x, dims=(1,), keepdim=True))
    norm = b.op("mul", centered, b.op("rsqrt", b.op("add", b.op("mean", b.op("mul", centered, centered), dims=(1,),
                                                                 keepdim=True), b.op("full", shape=(16, 1), dtype=DType.f32, value=1e-5))))
    h = b.op("tanh", b.op("mm", soft, w))
    for _ in range(3):  # a matmul ends a kernel: each epilogue is one more
        h = b.op("sigmoid", b.op("mm", b.op("permute", h, dims=(1, 0)), b.op("exp", h)))
    return run_pipeline(default_pipeline("cpu"), b.build([soft, norm, h, b.op("sum", h, dims=(0,))]))


def aligned_kernel_code(fn: Function, target: CpuTarget) -> tuple[str, str]:
    """The kernel's IR and assembly for ``target``, its buffers aligned (as the launcher's are: streamed outputs)."""
    layouts = [Layout.of(k, p.type) for k, p in enumerate(fn.params)]
    outputs = [Layout.of(len(fn.params) + k, v.type) for k, v in enumerate(fn.outputs)]
    plan = dataclasses.replace(plan_kernel(fn, layouts, outputs), aligned_args=frozenset(range(len(layouts) + 1)))
    texts, _ = emit_kernel(plan, "k", target)
    return "".join(texts), jit.assembly(texts, target).split("k_p0:")[1].split(".Lfunc_end")[0]


def background_builds_finished() -> None:
    """Wait for the builds earlier tests left running in the background (the optimizer tier's, a torch.compile
    graph's link), before a test patches how kernels are linked or loaded: a build linking in the background
    meanwhile would fail and give the process's shared-library form up for every later test of the worker
    (native_library.give_up)."""
    from neuroncc.executors.cpu import deferred_code
    from neuroncc.executors.cpu.tiers import OPTIMIZER

    deferred_code.wait_for_pending()
    OPTIMIZER.wait()


def math_function_body(name: str, target: CpuTarget) -> str:
    """The LLVM IR of math library function ``name``'s body (float32) as ``target`` gets it."""
    module = ir.Module("f")
    fn = ir.Function(module, ir.FunctionType(F32, [F32]), "f")
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    b.ret(math_call(b, name, fn.args[0], target=target))
    text = str(module)
    return text[text.index(f'define internal float @"ncc.math.{name}"'):]
