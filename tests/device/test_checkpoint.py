"""Saving and resuming training on the device as users write it: a checkpoint of model, optimizer, LR scheduler and
GradScaler taken mid-training with torch.save and restored into a fresh model and optimizer continues exactly as
the uninterrupted run (bitwise, as on CPU), and the device's losses are CPU's; state dicts of torch.compile'd
models, safetensors files of device tensors, and models built on the meta device then ``to_empty(device=
"neuron")`` or loaded with ``assign=True``."""

from __future__ import annotations

import io

import pytest
import torch

STEPS, RESUME_AT = 4, 2


def make_model(device: str) -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.LayerNorm(16),
                               torch.nn.Linear(16, 4)).to(device)


def batches(device: str) -> list[tuple[torch.Tensor, torch.Tensor]]:
    generator = torch.Generator().manual_seed(1)
    return [(torch.randn(6, 8, generator=generator).to(device), torch.randn(6, 4, generator=generator).to(device))
            for _ in range(STEPS)]


OPTIMIZERS = {
    "SGD nesterov momentum": lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, nesterov=True, weight_decay=1e-3),
    "AdamW amsgrad": lambda p: torch.optim.AdamW(p, lr=1e-2, amsgrad=True),
    "Adam foreach=False": lambda p: torch.optim.Adam(p, lr=1e-2, foreach=False),
}


class Training:
    def __init__(self, device: str, optimizer: str, amp: bool):
        self.model = make_model(device)
        self.optimizer = OPTIMIZERS[optimizer](self.model.parameters())
        self.scheduler = torch.optim.lr_scheduler.StepLR(self.optimizer, 1, gamma=0.5)
        self.scaler = torch.amp.GradScaler(device, init_scale=2.0 ** 4) if amp else None
        self.losses: list[float] = []

    def train(self, data: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
        for x, y in data:
            self.optimizer.zero_grad()
            with torch.autocast(x.device.type, dtype=torch.bfloat16, enabled=self.scaler is not None):
                loss = torch.nn.functional.mse_loss(self.model(x).float(), y)
            if self.scaler:
                self.scaler.scale(loss).backward()
                self.scaler.step(self.optimizer)
                self.scaler.update()
            else:
                loss.backward()
                self.optimizer.step()
            self.scheduler.step()
            self.losses.append(loss.item())

    def state_dict(self) -> dict:
        return {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
                "scheduler": self.scheduler.state_dict(), "scaler": self.scaler.state_dict() if self.scaler else None}

    def load_state_dict(self, state: dict) -> None:
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        if self.scaler:
            self.scaler.load_state_dict(state["scaler"])


def resumed_and_uninterrupted(device: str, optimizer: str, amp: bool, map_location: str | None):
    data = batches(device)
    whole = Training(device, optimizer, amp)
    whole.train(data)
    first = Training(device, optimizer, amp)
    first.train(data[:RESUME_AT])
    buffer = io.BytesIO()
    torch.save(first.state_dict(), buffer)
    buffer.seek(0)
    second = Training(device, optimizer, amp)
    second.load_state_dict(torch.load(buffer, map_location=map_location, weights_only=True))
    second.train(data[RESUME_AT:])
    return whole, second


@pytest.mark.parametrize("optimizer", list(OPTIMIZERS))
@pytest.mark.parametrize("amp", [False, True], ids=["float32", "bf16 autocast + GradScaler"])
def test_resumed_training_equals_uninterrupted_training(optimizer, amp):
    cpu_whole, cpu_resumed = resumed_and_uninterrupted("cpu", optimizer, amp, None)
    assert cpu_resumed.losses == cpu_whole.losses[RESUME_AT:]  # bitwise on CPU: so on the device
    # the device's checkpoint read back onto the device, and through CPU (map_location="cpu")
    for map_location in (None, "cpu"):
        whole, resumed = resumed_and_uninterrupted("neuron", optimizer, amp, map_location)
        assert resumed.losses == whole.losses[RESUME_AT:], map_location
        for (name, expected), got in zip(whole.model.state_dict().items(), resumed.model.state_dict().values()):
            assert got.device.type == "neuron"
            torch.testing.assert_close(got.cpu(), expected.cpu(), rtol=0, atol=0, msg=lambda m: f"{name}: {m}")
        moments = [v for state in resumed.optimizer.state.values() for k, v in state.items() if k != "step"]
        assert moments and all(v.device.type == "neuron" for v in moments)
    # bf16 autocast rounds the products; the device's and CPU's products round alike within a few bf16 ulps
    tolerance = 2e-2 if amp else 1e-5
    torch.testing.assert_close(torch.tensor(whole.losses), torch.tensor(cpu_whole.losses), rtol=tolerance,
                               atol=tolerance)


def test_a_compiled_models_state_dict_round_trips():
    model = make_model("neuron")
    compiled = torch.compile(model, backend="neuron")
    buffer = io.BytesIO()
    torch.save(compiled.state_dict(), buffer)
    buffer.seek(0)
    fresh = torch.compile(torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.LayerNorm(16),
                                              torch.nn.Linear(16, 4)).to("neuron"), backend="neuron")
    fresh.load_state_dict(torch.load(buffer, weights_only=True))
    assert next(iter(fresh.state_dict())).startswith("_orig_mod.")
    x = torch.randn(3, 8)
    torch.testing.assert_close(fresh(x.to("neuron")).cpu(), make_model("cpu")(x), rtol=1e-5, atol=1e-5)


def test_safetensors_files_of_device_tensors(tmp_path):
    from safetensors.torch import load_file, load_model, save_file, save_model

    model = make_model("neuron")
    save_file(model.state_dict(), tmp_path / "w.safetensors")
    loaded = load_file(tmp_path / "w.safetensors")  # safetensors names its devices itself: "neuron" is not one
    expected = make_model("cpu").state_dict()
    assert all(torch.equal(loaded[name], expected[name]) for name in expected)
    save_model(model, tmp_path / "m.safetensors")
    fresh = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.LayerNorm(16),
                                torch.nn.Linear(16, 4)).to("neuron")
    load_model(fresh, tmp_path / "m.safetensors")
    assert all(torch.equal(fresh.state_dict()[name].cpu(), expected[name]) for name in expected)


def test_meta_initialization_then_the_device():
    expected = make_model("cpu").state_dict()
    with torch.device("meta"):
        empty = make_model("meta")
    on_device = empty.to_empty(device="neuron")
    on_device.load_state_dict(expected)
    for name, t in on_device.state_dict().items():
        assert t.device.type == "neuron" and torch.equal(t.cpu(), expected[name]), name
    with torch.device("meta"):
        assigned = make_model("meta")
    assigned.load_state_dict({name: t.to("neuron") for name, t in expected.items()}, assign=True)
    x = torch.randn(3, 8)
    torch.testing.assert_close(assigned(x.to("neuron")).cpu(), make_model("cpu")(x), rtol=1e-5, atol=1e-5)


def test_pin_memory_where_the_device_is_the_accelerator():
    """``pin_memory()`` pins for the current accelerator, the device, whose memory is host memory: a copy (it raised
    PyTorch's missing getPinnedMemoryAllocator error). What pins: torch.distributed checkpoint's staging of a state
    dict in pinned CPU memory, and ``DataLoader(pin_memory=True)`` (which pins whenever an accelerator exists)."""
    from torch.distributed.checkpoint.staging import DefaultStager, StagingOptions

    x = torch.randn(3, 4).t().requires_grad_()
    pinned = x.pin_memory()
    assert pinned.device.type == "cpu" and pinned.stride() == x.stride() and torch.equal(pinned, x)
    pinned.sum().backward()
    assert torch.equal(x.grad, torch.ones(4, 3))

    state = {"model": make_model("neuron").state_dict(), "step": torch.tensor(3, device="neuron")}
    stager = DefaultStager(StagingOptions(use_pinned_memory=True, use_shared_memory=False, use_async_staging=False,
                                          use_non_blocking_copy=False))
    staged = stager.stage(state)
    stager.close()
    assert staged["step"].device.type == "cpu" and staged["step"].item() == 3
    for name, expected in make_model("cpu").state_dict().items():
        assert staged["model"][name].device.type == "cpu" and torch.equal(staged["model"][name], expected), name

    dataset = torch.utils.data.TensorDataset(torch.arange(12.0).reshape(6, 2), torch.arange(6))
    loaded = [[t.to("neuron", non_blocking=True).cpu() for t in batch]
              for batch in torch.utils.data.DataLoader(dataset, batch_size=4, pin_memory=True)]
    expected = list(torch.utils.data.DataLoader(dataset, batch_size=4))
    assert len(loaded) == 2 and all(torch.equal(a, b) for got, want in zip(loaded, expected) for a, b in zip(got, want))


@pytest.mark.parametrize("use_reentrant", [False, True])
def test_activation_checkpointing_recomputes_dropout_with_the_forwards_mask(use_reentrant):
    """torch.utils.checkpoint restores the device's RNG state for the recomputation (it asks the device module's
    ``_initialized``): the gradients equal the plain run's bitwise, as on CPU; a different mask before the fix."""
    from torch.utils.checkpoint import checkpoint

    def gradients(device: str, checkpointed: bool) -> list[torch.Tensor]:
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.Dropout(0.5), torch.nn.GELU(),
                                    torch.nn.Linear(32, 4)).to(device)
        x = torch.randn(5, 8, device=device, requires_grad=True)
        torch.manual_seed(7)
        y = checkpoint(model, x, use_reentrant=use_reentrant) if checkpointed else model(x)
        y.square().sum().backward()
        return [t.cpu() for t in (y.detach(), x.grad, model[0].weight.grad)]

    for device in ("cpu", "neuron"):
        for got, expected in zip(gradients(device, True), gradients(device, False)):
            torch.testing.assert_close(got, expected, rtol=0, atol=0, msg=lambda m: f"{device}: {m}")
