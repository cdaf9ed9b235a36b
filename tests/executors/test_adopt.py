"""Results the launcher returns or passes on without copying them: outputs that are views of intermediates,
and ATen results (oneDNN products, library ops) adopted as the call's buffer."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from neuroncc.ir import Builder, DType, TensorType, interpret
from neuroncc.hardware.host import CpuTarget
from neuroncc.executors.cpu import adopt, extern
from neuroncc.driver.compile import compile_graph
from neuroncc.executors.cpu.extern_library import LIBRARY_CALLS
from neuroncc.executors.cpu.launcher import CpuExecutable, build_cpu_executable, load_cpu_executable
from neuroncc.testing.choices import choose


@pytest.fixture(autouse=True)
def products_on_blas(monkeypatch):
    """These tests are of the extern path (MKL, oneDNN): with AVX-512 the small products they use would be
    generated code instead (CpuTarget.small_mm_max_macs)."""
    choose(monkeypatch, small_mm_max_macs=0)


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(0)


@pytest.fixture
def no_output_copies(monkeypatch):
    """Fail the test if the launcher copies an output out of its buffers."""
    monkeypatch.setattr(CpuExecutable, "_fresh_copy", lambda *a: pytest.fail("an output was copied"))


def _assert_fresh_and_equal(exe, fn, inputs, rtol=1.3e-6, atol=1e-5):
    first = exe(*inputs)
    second = exe(*inputs)
    for got, want in zip(first, interpret(fn, inputs)):
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)
    for i, a in enumerate(first):  # outputs never alias each other, nor an earlier call's
        assert not any(np.shares_memory(a, b) for b in first[i + 1:])
        assert not any(np.shares_memory(a, b) for b in second)
        assert not any(np.shares_memory(a, x) for x in inputs)
    return first


def _view_of_kernel_result(view: str):
    b = Builder("views")
    x = b.param(TensorType((8, 6), DType.f32), "x")
    k = b.op("exp", x)
    if view == "reshape":
        o = b.op("reshape", k, shape=(48,))
    elif view == "permute":
        o = b.op("permute", k, dims=(1, 0))
    else:
        o = b.op("slice", k, dim=0, start=0, end=4, step=1)
    return b.build([o, b.op("neg", k)])


def test_output_view_of_an_intermediate_is_its_storage(rng, no_output_copies):
    fn = _view_of_kernel_result("reshape")
    exe = build_cpu_executable(fn, {"threads": 1})
    kinds = [b.kind for b in exe.plan.buffers]
    assert "arena" not in kinds  # exp's result lives in the output's fresh storage
    _assert_fresh_and_equal(exe, fn, [rng.standard_normal((8, 6)).astype(np.float32)])


@pytest.mark.parametrize("view", ["permute", "slice"])
def test_views_in_another_layout_or_of_part_of_the_storage_are_copied(rng, view):
    fn = _view_of_kernel_result(view)
    exe = build_cpu_executable(fn, {"threads": 1})
    assert [b.kind for b in exe.plan.buffers].count("arena") == 1
    (out, _) = _assert_fresh_and_equal(exe, fn, [rng.standard_normal((8, 6)).astype(np.float32)])
    assert out.flags.c_contiguous


def test_two_views_of_one_intermediate_do_not_share_it(rng):
    b = Builder("twice")
    x = b.param(TensorType((8, 6), DType.f32), "x")
    k = b.op("exp", x)
    fn = b.build([b.op("reshape", k, shape=(48,)), b.op("reshape", k, shape=(6, 8)), b.op("neg", k)])
    exe = build_cpu_executable(fn, {"threads": 1})
    _assert_fresh_and_equal(exe, fn, [rng.standard_normal((8, 6)).astype(np.float32)])


# ---- ATen results adopted -------------------------------------------------------------------------------------

N = 128  # 128^3 multiply-adds: big enough for oneDNN (onednn_from_2m_macs)


@pytest.fixture(autouse=True)
def onednn_from_2m_macs(monkeypatch):
    """oneDNN from 2M multiply-adds (AVX-512's threshold) on any host, so these products take it here too."""
    monkeypatch.setattr(CpuTarget, "onednn_takes", lambda self, rows, depth, cols: rows * depth * cols >= 1 << 21)
requires_onednn = pytest.mark.skipif(not extern._onednn_available(torch), reason="torch built without oneDNN")


@pytest.fixture
def products(monkeypatch):
    """The tensors oneDNN returns, in call order."""
    made = []
    onednn = extern._onednn_matmul
    monkeypatch.setattr(extern, "_onednn_matmul", lambda *args: made.append(onednn(*args)) or made[-1])
    return made


@pytest.fixture
def writes(monkeypatch):
    """The results a supplying step copied into a buffer (their shapes)."""
    copied = []
    write = adopt.write_result
    monkeypatch.setattr(adopt, "write_result", lambda r, t, d: copied.append(tuple(t.shape)) or write(r, t, d))
    return copied


def _matmul_graph(dtype=DType.f32, bias=True):
    b = Builder("linear")
    x = b.param(TensorType((N, N), dtype), "x")
    w = b.param(TensorType((N, N), dtype), "w")
    if bias:
        y = b.op("addmm", b.param(TensorType((N,), dtype), "b"), x, w, transpose_b=True)
    else:
        y = b.op("mm", x, w)
    return b.build([y, b.op("relu", y), b.op("neg", b.op("exp", y))])


def _inputs(fn, rng):
    """Operands whose products are about N(0, 1) (exp of them stays well conditioned)."""
    return [(rng.standard_normal(p.type.shape) / np.sqrt(np.sqrt(N))).astype(np.float32) for p in fn.params]


@requires_onednn
def test_onednn_product_is_the_output(rng, products, writes, no_output_copies):
    fn = _matmul_graph()
    exe = build_cpu_executable(fn, {"threads": 1})
    (supplied,) = [b for b in exe.plan.buffers if b.supplied]
    assert supplied.kind == "output"
    first = _assert_fresh_and_equal(exe, fn, _inputs(fn, rng), rtol=1e-5, atol=1e-4)
    assert np.shares_memory(first[0], products[0].numpy())  # returned, not copied
    assert writes == []


@requires_onednn
def test_onednn_product_feeds_later_kernels_from_its_own_memory(rng, products, writes):
    b = Builder("hidden")
    x, w = (b.param(TensorType((N, N), DType.f32), name) for name in "xw")
    y = b.op("mm", x, w)
    fn = b.build([b.op("relu", y), b.op("reshape", y, shape=(N * N,))])  # the reshape: y's storage, returned
    exe = build_cpu_executable(fn, {"threads": 1})
    assert [b.kind for b in exe.plan.buffers if b.supplied] == ["output"]
    first = _assert_fresh_and_equal(exe, fn, _inputs(fn, rng), rtol=1e-5, atol=1e-4)
    assert np.shares_memory(first[1], products[0].numpy()) and writes == []


@requires_onednn
def test_fused_onednn_product_is_the_kernels_scratch(rng, products):
    b = Builder("fused")
    x, w = (b.param(TensorType((N, N), DType.f32), name) for name in "xw")
    bias = b.param(TensorType((N,), DType.f32), "b")
    fn = b.build([b.op("relu", b.op("add", b.op("mm", x, w), bias))])
    exe = compile_graph(fn, target="cpu", cache=None)
    (kernel,) = [r for r in exe._runners if getattr(r, "scratch_product", None) is not None]
    inputs = _inputs(fn, rng)
    _assert_fresh_and_equal(exe, fn, inputs, rtol=1e-5, atol=1e-4)
    # the epilogue read the product where oneDNN left it (the slot pointed at it during the call)
    assert kernel.args[kernel.scratch_product.slot] == products[-1].data_ptr()
    assert kernel.args[kernel.scratch_product.slot] != kernel.scratch_product.scratch


@requires_onednn
def test_fused_product_in_another_layout_is_copied(rng, products, monkeypatch):
    onednn = extern._onednn_matmul
    transposed = lambda *args: products.append(onednn(*args).t().contiguous().t()) or products[-1]  # noqa: E731
    monkeypatch.setattr(extern, "_onednn_matmul", transposed)
    b = Builder("fused")
    x, w = (b.param(TensorType((N, N), DType.f32), name) for name in "xw")
    fn = b.build([b.op("relu", b.op("mm", x, w))])
    exe = compile_graph(fn, target="cpu", cache=None)
    (kernel,) = [r for r in exe._runners if getattr(r, "scratch_product", None) is not None]
    _assert_fresh_and_equal(exe, fn, _inputs(fn, rng), rtol=1e-5, atol=1e-4)
    assert kernel.args[kernel.scratch_product.slot] == kernel.scratch_product.scratch


def test_bf16_products_are_not_supplied(rng):
    fn = _matmul_graph(DType.bf16)
    exe = build_cpu_executable(fn, {"threads": 1})
    assert not any(b.supplied for b in exe.plan.buffers)
    from neuroncc.ir.dtypes import round_to_bf16

    inputs = [round_to_bf16(a) for a in _inputs(fn, rng)]
    _assert_fresh_and_equal(exe, fn, inputs, rtol=1.6e-2, atol=1e-2)


def test_bf16_library_results_are_not_supplied(rng):
    from neuroncc.ir.dtypes import round_to_bf16

    fn = _attention_graph(DType.bf16)
    exe = build_cpu_executable(fn, {"threads": 1})
    assert not any(b.supplied for b in exe.plan.buffers)  # ATen's bf16 results are rounded into float32
    inputs = [round_to_bf16(a) for a in _inputs(fn, rng)]
    _assert_fresh_and_equal(exe, fn, inputs, rtol=2e-2, atol=2e-2)


@requires_onednn
def test_other_matmul_precisions_fill_fresh_buffers(rng, products):
    fn = _matmul_graph(bias=False)
    exe = build_cpu_executable(fn, {"threads": 1})
    previous = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("medium")  # ATen's reduced-precision gemm: not oneDNN's linear
    try:
        _assert_fresh_and_equal(exe, fn, _inputs(fn, rng), rtol=1e-2, atol=1e-1)
    finally:
        torch.set_float32_matmul_precision(previous)
    assert products == []


def _attention_graph(dtype=DType.f32):
    b = Builder("attention")
    q, k, v, grad = (b.param(TensorType((2, 3, 16, 8), dtype), name) for name in ("q", "k", "v", "grad"))
    out, lse = b.op("flash_attention", q, k, v, scale=0.25)
    dq, dk, dv = b.op("flash_attention_backward", grad, q, k, v, out, lse, scale=0.25)
    return b.build([out, b.op("add", b.op("add", dq, dk), dv), b.op("exp", lse)])


def _recording(monkeypatch, name, made, change=lambda t, x, outs: outs):
    """Make library op ``name`` record the tensors it returns in ``made`` (after ``change``)."""
    call = LIBRARY_CALLS[name]

    def recorded(t, x, a):
        outs = tuple(change(t, x, call(t, x, a)))
        made.extend(outs)
        return outs
    monkeypatch.setitem(LIBRARY_CALLS, name, recorded)


def test_library_results_are_adopted_in_atens_layouts(rng, monkeypatch, writes):
    made = []
    _recording(monkeypatch, "flash_attention", made)
    fn = _attention_graph()
    exe = build_cpu_executable(fn, {"threads": 1})
    supplied = [b for b in exe.plan.buffers if b.supplied]
    assert [b.kind for b in supplied] == ["output", "call", "call", "call", "call"]
    # the gradients as ATen's CPU kernel stores them, [B, L, H, E]; the logsumexp [B, L, H]
    assert [v.strides for v in exe.plan.values if v.shape == (2, 3, 16, 8) and v.strides != (384, 128, 8, 1)] \
        == [(384, 8, 24, 1)] * 3
    assert [v.strides for v in exe.plan.values if v.shape == (2, 3, 16)][0] == (48, 1, 3)
    first = _assert_fresh_and_equal(exe, fn, _inputs(fn, rng), rtol=1e-5, atol=1e-5)
    assert writes == []
    assert np.shares_memory(first[0], made[0].numpy())


def _scan(name):
    b = Builder("scan")
    x = b.param(TensorType((4, 6), DType.f32), "x")
    values = b.op(name, x, dim=1)
    values = values[0] if isinstance(values, tuple) else values
    return b.build([values, b.op("reshape", values, shape=(24,))])


def test_library_results_in_another_layout_are_copied(rng, monkeypatch, writes):
    made = []
    _recording(monkeypatch, "cummax", made, lambda t, x, outs: (outs[0].t().contiguous().t(), outs[1]))
    fn = _scan("cummax")
    exe = build_cpu_executable(fn, {"threads": 1})
    assert [b.kind for b in exe.plan.buffers if b.supplied] == ["output", "call"]
    data = rng.standard_normal((4, 6)).astype(np.float32)
    got, _ = _assert_fresh_and_equal(exe, fn, [data])
    assert writes == [(4, 6), (4, 6)]  # the values copied (twice: two calls); the indices adopted
    assert not any(np.shares_memory(got, t.numpy()) for t in made)


def test_library_results_aliasing_an_operand_are_copied(rng, monkeypatch, writes):
    monkeypatch.setitem(LIBRARY_CALLS, "logcumsumexp", lambda t, x, a: (x[0],))  # as if ATen returned its input
    fn = _scan("logcumsumexp")
    exe = build_cpu_executable(fn, {"threads": 1})
    data = rng.standard_normal((4, 6)).astype(np.float32)
    got, flat = exe(data)
    np.testing.assert_array_equal(got, data)
    assert writes == [(4, 6)] and not np.shares_memory(got, data) and not np.shares_memory(flat, data)


def test_supplied_buffers_round_trip_through_save_and_load(tmp_path, rng, writes):
    fn = _attention_graph()
    exe = build_cpu_executable(fn, {"threads": 1})
    exe.save(tmp_path / "artifact")
    loaded = load_cpu_executable(tmp_path / "artifact", fn, {"threads": 1})
    assert loaded.plan == exe.plan and sum(b.supplied for b in loaded.plan.buffers) == 5
    inputs = _inputs(fn, rng)
    for a, c in zip(exe(*inputs), _assert_fresh_and_equal(loaded, fn, inputs, rtol=1e-5, atol=1e-5)):
        np.testing.assert_array_equal(a, c)
    assert writes == []


@requires_onednn
def test_in_place_reuse_of_a_supplied_values_slot_stays_in_the_arena(rng, products):
    from neuroncc.codegen.llvm.regions import wrap_remaining_ops
    from neuroncc.passes.plan_memory import plan, value_indices

    b = Builder("in_place")
    x, w = (b.param(TensorType((N, N), DType.f32), name) for name in "xw")
    fn = wrap_remaining_ops(b.build([b.op("neg", b.op("exp", b.op("mm", x, w)))]))
    memory, index = plan(fn), value_indices(fn)
    y, z = fn.ops[0].result, fn.ops[1].result
    assert (index[z], index[y]) in memory.in_place  # the plan puts exp's result over the dying product
    exe = build_cpu_executable(fn, {"threads": 1, "memory_plan": memory})
    y_buffer = exe.plan.buffers[exe.plan.values[index[y]].buffer]
    z_buffer = exe.plan.buffers[exe.plan.values[index[z]].buffer]
    assert y_buffer.supplied and z_buffer.kind == "arena" and z_buffer.index == memory.offsets[index[z]]
    inputs = _inputs(fn, rng)
    _assert_fresh_and_equal(exe, fn, inputs, rtol=1e-5, atol=1e-4)
    # the exp kernel wrote the arena, not oneDNN's memory: the product is intact
    np.testing.assert_allclose(products[0].numpy(), inputs[0] @ inputs[1], rtol=1e-5, atol=1e-4)



@requires_onednn
def test_an_adopted_product_takes_no_arena_slot(rng, products):
    """The memory plan leaves out the values the launch keeps outside the arena (ATen's results adopted per
    call). Before, it reserved the first product a slot that stayed empty: neg's result went above it, exp's
    below, and closing the unused range left an arena of 4 products' size for 3 (the transformer block's
    backward had 32.25 MiB for 20.25)."""
    from neuroncc.codegen.llvm import jit
    from neuroncc.codegen.llvm.program import memory_plan_for_launch
    from neuroncc.codegen.llvm.regions import wrap_remaining_ops
    from neuroncc.passes.plan_memory import value_indices

    b = Builder("adopted")
    x = b.param(TensorType((N, N), DType.f32), "x")
    w, v = b.param(TensorType((N, 2 * N), DType.f32), "w"), b.param(TensorType((2 * N, N), DType.f32), "v")
    a = b.op("exp", x)  # live to the end
    q = b.op("neg", b.op("mm", a, w))  # twice a's size, over the adopted product's lifetime
    r = b.op("exp", b.op("mm", q, v))  # after q, while a lives
    fn = wrap_remaining_ops(b.build([b.op("add", r, a)]))
    exe = build_cpu_executable(fn, {"threads": 1})
    index = value_indices(fn)
    kinds = [exe.plan.buffers[exe.plan.values[index[op.result]].buffer] for op in fn.ops]
    assert [k.supplied for k in kinds] == [False, True, False, True, False, False]
    size = N * N * 4
    assert exe.plan.arena_bytes == 3 * size  # a, then q over a product's lifetime, r in q's place (was 4)
    memory = memory_plan_for_launch(fn, *jit.host_cpu())
    assert index[fn.ops[1].result] in memory.external and memory.peak_bytes == 3 * size  # the plan's report
    x, w, v = (array / N for array in _inputs(fn, rng))  # products about N(0, 1/N): exp stays near 1
    _assert_fresh_and_equal(exe, fn, [x, w, v], rtol=1e-5, atol=1e-4)


def _words_convolutions():
    """A words convolution (bf16-product-words) whose result is an output and read by a kernel, and its backward,
    whose three gradients are outputs."""
    b = Builder("conv_words")
    x = b.param(TensorType((2, 4, 10, 10), DType.i16), "x")
    w = b.param(TensorType((8, 4, 3, 3), DType.i16), "w")
    g = b.param(TensorType((2, 8, 5, 5), DType.i16), "g")
    conv = dict(stride=(2,), padding=(1,), dilation=(1,), words=True)
    y = b.op("convolution", x, w, **conv)
    dx, dw, db = b.op("convolution_backward", g, x, w, **conv)
    return b.build([y, b.op("relu", b.op("bitcast", y, dtype=DType.bf16)), dx, dw, db])


@pytest.mark.parametrize("native", [True, False])
def test_words_convolutions_supply_their_results_as_atens_tensors(rng, monkeypatch, writes, no_output_copies,
                                                                  native):
    """A convolution on bf16 words: each result is ATen's tensor's memory (its bf16 result's words, or the
    float32 result's rounded words without native bf16: forced here), not a copy of it; the interpreter's bits."""
    if native and not extern.aten_multiplies_bf16_natively():
        pytest.skip("the host has no native bf16 convolutions (AVX512-BF16 or AMX)")
    monkeypatch.setattr(extern, "_NATIVE_BF16", native)
    made = []
    words = adopt.convolution_words

    def recorded(*args):
        results = words(*args)
        made.extend(results)
        return results
    monkeypatch.setattr(adopt, "convolution_words", recorded)
    fn = _words_convolutions()
    exe = build_cpu_executable(fn, {"threads": 1})
    assert [b.kind for b in exe.plan.buffers if b.supplied] == ["output"] * 4
    inputs = [(np.asarray(rng.standard_normal(p.type.shape), np.float32).view(np.uint32) >> 16)
              .astype(np.uint16).view(np.int16) for p in fn.params]
    first = exe(*inputs)
    for got, want in zip(first, interpret(fn, inputs)):
        if native:  # (oneDNN's bf16 kernels sum in another order than the float64 reference)
            np.testing.assert_allclose(*(np.asarray(a, np.float32) for a in (_widened(got), _widened(want))),
                                       rtol=2e-2, atol=2e-2)
        else:
            assert np.array_equal(got, want) if got.dtype == np.int16 else np.allclose(got, want)
    outputs = [first[0], *first[2:]]
    assert all(any(np.shares_memory(o, t.numpy()) for t in made) for o in outputs) and writes == []
    second = exe(*inputs)
    assert not any(np.shares_memory(a, b) for a in first for b in second)


def _widened(array):
    from neuroncc.ir.dtypes import bf16_from_words

    return bf16_from_words(array) if array.dtype == np.int16 else array
