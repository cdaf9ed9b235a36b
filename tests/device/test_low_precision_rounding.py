"""bfloat16/float16 ops whose CPU kernels round intermediates to the input's dtype (or keep float32 where a
decomposition rounded): the device rounds at the same points and gives CPU eager's bits
(neuroncc/frontend/lowering/low_precision.py)."""

import warnings

import pytest
import torch
import torch.nn.functional as F

from neuroncc.device.diagnostics import DeviceFallbackWarning

LOW = (torch.bfloat16, torch.float16)


def _bits(tensor):
    return tensor.view(torch.int16) if tensor.dtype in LOW else tensor


def _batch_norm(x, w, b):
    """Training batch norm: output, saved mean and saved 1/std (the running statistics updated in place)."""
    return torch.ops.aten._native_batch_norm_legit(x, w, b, torch.zeros(x.shape[1], dtype=x.dtype).to(x.device),
                                                    torch.ones(x.shape[1], dtype=x.dtype).to(x.device), True, 0.1,
                                                    1e-5)


#: Compared with torch's tolerance for the dtype, not bit for bit: a few elements differ by an ulp where CPU's
#: vectorized float32 sums run in another order (the rounding points are CPU's).
CLOSE = {"interpolate trilinear", "interpolate bilinear (float32 weights)", "embedding_bag mean"}

CASES = {  # name: (function, shapes, scale of the inputs)
    "log_softmax over the last dim": (lambda x: x.log_softmax(-1), [(16, 37)], 4.0),
    "log_softmax of a vector": (lambda x: torch.log_softmax(x, 0), [(300,)], 4.0),
    "cross_entropy's log_softmax": (lambda x: F.log_softmax(x, dim=1), [(8, 100)], 3.0),
    "batch_norm training": (lambda x, w, b: _batch_norm(x, w, b), [(5, 5, 5), (5,), (5,)], 3.0),
    "batch_norm training without weights": (lambda x: _batch_norm(x, None, None), [(3, 2, 3, 4)], 3.0),
    "BatchNorm1d": (lambda x: torch.nn.BatchNorm1d(16).to(x.device, x.dtype)(x), [(64, 16)], 3.0),
    "layer_norm (ran on CPU: float32 meta statistics)": (lambda x, w, b: F.layer_norm(x, (64,), w, b),
                                                         [(2, 8, 64), (64,), (64,)], 3.0),
    "native_layer_norm's statistics": (lambda x, w, b: torch.ops.aten.native_layer_norm(x, [5, 7], w, b, 1e-5),
                                       [(3, 5, 7), (5, 7), (5, 7)], 3.0),
    "cross": (lambda a, b: torch.linalg.cross(a, b), [(64, 3), (64, 3)], 3.0),
    "cross over dim 1": (lambda a, b: torch.cross(a, b, dim=1), [(5, 3, 5), (5, 3, 5)], 3.0),
    "logit": (lambda x: torch.logit((x.abs() / 3).clamp(max=0.99)), [(500,)], 1.0),
    "logit with eps": (lambda x: torch.logit((x.abs() / 3).clamp(max=0.99), eps=0.2), [(500,)], 1.0),
    "logit with another eps (the same kernel)": (lambda x: torch.logit((x.abs() / 3).clamp(max=0.99), eps=0.013),
                                                 [(500,)], 1.0),
    "mse_loss none": (lambda x, y: F.mse_loss(x, y, reduction="none"), [(500,), (500,)], 3.0),
    "mse_loss mean": (lambda x, y: F.mse_loss(x, y), [(8, 50), (8, 50)], 3.0),
    "mse_loss sum, broadcast": (lambda x, y: F.mse_loss(x, y.expand(8, 50), reduction="sum"), [(8, 50), (50,)],
                                3.0),
    "addr": (lambda s, a, b: torch.addr(s, a, b), [(5, 10), (5,), (10,)], 3.0),
    "addr with beta and alpha": (lambda s, a, b: torch.addr(s, a, b, beta=0.2, alpha=0.6), [(5, 10), (5,), (10,)],
                                 3.0),
    "addr with beta 0": (lambda s, a, b: torch.addr(s, a, b, beta=0, alpha=0.3), [(5, 10), (5,), (10,)], 3.0),
    "addr with beta 0.0 and a NaN in self": (lambda s, a, b: torch.addr(s.log(), a, b, beta=0.0, alpha=0.3),
                                             [(5, 10), (5,), (10,)], 3.0),
    "interpolate linear": (lambda x: F.interpolate(x, size=12, mode="linear"), [(2, 3, 7)], 3.0),
    "interpolate linear, align_corners": (lambda x: F.interpolate(x, size=12, mode="linear", align_corners=True),
                                          [(2, 3, 7)], 3.0),
    "interpolate linear down by a factor": (lambda x: F.interpolate(x, scale_factor=0.6, mode="linear"),
                                            [(2, 3, 10)], 3.0),
    "interpolate trilinear": (lambda x: F.interpolate(x, size=(5, 6, 7), mode="trilinear"), [(2, 3, 3, 4, 5)], 3.0),
    "interpolate trilinear by a factor": (lambda x: F.interpolate(x, scale_factor=1.5, mode="trilinear",
                                                                  align_corners=True), [(1, 2, 4, 4, 4)], 3.0),
    "interpolate bilinear (float32 weights)": (lambda x: F.interpolate(x, size=(6, 7), mode="bilinear"),
                                               [(2, 3, 4, 5)], 3.0),
    "embedding_bag mean": (lambda w: F.embedding_bag(torch.tensor([0, 2, 4, 5, 4, 3, 2, 9]).to(w.device), w,
                                                     torch.tensor([0, 4]).to(w.device), mode="mean"),
                           [(10, 16)], 4.0),
    "embedding_bag weighted sum": (lambda w, p: F.embedding_bag(torch.tensor([1, 2, 4, 5, 4, 3, 2, 9]).to(w.device),
                                                                w, torch.tensor([0, 3, 5]).to(w.device), mode="sum",
                                                                per_sample_weights=p), [(10, 16), (8,)], 4.0),
}


@pytest.mark.parametrize("dtype", LOW)
@pytest.mark.parametrize("name", CASES)
def test_low_precision_op_rounds_where_cpu_rounds(name, dtype):
    op, shapes, scale = CASES[name]
    torch.manual_seed(0)
    inputs = [(torch.randn(s) * scale).to(dtype) for s in shapes]
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("error", DeviceFallbackWarning)  # computed on the device, not by CPU's kernel
        expected = op(*[x.clone() for x in inputs])
        got = op(*[x.clone().to("neuron") for x in inputs])
    expected, got = (expected, got) if isinstance(expected, tuple) else ((expected,), (got,))
    for g, e in zip(got, expected, strict=True):
        g = g.cpu()
        assert g.dtype == e.dtype and g.shape == e.shape, name
        if name in CLOSE:
            torch.testing.assert_close(g, e)
        else:
            assert torch.equal(_bits(g), _bits(e)), (name, (g != e).sum().item())


@pytest.mark.parametrize("dtype", LOW)
def test_log_softmax_over_another_dim_rounds_once(dtype):
    """Over a dim that is not the last, CPU's kernel keeps float32 buffers and rounds once, as the
    decomposition does (the float32 sums' order and exp may differ by an ulp: torch's tolerance)."""
    torch.manual_seed(0)
    x = (torch.randn(16, 37) * 4).to(dtype)
    torch.testing.assert_close(x.to("neuron").log_softmax(0).cpu(), x.log_softmax(0))


def test_float32_ops_keep_their_decompositions():
    """The low-precision rules leave float32 alone: float32 log_softmax and batch norm as before."""
    torch.manual_seed(0)
    x = torch.randn(16, 37)
    torch.testing.assert_close(x.to("neuron").log_softmax(-1).cpu(), x.log_softmax(-1))
    got = _batch_norm(x.to("neuron"), None, None)
    for g, e in zip(got, _batch_norm(x, None, None), strict=True):
        torch.testing.assert_close(g.cpu(), e)


@pytest.mark.parametrize("dtype", LOW)
def test_a_low_precision_batch_norm_trains_on_the_device(dtype):
    """A bf16/f16 BatchNorm1d/2d training step runs on the device (native_batch_norm's meta kernel gives float32
    statistics where CPU's gives the input's dtype: every such call ran on CPU with a DeviceFallbackWarning)
    with CPU's output bits; the running statistics (float32 formula, rounded) within an ulp."""
    torch.manual_seed(0)
    for module, shape in ((torch.nn.BatchNorm1d(16), (64, 16)), (torch.nn.BatchNorm2d(4), (2, 4, 3, 5))):
        x = (torch.randn(shape) * 3 + 1).to(dtype)
        cpu = module.to(dtype)
        device = torch.nn.BatchNorm1d(16) if len(shape) == 2 else torch.nn.BatchNorm2d(4)
        device = device.to("neuron", dtype)
        with warnings.catch_warnings():
            warnings.simplefilter("error", DeviceFallbackWarning)
            for scale in (1, 2):
                got, expected = device(x.to("neuron") * scale).cpu(), cpu(x * scale)
                assert torch.equal(_bits(got), _bits(expected))
        for name in ("running_mean", "running_var"):
            torch.testing.assert_close(getattr(device, name).cpu(), getattr(cpu, name))
