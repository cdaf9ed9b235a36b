"""Kernels named by their code (codegen/llvm/kernel_names.py) and the process's object memo
(codegen/llvm/object_memo.py): a model's identical layers call one function, compiled once, and a kernel
compiled for one graph is not compiled again for another graph of the process."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from codegen_helpers import run_both

from neuroncc.codegen.llvm import jit
from neuroncc.codegen.llvm.object_memo import ObjectMemo
from neuroncc.codegen.llvm.program import plan_launch
from neuroncc.errors import CodegenError
from neuroncc.executors.cpu.launcher import build_cpu_executable, wrap_remaining_ops
from neuroncc.ir import Builder, DType, TensorType
from neuroncc.passes import run_pipeline
from neuroncc.passes.pipeline import default_pipeline



def _layers(count: int, rows: int = 16):
    """``count`` identical layers (a product, generated, then a softmax and a tanh fused: two phases each)."""
    b = Builder(f"layers{count}")
    h = b.param(TensorType((rows, 32), DType.f32), "x")
    for number in range(count):
        y = b.op("mm", h, b.param(TensorType((32, 32), DType.f32), f"w{number}"))
        e = b.op("exp", b.op("sub", y, b.op("amax", y, dims=(1,), keepdim=True)))
        h = b.op("tanh", b.op("div", e, b.op("sum", e, dims=(1,), keepdim=True)))
    return run_pipeline(default_pipeline("cpu"), b.build([h]))


def _inputs(fn, rng):
    return [rng.standard_normal(p.type.shape).astype(np.float32) for p in fn.params]


@pytest.fixture
def compiles(monkeypatch):
    """The kernel modules LLVM compiles (not the process's helpers), with a fresh, empty memo: nothing compiled
    by earlier tests counts."""
    monkeypatch.setattr(jit, "OBJECT_MEMO", ObjectMemo())
    compiled, real = [], jit._llvm_compile

    def counted(text, *args):
        if '.body"' in text or "@f" in text or "@g" in text:
            compiled.append(text)
        return real(text, *args)

    monkeypatch.setattr(jit, "_llvm_compile", counted)
    return compiled


def test_identical_layers_call_one_function_per_phase_and_each_step_keeps_its_op():
    fn = wrap_remaining_ops(_layers(3))
    plan, texts = plan_launch(fn, *jit.host_cpu())
    native = [step for step in plan.steps if step.native]
    symbols = [tuple(phase.symbol for phase in step.phases) for step in native]
    assert len(native) == 6 and len(set(symbols)) == 2  # a layer's two kernels, shared by the three layers
    assert len(texts) == sum(len(s) for s in set(symbols))  # each module once
    for text in texts:  # the names are the code's: the text names its own functions, no op index
        assert sum(f'"{symbol}' in text for step in set(symbols) for symbol in step) == 1
    # which ops a shared function serves stays in the plan: every layer's steps, each with its own op
    assert len({step.op_index for step in native}) == 6
    kernels = [fn.ops[step.op_index].attrs.get("name") for step in native]
    assert kernels[1::2] == ["fused_0_softmax", "fused_1_softmax", "fused_2_softmax"]


def test_identical_layers_compile_once_and_compute_what_the_interpreter_does(rng, compiles):
    fn = _layers(3)
    run_both(fn, _inputs(fn, rng))
    assert len(compiles) == len(set(compiles)) == 2


def test_the_same_graph_makes_the_same_library_bytes(compiles):
    first = build_cpu_executable(_layers(2))
    jit.OBJECT_MEMO.resize(0)  # the second build compiles everything again
    second = build_cpu_executable(_layers(2))
    assert len(compiles) == 4
    assert first.module.llvm_ir == second.module.llvm_ir and first.module.objects == second.module.objects
    if hasattr(first.module, "library"):
        assert first.module.library == second.module.library


def test_another_graph_with_the_same_kernels_compiles_only_its_new_ones(rng, compiles):
    fn = _layers(1)
    build_cpu_executable(fn)
    assert len(compiles) == 2
    deeper = _layers(4)  # its layers are the first graph's layer: nothing new to compile
    run_both(deeper, _inputs(deeper, rng))
    assert len(compiles) == 2 and jit.OBJECT_MEMO.hits >= 2
    other = _layers(1, rows=8)  # another shape: the softmax's code is new (the product's rows are only its
    run_both(other, _inputs(other, rng))  # outer iterations: the same code)
    assert len(compiles) == 3


MODULE = """define float @f(float %x) {
  %y = fmul contract float %x, %x
  ret float %y
}
"""


def _compile(text, tier=jit.Tier.OPTIMIZED, target=None):
    return jit._compile_module(text, None, jit.target_machine(target, tier), tier)


def test_a_remembered_object_is_what_llvm_makes_again(compiles):
    first = _compile(MODULE)
    assert (jit.OBJECT_MEMO.hits, jit.OBJECT_MEMO.misses) == (0, 1)
    assert _compile(MODULE) == first and (jit.OBJECT_MEMO.hits, jit.OBJECT_MEMO.misses) == (1, 1)
    assert jit._llvm_compile(MODULE, None, jit.target_machine(), jit.Tier.OPTIMIZED) == first  # byte for byte


def test_another_tier_or_machine_is_another_entry(compiles):
    _compile(MODULE)
    _compile(MODULE, jit.Tier.QUICK)
    _compile(MODULE, target=dataclasses.replace(jit.host_target(), name="x86-64", features=""))
    assert len(compiles) == 3 and jit.OBJECT_MEMO.misses == 3


def test_a_module_that_fails_is_never_remembered(compiles):
    broken = "define float @g(float %x) {\n  ret float %undefined_value\n}\n"
    for _ in range(2):
        with pytest.raises(CodegenError):
            _compile(broken)
    assert jit.OBJECT_MEMO.misses == 2 and len(jit.OBJECT_MEMO) == 0


def test_the_memo_keeps_the_most_recently_used_objects_within_its_capacity():
    memo = ObjectMemo(capacity_bytes=10)
    memo.put(("a",), b"12345")
    memo.put(("b",), b"12345")
    assert memo.get(("a",)) == b"12345"  # now the most recently used
    memo.put(("c",), b"12345")
    assert memo.get(("b",)) is None and memo.get(("a",)) and memo.get(("c",))
    memo.put(("d",), b"x" * 11)  # larger than the whole memo: not kept
    assert memo.get(("d",)) is None and len(memo) == 2
