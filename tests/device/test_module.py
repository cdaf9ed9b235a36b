"""torch.neuron (like torch.cuda), torch.accelerator answering for it, and the caching allocator."""

from __future__ import annotations

import pytest
import torch

from neuroncc.device.allocator import round_size
from neuroncc.errors import DeviceIndexError


def test_device_module_basics(two_devices):
    assert torch.neuron.is_available() and torch.neuron.is_initialized()
    assert torch.neuron.device_count() == 2
    assert torch.neuron.current_device() == 0
    torch.neuron.set_device(1)
    assert torch.neuron.current_device() == 1
    assert torch.empty(2, device="neuron").device == torch.device("neuron", 1)
    with torch.neuron.device(0):
        assert torch.neuron.current_device() == 0
        assert torch.ones(1, device="neuron").device.index == 0
    assert torch.neuron.current_device() == 1
    torch.neuron.synchronize()
    with pytest.raises(RuntimeError, match="does not exist"):
        torch.neuron.set_device(2)


def test_torch_accelerator_answers_for_the_device(two_devices):
    acc = torch.accelerator
    assert acc.current_accelerator() == torch.device("neuron")
    assert acc.is_available() and acc.device_count() == 2
    acc.set_device_index(1)
    assert acc.current_device_index() == 1 and torch.neuron.current_device() == 1
    with acc.device_index(0):
        assert acc.current_device_index() == 0
    assert acc.current_device_index() == 1
    acc.synchronize()
    before = acc.memory_allocated(1)
    t = torch.empty(1000, device="neuron:1")
    assert acc.memory_allocated(1) == before + round_size(4000)
    assert acc.max_memory_allocated(1) >= before + round_size(4000)
    assert acc.memory_stats(1)["allocated_bytes.all.current"] == acc.memory_allocated(1)
    del t
    acc.empty_cache()
    assert acc.memory_reserved(1) == acc.memory_allocated(1)


@pytest.mark.parametrize("call", [
    lambda: torch.accelerator.set_device_index(5), lambda: torch.accelerator.synchronize(5),
    lambda: torch.neuron.set_device(5), lambda: torch.neuron.memory_allocated(5),
    lambda: torch.ones(2, device="neuron:5"), lambda: torch.ones(2).to("neuron:5"),
    lambda: torch.Generator(device="neuron:5"),
], ids=["accelerator.set_device_index", "accelerator.synchronize", "neuron.set_device", "neuron.memory_allocated",
        "factory", "to", "Generator"])
def test_a_device_index_past_the_count_is_a_typed_error(call, two_devices):
    # a bare RuntimeError from neuroncc's own code before; still a RuntimeError, as torch.cuda's is
    with pytest.raises(DeviceIndexError, match=r"neuron:5 does not exist: torch.neuron.device_count\(\) is 2 "
                                               r"\(set NEURONCC_DEVICE_COUNT"):
        call()
    assert issubclass(DeviceIndexError, RuntimeError)


def test_memory_is_returned_when_the_last_user_dies():
    torch.neuron.empty_cache()
    base = torch.neuron.memory_allocated()
    t = torch.empty(256, 256, device="neuron")
    size = round_size(256 * 256 * 4)
    assert torch.neuron.memory_allocated() == base + size
    view = t[3:].t()        # a view keeps the block
    data = t.data           # so does a .data alias
    del t
    assert torch.neuron.memory_allocated() == base + size
    del view
    assert torch.neuron.memory_allocated() == base + size
    del data
    assert torch.neuron.memory_allocated() == base
    assert torch.neuron.memory_reserved() >= size  # cached for reuse
    reused = torch.empty(256, 256, device="neuron")
    assert torch.neuron.memory_stats()["num_cache_hits"] >= 1
    del reused
    torch.neuron.empty_cache()
    assert torch.neuron.memory_reserved() == torch.neuron.memory_allocated()


def test_peak_statistics_reset():
    torch.neuron.reset_peak_memory_stats()
    base = torch.neuron.memory_allocated()
    big = torch.empty(1 << 20, device="neuron")
    del big
    assert torch.neuron.max_memory_allocated() >= base + (4 << 20)
    torch.neuron.reset_peak_memory_stats()
    assert torch.neuron.max_memory_allocated() == torch.neuron.memory_allocated()


def test_blocks_are_aligned_for_the_kernels():
    for n in (1, 3, 17, 1000, 300_001):
        assert torch.empty(n, device="neuron").data_ptr() % 64 == 0


def test_rounding():
    assert round_size(0) == 512 and round_size(1) == 512 and round_size(513) == 1024
    assert round_size((1 << 20) + 1) == (1 << 20) + (64 << 10)


def test_rng_state_round_trips():
    state = torch.neuron.get_rng_state()
    a = torch.rand(5, device="neuron")
    torch.neuron.set_rng_state(state)
    assert torch.equal(torch.rand(5, device="neuron").cpu(), a.cpu())
    torch.neuron.manual_seed(3)
    assert torch.neuron.initial_seed() == 3


def test_device_name_and_properties():
    assert "neuroncc" in torch.neuron.get_device_name()
    assert torch.neuron.is_bf16_supported()


def test_large_blocks_start_window_multiples_past_a_page_so_outputs_are_not_4k_aliased_with_inputs():
    """The allocator cannot see a kernel's inputs; its large blocks all start a multiple of the host's aliasing
    window (``alias_window_bytes``) past a page instead, which ``hardware.host.placement_shift`` allows (0 or at
    least a window apart: the loads never meet the output's older stores), spread over the page (L1 sets:
    tests/device/test_optimizers.py)."""
    from neuroncc.hardware.host import ALIAS_PERIOD_BYTES, PLACED_OUTPUT_MIN_BYTES, aliased_distances

    window = aliased_distances().stop

    x = torch.randn(512, 512).to("neuron")
    y = x * 2.0 + 1.0
    for tensor in (x, y, torch.empty(PLACED_OUTPUT_MIN_BYTES // 4 + 3, device="neuron")):
        assert tensor.data_ptr() % ALIAS_PERIOD_BYTES % window == 0
    assert (y.data_ptr() - x.data_ptr()) % ALIAS_PERIOD_BYTES not in aliased_distances()
    torch.testing.assert_close(y.cpu(), x.cpu() * 2.0 + 1.0)
