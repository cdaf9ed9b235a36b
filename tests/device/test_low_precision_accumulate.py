"""bfloat16/float16 accumulating writes on the device against CPU eager, bit for bit. CPU's kernels round in one
of two orders: after every add, in index order (index_put/put with accumulate, embedding's backward, index_add
into a 1-d tensor or along a middle dim), or once after adding in float32 (scatter_add, scatter_reduce sum,
index_add along the first or last dim). The IR's accumulating write rounds after every add (docs/ir.md); the
ops CPU adds in float32 are added in float32 (movement.py's scatter lowering, low_precision.py's index_add)."""

import warnings

import pytest
import torch
import torch.nn.functional as F

from neuroncc.device.diagnostics import DeviceFallbackWarning

LOW = (torch.bfloat16, torch.float16)
ROWS, WIDTH, COUNT = 20, 8, 600  # ~30 adds per row: the two orders differ in most elements


def _zeros(*shape, like):
    return torch.zeros(shape, dtype=like.dtype, device=like.device)


CASES = {
    "index_put accumulate": lambda i, s: _zeros(ROWS, WIDTH, like=s).index_put_((i,), s, accumulate=True),
    "put accumulate": lambda i, s: _zeros(ROWS, like=s).put_(i, s[:, 0].contiguous(), accumulate=True),
    "embedding backward": lambda i, s: torch.ops.aten.embedding_dense_backward(s, i, ROWS, -1, False),
    "embedding backward with padding": lambda i, s: torch.ops.aten.embedding_dense_backward(s, i, ROWS, 3, False),
    "index_add 1-d": lambda i, s: _zeros(ROWS, like=s).index_add_(0, i, s[:, 0].contiguous()),
    "index_add middle dim": lambda i, s: _zeros(2, ROWS, 4, like=s).index_add_(1, i, s.reshape(COUNT, 2, 4)
                                                                                 .transpose(0, 1).contiguous()),
    "index_add first dim": lambda i, s: _zeros(ROWS, WIDTH, like=s).index_add_(0, i, s),
    "index_add last dim": lambda i, s: _zeros(WIDTH, ROWS, like=s).index_add_(1, i, s.t().contiguous()),
    "scatter_add": lambda i, s: _zeros(ROWS, WIDTH, like=s).scatter_add_(0, i[:, None].expand(COUNT, WIDTH), s),
    "scatter_add 1-d": lambda i, s: _zeros(ROWS, like=s).scatter_add_(0, i, s[:, 0].contiguous()),
    "scatter_reduce sum": lambda i, s: _zeros(ROWS, like=s).scatter_reduce_(0, i, s[:, 0].contiguous(), "sum"),
}


@pytest.mark.parametrize("dtype", LOW, ids=str)
@pytest.mark.parametrize("name", sorted(CASES))
def test_accumulating_writes_round_where_cpu_rounds(name, dtype):
    generator = torch.Generator().manual_seed(0)
    index = torch.randint(0, ROWS, (COUNT,), generator=generator)
    source = torch.randn(COUNT, WIDTH, generator=generator).to(dtype)
    expected = CASES[name](index, source)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeviceFallbackWarning)
        got = CASES[name](index.to("neuron"), source.to("neuron")).cpu()
    assert torch.equal(got.view(torch.int16), expected.view(torch.int16))


@pytest.mark.parametrize("dtype", LOW, ids=str)
def test_a_low_precision_embeddings_gradient_is_cpus(dtype):
    """A bf16/f16 model's embedding gradient (tokens repeat: their rows add up in index order on CPU)."""
    def gradient(device):
        torch.manual_seed(0)
        embedding = torch.nn.Embedding(50, 16).to(dtype).to(device)
        tokens = torch.randint(0, 50, (4, 64), generator=torch.Generator().manual_seed(1)).to(device)
        F.mse_loss(embedding(tokens).float().sum(-1), torch.ones(4, 64, device=device)).backward()
        return embedding.weight.grad.cpu()

    expected = gradient("cpu")
    assert torch.equal(gradient("neuron").view(torch.int16), expected.view(torch.int16))


@pytest.mark.parametrize("dtype", LOW, ids=str)
@pytest.mark.parametrize("include_self", [True, False])
@pytest.mark.parametrize("shape, dim", [((ROWS, WIDTH), 0), ((3, ROWS, 4), 1), ((ROWS,), 0)])
def test_index_reduce_mean_adds_in_index_order_and_divides_once(dtype, include_self, shape, dim):
    generator = torch.Generator().manual_seed(0)
    sizes = list(shape)
    sizes[dim] = COUNT
    x = torch.randn(shape, generator=generator).to(dtype)
    source = torch.randn(sizes, generator=generator).to(dtype)
    index = torch.randint(0, ROWS, (COUNT,), generator=generator)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # index_reduce is in beta
        warnings.simplefilter("error", DeviceFallbackWarning)
        expected = x.index_reduce(dim, index, source, "mean", include_self=include_self)
        got = x.to("neuron").index_reduce(dim, index.to("neuron"), source.to("neuron"), "mean",
                                          include_self=include_self).cpu()
    assert torch.equal(got.view(torch.int16), expected.view(torch.int16))


@pytest.mark.parametrize("dtype", LOW, ids=str)
@pytest.mark.parametrize("beta, alpha", [(1, 1), (0.5, 0.3), (0.0, 1.0)])
def test_addbmm_rounds_after_each_batch(dtype, beta, alpha):
    """CPU's addbmm adds each batch's float32 product into the bf16/f16 result (rounded per batch)."""
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(16, 12, generator=generator).to(dtype)
    batch1 = torch.randn(6, 16, 9, generator=generator).to(dtype)
    batch2 = torch.randn(6, 9, 12, generator=generator).to(dtype)
    expected = torch.addbmm(x, batch1, batch2, beta=beta, alpha=alpha)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeviceFallbackWarning)
        got = torch.addbmm(x.to("neuron"), batch1.to("neuron"), batch2.to("neuron"), beta=beta, alpha=alpha).cpu()
    assert torch.equal(got.view(torch.int16), expected.view(torch.int16))
