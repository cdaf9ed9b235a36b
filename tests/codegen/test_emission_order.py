"""The launch planner hands the compiler the optimized tier's kernels first (codegen/llvm/program.py), the compiler
loads the objects in the plan's order whatever the order they came in (``KernelCompiler.follow``), and a compile
worker makes few llvmlite calls a module (codegen/llvm/jit.py: each waits for the GIL beside the planner)."""

from __future__ import annotations

import pytest

from neuroncc.codegen.llvm import jit
from neuroncc.codegen.llvm.program import plan_launch
from neuroncc.codegen.llvm.regions import wrap_remaining_ops
from neuroncc.errors import CodegenError
from neuroncc.executors.cpu.launcher import build_cpu_executable
from neuroncc.ir import Builder, DType, Function, TensorType
from neuroncc.passes.manager import PassContext
from neuroncc.passes.pipeline import default_pipeline, run_pipeline

CPU, FEATURES = "znver3", "+avx,+avx2,+fma"


def _elementwise_then_row_mean() -> Function:
    """Two kernels in this order: an elementwise one (quick tier), then a row reduction (optimized tier)."""
    b = Builder("order")
    x = b.param(TensorType((16, 32), DType.f32), "x")
    z = b.param(TensorType((16, 32), DType.f32), "z")
    act = b.op("relu", b.op("add", x, x))
    centered = b.op("sub", z, b.op("mean", z, dims=(1,), keepdim=True))
    return run_pipeline(default_pipeline("cpu"), b.build([act, centered]), PassContext())


def test_the_kernels_reducing_rows_are_handed_over_first_and_listed_in_the_plans_order():
    top = wrap_remaining_ops(_elementwise_then_row_mean())
    handed: list[str] = []
    plan, texts = plan_launch(top, CPU, FEATURES, on_kernel=handed.append)
    assert [jit.tier_independent(t) for t in texts] == [True, False]  # the plan's order: elementwise first
    assert [jit.tier_independent(t) for t in handed] == [False, True]  # the row reduction handed over first
    again, same = plan_launch(top, CPU, FEATURES)
    assert same == texts and again.to_json() == plan.to_json()  # the same plan and texts, streamed or not


def test_the_compiler_loads_the_objects_in_the_order_it_follows():
    texts = plan_launch(wrap_remaining_ops(_elementwise_then_row_mean()), CPU, FEATURES)[1]
    compiler = jit.KernelCompiler(2, quick_when_independent=True)
    for text in reversed(texts):
        compiler.submit(text)
    with pytest.raises(CodegenError, match="not the modules submitted"):
        compiler.follow(texts[:1])
    compiler.follow(texts)
    module = compiler.finish()
    assert module.llvm_ir == texts and compiler.tiers == [jit.Tier.QUICK, jit.Tier.OPTIMIZED]
    in_order = jit.KernelCompiler(1, quick_when_independent=True)
    for text in texts:
        in_order.submit(text)
    assert module.objects == in_order.finish().objects


def test_a_graph_build_keeps_its_modules_in_the_plans_order():
    fn = _elementwise_then_row_mean()
    exe = build_cpu_executable(fn, {"compile_threads": 2, "quick_first": "modules"})
    exe.bind_code()
    assert exe.module.llvm_ir == plan_launch(wrap_remaining_ops(fn), *jit.host_cpu())[1]


def test_a_module_naming_no_vector_variant_is_not_searched_for_them(monkeypatch):
    searched: list[str] = []
    real = jit._inline_vector_variants
    monkeypatch.setattr(jit, "_inline_vector_variants", lambda module, *rest: (searched.append(module.name),
                                                                               real(module, *rest)))
    plain = "define void @f() {\n  ret void\n}\n"
    named = f'declare float @"ncc.scalef"(float, float)\n{plain}'
    assert not jit.names_vector_variants(plain) and jit.names_vector_variants(named)
    tm = jit.target_machine()
    for text in (plain, named):
        jit._llvm_compile(text, None, tm, jit.Tier.OPTIMIZED)
    assert len(searched) == 1  # the module that names one only


def test_a_machines_triple_layout_and_tuning_are_made_once_per_tier(monkeypatch):
    made: list[int] = []
    real = jit.llvm.create_pipeline_tuning_options
    monkeypatch.setattr(jit.llvm, "create_pipeline_tuning_options",
                        lambda speed_level: (made.append(speed_level), real(speed_level=speed_level))[1])
    tm = jit.target_machine()
    text = "define void @f() {\n  ret void\n}\n"
    first = jit._llvm_compile(text, None, tm, jit.Tier.OPTIMIZED)
    for tier in (jit.Tier.OPTIMIZED, jit.Tier.QUICK, jit.Tier.QUICK):
        jit._llvm_compile(text, None, tm, tier)
    assert made == [3, 0] and jit._machine_setup(tm, jit.Tier.OPTIMIZED).triple == tm.triple
    assert jit._llvm_compile(text, None, jit.target_machine(), jit.Tier.OPTIMIZED) == first  # a fresh machine's
