"""Streams and events on the synchronous ``neuron`` device, written as device-agnostic PyTorch code writes them
(``torch.Event``, ``torch.accelerator.current_stream()``, ``tensor.record_stream``): they work, time the work on
the host clock, and leave every value as CPU computes it (``neuroncc/device/streams.py``)."""

from __future__ import annotations

import time

import pytest
import torch


def test_torch_event_times_the_device_work_between_two_records():
    # torch.accelerator's documented recipe: torch.Event on the current accelerator, record, synchronize, time
    start, end = torch.Event(enable_timing=True), torch.Event(enable_timing=True)
    x = torch.randn(64, 64, device="neuron")
    start.record()
    y = x @ x
    time.sleep(0.02)
    end.record()
    end.synchronize()
    assert start.query() and end.query()
    elapsed = start.elapsed_time(end)
    assert 20.0 <= elapsed < 10_000.0
    assert end.elapsed_time(start) == pytest.approx(-elapsed)
    torch.testing.assert_close(y.cpu(), x.cpu() @ x.cpu())
    on_device = torch.Event(device="neuron", enable_timing=True)
    assert isinstance(on_device, torch.Event) and isinstance(torch.Stream("neuron").record_event(), torch.Event)


def test_event_timing_needs_enable_timing_and_recorded_events():
    plain, timed = torch.Event(), torch.Event(enable_timing=True)
    plain.record()
    timed.record()
    with pytest.raises(RuntimeError, match="enable_timing=True"):
        plain.elapsed_time(timed)
    with pytest.raises(RuntimeError, match="recorded first"):
        timed.elapsed_time(torch.Event(enable_timing=True))


def test_the_current_streams_record_event_times_like_event_record():
    stream = torch.accelerator.current_stream()
    assert stream is torch.neuron.current_stream() and stream.device == torch.device("neuron", 0)
    start = stream.record_event(torch.Event(enable_timing=True))
    time.sleep(0.01)
    end = stream.record_event(torch.Event(enable_timing=True))
    assert start.elapsed_time(end) >= 10.0


def test_side_stream_prefetch_with_record_stream_gives_cpus_values():
    # the CUDA prefetching idiom: copy on a side stream, wait for it, record the tensor on the consumer stream
    batch = torch.randn(8, 16)
    side = torch.neuron.Stream()
    with torch.neuron.stream(side):
        on_device = batch.to("neuron", non_blocking=True)
        assert torch.accelerator.current_stream() is side
    torch.neuron.current_stream().wait_stream(side)
    on_device.record_stream(torch.neuron.current_stream())
    on_device.record_stream(torch.accelerator.current_stream())
    on_device.record_stream(torch.Stream("neuron"))
    assert isinstance(side, torch.Stream) and side != torch.neuron.current_stream()
    torch.testing.assert_close((on_device * 2).softmax(-1).cpu(), (batch * 2).softmax(-1))


def test_a_torch_stream_of_the_device_is_current_inside_with_and_its_events_time():
    # device-agnostic code: torch.Stream("neuron") (or torch.Stream() with neuron as the accelerator)
    side = torch.Stream("neuron")
    assert isinstance(side, torch.Stream) and side.device == torch.device("neuron", 0)
    assert isinstance(torch.Stream(), torch.neuron.Stream) and torch.Stream("neuron", priority=-1).priority == -1
    with side:
        assert torch.accelerator.current_stream() is side and torch.neuron.current_stream() is side
        x = torch.randn(16, 16, device="neuron")
        start = side.record_event(torch.Event(enable_timing=True))
        y = x @ x
        time.sleep(0.01)
        end = side.record_event(torch.Event(enable_timing=True))
    assert torch.neuron.current_stream() is torch.neuron.default_stream()
    plain = torch.Stream("neuron").record_event()
    plain.synchronize()
    end.synchronize()
    assert plain.query() and start.elapsed_time(end) >= 10.0
    torch.testing.assert_close(y.cpu(), x.cpu() @ x.cpu())
    assert type(torch.Stream("cpu")) is torch._C.Stream  # any other device's stream is PyTorch's own
