"""``torch.Generator(device="neuron")``: a generator of the device that its random ops, ``torch.nn.init``,
DataLoaders and ``torch.compile``d code take, drawing what a CPU generator with the same seed draws on CPU."""

from __future__ import annotations

import copy
import json
import pickle

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from neuroncc.device import dispatch
from device.conftest import run_python


def _neuron(seed: int) -> torch.Generator:
    return torch.Generator(device="neuron").manual_seed(seed)


def _cpu(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


#: random ops with a generator= argument: (device, generator) -> result
_DRAWS = {
    "randn": lambda d, g: torch.randn(3, 5, generator=g, device=d),
    "rand_bf16": lambda d, g: torch.rand(7, generator=g, device=d, dtype=torch.bfloat16),
    "randint": lambda d, g: torch.randint(0, 1000, (9,), generator=g, device=d),
    "randperm": lambda d, g: torch.randperm(20, generator=g, device=d),
    "normal_": lambda d, g: torch.empty(6, device=d).normal_(2.0, 0.5, generator=g),
    "uniform_": lambda d, g: torch.empty(6, device=d).uniform_(-1, 1, generator=g),
    "exponential_": lambda d, g: torch.empty(6, device=d).exponential_(generator=g),
    "bernoulli": lambda d, g: torch.bernoulli(torch.full((12,), 0.3, device=d), generator=g),
    "multinomial": lambda d, g: torch.multinomial(torch.arange(1.0, 11.0, device=d), 5, generator=g),
}


def test_a_neuron_generator_is_a_torch_generator_of_the_device():
    g = torch.Generator(device="neuron")
    assert isinstance(g, torch.Generator) and isinstance(g, torch._C.Generator)
    assert g.device == torch.device("neuron", 0)
    assert torch.Generator("neuron:0").device == torch.device("neuron", 0)
    assert g.initial_seed() == torch.Generator().initial_seed()  # PyTorch's default seed, as CUDA's
    assert g.manual_seed(3) is g
    assert torch.Generator().device.type == "cpu" and type(torch.Generator("cpu")) is torch._C.Generator
    with pytest.raises(RuntimeError, match="neuron:7 does not exist"):
        torch.Generator("neuron:7")


@pytest.mark.parametrize("name", sorted(_DRAWS))
def test_seeded_draws_on_the_device_are_cpus_and_repeat(name):
    draw = _DRAWS[name]
    first = draw("neuron", _neuron(17))
    assert first.device.type == "neuron"
    again = draw("neuron", _neuron(17))
    on_cpu = draw("cpu", _cpu(17))
    assert torch.equal(first.cpu(), again.cpu())
    assert torch.equal(first.cpu(), on_cpu)


def test_a_generator_continues_its_stream_and_ignores_the_global_seed():
    g = _neuron(5)
    first, second = torch.randn(4, generator=g, device="neuron"), torch.randn(4, generator=g, device="neuron")
    c = _cpu(5)
    assert torch.equal(first.cpu(), torch.randn(4, generator=c))
    assert torch.equal(second.cpu(), torch.randn(4, generator=c))
    g.manual_seed(5)
    torch.manual_seed(99)  # the device's default generator: not g
    torch.rand(10, device="neuron")
    assert torch.equal(torch.randn(4, generator=g, device="neuron").cpu(), first.cpu())


def test_nn_init_with_a_generator_on_the_device_gives_cpus_weights():
    for init in (lambda w, g: torch.nn.init.normal_(w, 0.0, 0.02, generator=g),
                 lambda w, g: torch.nn.init.kaiming_uniform_(w, a=5 ** 0.5, generator=g),
                 lambda w, g: torch.nn.init.trunc_normal_(w, std=0.02, generator=g)):
        on_device = init(torch.empty(16, 8, device="neuron"), _neuron(0))
        assert torch.equal(on_device.cpu(), init(torch.empty(16, 8), _cpu(0)))


def test_a_dataloader_shuffles_with_a_neuron_generator_as_with_a_cpu_one():
    data = TensorDataset(torch.arange(40.0))

    def order(generator: torch.Generator) -> list[float]:
        return [x for (batch,) in DataLoader(data, batch_size=8, shuffle=True, generator=generator)
                for x in batch.tolist()]

    assert order(_neuron(0)) == order(_cpu(0)) == order(_neuron(0))
    assert order(_neuron(0)) != order(_neuron(1))
    split = torch.utils.data.random_split(range(10), [5, 5], generator=_neuron(2))
    assert [list(s.indices) for s in split] == [list(s.indices) for s in
                                                torch.utils.data.random_split(range(10), [5, 5], generator=_cpu(2))]


def test_copies_and_pickles_keep_the_device_and_the_state():
    g = _neuron(11)
    torch.randn(3, generator=g, device="neuron")
    expected = torch.randn(3, generator=copy.deepcopy(g), device="neuron")
    for other in (copy.deepcopy(g), pickle.loads(pickle.dumps(g)), g.clone_state()):
        assert other.device == torch.device("neuron", 0) and other is not g
        assert torch.equal(torch.randn(3, generator=other, device="neuron").cpu(), expected.cpu())
    state = g.get_state()
    first = torch.randn(3, generator=g, device="neuron")
    g.set_state(state)
    assert torch.equal(torch.randn(3, generator=g, device="neuron").cpu(), first.cpu())


def test_compiled_code_draws_from_a_neuron_generator_as_eager():
    def noisy(x: torch.Tensor, g: torch.Generator) -> torch.Tensor:
        return x * 2 + torch.randn(x.shape, generator=g, device=x.device)

    x = torch.arange(6.0, device="neuron")
    for backend in ("eager", "neuron"):
        compiled = torch.compile(noisy, backend=backend)
        assert torch.equal(compiled(x, _neuron(3)).cpu(), noisy(x.cpu(), _cpu(3)))


def test_new_generators_do_not_grow_the_devices_op_table():
    torch.randn(4, generator=_neuron(0), device="neuron")
    before = sum(len(handler.entries) for handler in dispatch._handlers.values())
    for seed in range(50):  # a pipeline seeding a new generator per image
        torch.randn(4, generator=_neuron(seed), device="neuron")
        torch.randn(4, generator=_cpu(seed), device="neuron")
    assert sum(len(handler.entries) for handler in dispatch._handlers.values()) == before


def test_seeded_draws_repeat_across_processes(warm_python):
    code = ("import json, torch, neuroncc.device\n"
            "g = torch.Generator(device='neuron').manual_seed(1234)\n"
            "a = torch.randn(5, generator=g, device='neuron')\n"
            "p = torch.randperm(10, generator=g, device='neuron')\n"
            "torch.manual_seed(7)\n"
            "d = torch.nn.functional.dropout(torch.ones(16, device='neuron'), 0.5)\n"
            "print(json.dumps([a.cpu().tolist(), p.cpu().tolist(), d.cpu().tolist()]))")
    runs = [run_python(code, python=warm_python), run_python(code, python=warm_python.other)]
    for run in runs:
        assert run.returncode == 0, run.stderr
    outputs = [json.loads(run.stdout.strip().splitlines()[-1]) for run in runs]
    assert outputs[0] == outputs[1]
    g = _cpu(1234)
    assert outputs[0][0] == torch.randn(5, generator=g).tolist()
    assert outputs[0][1] == torch.randperm(10, generator=g).tolist()
    torch.manual_seed(7)
    here = torch.nn.functional.dropout(torch.ones(16, device="neuron"), 0.5)
    assert outputs[0][2] == here.cpu().tolist()
