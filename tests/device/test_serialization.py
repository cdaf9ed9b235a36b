"""torch.save / torch.load of neuron tensors and state dicts (map_location, weights_only)."""

from __future__ import annotations

import io

import pytest
import torch

from frontend import models


def _saved(obj) -> io.BytesIO:
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    buffer.seek(0)
    return buffer


@pytest.mark.parametrize("kwargs, device", [
    ({}, "neuron"), ({"map_location": "cpu"}, "cpu"), ({"map_location": "neuron"}, "neuron"),
    ({"weights_only": True}, "neuron"), ({"map_location": torch.device("neuron", 0), "weights_only": True}, "neuron"),
    ({"map_location": "cpu", "weights_only": True}, "cpu"),
])
def test_tensors_and_views_round_trip(kwargs, device):
    x = torch.randn(3, 4).to("neuron")
    loaded = torch.load(_saved({"x": x, "column": x[:, 1], "ints": torch.arange(5, device="neuron")}), **kwargs)
    assert loaded["x"].device.type == device and loaded["ints"].dtype == torch.int64
    assert torch.equal(loaded["x"].cpu(), x.cpu())
    assert torch.equal(loaded["column"].cpu(), x.cpu()[:, 1])
    assert loaded["column"].untyped_storage().data_ptr() == loaded["x"].untyped_storage().data_ptr()


def test_a_state_dict_loads_into_a_model_on_the_device():
    model = models.LayerNormNet().to("neuron")
    state = torch.load(_saved(model.state_dict()), weights_only=True)
    fresh = models.LayerNormNet().to("neuron")
    fresh.load_state_dict(state)
    x = torch.randn(2, 16, device="neuron")
    with torch.no_grad():
        torch.testing.assert_close(fresh(x).cpu(), model(x).cpu())


def test_cpu_checkpoints_map_onto_the_device():
    loaded = torch.load(_saved(torch.ones(3)), map_location="neuron")
    assert loaded.device == torch.device("neuron", 0) and loaded.cpu().tolist() == [1.0, 1.0, 1.0]


def test_storages_on_the_device():
    storage = torch.UntypedStorage(10, device="neuron")
    assert storage.device.type == "neuron" and storage.nbytes() == 10
    assert torch.UntypedStorage(4).device.type == "cpu"
