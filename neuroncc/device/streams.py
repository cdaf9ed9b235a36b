"""Streams and events of ``torch.neuron``, shaped like ``torch.cuda``'s: what FSDP2, pipelining and other code
written for CUDA streams asks a device module for.

The device is synchronous (an op's work is done when its call returns, see torch_module), so there is nothing
to order between streams: a stream is a named context that keeps what torch.cuda code expects (the current
stream per device, ``wait_stream``/``wait_event`` as no-ops that are correct because everything before them has
run), and an event is a point in time (``elapsed_time`` measures host time between two recorded events).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from typing import Any

import torch

_state = threading.local()  # the current stream per device, per thread (as CUDA's)


def _device_index(device: Any) -> int:
    if device is None:
        return torch.get_device_module("neuron").current_device()
    if isinstance(device, int):
        return device
    device = torch.device(device)
    return device.index if device.index is not None else torch.get_device_module("neuron").current_device()


class Stream:
    """A stream of the synchronous neuron device: work submitted "on" it has run when its call returns."""

    def __init__(self, device: Any = None, priority: int = 0, **kwargs: Any):
        self.device_index = _device_index(device)
        self.priority = priority

    @property
    def device(self) -> torch.device:
        return torch.device("neuron", self.device_index)

    def wait_stream(self, stream: Stream) -> None:
        """Nothing to wait for: the other stream's work has already run."""

    def wait_event(self, event: Event) -> None:
        """Nothing to wait for: the work before the event has already run."""

    def record_event(self, event: Event | None = None) -> Event:
        event = event or Event()
        event.record(self)
        return event

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        pass

    def __enter__(self) -> Stream:
        self._previous = current_stream(self.device_index)
        set_stream(self)
        return self

    def __exit__(self, *exc_info: object) -> None:
        set_stream(self._previous)

    def __repr__(self) -> str:
        return f"<torch.neuron.Stream device=neuron:{self.device_index} priority={self.priority}>"


class Event:
    """A recorded point in the (synchronous) device's work."""

    def __init__(self, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False):
        self.enable_timing = enable_timing
        self.recorded_at: float | None = None

    def record(self, stream: Stream | None = None) -> None:
        self.recorded_at = time.perf_counter()

    def wait(self, stream: Stream | None = None) -> None:
        pass

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        pass

    def elapsed_time(self, end_event: Event) -> float:
        """Milliseconds between this event and ``end_event``, both recorded."""
        if self.recorded_at is None or end_event.recorded_at is None:
            raise RuntimeError("elapsed_time needs both events recorded")
        return (end_event.recorded_at - self.recorded_at) * 1000.0


def _streams() -> dict[int, Stream]:
    streams = getattr(_state, "streams", None)
    if streams is None:
        streams = _state.streams = {}
    return streams


def default_stream(device: Any = None) -> Stream:
    index = _device_index(device)
    defaults = _DEFAULTS
    with _DEFAULTS_LOCK:
        if index not in defaults:
            defaults[index] = Stream(index)
        return defaults[index]


_DEFAULTS: dict[int, Stream] = {}
_DEFAULTS_LOCK = threading.Lock()


def current_stream(device: Any = None) -> Stream:
    index = _device_index(device)
    return _streams().get(index) or default_stream(index)


def set_stream(stream: Stream) -> None:
    _streams()[stream.device_index] = stream


@contextlib.contextmanager
def stream(stream: Stream | None) -> Iterator[None]:
    """Make ``stream`` current in the block (None: no change), as ``torch.cuda.stream``."""
    if stream is None:
        yield
        return
    with stream:
        yield


__all__ = ["Event", "Stream", "current_stream", "default_stream", "set_stream", "stream"]
