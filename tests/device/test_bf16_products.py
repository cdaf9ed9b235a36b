"""bf16 matrix products and convolutions on the device and in compiled graphs: ATen's own bf16 kernels where the
host multiplies bf16 natively (CPU eager's bits), the float32 product of the same values elsewhere."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import neuroncc
from neuroncc.device import bf16_products, dispatch
from neuroncc.device.signature import describe
from neuroncc.executors.cpu import extern
from neuroncc.ir.dtypes import DType

aten = torch.ops.aten
NATIVE = extern.aten_multiplies_bf16_natively()


def _bits(tensor):
    return tensor.view(torch.int16)


def _calls():
    generator = torch.Generator().manual_seed(0)

    def randn(*shape):
        return torch.randn(*shape, generator=generator).to(torch.bfloat16)

    # sizes where the float32 product's summation order gives other bits than ATen's bf16 kernel in a few elements
    a, w, bias = randn(128, 1024), randn(256, 1024), randn(256)
    batch1, batch2, base = randn(4, 32, 1024), randn(4, 1024, 64), randn(32, 64)
    return {
        "linear": (lambda a, w: F.linear(a, w), (a, w)),
        "linear with bias": (lambda a, w, b: F.linear(a, w, b), (a, w, bias)),
        "mm of a transposed view": (lambda a, w: a.t().mm(a), (a, w)),
        "addmm with alpha and beta": (lambda b, a, w: torch.addmm(b, a, w.t(), beta=0.5, alpha=2.0), (bias, a, w)),
        "bmm": (torch.bmm, (batch1, batch2)),
        "baddbmm": (lambda c, x, y: torch.baddbmm(c, x, y, beta=-1.0, alpha=0.25), (base, batch1, batch2)),
        "empty inner dim": (torch.mm, (randn(5, 0), randn(0, 7))),
        # other overloads: ATen's kernel on the device's memory (layouts.aten_on_device_memory)
        "mm out=": (lambda a, w: torch.mm(a, w.t(), out=torch.empty(0, dtype=a.dtype, device=a.device)), (a, w)),
        "addmm_ in place": (lambda c, a, w: c.addmm_(a, w.t(), beta=0.5), (randn(128, 256), a, w)),
        "baddbmm_ in place": (lambda c, x, y: c.baddbmm_(x, y, alpha=0.5), (randn(4, 32, 64), batch1, batch2)),
    }


@pytest.mark.parametrize("case", list(_calls()))
def test_bf16_products_on_the_device_have_cpu_eagers_bits(case):
    """Each product on bf16 neuron tensors: CPU eager's bits where ATen runs on the device's memory (native bf16
    hosts: no kernel compiled, counted as device calls), close to them elsewhere (the float32 product's
    summation order)."""
    fn, args = _calls()[case]
    expected = fn(*(t.clone() for t in args))  # (an in-place product writes its first argument)
    neuroncc.reset_stats()
    got = fn(*(t.to("neuron") for t in args))
    stats = neuroncc.stats()
    assert got.device.type == "neuron" and got.dtype == torch.bfloat16 and got.shape == expected.shape
    assert stats["eager_fallback_calls"] == 0
    if NATIVE:
        assert torch.equal(_bits(got.cpu()), _bits(expected))
        assert stats["eager_kernels_compiled"] == 0 and stats["eager_device_calls"] >= 1
    else:
        torch.testing.assert_close(got.cpu(), expected)


@pytest.mark.skipif(not NATIVE, reason="the host has no native bf16 products (AVX512-BF16 or AMX)")
def test_a_functional_bf16_product_writes_its_result_into_device_memory():
    """mm's entry on a native bf16 host is the out= call into a new device tensor, not run_on_host's copy."""
    a, b = torch.randn(8, 16).to(torch.bfloat16).to("neuron"), torch.randn(16, 4).to(torch.bfloat16).to("neuron")
    a.mm(b)
    key, _, _ = describe((a, b), {})
    assert isinstance(dispatch._handlers[aten.mm.default].entries[key], bf16_products.AtenBf16Product)


def test_bf16_products_refuse_as_eager_does():
    """Shapes ATen refuses, and a CPU operand, raise eager's errors."""
    x = torch.ones(2, 3, dtype=torch.bfloat16, device="neuron")
    with pytest.raises(RuntimeError, match="cannot be multiplied"):
        x.mm(torch.ones(4, 3, dtype=torch.bfloat16, device="neuron"))
    with pytest.raises(RuntimeError, match="same device"):
        x.mm(torch.ones(3, 3, dtype=torch.bfloat16))
    with pytest.raises(RuntimeError):
        torch.bmm(torch.ones(2, 2, 3, dtype=torch.bfloat16, device="neuron"),
                  torch.ones(3, 3, 2, dtype=torch.bfloat16, device="neuron"))


@pytest.mark.parametrize("transpose_b", [False, True])
@pytest.mark.parametrize("name", ["mm", "addmm"])
def test_an_extern_bf16_product_is_atens_bf16_product(name, transpose_b):
    """run_extern on float32 arrays holding bf16 values (a compiled graph's buffers): ATen's bf16 product's bits
    on a native bf16 host, the float32 product rounded once elsewhere."""
    rng = np.random.default_rng(0)

    def bf16_values(*shape):
        return torch.from_numpy(rng.standard_normal(shape).astype(np.float32)).to(torch.bfloat16)

    a, b, bias = bf16_values(128, 1024), bf16_values(1024, 256), bf16_values(256)
    stored_b = b.t().contiguous() if transpose_b else b
    attrs = {"transpose_a": False, "transpose_b": transpose_b}
    operands = [a.float().numpy(), stored_b.float().numpy()]
    if name == "addmm":
        attrs.update(alpha=1, beta=1)
        operands.insert(0, bias.float().numpy())
    result = np.empty((128, 256), np.float32)
    extern.run_extern(name, attrs, operands, [result], DType.bf16)
    expected = torch.mm(a, b) if name == "mm" else torch.addmm(bias, a, b)
    got = torch.from_numpy(result)
    assert torch.equal(got.to(torch.bfloat16).float(), got)  # bf16 values
    if NATIVE:
        assert torch.equal(_bits(got.to(torch.bfloat16)), _bits(expected))
    else:
        torch.testing.assert_close(got.to(torch.bfloat16), expected)


def test_a_compiled_bf16_linear_has_cpu_eagers_bits():
    """torch.compile of a bf16 Linear + GELU (the product an extern step of a fused kernel), on CPU and on
    neuron tensors: CPU eager's bits on a native bf16 host."""
    torch.manual_seed(0)
    layer = torch.nn.Linear(1024, 256).to(torch.bfloat16)
    x = torch.randn(128, 1024).to(torch.bfloat16)
    expected = F.gelu(layer(x))
    torch._dynamo.reset()
    compiled = torch.compile(lambda t: F.gelu(layer(t)), backend="neuron", dynamic=False)
    on_cpu = compiled(x)
    layer.to("neuron")
    on_device = compiled(x.to("neuron")).cpu()
    for got in (on_cpu, on_device):
        if NATIVE:
            assert torch.equal(_bits(got), _bits(expected))
        else:
            torch.testing.assert_close(got, expected)


def test_a_bf16_cnn_training_step_has_cpu_eagers_bits_on_the_device_and_compiled():
    """A bf16 CNN's forward and backward (convolutions, their backward, a Linear) on the device, and compiled on
    CPU and on neuron tensors: CPU eager's bits on a native bf16 host (ATen's bf16 convolution kernels; the float32
    convolution of the same values, rounded, gave other bits in many elements)."""
    def model():
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Conv2d(64, 32, 3, padding=1), torch.nn.ReLU(),
                                   torch.nn.Conv2d(32, 16, 3, stride=2), torch.nn.Flatten(),
                                   torch.nn.Linear(16 * 7 * 7, 10)).to(torch.bfloat16)

    def step(net, x):
        out = net(x)
        out.float().square().mean().backward()
        return [out] + [p.grad for p in net.parameters()]

    x = torch.randn(4, 64, 16, 16, generator=torch.Generator().manual_seed(1)).to(torch.bfloat16)
    expected = step(model(), x)
    torch._dynamo.reset()
    runs = {"device": step(model().to("neuron"), x.to("neuron")),
            "compiled": step(torch.compile(model(), backend="neuron", dynamic=False), x),
            "compiled on the device": step(torch.compile(model().to("neuron"), backend="neuron", dynamic=False),
                                           x.to("neuron"))}
    for name, results in runs.items():
        for got, want in zip(results, expected, strict=True):
            if NATIVE:
                assert torch.equal(_bits(got.cpu()), _bits(want)), name
            else:
                torch.testing.assert_close(got.cpu(), want, atol=0.05, rtol=0.02)


@pytest.mark.parametrize("native", [True, False])
@pytest.mark.parametrize("name", ["mm", "addmm", "bmm"])
def test_a_product_on_bf16_words_reads_and_writes_them_in_place(name, native, monkeypatch):
    """run_extern of a ``words`` product (bf16-product-words: int16 operands and result, the bf16 values' words):
    ATen's bf16 product's bits on a native bf16 host; elsewhere (forced here) the float32 product of the same
    values rounded once to bf16 words, a NaN row staying NaN."""
    if native and not NATIVE:
        pytest.skip("the host has no native bf16 products (AVX512-BF16 or AMX)")
    monkeypatch.setattr(extern, "_NATIVE_BF16", native)
    rng = np.random.default_rng(1)

    def bf16_values(*shape):
        return torch.from_numpy(rng.standard_normal(shape).astype(np.float32)).to(torch.bfloat16)

    batch = (3,) if name == "bmm" else ()
    a, b, bias = bf16_values(*batch, 64, 96), bf16_values(*batch, 96, 48), bf16_values(48)
    a[..., 5, 7] = float("nan")
    operands = [_bits(a).numpy(), _bits(b.transpose(-1, -2).contiguous()).numpy()]  # b stored transposed
    attrs = {"transpose_a": False, "transpose_b": True, "words": True}
    if name == "addmm":
        attrs.update(alpha=0.5, beta=2.0)
        operands.insert(0, _bits(bias).numpy())
    result = np.full((*batch, 64, 48), 77, np.int16)
    extern.run_extern(name, attrs, operands, [result], DType.i16)
    expected = {"mm": lambda: torch.mm(a, b), "bmm": lambda: torch.bmm(a, b),
                "addmm": lambda: torch.addmm(bias, a, b, beta=2.0, alpha=0.5)}[name]()
    got = torch.from_numpy(result).view(torch.bfloat16)
    if native:
        assert torch.equal(_bits(got), _bits(expected))
    else:  # the float32 product's summation order is BLAS's: bf16 values within one rounding of eager's
        assert torch.isnan(got[..., 5, :]).all()
        torch.testing.assert_close(got, expected, equal_nan=True)


def test_a_compiled_autocast_training_step_has_eager_autocasts_products():
    """A Linear-GELU-Linear step under bf16 autocast, compiled on CPU and on neuron tensors, its products on the
    graphs' bf16 words (bf16-product-words): the loss and the second layer's gradients are CPU eager's bits on a
    native host. The first layer's go through GELU's backward, whose float32 derivative is one rounding apart
    from ATen's in an element or two on some inputs (as before the words: not the products), so within that."""
    def model():
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(), torch.nn.Linear(256, 32))

    def step(net, x, target):
        with torch.autocast(x.device.type, dtype=torch.bfloat16):
            loss = F.mse_loss(net(x), target)
        loss.backward()
        return [loss] + [p.grad for p in net.parameters()]

    generator = torch.Generator().manual_seed(2)
    x, target = torch.randn(16, 64, generator=generator), torch.randn(16, 32, generator=generator)
    expected = step(model(), x, target)
    torch._dynamo.reset()
    runs = {"compiled": step(torch.compile(model(), backend="neuron", dynamic=False), x, target),
            "compiled on the device": step(torch.compile(model().to("neuron"), backend="neuron", dynamic=False),
                                           x.to("neuron"), target.to("neuron"))}
    for name, (loss, w1, b1, w2, b2) in runs.items():
        want_loss, want_w1, want_b1, want_w2, want_b2 = expected
        for got, want in ((loss, want_loss), (w2, want_w2), (b2, want_b2)):
            if NATIVE:
                assert torch.equal(got.cpu(), want), name
            else:
                torch.testing.assert_close(got.cpu(), want, atol=0.02, rtol=0.02)
        for got, want in ((w1, want_w1), (b1, want_b1)):
            torch.testing.assert_close(got.cpu(), want, **({} if NATIVE else {"atol": 0.02, "rtol": 0.02}))
