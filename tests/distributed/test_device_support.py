"""What the parallelism APIs ask of the device beyond tensors: ``torch.neuron`` streams and events (the device
is synchronous, so they order nothing but behave as torch.cuda's do), and resizing a storage in place (FSDP2
frees and re-allocates parameter memory that way)."""

from __future__ import annotations

import torch

import neuroncc.device
from neuroncc.device.resize import resize_storage

neuroncc.device.register()


def test_streams_and_events_behave_as_torch_cuda_s():
    module = torch.get_device_module("neuron")
    default = module.current_stream()
    assert default is module.default_stream() and default.device == torch.device("neuron", 0)
    side = module.Stream(priority=-1)
    with module.stream(side):
        assert module.current_stream() is side
        x = torch.ones(4, device="neuron") * 2
    assert module.current_stream() is default
    default.wait_stream(side)
    start, end = module.Event(enable_timing=True), module.Event(enable_timing=True)
    start.record()
    y = x + 1
    end.record(side)
    side.wait_event(end)
    end.synchronize()
    assert start.query() and end.elapsed_time(start) <= 0 <= start.elapsed_time(end)
    assert isinstance(default.record_event(), module.Event)
    assert y.cpu().tolist() == [3.0] * 4


def test_resize_storage_keeps_the_prefix_and_every_view_sees_the_new_memory():
    t = torch.arange(8.0, device="neuron")
    view = t[2:4]
    storage = t.untyped_storage()
    resize_storage(storage, 0)
    assert storage.nbytes() == 0 and t.untyped_storage().nbytes() == 0
    resize_storage(storage, 8 * 4)  # FSDP2 then writes the gathered parameter into it
    t.copy_(torch.arange(8.0) * 10)
    assert view.cpu().tolist() == [20.0, 30.0]
    resize_storage(storage, 16 * 4)
    assert t.cpu().tolist() == [0.0, 10.0, 20.0, 30.0, 40.0, 50.0, 60.0, 70.0]  # kept the first 8 elements
