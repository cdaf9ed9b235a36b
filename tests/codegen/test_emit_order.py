"""The launch planner emits the kernels that need LLVM's optimized tier first (codegen/llvm/program.py
``_LaunchPlanner._emit_all``), while the modules keep their op-order places: only the order of work changes."""

from __future__ import annotations

import hashlib

from neuroncc.codegen.llvm import jit
from neuroncc.codegen.llvm import program
from neuroncc.codegen.llvm.program import plan_launch
from neuroncc.codegen.llvm.regions import wrap_remaining_ops
from neuroncc.ir import Builder, DType, TensorType
from neuroncc.passes import run_pipeline
from neuroncc.passes.pipeline import default_pipeline


def elementwise_then_norm():
    """Two elementwise kernels (tier independent: quick) before a LayerNorm-like kernel (float sums along its
    rows: reassociated, so optimized), each of its own shape so that fusion keeps them apart."""
    b = Builder("order")
    a = b.param(TensorType((64,), DType.f32), "a")
    c = b.param(TensorType((8, 8, 3), DType.f32), "c")
    x = b.param(TensorType((16, 32), DType.f32), "x")
    first = b.op("mul", b.op("add", a, a), a)
    second = b.op("sub", b.op("mul", c, c), c)
    centered = b.op("sub", x, b.op("mean", x, dims=(1,), keepdim=True))
    var = b.op("mean", b.op("mul", centered, centered), dims=(1,), keepdim=True)
    norm = b.op("mul", centered, b.op("rsqrt", b.op("add", var, b.op("full", shape=(16, 1), dtype=DType.f32,
                                                                        value=1e-5))))
    fn = run_pipeline(default_pipeline("cpu"), b.build([first, second, norm]))
    return wrap_remaining_ops(fn)


def _planned(fn, **kwargs):
    cpu, features = jit.host_cpu()
    submitted = []
    plan, texts = plan_launch(fn, cpu, features, on_kernel=lambda text, *key: submitted.append(text), **kwargs)
    return plan, texts, submitted


def test_the_optimized_kernel_is_emitted_first_and_the_modules_keep_op_order():
    fn = elementwise_then_norm()
    plan, texts, submitted = _planned(fn)
    assert len(texts) >= 3
    tiers = [jit.tier_independent(text) for text in texts]
    assert tiers[-1] is False and all(tiers[:-1]), "the graph: quick kernels, then the optimized one"
    # the optimized module reaches the compiler first (in op order it came last) ...
    assert jit.tier_independent(submitted[0]) is False
    assert submitted[0] == texts[-1]
    # ... and the returned modules (the artifact's kernels.ll, the objects' order) are in op order
    assert sorted(submitted) == sorted(texts)
    symbols = [text.split('define void @"')[1].split('"')[0] for text in texts]
    assert [int(s[1:].split("_")[0]) for s in symbols] == sorted(int(s[1:].split("_")[0]) for s in symbols)


def test_the_plan_and_the_code_do_not_depend_on_the_emission_order(monkeypatch):
    fn = elementwise_then_norm()
    plan, texts, submitted = _planned(fn)
    monkeypatch.setattr(program, "_likely_optimized", lambda kplan: False)  # every kernel in op order
    in_op_order, op_texts, op_submitted = _planned(fn)
    assert op_submitted == op_texts != submitted
    assert plan.to_json() == in_op_order.to_json()
    assert texts == op_texts


def test_kernel_compiler_keeps_the_modules_in_key_order_whatever_the_submission_order():
    fn = elementwise_then_norm()
    cpu, features = jit.host_cpu()
    _, texts = plan_launch(fn, cpu, features)
    in_order = jit.KernelCompiler(2)
    for text in texts:
        in_order.submit(text)
    reordered = jit.KernelCompiler(2)
    for key, text in reversed(list(enumerate(texts))):
        reordered.submit(text, key)
    assert reordered.texts == texts
    a, b = in_order.finish(), reordered.finish()
    assert b.llvm_ir == a.llvm_ir
    assert hashlib.sha256(b"".join(b.objects)).digest() == hashlib.sha256(b"".join(a.objects)).digest()
