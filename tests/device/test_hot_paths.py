"""The eager path's per-call shortcuts (kernels.py's in-place and new-results closures, entries.py's shared
wrapped numbers, the kernels registered without a keyset, the device guard's type) give eager's results whatever
the call varies: values of floats, layouts, views, argument places."""

import math

import torch

from neuroncc.device import dispatch, entries
from neuroncc.device.kernels import CompiledKernel
from neuroncc.device.signature import describe


def _entry(op, args, kwargs=None):
    key, _, _ = describe(args, kwargs or {})
    return dispatch._handlers[op].entries[key]


def test_in_place_add_takes_the_closure_and_matches_cpu_as_alpha_changes():
    x_cpu, y_cpu = torch.randn(16), torch.randn(16)
    x, y = x_cpu.to("neuron"), y_cpu.to("neuron")
    alias = x.view(4, 4)  # shares x's storage: sees the swapped-in memory
    for step in range(4):
        alpha = 1e-3 * (step + 1)
        returned = x.add_(y, alpha=alpha)
        x_cpu.add_(y_cpu, alpha=alpha)
        assert returned is x
        torch.testing.assert_close(x.cpu(), x_cpu)
        torch.testing.assert_close(alias.cpu(), x_cpu.view(4, 4))
    entry = _entry(torch.ops.aten.add_.Tensor, (x, y), {"alpha": 0.5})
    assert isinstance(entry, CompiledKernel)
    assert getattr(entry.call, "__func__", None) is not CompiledKernel.call  # the in-place closure


def test_in_place_on_views_and_other_layouts_is_not_served_by_the_contiguous_kernel():
    base_cpu = torch.randn(8, 8)
    other_cpu = torch.randn(8, 8)
    base, other = base_cpu.to("neuron"), other_cpu.to("neuron")
    base.add_(other, alpha=0.25)  # whole storage, contiguous
    base_cpu.add_(other_cpu, alpha=0.25)
    base.t().add_(other, alpha=0.5)  # the same shape, transposed strides
    base_cpu.t().add_(other_cpu, alpha=0.5)
    base[2:6].add_(other[:4], alpha=-1.5)  # part of the storage: copied in, the rest untouched
    base_cpu[2:6].add_(other_cpu[:4], alpha=-1.5)
    torch.testing.assert_close(base.cpu(), base_cpu)
    half = base.to(torch.float16)
    half_cpu = base_cpu.to(torch.float16)
    half.mul_(0.5)
    half_cpu.mul_(0.5)
    torch.testing.assert_close(half.cpu(), half_cpu)


def test_out_variant_returns_its_out_tensor():
    x_cpu, y_cpu = torch.randn(5), torch.randn(5)
    out = torch.empty(5, device="neuron")
    returned = torch.add(x_cpu.to("neuron"), y_cpu.to("neuron"), alpha=2.0, out=out)
    assert returned is out
    torch.testing.assert_close(out.cpu(), torch.add(x_cpu, y_cpu, alpha=2.0))


def test_foreach_in_place_updates_every_tensor():
    cpu = [torch.randn(3), torch.randn(4, 2)]
    device = [t.to("neuron") for t in cpu]
    for step in range(3):
        torch._foreach_mul_(device, 0.9 + step)
        torch._foreach_mul_(cpu, 0.9 + step)
    for d, c in zip(device, cpu):
        torch.testing.assert_close(d.cpu(), c)


def test_numbers_for_tensors_match_cpu_by_value_sign_and_type():
    x_cpu = torch.rand(8) + 0.5
    x = x_cpu.to("neuron")
    i_cpu = torch.arange(8, dtype=torch.int32)
    i = i_cpu.to("neuron")
    for value in (0.5, 0.0, -0.0, 2.0, 2, True, False, -3, math.inf):
        for a, a_cpu in ((x, x_cpu), (i, i_cpu)):
            got, want = a * value, a_cpu * value
            assert got.dtype == want.dtype, (value, a.dtype)
            torch.testing.assert_close(got.cpu(), want, equal_nan=True)
            if isinstance(value, float) and value == 0.0 and a is x:  # the sign of the zeros too
                assert torch.equal(torch.signbit(got.cpu()), torch.signbit(want))
    # the number by keyword: another signature, the same result
    torch.testing.assert_close(torch.mul(x, other=0.25).cpu(), x_cpu * 0.25)
    torch.testing.assert_close(torch.mul(x, 0.25).cpu(), x_cpu * 0.25)


def test_wrapped_numbers_are_shared_by_bits_and_never_reused_once_written():
    assert entries.wrapped_number(0.5) is entries.wrapped_number(0.5)
    assert entries.wrapped_number(0.0) is not entries.wrapped_number(-0.0)
    assert entries.wrapped_number(1) is not entries.wrapped_number(True)
    assert entries.wrapped_number(1).dtype == torch.int64 and entries.wrapped_number(True).dtype == torch.bool
    shared = entries.wrapped_number(0.75)
    shared.add_(1.0)  # someone wrote into it: its value is no longer 0.75
    fresh = entries.wrapped_number(0.75)
    assert fresh is not shared and fresh.item() == 0.75
    x_cpu = torch.randn(6)
    torch.testing.assert_close((x_cpu.to("neuron") * 0.75).cpu(), x_cpu * 0.75)


def test_small_in_place_results_are_copied_in_from_the_entry_scratch_memory():
    """A small in-place result is written into the tensor's own memory (its data pointer stays), a large one
    exchanges storage memory; both match eager, also from several threads sharing one entry."""
    import threading

    small_cpu, large_cpu = torch.randn(16), torch.randn(64, 128)  # 64 bytes; 32 KiB > SMALL_WRITE_BYTES
    small, large = small_cpu.to("neuron"), large_cpu.to("neuron")
    small_address = small.data_ptr()
    small.mul_(0.5)
    large.mul_(0.5)
    assert small.data_ptr() == small_address
    torch.testing.assert_close(small.cpu(), small_cpu * 0.5)
    torch.testing.assert_close(large.cpu(), large_cpu * 0.5)

    rows_cpu = [torch.randn(16) for _ in range(4)]
    rows = [r.to("neuron") for r in rows_cpu]
    errors = []

    def update(row: torch.Tensor, row_cpu: torch.Tensor) -> None:
        try:
            for step in range(200):
                row.add_(row, alpha=1e-3 * (step % 3))
                row_cpu.add_(row_cpu, alpha=1e-3 * (step % 3))
        except Exception as error:  # noqa: BLE001 - reported below
            errors.append(error)

    threads = [threading.Thread(target=update, args=pair) for pair in zip(rows, rows_cpu)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    for row, row_cpu in zip(rows, rows_cpu):
        torch.testing.assert_close(row.cpu(), row_cpu)


def test_freed_counters_follow_a_reset_of_the_accumulated_statistics():
    keep = torch.empty(64, device="neuron")
    torch.neuron.reset_accumulated_memory_stats()
    stats = torch.neuron.memory_stats()
    assert stats["active.all.allocated"] == stats["active.all.freed"] == 0
    assert stats["allocated_bytes.all.freed"] == 0
    made = [torch.empty(100, device="neuron") for _ in range(3)]
    del made[:2]
    stats = torch.neuron.memory_stats()
    assert stats["active.all.allocated"] == 3 and stats["active.all.freed"] == 2
    assert stats["allocated_bytes.all.freed"] == 2 * 512 and stats["allocated_bytes.all.allocated"] == 3 * 512
    del made, keep
    assert torch.neuron.memory_stats()["active.all.freed"] == 4  # keep was allocated before the reset


def test_numbers_reach_the_wrapped_signature_kernel_directly_after_the_first_call():
    """``x * 0.5`` after its first call: the number goes to the kernel of ``mul(x, tensor(0.5))`` in a buffer,
    with eager's float32 rounding, integer and bool values, and no 0-d tensor made per call."""
    x_cpu = torch.randn(8)
    x = x_cpu.to("neuron")
    for value in (0.1, 1e-40, 3.4e39, -0.0, float("nan"), 7, True):  # rounding, subnormal, overflow, sign
        for _ in range(3):
            got, want = x * value, x_cpu * value
            assert got.dtype == want.dtype
            torch.testing.assert_close(got.cpu(), want, equal_nan=True, rtol=0, atol=0)
    entry = _entry(torch.ops.aten.mul.Tensor, (x, 0.25))
    x * 0.25
    assert isinstance(entry, entries.WrapNumbers) and entry.direct is not None and entry.holds_kernel
    before = len(entries._WRAPPED)
    entries._WRAPPED.clear()
    for step in range(5):
        torch.testing.assert_close((x * (0.25 + step)).cpu(), x_cpu * (0.25 + step), rtol=0, atol=0)
    assert not entries._WRAPPED  # no wrapped tensor was made for these calls
    assert before > 0


def test_in_place_ops_with_numbers_reach_the_wrapped_signature_kernel_directly_too():
    """``x.mul_(0.5)`` after its first call: the number goes to the in-place kernel of ``x.mul_(tensor(0.5))`` in
    a buffer (no 0-d tensor, no second dispatch), the result written into ``x`` and returned as ``x``, with
    eager's bits for float, integer and bool numbers, in small (scratch-memory) and large (fresh-block) tensors."""
    for shape in ((8,), (256, 64)):  # 32 bytes through the entry's scratch memory; 64 KiB through a fresh block
        x_cpu = torch.randn(shape)
        x = x_cpu.to("neuron")
        for op, values in ((torch.Tensor.mul_, (0.1, 1e-40, -0.0, 3, True)), (torch.Tensor.add_, (0.25, 7)),
                           (torch.Tensor.sub_, (1.5,)),
                           (torch.Tensor.div_, (4.0, float("inf"), 3.0, 0.1))):
            for value in values:
                for _ in range(3):
                    got = op(x, value)
                    op(x_cpu, value)
                    assert got is x
                    torch.testing.assert_close(x.cpu(), x_cpu, equal_nan=True, rtol=0, atol=0)
            x_cpu = torch.randn(shape)
            x.copy_(x_cpu.to("neuron"))
        entry = _entry(torch.ops.aten.mul_.Tensor, (x, 0.25))
        x.mul_(0.25)
        assert isinstance(entry, entries.WrapNumbers) and entry.direct is not None and entry.holds_kernel
        entries._WRAPPED.clear()
        x_cpu = x.cpu()
        for step in range(5):
            x.mul_(0.5 + step)
            torch.testing.assert_close(x.cpu(), x_cpu.mul_(0.5 + step), rtol=0, atol=0)
        assert not entries._WRAPPED  # no wrapped tensor was made for these calls


def test_new_results_take_the_closure_each_in_its_own_memory_and_match_cpu_as_floats_change():
    """``native_layer_norm`` (three new results, its eps lifted) and ``add(x, y, alpha=...)`` (one new result, a
    lifted float) run through kernels.py's new-results closure: eager's values, dtypes, shapes and strides for
    every value of the floats, each result a tensor of its own memory."""
    x_cpu, w_cpu, b_cpu = torch.randn(8, 16), torch.randn(16), torch.randn(16)
    x, w, b = x_cpu.to("neuron"), w_cpu.to("neuron"), b_cpu.to("neuron")
    for eps in (1e-5, 1e-3, 0.5):
        got = torch.native_layer_norm(x, (16,), w, b, eps)
        want = torch.native_layer_norm(x_cpu, (16,), w_cpu, b_cpu, eps)
        assert isinstance(got, tuple) and len(got) == 3
        for g, e in zip(got, want):
            assert g.device.type == "neuron" and g.dtype == e.dtype
            assert g.shape == e.shape and g.stride() == e.stride()
            torch.testing.assert_close(g.cpu(), e)
        storages = {t.untyped_storage().data_ptr() for t in got}
        assert len(storages) == 3 and x.untyped_storage().data_ptr() not in storages
    entry = _entry(torch.ops.aten.native_layer_norm.default, (x, [16], w, b, 1e-5))
    assert isinstance(entry, CompiledKernel)
    assert getattr(entry.call, "__func__", None) is not CompiledKernel.call  # the new-results closure
    for alpha in (0.5, -2.0):
        got = torch.add(x, x, alpha=alpha)
        assert isinstance(got, torch.Tensor)
        torch.testing.assert_close(got.cpu(), torch.add(x_cpu, x_cpu, alpha=alpha))
    entry = _entry(torch.ops.aten.add.Tensor, (x, x), {"alpha": 0.5})
    assert getattr(entry.call, "__func__", None) is not CompiledKernel.call


def test_a_kernel_registered_at_once_calls_its_handler_straight_after_its_first_call():
    """``native_layer_norm``'s kernel (registration.REGISTERED_AT_ONCE) goes through the boxed fallback once,
    then to the op's device kernel without it."""
    from neuroncc.device import registration

    x = torch.randn(4, 8).to("neuron")
    first = torch.nn.functional.layer_norm(x, (8,))

    def refused(*args, **kwargs):
        raise AssertionError("the fallback was called again")

    fallback = registration._fallback[0]
    registration._fallback[0] = refused
    try:
        again = torch.nn.functional.layer_norm(x, (8,))
    finally:
        registration._fallback[0] = fallback
    torch.testing.assert_close(again.cpu(), first.cpu())


def test_size_lists_are_keyed_as_their_tuples_and_bools_stay_apart():
    x = torch.randn(4, 4).to("neuron")
    assert describe((x, [4, 4]), {})[0] == describe((x, (4, 4)), {})[0]
    assert describe((x, [1, True]), {})[0] != describe((x, [1, 1]), {})[0]
    assert describe((x, []), {})[0] == describe((x, ()), {})[0]


def test_the_registered_kernel_takes_the_call_without_a_keyset():
    """dispatch.py registers ``DeviceOp.run`` (no keyset argument for the dispatcher to box); ``DeviceOp(keyset,
    ...)``, the fallback's form, gives the same result."""
    x_cpu, y_cpu = torch.randn(6), torch.randn(6)
    x, y = x_cpu.to("neuron"), y_cpu.to("neuron")
    torch.testing.assert_close((x - y).cpu(), x_cpu - y_cpu)
    handler = dispatch.handler_for(torch.ops.aten.sub.Tensor)
    torch.testing.assert_close(handler.run(x, y).cpu(), x_cpu - y_cpu)
    torch.testing.assert_close(handler(None, x, y, alpha=2).cpu(), torch.sub(x_cpu, y_cpu, alpha=2))


def test_the_device_guard_answers_its_type_without_a_python_frame():
    """PyTorch's C++ asks the device guard its type for every autograd node on the device (twice for a view under
    autograd): registration._Guard answers by a C-level callable, no Python frame per ask."""
    import sys

    weight = torch.nn.Parameter(torch.randn(4, 4).to("neuron"))
    weight.t()
    asked = []

    def profile(frame, event, arg):
        if event == "call" and frame.f_code.co_name == "type_":
            asked.append(frame)

    sys.setprofile(profile)
    try:
        view = weight.t()
    finally:
        sys.setprofile(None)
    assert view.grad_fn is not None and not asked
    from neuroncc.device.registration import _Guard

    assert _Guard().type_() == torch._C._autograd.DeviceType.PrivateUse1


def test_factories_with_contiguous_strides_take_the_cheaper_tensor_and_keep_eager_strides():
    """``torch.empty``/``empty_like``/``zeros`` with contiguous strides make their tensor the way compiled results
    are made (memory.new_tensor's bare tensor, no ``set_``); other strides, zero-size shapes and other devices keep
    ``set_``; every one has CPU's strides and storage size."""
    from neuroncc.device import memory

    cases = [((4, 4), None), ((0, 3), None), ((2, 0, 3), None), ((3, 4), (1, 3)), ((5,), (2,)), ((), None)]
    for shape, stride in cases:
        got = torch.empty_strided(shape, stride, device="neuron") if stride else torch.empty(shape, device="neuron")
        want = torch.empty_strided(shape, stride) if stride else torch.empty(shape)
        assert got.stride() == want.stride() and got.untyped_storage().nbytes() == want.untyped_storage().nbytes()
    x = torch.randn(3, 5).to("neuron")
    redispatch = memory._redispatch_set

    def refused(*args, **kwargs):
        raise AssertionError("set_ was called")

    memory._redispatch_set = refused
    try:
        made = [torch.empty(4, 4, device="neuron"), torch.empty_like(x),
                torch.zeros(2, 3, device=torch.device("neuron")), torch.ones(7, device="neuron:0")]
    finally:
        memory._redispatch_set = redispatch
    assert [t.shape for t in made] == [(4, 4), (3, 5), (2, 3), (7,)]
    torch.testing.assert_close(made[2].cpu(), torch.zeros(2, 3))
    torch.testing.assert_close(made[3].cpu(), torch.ones(7))
