"""Integer, bool and low-precision eager ops on the device against CPU eager: what the ``--dtype`` OpInfo
sweeps (tools/opinfo_device_sweep.py) found wrong, each checked to run on the device (no CPU fallback) and
to give CPU's dtype and values exactly."""

import pytest
import torch
import torch.nn.functional as F

import neuroncc
from neuroncc.device import programs

INTS = (torch.int64, torch.int32)


def _on_device(fn, *tensors, fallback_ok=False):
    """``fn`` on neuron copies of ``tensors``, brought back to CPU; without ``fallback_ok`` no op may fall back."""
    before = dict(neuroncc.get_fallback_ops())
    result = fn(*(t.to("neuron") for t in tensors))
    fell_back = {k: v for k, v in neuroncc.get_fallback_ops().items() if v > before.get(k, 0)}
    assert fallback_ok or not fell_back, f"ran on CPU: {fell_back}"
    return result.cpu()


def _same(got, want):
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    assert torch.equal(got, want), (got, want)


@pytest.mark.parametrize("dtype", (torch.int64,))  # CPU has no int32 avg_pool3d
@pytest.mark.parametrize("kwargs", [{}, dict(stride=1, padding=1, ceil_mode=True, count_include_pad=False),
                                    dict(stride=(1, 2, 2), padding=(0, 1, 1), divisor_override=-3)])
def test_integer_avg_pool3d_truncates_its_average(dtype, kwargs):
    """ATen divides an integer window sum by the window size with C's truncation (-9 / 8 -> -1): the device
    returned the true quotient as float32."""
    x = torch.randint(-50, 50, (1, 2, 4, 5, 5), dtype=dtype)
    fn = lambda t: F.avg_pool3d(t, 2, **kwargs)  # noqa: E731
    _same(_on_device(fn, x), fn(x))


@pytest.mark.parametrize("dtype", INTS)
@pytest.mark.parametrize("alpha,beta", [(0.2, 0.6), (2.7, -1.5), (3, 2)])
def test_integer_addbmm_truncates_alpha_and_beta(dtype, alpha, beta):
    """Integer addbmm takes float alpha/beta as integers (0.6 -> 0): the device computed in float32."""
    m, b1, b2 = (torch.randint(-9, 9, s, dtype=dtype) for s in ((3, 5), (4, 3, 2), (4, 2, 5)))
    fn = lambda m, b1, b2: torch.addbmm(m, b1, b2, alpha=alpha, beta=beta)  # noqa: E731
    _same(_on_device(fn, m, b1, b2), fn(m, b1, b2))


@pytest.mark.parametrize("dtype", (torch.int32, torch.uint8))
def test_cumsum_keeps_the_dtype_it_is_asked_for(dtype):
    """cumsum(dtype=int32) of int32 is int32, wrapping as CPU's (the device returned int64)."""
    high = 250 if dtype is torch.uint8 else 2**30
    x = torch.randint(0, high, (3, 7), dtype=dtype)
    for fn in (lambda t: t.cumsum(1, dtype=dtype), lambda t: t.cumprod(0, dtype=dtype)):
        _same(_on_device(fn, x), fn(x))


@pytest.mark.parametrize("dtype", (torch.int32, torch.uint8, torch.bool))
@pytest.mark.parametrize("reduce", ("prod", "amax", "amin"))
@pytest.mark.parametrize("include_self", (True, False))
def test_scatter_reduce_keeps_the_input_dtype(dtype, reduce, include_self):
    """scatter_reduce prod/amax/amin and index_reduce prod of int32/uint8/bool keep the input's dtype (the
    device returned int64), with products wrapping as CPU's."""
    make = (lambda s: torch.rand(s) > 0.3) if dtype is torch.bool else \
        (lambda s: torch.randint(0, 200, s).to(dtype) if dtype is torch.uint8 else torch.randint(-2**20, 2**20, s,
                                                                                                  dtype=dtype))
    x, src = make((4, 5)), make((6, 5))
    index = torch.randint(0, 4, (6, 5))
    fn = lambda x, i, s: x.scatter_reduce(0, i, s, reduce, include_self=include_self)  # noqa: E731
    _same(_on_device(fn, x, index, src), fn(x, index, src))
    if reduce == "prod" and dtype is not torch.bool:
        rows = torch.randint(0, 4, (6,))
        fn = lambda x, i, s: x.index_reduce(0, i, s, "prod", include_self=include_self)  # noqa: E731
        _same(_on_device(fn, x, rows, src), fn(x, rows, src))


@pytest.mark.parametrize("antialias", (True, False))
@pytest.mark.parametrize("size", ((4, 5), (13, 17)))
def test_uint8_bilinear_resize_matches_cpu(antialias, size):
    """ATen resizes uint8 images with fixed-point weights and its own rounding: the device's antialiased
    resize cast its float weights to uint8 (all 0: a black image), the plain one rounded the float result
    (one off in 16% of the pixels). Both run on CPU now; float images stay on the device."""
    x = torch.randint(0, 256, (2, 3, 10, 12), dtype=torch.uint8)
    fn = lambda t: F.interpolate(t, size=size, mode="bilinear", antialias=antialias)  # noqa: E731
    _same(_on_device(fn, x, fallback_ok=True), fn(x))
    image = x.float() / 255
    torch.testing.assert_close(_on_device(fn, image), fn(image))


def test_a_decomposition_of_another_dtype_falls_back(monkeypatch):
    """A decomposition whose result dtype is not the op's makes the call run on CPU (CPU's dtype and
    values), not return the decomposition's dtype."""
    op = torch.ops.aten.avg_pool3d.default
    # eager's first call of an op on the device goes through its out= overload (whose written results take the out
    # tensor's dtype, not checked); the op itself from then on: reached here before the table is patched
    for _ in range(2):
        F.avg_pool3d(torch.zeros((1, 1, 2, 2, 2), dtype=torch.int64, device="neuron"), 2)
    wrong = {**programs._tracing_table((op,)), op: lambda x, *a, **k: x.float().sum() * 0 + torch.zeros(
        (1, 1, 1, 1, 1))}
    monkeypatch.setattr(programs, "_tracing_table", lambda ops: wrong)
    x = torch.randint(-9, 9, (1, 1, 3, 2, 3))  # a shape no other test compiles
    fn = lambda t: F.avg_pool3d(t, (3, 2, 3))  # noqa: E731
    with pytest.warns(UserWarning, match="computes torch.float32 where the op returns torch.int64"):
        got = _on_device(fn, x, fallback_ok=True)
    _same(got, fn(x))


@pytest.mark.parametrize("dtype", (torch.int16, torch.int8, torch.int32, torch.uint8, torch.bool))
def test_small_integer_elementwise_and_reductions(dtype):
    """int16 tensors cross into kernels as i16, as bf16 tensors' bits do: the importer read int16 inputs as
    bf16 bits (``x * 3`` and ``x.sum()`` of int16 returned zeros)."""
    x = (torch.rand(4, 6) > 0.5) if dtype is torch.bool else torch.randint(-100 if dtype.is_signed else 0, 100,
                                                                           (4, 6)).to(dtype)
    for fn in (lambda t: t * 3, lambda t: t + t, lambda t: t.sum(), lambda t: t.sum(1, dtype=torch.int32 if dtype is torch.bool else dtype),
               lambda t: t.cumsum(0), lambda t: t.amax(1), lambda t: t.to(torch.bfloat16) * 2,
               lambda t: (t > 1) & (t < 50), lambda t: t.float() * 0.5):
        _same(_on_device(fn, x), fn(x))


def test_int16_under_torch_compile():
    """The compiled path on neuron tensors takes bf16 as bits too: int16 inputs keep their values there."""
    x = torch.randint(-100, 100, (4, 6), dtype=torch.int16)
    fn = lambda t: (t * 3 + 1).sum(1)  # noqa: E731
    compiled = torch.compile(fn, backend="neuron", fullgraph=True, dynamic=False)
    _same(compiled(x.to("neuron")).cpu(), fn(x))


@pytest.mark.parametrize("dtype", (torch.bfloat16, torch.float16))
def test_zero_dim_low_precision_with_a_python_float_keeps_its_dtype(dtype):
    """``loss_bf16 * 0.5``: eager's wrapped number never wins type promotion; the device's 0-d float32 tensor
    for it did against a 0-d bf16/f16 tensor (the result was float32). CPU's bits, on every call."""
    x = torch.tensor(-1.4765625, dtype=dtype)
    for fn in (lambda t: t * 0.7071067811865476, lambda t: 0.1 + t, lambda t: t / 3.0, torch.special.ndtr,
               lambda t: t * 2):
        for _ in range(3):  # the first call, then the entry's later calls
            _same(_on_device(fn, x), fn(x))
    y = torch.randn(5, dtype=dtype)
    _same(_on_device(lambda t: t * 0.7, y), y * 0.7)
