"""A compiled graph's large output written into the memory of one its caller has dropped
(``neuroncc/frontend/output_reuse.py``): used again only when nothing holds the storage, never while the caller
keeps the output, a view, its storage or an array over it, and each call's output an ordinary new tensor."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from neuroncc.frontend import output_reuse

ROWS, COLS = 512, 1024  # a 2 MiB float32 output: PLACED_OUTPUT_MIN_BYTES or more, the one-frame call's reuse


def _scaled(x, w):
    return x * w + 1.0


@pytest.fixture
def compiled():
    """(call, inputs, expected(inputs)) of a one-output graph whose output is 2 MiB, its ring fresh."""
    torch._dynamo.reset()
    function = torch.compile(_scaled, backend="neuron", options={"quick_first": False})  # one build: one ring
    x, w = torch.randn(ROWS, COLS), torch.randn(COLS)
    expected = _scaled(x, w)
    torch.testing.assert_close(function(x, w), expected)
    yield function, (x, w), expected
    torch._dynamo.reset()


def test_a_dropped_output_is_written_again_and_a_kept_one_never(compiled):
    function, inputs, expected = compiled
    kept = function(*inputs)
    address = kept.data_ptr()
    second = function(*inputs)
    assert second.data_ptr() != address  # the caller keeps the first: fresh memory
    kept_values = kept.clone()
    del second
    third = function(*inputs)
    assert third.data_ptr() != address
    torch.testing.assert_close(kept, kept_values, rtol=0, atol=0)
    torch.testing.assert_close(third, expected)
    dropped = third.data_ptr()
    del third
    fourth = function(*inputs)
    assert fourth.data_ptr() == dropped  # nothing held the third: its memory written again
    torch.testing.assert_close(fourth, expected)
    assert fourth._base is None and not fourth.requires_grad and fourth.untyped_storage().resizable()


def test_a_placed_output_dropped_comes_back(monkeypatch):
    """An output placed off its inputs (``direct_call._placed``: in a storage one alias period longer, at a shift)
    comes back from the ring once dropped, as any other: nothing else holds its storage. (It was made over a Python
    storage object, which held it for good: a row whose fresh output landed 1-255 bytes past an input took fresh
    memory every call and faulted it in, 2.5-2.9x the call's time under glibc's defaults, session 34 mem34.)"""
    from neuroncc.frontend import direct_call

    monkeypatch.setattr(direct_call, "placement_shift", lambda base, near: 64)  # placed wherever it lands
    nbytes = ROWS * COLS * 4
    out = direct_call._placed(nbytes, (ROWS, COLS), (COLS, 1), torch.float32, [])
    assert out.storage_offset() == 16 and out._base is None
    ring = output_reuse.OutputRing()
    ring.keep(out)
    address = out.data_ptr()
    del out
    again = ring.take()
    assert again is not None and again.data_ptr() == address and again.shape == (ROWS, COLS)
    assert again.storage_offset() == 16 and again.untyped_storage().resizable()


def test_a_loop_rebinding_its_result_finds_memory_each_call(compiled):
    """``y = f(x)`` keeps the previous output during the call: two kept storages serve such a loop."""
    function, inputs, expected = compiled
    y = function(*inputs)
    seen = set()
    for _ in range(6):
        previous = y.data_ptr()
        y = function(*inputs)
        assert y.data_ptr() != previous
        seen.add(y.data_ptr())
        torch.testing.assert_close(y, expected)
    assert len(seen) <= output_reuse.KEPT_OUTPUTS


@pytest.mark.parametrize("holder", ["view", "storage", "numpy", "saved by autograd", "dlpack"])
def test_memory_held_through_anything_is_never_written(compiled, holder):
    function, (x, w), expected = compiled
    out = function(x, w)
    address = out.data_ptr()
    if holder == "view":
        held = out[ROWS // 2:]
    elif holder == "storage":
        held = out.untyped_storage()
    elif holder == "numpy":
        held = out.numpy()
    elif holder == "saved by autograd":
        weight = torch.ones(COLS, requires_grad=True)
        held = out * weight  # mul saves ``out`` for weight's gradient
    else:
        held = torch.from_dlpack(out)
    before = out.clone()
    del out
    outputs = [function(x * 2, w) for _ in range(3)]
    assert all(o.data_ptr() != address for o in outputs)
    assert torch.equal(torch.frombuffer(_bytes_at(address, before), dtype=torch.float32).view(ROWS, COLS), before)
    if holder == "saved by autograd":
        held.sum().backward()  # reads the saved output
        torch.testing.assert_close(weight.grad, before.sum(0))
    del held


def _bytes_at(address: int, like: torch.Tensor) -> bytearray:
    import ctypes

    return bytearray((ctypes.c_char * (like.numel() * like.element_size())).from_address(address))


def test_an_output_resized_or_shared_is_not_written_again(compiled):
    function, (x, w), expected = compiled
    out = function(x, w)
    out.resize_(ROWS * 2, COLS)  # larger: torch moves the storage's data
    out[ROWS:] = 7.0
    del out
    torch.testing.assert_close(function(x, w), expected)
    shared = function(x, w)
    shared.share_memory_()  # its data now in shared memory, which another process may map
    fd, size = shared.untyped_storage()._share_fd_cpu_()
    elsewhere = torch.UntypedStorage._new_shared_fd_cpu(fd, size)  # as a receiving process maps it
    seen = torch.empty(0).set_(elsewhere, 0, (ROWS, COLS), (COLS, 1))
    before = seen.clone()
    del shared
    for scale in (2.0, -1.0, 3.0):
        torch.testing.assert_close(function(x * scale, w), _scaled(x * scale, w))
    assert torch.equal(seen, before)


def test_calls_on_two_threads_never_share_an_output(compiled):
    function, (x, w), _ = compiled
    results: dict[int, list[torch.Tensor]] = {0: [], 1: []}
    factors = {0: 1.0, 1: -3.0}

    def calls(number: int) -> None:
        for _ in range(20):
            results[number].append(function(x * factors[number], w))
            if len(results[number]) > 2:
                results[number].pop(0)  # dropped: its memory may serve either thread next

    threads = [threading.Thread(target=calls, args=(n,)) for n in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not any(thread.is_alive() for thread in threads)
    for number, kept in results.items():
        for out in kept:
            torch.testing.assert_close(out, _scaled(x * factors[number], w))
    addresses = [o.data_ptr() for kept in results.values() for o in kept]
    assert len(set(addresses)) == len(addresses)


def test_the_ring_gives_memory_back_only_when_nothing_holds_it():
    ring = output_reuse.OutputRing()
    out = torch.empty(1 << 20)
    ring.keep(out)
    assert ring.take() is None  # the caller holds it
    address = out.data_ptr()
    del out
    again = ring.take()
    assert again is not None and again.data_ptr() == address and again.shape == (1 << 20,)
    assert ring.take() is None  # ``again`` holds it now
    del again
    assert ring.take() is not None


def test_kept_memory_values_match_numpy_reference(compiled):
    """The values in reused memory are the kernel's, not the previous call's: inputs changed between calls."""
    function, (x, w), _ = compiled
    for scale in (1.0, -2.0, 0.5):
        x_now = x * scale
        out = function(x_now, w)
        np.testing.assert_allclose(out.numpy(), x_now.numpy() * w.numpy() + 1.0, rtol=1e-6, atol=1e-6)
        del out


def test_the_process_keeps_at_most_its_limit_over_all_graphs(monkeypatch):
    """Rings of many graphs (a server compiling one per input shape) keep at most KEPT_BYTES_LIMIT of dropped
    outputs: the storages kept longest ago are given up first, and never handed out again."""
    monkeypatch.setattr(output_reuse, "KEPT_BYTES_LIMIT", 3 << 20)
    monkeypatch.setattr(output_reuse, "_KEPT_BYTES", output_reuse._KeptBytes())  # (other tests' graphs go meanwhile)
    start = 0
    rings = [output_reuse.OutputRing() for _ in range(3)]
    for ring in rings:
        ring.keep(torch.empty(1 << 18))  # 1 MiB each, dropped by its caller at once
    assert output_reuse.kept_bytes() - start == 3 << 20
    rings[0].keep(torch.empty(1 << 18))  # over the limit: the oldest kept (ring 0's first) is given up
    assert output_reuse.kept_bytes() - start <= 3 << 20
    assert [ring.take() is not None for ring in rings] == [True, True, True]  # ring 0 keeps its newer one
    assert len(rings[0]._kept) == 1
    big = output_reuse.OutputRing()
    big.keep(torch.empty(1 << 20))  # 4 MiB: over the limit alone, never kept
    assert big.take() is None and len(big._kept) == 0
    del rings, ring
    assert output_reuse.kept_bytes() == start  # a graph's ring gone: its bytes no longer counted


class _AtenCalls(TorchDispatchMode):
    """The ATen calls dispatched while it is on."""

    def __init__(self):
        super().__init__()
        self.calls: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.calls.append(str(func))
        return func(*args, **(kwargs or {}))


def test_a_dropped_output_comes_back_in_one_call():
    """After a large kernel each ATen call from Python is a cold path (~30 us for ``empty`` + ``set_`` at 1 thread on
    Zen 4): the kept memory comes back as a tensor made by one ``detach`` (not ``Tensor._make_subclass``, the same
    detach behind a longer path: 10-14 us more a call there, session 35), still an ordinary tensor of its own."""
    ring = output_reuse.OutputRing()
    out = torch.randn(ROWS, COLS)
    values = out.clone()
    ring.keep(out)
    address = out.data_ptr()
    del out
    with _AtenCalls() as mode:
        again = ring.take()
    assert mode.calls == ["aten.detach.default"]
    assert type(again) is torch.Tensor and again._base is None and not again._is_view()
    assert again.data_ptr() == address and again.shape == (ROWS, COLS) and again.stride() == (COLS, 1)
    assert not again.requires_grad and not again.is_inference()
    torch.testing.assert_close(again, values, rtol=0, atol=0)
    assert ring.take() is None  # ``again`` holds it
    again.resize_(2 * ROWS, COLS)  # its own metadata, and resizable storage: moved, never written again
    assert again.shape == (2 * ROWS, COLS)
    del again
    assert ring.take() is None


def test_under_inference_mode_a_dropped_output_comes_back_as_an_inference_tensor():
    """As a fresh output would: an inference tensor exactly when the call runs under ``torch.inference_mode``,
    whichever mode the memory was first kept in."""
    for kept_in_inference in (False, True):
        ring = output_reuse.OutputRing()
        with torch.inference_mode(kept_in_inference):
            out = torch.empty(ROWS, COLS)
            ring.keep(out)
        del out
        for inference in (True, False, True):
            with torch.inference_mode(inference):
                again = ring.take()
                assert again is not None and again.is_inference() == inference == torch.empty(1).is_inference()
            del again


def _training_step(logits, target):
    logits = logits.detach().requires_grad_()
    loss = torch.nn.functional.cross_entropy(logits, target)
    loss.backward()
    return loss.detach(), logits.grad


def test_a_training_steps_gradient_comes_back_once_dropped(monkeypatch):
    """A backward graph returns its gradient beside None for the target: a graph of two outputs, whose large one
    (placed off its inputs, ``DirectCall.launch``) comes from its own ring as the one-output call's does: written
    again once the caller has dropped it, never while it is kept (cross-entropy's 65 MB gradient took fresh memory
    each step, and under glibc's defaults faulted it in: 0.54x the step's time at 1 thread, session 38 xent38)."""
    from neuroncc.frontend import direct_call

    monkeypatch.setattr(direct_call, "placement_shift", lambda base, near: 0)  # (no input lands 4K-aliased)
    torch._dynamo.reset()
    step = torch.compile(_training_step, backend="neuron", dynamic=False, options={"quick_first": False})
    logits, target = torch.randn(ROWS, COLS), torch.randint(0, COLS, (ROWS,))
    _, want = _training_step(logits, target)
    _, kept = step(logits, target)
    kept_values = kept.clone()
    _, second = step(logits, target)
    assert second.data_ptr() != kept.data_ptr()  # the caller keeps the first
    dropped = second.data_ptr()
    del second
    taken = torch.empty(ROWS, COLS)  # a dropped gradient freed to the allocator would be this memory
    _, third = step(logits, target)
    assert third.data_ptr() == dropped and taken.data_ptr() != dropped
    torch.testing.assert_close(third, want)
    torch.testing.assert_close(kept, kept_values, rtol=0, atol=0)
    assert third._base is None and not third.requires_grad
    torch._dynamo.reset()


def test_a_gradient_aliased_with_this_calls_inputs_moves_within_its_kept_memory(monkeypatch):
    """The backward's small inputs (the row maxima, the loss's scale) move from step to step, so a kept gradient's
    start is now and then 4K-aliased with one of them: the kept memory is one alias period longer than the
    gradient, which starts where it is not (``direct_call._kept_placed``), in the same storage each step (refused
    and dropped, it left fresh memory every few steps: small pages from the heap, the backward 1.1-1.2x its time
    at 1 thread on Zen 4, session 42 xent42)."""
    from neuroncc.frontend import direct_call
    from neuroncc.hardware import host

    torch._dynamo.reset()
    step = torch.compile(_training_step, backend="neuron", dynamic=False, options={"quick_first": False})
    logits, target = torch.randn(ROWS, COLS), torch.randint(0, COLS, (ROWS,))
    _, want = _training_step(logits, target)
    for _ in range(3):  # (the first call's gradient stays held past it, outside the ring)
        step(logits, target)
    bases = set()
    for shift in (0, 64, 0, 192, host.ALIAS_PERIOD_BYTES - 64):  # each step's inputs aliased elsewhere
        monkeypatch.setattr(direct_call, "placement_shift", lambda base, near, shift=shift: shift)
        _, gradient = step(logits, target)
        assert gradient.storage_offset() * 4 == shift  # (not untyped_storage(): a storage object is never reused)
        bases.add(gradient.data_ptr() - shift)
        assert gradient._base is None and gradient.is_contiguous() and not gradient.requires_grad
        torch.testing.assert_close(gradient, want)
        del gradient
    assert len(bases) == 1  # one kept memory, the gradient placed in it
    torch._dynamo.reset()


def test_a_kept_storage_refused_as_aliased_leaves_the_ring(compiled):
    """A kept storage 4K-aliased with the call's inputs is refused and dropped from the ring, and the output placed
    instead is kept and comes back: before, the refused storage stayed first in line, was refused again on every
    call on those inputs, and each call made a fresh output (pushing the placed one out of the full ring)."""
    from neuroncc.hardware import host

    function, (x, w), expected = compiled
    for _ in range(3):
        function(x, w)  # dropped at once: one storage in the ring
    kept = function(x, w).data_ptr()
    memory = torch.empty(ROWS * COLS + host.ALIAS_PERIOD_BYTES // 4)
    start = (kept - 64 - memory.data_ptr()) % host.ALIAS_PERIOD_BYTES // 4  # the kept storage 64 bytes past x
    moved = memory[start:start + ROWS * COLS].view(ROWS, COLS)
    moved.copy_(x)
    assert (kept - moved.data_ptr()) % host.ALIAS_PERIOD_BYTES == 64
    placed = function(moved, w)
    address = placed.data_ptr()
    assert address != kept
    assert (address - moved.data_ptr()) % host.ALIAS_PERIOD_BYTES not in host.aliased_distances()
    torch.testing.assert_close(placed, expected)
    del placed
    for _ in range(3):
        assert function(moved, w).data_ptr() == address  # the placed one, again: no fresh memory per call


def test_the_ring_forgets_a_storage_dropped():
    ring, tensor = output_reuse.OutputRing(), torch.empty(1 << 18)
    ring.keep(tensor)
    del tensor
    taken = ring.take()
    assert taken is not None
    ring.drop(taken)
    del taken
    assert ring.take() is None
