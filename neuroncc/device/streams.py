"""Streams and events of ``torch.neuron``, shaped like ``torch.cuda``'s: what FSDP2, pipelining and other code
written for CUDA streams asks a device module for.

The device is synchronous (an op's work is done when its call returns, see torch_module), so there is nothing
to order between streams: a stream is a named context that keeps what torch.cuda code expects (the current
stream per device, ``wait_stream``/``wait_event`` as no-ops that are correct because everything before them has
run), and an event is a point in time (``elapsed_time`` measures host time between two recorded events, which
is the device's time for the work between them).

A ``torch.neuron.Stream`` is a ``torch.Stream`` (as ``torch.cuda.Stream`` is), so it goes wherever PyTorch takes
one: ``tensor.record_stream(torch.neuron.current_stream())``, whose device kernel here does nothing (memory
freed while "in use" by a stream has no pending work to wait for).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from typing import Any

import torch

from neuroncc.device.routed_classes import instances_of
from neuroncc.codegen.llvm.fork_safety import renew_in_child

_state = threading.local()  # the current stream per device, per thread (as CUDA's)


def _device_index(device: Any) -> int:
    if device is None:
        return torch.get_device_module("neuron").current_device()
    if isinstance(device, int):
        return device
    device = torch.device(device)
    return device.index if device.index is not None else torch.get_device_module("neuron").current_device()


class Stream(torch.Stream):
    """A stream of the synchronous neuron device: work submitted "on" it has run when its call returns. Streams
    compare by identity (each is a context of its own, as torch.cuda's streams are distinct)."""

    __eq__, __ne__, __hash__ = object.__eq__, object.__ne__, object.__hash__

    def __new__(cls, device: Any = None, priority: int = 0, **kwargs: Any) -> Stream:
        return super().__new__(cls, device=torch.device("neuron", _device_index(device)))

    def __init__(self, device: Any = None, priority: int = 0, **kwargs: Any):
        self.priority = priority

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


class Event(torch.Event):
    """A recorded point in the (synchronous) device's work: ``record()`` reads the host clock, after every op
    before it has run; ``elapsed_time`` is the host milliseconds between two recorded events (with
    ``enable_timing=True``, as CUDA requires), which is the device's time for the work between them. A
    ``torch.Event`` (PyTorch's class, :func:`route_torch_event`) on the device is one of these."""

    def __new__(cls, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False,
                device: Any = None) -> Event:
        return super().__new__(cls, torch.device("neuron", _device_index(device)), enable_timing=enable_timing,
                               blocking=blocking, interprocess=interprocess)

    def __init__(self, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False,
                 device: Any = None):
        self.timing = enable_timing
        self.index = _device_index(device)
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
        """Milliseconds between this event and ``end_event``, both recorded with ``record()``."""
        if not (self.timing and getattr(end_event, "timing", False)):
            raise RuntimeError("Both events must be created with argument 'enable_timing=True'.")
        if self.recorded_at is None or end_event.recorded_at is None:
            raise RuntimeError("elapsed_time: both events must be recorded first, with Event.record() (the neuron "
                               "device times events on the host clock)")
        return (end_event.recorded_at - self.recorded_at) * 1000.0

    def __repr__(self) -> str:
        return f"<torch.neuron.Event device=neuron:{self.index} enable_timing={self.timing}>"


_TORCH_EVENT = torch.Event  # PyTorch's own class (C++): its synchronize/elapsed_time go to the C++ device guard


class _RoutedEvent(_TORCH_EVENT, metaclass=instances_of(_TORCH_EVENT)):
    """``torch.Event`` once the device is registered: an event of the neuron device (``device="neuron"``, or
    none while neuron is the accelerator) is a :class:`Event`; any other is PyTorch's own. PyTorch's would raise
    ``Backend doesn't support synchronizing events`` from ``synchronize()`` and ``elapsed_time()`` on the device
    (a Python backend cannot implement the C++ guard's event functions in torch 2.13)."""

    __neuroncc_routed__ = True

    def __new__(cls, device: Any = None, *, enable_timing: bool = False, blocking: bool = False,
                interprocess: bool = False) -> Any:
        if _names_neuron(device):
            return Event(enable_timing, blocking, interprocess, device=device)
        return _TORCH_EVENT(device, enable_timing=enable_timing, blocking=blocking, interprocess=interprocess)


def _names_neuron(device: Any) -> bool:
    name = torch._C._get_privateuse1_backend_name()
    if device is None:
        accelerator = torch._C._accelerator_getAccelerator()
        return accelerator is not None and accelerator.type == name
    if isinstance(device, int):
        return False
    try:
        return torch.device(device).type == name
    except (RuntimeError, TypeError):
        return False  # PyTorch's own class raises its error for it


def route_torch_event() -> None:
    """Make ``torch.Event`` :class:`_RoutedEvent` (idempotent)."""
    if not getattr(torch.Event, "__neuroncc_routed__", False):
        _RoutedEvent.__doc__ = (_TORCH_EVENT.__doc__ or "") + "\n\n" + (_RoutedEvent.__doc__ or "")
        torch.Event = _RoutedEvent


_TORCH_STREAM = torch.Stream  # PyTorch's own class (C++): its events cannot synchronize or time on the device


class _RoutedStream(_TORCH_STREAM, metaclass=instances_of(_TORCH_STREAM)):
    """``torch.Stream`` once the device is registered: a stream of the neuron device (``torch.Stream("neuron")``,
    or no device while neuron is the accelerator) is a :class:`Stream`, so ``with torch.Stream("neuron"):``
    makes it current and its ``record_event()`` gives an event that synchronizes and times. PyTorch's own (made
    through the C++ device guard, which a Python backend cannot give streams or events in torch 2.13) did
    neither. Any other stream, and one rebuilt from ``stream_id``/``device_index``/``device_type``, is
    PyTorch's own."""

    __neuroncc_routed__ = True

    def __new__(cls, device: Any = None, *args: Any, priority: int = 0, **kwargs: Any) -> Any:
        if not args and not kwargs and (_names_neuron(device) or isinstance(device, int) and _names_neuron(None)):
            return Stream(device, priority=priority)
        return _TORCH_STREAM(device, *args, priority=priority, **kwargs) if device is not None else \
            _TORCH_STREAM(*args, priority=priority, **kwargs)


def route_torch_stream() -> None:
    """Make ``torch.Stream`` :class:`_RoutedStream` (idempotent)."""
    if not getattr(torch.Stream, "__neuroncc_routed__", False):
        _RoutedStream.__doc__ = (_TORCH_STREAM.__doc__ or "") + "\n\n" + (_RoutedStream.__doc__ or "")
        torch.Stream = _RoutedStream


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
_DEFAULTS_LOCK = renew_in_child(threading.Lock())


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


def record_stream(tensor: torch.Tensor, stream: torch.Stream) -> None:
    """``aten::record_stream`` on the device: nothing to record (no work is ever pending on a stream)."""


def register(kernels: torch.library.Library) -> None:
    """Put the device's ``record_stream`` kernel on ``kernels`` (a ``torch.library.Library("aten", "IMPL")``) and
    route ``torch.Event`` and ``torch.Stream`` (:func:`route_torch_event`, :func:`route_torch_stream`)."""
    kernels.impl("record_stream", record_stream, "PrivateUse1")
    route_torch_event()
    route_torch_stream()


__all__ = ["Event", "Stream", "current_stream", "default_stream", "set_stream", "stream"]
