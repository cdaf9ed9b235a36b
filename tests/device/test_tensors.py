"""neuron tensors behave like CPU tensors: factories, copies, views, in-place ops, indexing, printing, dtypes."""

from __future__ import annotations

import warnings

import pytest
import torch

import neuroncc.device
from neuroncc.device.diagnostics import DeviceFloat64Warning


def test_factories_and_round_trips():
    for t in (torch.zeros(2, 3, device="neuron"), torch.ones(4, device="neuron", dtype=torch.int32),
              torch.full((2, 2), 7.5, device="neuron"), torch.arange(6, device="neuron"),
              torch.eye(3, device="neuron"), torch.tensor([1.0, 2.0], device="neuron")):
        assert t.device == torch.device("neuron", 0)
    assert torch.full((2, 2), 7.5, device="neuron").cpu().tolist() == [[7.5, 7.5], [7.5, 7.5]]
    assert torch.arange(6, device="neuron").cpu().tolist() == list(range(6))
    assert torch.equal(torch.eye(3, device="neuron").cpu(), torch.eye(3))
    x = torch.randn(3, 4)
    assert torch.equal(x.to("neuron").cpu(), x)
    assert torch.equal(x.to("neuron").to("neuron").cpu(), x)
    empty = torch.empty(0, 3, device="neuron")
    assert empty.shape == (0, 3) and empty.cpu().shape == (0, 3)


def test_copies_across_devices_convert_and_broadcast():
    x = torch.randn(3, 4)
    d = torch.empty(3, 4, device="neuron", dtype=torch.float16)
    d.copy_(x)
    assert torch.equal(d.cpu(), x.half())
    b = torch.empty(2, 3, 4, device="neuron")
    b.copy_(x.to("neuron"))
    assert torch.equal(b.cpu(), x.expand(2, 3, 4))
    out = torch.empty(3, 4)
    out.copy_(x.to("neuron"))
    assert torch.equal(out, x)
    assert torch.equal(x.to("neuron").to(torch.int64).cpu(), x.to(torch.int64))


def test_views_share_storage():
    x = torch.arange(12.0).to("neuron")
    v = x.view(3, 4)
    t = v.t()
    s = v[1:, ::2]
    assert v.untyped_storage().data_ptr() == x.untyped_storage().data_ptr() == t.untyped_storage().data_ptr()
    assert s.storage_offset() == 4 and s.stride() == (4, 2)
    s.fill_(-1.0)
    assert x.cpu().tolist() == [0.0, 1, 2, 3, -1, 5, -1, 7, -1, 9, -1, 11]
    assert torch.equal(t.contiguous().cpu(), x.cpu().view(3, 4).t())
    assert torch.equal(x.view(2, 6).permute(1, 0).reshape(12).cpu(), x.cpu().view(2, 6).permute(1, 0).reshape(12))
    assert x.unsqueeze(0).expand(2, 12).stride() == (0, 1)
    assert [c.cpu().tolist() for c in x.split(5)][-1] == [-1.0, 11.0]


def test_in_place_ops_indexing_and_setitem():
    c = torch.randn(5, 4)
    d = c.to("neuron")
    d.add_(1.5).mul_(2)
    c.add_(1.5).mul_(2)
    d[0] = 3.0
    c[0] = 3.0
    d[:, 1] = torch.arange(5.0, device="neuron")
    c[:, 1] = torch.arange(5.0)
    d[d > 2] = 0.0
    c[c > 2] = 0.0
    assert torch.allclose(d.cpu(), c)
    index = torch.tensor([4, 0, 2])
    assert torch.equal(d[index.to("neuron")].cpu(), c[index])
    assert torch.equal(d[[1, 3]].cpu(), c[[1, 3]])


def test_item_and_python_scalars():
    x = torch.tensor([2.5, -1.0], device="neuron")
    assert x[0].item() == 2.5 and x.sum().item() == 1.5
    assert float(x.max()) == 2.5 and bool((x > 0).any())
    assert x.tolist() == [2.5, -1.0]


def test_printing_names_the_device():
    x = torch.tensor([[1.0, 2.0], [3.0, 4.0]], device="neuron", requires_grad=True)
    text = repr(x * 2)
    assert "device='neuron:0'" in text and "grad_fn=<MulBackward0>" in text and "6." in text
    assert repr(torch.empty(0, device="neuron")) == "tensor([], device='neuron:0')"
    assert "dtype=torch.int32" in repr(torch.ones(2, dtype=torch.int32, device="neuron"))
    assert str(torch.tensor(3.0, device="neuron")) == "tensor(3., device='neuron:0')"


def test_dtype_casts():
    x = torch.randn(4, device="neuron")
    for dtype in (torch.float16, torch.bfloat16, torch.int32, torch.int64, torch.bool, torch.uint8):
        assert torch.equal(x.to(dtype).cpu(), x.cpu().to(dtype))


def test_mixing_with_a_cpu_tensor_raises_cudas_error_but_cpu_scalars_are_fine():
    x = torch.ones(3, device="neuron")
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device, but found at least "
                                           "two devices, neuron:0 and cpu!"):
        x + torch.ones(3)
    assert (x * torch.tensor(2.0)).cpu().tolist() == [2.0, 2.0, 2.0]
    assert (x + torch.tensor(1, dtype=torch.int64)).cpu().tolist() == [2.0, 2.0, 2.0]


def test_several_devices():
    count = torch.neuron.device_count()
    neuroncc.device.set_device_count(2)
    try:
        a = torch.ones(3, device="neuron:1")
        assert (a + a).device == torch.device("neuron", 1)
        assert a.to("neuron:0").device.index == 0
        with pytest.raises(RuntimeError, match="neuron:1 and neuron:0"):
            a + torch.ones(3, device="neuron:0")
        with pytest.raises(RuntimeError, match="neuron:5 does not exist"):
            torch.ones(3, device="neuron:5")
    finally:
        neuroncc.device.set_device_count(count)


def test_requires_grad_off_device_zero_warns_that_backward_cannot_run(monkeypatch):
    from neuroncc.device import diagnostics

    monkeypatch.setattr(diagnostics, "_warned_autograd", False)
    count = torch.neuron.device_count()
    neuroncc.device.set_device_count(2)
    try:
        w = torch.ones(3, device="neuron:1", requires_grad=True)
        with pytest.warns(diagnostics.DeviceAutogradWarning, match="backward can only run on neuron:0"):
            (w * 2.5).sum()
        with torch.no_grad():
            assert (w * 3.5).device.index == 1  # inference on another device is fine
    finally:
        neuroncc.device.set_device_count(count)


def test_float64_becomes_float32_with_one_warning(monkeypatch):
    from neuroncc.device import diagnostics

    monkeypatch.setattr(diagnostics, "_warned_float64", False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        x = torch.randn(3, dtype=torch.float64).to("neuron")
        y = torch.zeros(2, dtype=torch.float64, device="neuron")
    assert x.dtype == torch.float32 and y.dtype == torch.float32
    assert [w.category for w in caught].count(DeviceFloat64Warning) == 1
    assert __file__ in str([w.message for w in caught if w.category is DeviceFloat64Warning][0])


def test_resize_and_set():
    x = torch.arange(4.0, device="neuron")
    x.resize_(2, 3)
    assert x.shape == (2, 3) and x.view(-1)[:4].cpu().tolist() == [0.0, 1.0, 2.0, 3.0]
    y = torch.empty(0, device="neuron")
    y.set_(x)
    assert y.data_ptr() == x.data_ptr() and y.shape == x.shape
    out = torch.empty(0, device="neuron")
    torch.add(torch.ones(3, device="neuron"), 1, out=out)
    assert out.cpu().tolist() == [2.0, 2.0, 2.0]


def test_ops_follow_eager_strides():
    x = torch.randn(4, 6).to("neuron").t()
    y = x * 2
    assert y.stride() == (x.cpu() * 2).stride()
    assert torch.equal(y.cpu(), x.cpu() * 2)
    channels_last = torch.randn(2, 3, 4, 5).to(memory_format=torch.channels_last)
    assert (channels_last.to("neuron") + 1).stride() == (channels_last + 1).stride()
