"""bf16 convolutions and their backward on bf16 words (bf16-product-words): the extern reads a compiled graph's
words in place as ATen's bfloat16 tensors and writes each result's words, CPU eager's bits on a native bf16 host;
the float32 convolution of the same values rounded once elsewhere (forced here), the bits of the float32 buffers'
path the pass replaced."""

from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from neuroncc.executors.cpu import extern
from neuroncc.ir import REGISTRY
from neuroncc.ir.dtypes import DType, bf16_words, round_to_bf16
from neuroncc.passes import default_pipeline

aten = torch.ops.aten
NATIVE = extern.aten_multiplies_bf16_natively()
FLOAT32_BUFFERS = default_pipeline("cpu").replace("bf16-product-words,", "")  # the pipeline before the pass


def _bits(tensor):
    return tensor.view(torch.int16)


def _conv_operands(channels_last: bool):
    generator = torch.Generator().manual_seed(3)

    def bf16(*shape):
        return torch.randn(*shape, generator=generator).to(torch.bfloat16)

    x, w, bias, grad = bf16(4, 32, 18, 18), bf16(64, 16, 3, 3), bf16(64), bf16(4, 64, 9, 9)
    x[1, 5, 7, 9] = float("nan")  # a window of NaN outputs
    if channels_last:  # operands whose buffers the compiled graph keeps channels_last (extern._dense)
        x, w = x.contiguous(memory_format=torch.channels_last), w.contiguous(memory_format=torch.channels_last)
    return x, w, bias, grad


ATTRS = {"stride": (2,), "padding": (1,), "dilation": (1,), "groups": 2, "words": True}


def _attrs(name, **changes):
    """The op's attributes as a compiled graph's extern step gets them (every default filled in)."""
    return REGISTRY.get(name).normalize_attrs(dict(ATTRS, **changes))


def _eager(name, x, w, bias, grad):
    if name == "convolution":
        return [aten.convolution(x, w, bias, [2, 2], [1, 1], [1, 1], False, [0, 0], 2)]
    return list(aten.convolution_backward(grad, x, w, [64], [2, 2], [1, 1], [1, 1], False, [0, 0], 2,
                                          [True, True, True]))


@pytest.mark.parametrize("channels_last", [False, True])
@pytest.mark.parametrize("native", [True, False])
@pytest.mark.parametrize("name", ["convolution", "convolution_backward"])
def test_a_convolution_on_bf16_words_reads_and_writes_them_in_place(name, native, channels_last, monkeypatch):
    """run_extern of a ``words`` convolution (int16 operands and results, the bf16 values' words, some operands
    strided channels_last): ATen's bf16 convolution's bits on a native bf16 host; elsewhere (forced here) the
    float32 convolution of the same values, each result rounded once to bf16 words, NaN outputs kept."""
    if native and not NATIVE:
        pytest.skip("the host has no native bf16 convolutions (AVX512-BF16 or AMX)")
    monkeypatch.setattr(extern, "_NATIVE_BF16", native)
    x, w, bias, grad = _conv_operands(channels_last)
    operands = [x, w, bias] if name == "convolution" else [grad, x, w]
    dense = [t.contiguous() for t in (x, w, bias, grad)]  # (the layout the extern computes in)
    expected = _eager(name, *dense)
    if not native:  # the float32 convolution of the widened values, rounded once (NaN payloads kept)
        widened = _eager(name, *(t.float() for t in dense))
        expected = [torch.from_numpy(bf16_words(round_to_bf16(t.numpy()))).view(torch.bfloat16) for t in widened]
    assert torch.isnan(expected[-1 if name == "convolution" else 1]).any()  # (the NaN input reaches a result)
    results = [np.full(tuple(t.shape), 77, np.int16) for t in expected]
    extern.run_extern(name, _attrs(name), [_bits(t).numpy() for t in operands], results, DType.i16)
    for result, want in zip(results, expected, strict=True):
        assert torch.equal(_bits(torch.from_numpy(result).view(torch.bfloat16)), _bits(want))


def test_a_non_native_convolution_rounds_nan_results_as_the_float32_buffers_path(monkeypatch):
    """Forced non-native: the words of a result holding NaN are round_to_bf16's (payload kept), as the float32
    buffers' rounding gives them, not ATen's one NaN pattern (0xFFFF)."""
    monkeypatch.setattr(extern, "_NATIVE_BF16", False)
    x = torch.ones(1, 1, 2, 2, dtype=torch.bfloat16)
    _bits(x)[0, 0, 0, 0] = 0x7FC1  # a NaN with a payload
    w = torch.ones(1, 1, 1, 1, dtype=torch.bfloat16)
    result = np.zeros((1, 1, 2, 2), np.int16)
    attrs = _attrs("convolution", stride=(1,), padding=(0,), groups=1)
    extern.run_extern("convolution", attrs, [_bits(x).numpy(), _bits(w).numpy()], [result], DType.i16)
    float32 = torch.convolution(x.float(), w.float(), None, [1, 1], [0, 0], [1, 1], False, [0, 0], 1)
    assert np.array_equal(result, bf16_words(round_to_bf16(float32.numpy())))
    assert result[0, 0, 0, 0] == 0x7FC1 and list(result.reshape(-1)[1:]) == [0x3F80] * 3  # (NaN, 1.0, 1.0, 1.0)


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 32, 3, padding=1), torch.nn.ReLU(),
        torch.nn.Conv2d(32, 32, 3, stride=2, padding=1, groups=4, bias=False), torch.nn.ReLU(),
        torch.nn.Conv2d(32, 16, 1), torch.nn.Flatten(), torch.nn.Linear(16 * 8 * 8, 10))


def _step(net, x, target):
    """The net's output, its loss and every gradient of a training step."""
    with torch.autocast(x.device.type, dtype=torch.bfloat16):
        out = net(x)
        loss = F.mse_loss(out, target)
    loss.backward()
    return [out, loss] + [p.grad for p in net.parameters()]


def _inputs():
    generator = torch.Generator().manual_seed(4)
    return torch.randn(8, 3, 16, 16, generator=generator), torch.randn(8, 10, generator=generator)


def _convolutions_on_words(dump: Path) -> dict[str, bool]:
    """For each convolution op name, whether every one in the graphs' last stage works on words."""
    ops = [line for stage in dump.rglob("*-plan-memory.nir") for line in stage.read_text().splitlines()
           if " convolution" in line and "= convolution" in line]
    return {name: all("words = true" in line for line in ops if f"= {name} " in line)
            for name in ("convolution", "convolution_backward") if any(f"= {name} " in line for line in ops)}


def test_a_compiled_autocast_conv_net_has_cpu_eagers_bits_on_words(tmp_path, monkeypatch):
    """A conv net (a grouped, strided convolution without bias, a 1x1 one, a Linear) under bf16 autocast,
    compiled on CPU and on neuron tensors: the forward's output, the loss and every gradient are CPU eager's bits
    on a native host, its convolutions and their backward on the graphs' bf16 words. (On neuron tensors the loss
    is the device's eager mse_loss, outside the graph, which sums in another order: one ulp off on this shape,
    with the pass or without.)"""
    x, target = _inputs()
    expected = _step(_model(), x, target)
    for device in ("cpu", "neuron"):
        torch._dynamo.reset()
        monkeypatch.setenv("NEURONCC_DUMP", str(tmp_path / device))  # (every pipeline stage of every graph)
        compiled = torch.compile(_model().to(device), backend="neuron", dynamic=False)
        results = _step(compiled, x.to(device), target.to(device))
        assert _convolutions_on_words(tmp_path / device) == {"convolution": True, "convolution_backward": True}
        for index, (got, want) in enumerate(zip(results, expected, strict=True)):
            if device == "neuron" and index == 1:  # (the device's eager loss: see above)
                torch.testing.assert_close(got.cpu(), want)
            elif NATIVE:
                assert torch.equal(got.cpu(), want), device
            else:
                torch.testing.assert_close(got.cpu(), want, atol=0.02, rtol=0.02)


def test_a_compiled_autocast_conv_step_on_words_has_the_float32_buffers_bits_without_native_bf16(tmp_path,
                                                                                                  monkeypatch):
    """Forced non-native: the step's convolutions on words (the float32 convolution rounded once into the words)
    give the bits the pipeline without the pass gives (float32 buffers rounded in place)."""
    monkeypatch.setattr(extern, "_NATIVE_BF16", False)
    x, target = _inputs()
    runs = []
    for pipeline in (default_pipeline("cpu"), FLOAT32_BUFFERS):
        torch._dynamo.reset()
        monkeypatch.setenv("NEURONCC_DUMP", str(tmp_path / str(len(runs))))
        compiled = torch.compile(_model(), backend="neuron", dynamic=False, options={"pipeline": pipeline})
        runs.append(_step(compiled, x, target))
    assert _convolutions_on_words(tmp_path / "0") == {"convolution": True, "convolution_backward": True}
    assert _convolutions_on_words(tmp_path / "1") == {"convolution": False, "convolution_backward": False}
    for words, buffers in zip(*runs, strict=True):
        assert torch.equal(words, buffers)
    torch.testing.assert_close(runs[0][1], _step(_model(), x, target)[1], atol=0.02, rtol=0.02)  # (near eager)
