"""Training recipes users copy (tutorials, model repos), on the device eagerly and under torch.compile, against CPU
eager: each test is a recipe that failed or was wrong on the device before the fix it names (session 30)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F

import neuroncc

TOL = {"rtol": 1e-4, "atol": 1e-5}


def _compiled_on_device(fn: Callable[..., torch.Tensor], *inputs: torch.Tensor) -> None:
    expected = fn(*inputs)
    got = torch.compile(fn, backend="neuron")(*(t.to("neuron") for t in inputs))
    assert got.device.type == "neuron"
    torch.testing.assert_close(got.cpu(), expected, **TOL)
    torch._dynamo.reset()


_OFFSETS = torch.tensor([0, 3, 7])
#: ops whose front-end decomposition makes helper tensors (positions, masks): made without a device, they were
#: CPU tensors beside the graph's neuron fake tensors, and torch.compile on neuron tensors failed with
#: FakeTensorDeviceMismatchError (nn.Embedding(max_norm=...), scatter_reduce amax, integer cumsum: Llama's mask)
HELPER_TENSOR_OPS: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "embedding_max_norm": lambda w, ids: F.embedding(ids, w, max_norm=1.0).sum(),
    "scatter_reduce_amax": lambda w, ids: torch.zeros(5, 8, device=w.device).scatter_reduce(
        0, (ids.reshape(-1)[:16] % 5).reshape(2, 8), w[:2], "amax"),
    "cumprod": lambda w, ids: torch.cumprod(w[:4], 0),
    "integer_cumsum": lambda w, ids: (ids != 3).cumsum(-1),
    "embedding_bag_max": lambda w, ids: F.embedding_bag(ids.reshape(-1), w, _OFFSETS.to(w.device), mode="max"),
    "nonzero_static": lambda w, ids: torch.nonzero_static(w[:3] > 0, size=5),
}


@pytest.mark.parametrize("name", HELPER_TENSOR_OPS)
def test_compiled_decompositions_make_their_helper_tensors_on_the_device(name):
    generator = torch.Generator().manual_seed(0)
    weight, ids = torch.randn(30, 8, generator=generator), torch.randint(0, 30, (4, 6), generator=generator)
    _compiled_on_device(HELPER_TENSOR_OPS[name], weight, ids)


@pytest.mark.parametrize("n", [4, 300])
def test_eye_of_any_size_eager_and_compiled(n):
    """SimCLR's NT-Xent masks the diagonal with torch.eye(2 * batch, dtype=torch.bool): from n = 256 on,
    PyTorch's reference builds it from uint16 positions, which the IR lacks (compiled: UnsupportedOpError;
    eager: a CPU fallback)."""
    neuroncc.set_fallback_mode("error")
    assert torch.equal(torch.eye(n, dtype=torch.bool, device="neuron").cpu(), torch.eye(n, dtype=torch.bool))
    assert torch.equal(torch.eye(n, n + 3, device="neuron").cpu(), torch.eye(n, n + 3))
    _compiled_on_device(lambda x: x.masked_fill(torch.eye(x.shape[0], dtype=torch.bool, device=x.device), 0.0),
                        torch.ones(n, n))


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("dim", [0, None])
def test_weight_norm_trains_as_on_cpu(dim, compiled):
    """nn.utils.parametrizations.weight_norm (HiFi-GAN, wav2vec2's positional conv): the fused path's backward,
    aten._weight_norm_interface_backward, had no decomposition (eager: a CPU fallback; compiled:
    UnsupportedOpError)."""
    neuroncc.set_fallback_mode("error")
    parametrizations = torch.nn.utils.parametrizations

    def train(device: str) -> tuple[list[float], dict[str, torch.Tensor]]:
        torch.manual_seed(0)
        model = torch.nn.Sequential(parametrizations.weight_norm(torch.nn.Linear(6, 8), dim=dim), torch.nn.Tanh(),
                                    torch.nn.Unflatten(1, (8, 1)),
                                    parametrizations.weight_norm(torch.nn.Conv1d(8, 3, 1))).to(device)
        run = torch.compile(model, backend="neuron") if compiled and device == "neuron" else model
        optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
        losses, generator = [], torch.Generator().manual_seed(1)
        for _ in range(3):
            x = torch.randn(4, 6, generator=generator).to(device)
            loss = run(x).square().mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
        return losses, {k: v.cpu() for k, v in model.state_dict().items()}

    (cpu_losses, cpu_state), (losses, state) = train("cpu"), train("neuron")
    torch.testing.assert_close(losses, cpu_losses, **TOL)
    torch.testing.assert_close(state, cpu_state, **TOL)
    torch._dynamo.reset()


def test_compiled_per_sample_gradients_and_jacobians():
    """Opacus-style per-sample gradients, torch.compile(vmap(grad(loss))) over functional_call, and a compiled
    jacrev / jacfwd: refused as "torch.func transforms" before session 30; AOTAutograd traces them away."""
    from torch.func import functional_call, grad, jacfwd, jacrev, vmap

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 4), torch.nn.Tanh(), torch.nn.Linear(4, 3))
    generator = torch.Generator().manual_seed(1)
    x, y = torch.randn(5, 6, generator=generator), torch.randint(0, 3, (5,), generator=generator)

    def per_sample(module: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> dict[str, torch.Tensor]:
        def loss(params: dict[str, torch.Tensor], xi: torch.Tensor, yi: torch.Tensor) -> torch.Tensor:
            return F.cross_entropy(functional_call(module, params, (xi.unsqueeze(0),)), yi.unsqueeze(0))
        params = {k: v.detach() for k, v in module.named_parameters()}
        return vmap(grad(loss), in_dims=(None, 0, 0))(params, x, y)

    expected = per_sample(model, x, y)
    expected_jacobians = jacrev(model)(x[:2]), jacfwd(model)(x[:2])
    model.to("neuron")
    got = torch.compile(per_sample, backend="neuron")(model, x.to("neuron"), y.to("neuron"))
    torch.testing.assert_close({k: v.cpu() for k, v in got.items()}, expected, **TOL)
    jacobians = torch.compile(lambda inputs: (jacrev(model)(inputs), jacfwd(model)(inputs)), backend="neuron")(
        x[:2].to("neuron"))
    torch.testing.assert_close(tuple(j.cpu() for j in jacobians), expected_jacobians, **TOL)
    torch._dynamo.reset()


@pytest.mark.parametrize("make", [lambda: torch.nn.Embedding(10, 4, sparse=True),
                                  lambda: torch.nn.EmbeddingBag(10, 4, sparse=True)], ids=["Embedding", "EmbeddingBag"])
def test_sparse_embedding_gradients_are_refused_by_name(make):
    """sparse=True makes sparse gradients, which the device cannot hold: PyTorch's "Could not run ... 'Sparseneuron'
    backend" (Embedding), or a CPU sparse gradient autograd rejected (EmbeddingBag), became a typed error."""
    module = make().to("neuron")
    loss = module(torch.tensor([[1, 2, 3], [4, 5, 1]], device="neuron")).sum()
    with pytest.raises(neuroncc.UnsupportedOpError, match="sparse=False"):
        loss.backward()


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_the_recipes_example_trains_as_on_cpu(compiled):
    """examples/finetune_recipes.py: accumulation, OneCycleLR, clipping, label smoothing, a padded
    TransformerEncoder and an EMA model give CPU eager's losses on the device."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "examples" / "finetune_recipes.py"
    spec = importlib.util.spec_from_file_location("finetune_recipes", path)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    expected = example.train("cpu", steps=3)
    torch.testing.assert_close(example.train("neuron", compile=compiled, steps=3), expected, rtol=1e-4, atol=1e-4)
    torch._dynamo.reset()
