"""What a Python-registered device cannot do in torch 2.13 fails with a typed error naming the problem at the
user's line, instead of an internal error of PyTorch (docs/device.md, "Limits")."""

from __future__ import annotations

import pytest
import torch

from neuroncc.errors import DeviceAutogradError


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_backward_off_device_zero_raises_a_typed_error_and_neuron0_still_trains(two_devices):
    w = torch.randn(4, 3, device="neuron:1", requires_grad=True)
    loss = (w * w).sum()
    with pytest.raises(DeviceAutogradError, match=r"test_device_limits.py:\d+ reaches tensors on a neuron device "
                                                  r"other than neuron:0.*Train on neuron:0"):
        loss.backward()
    with pytest.raises(RuntimeError, match="Train on neuron:0"):  # a RuntimeError, as the engine's assert was
        torch.autograd.grad((w * 3).sum(), w)
    x = torch.randn(4, 3)
    v = x.to("neuron:0").requires_grad_()
    (v * v).sum().backward()  # the engine still runs neuron:0's backward, with CPU's gradient
    torch.testing.assert_close(v.grad.cpu(), 2 * x)
    with pytest.raises(RuntimeError, match="does not require grad"):  # other errors are the engine's own
        torch.ones(2, device="neuron:0").sum().backward()
