"""Mixed precision on the neuron device: ``torch.autocast("neuron")`` and ``torch.amp.GradScaler("neuron")``.

The reference is CPU autocast on CPU (the device autocasts with CPU's op lists): every torch function a model
calls must produce the dtypes it produces under ``torch.autocast("cpu")``, and the values must agree to a few
units in the last place of the lower-precision dtype (tolerances are multiples of its epsilon, scaled by the
magnitude of the values compared).
"""

from __future__ import annotations

import copy
import warnings

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

import neuroncc
from neuroncc.device.autocast_policy import AUTOCAST_POLICY

LOWER = [torch.bfloat16, torch.float16]


def _close(actual: torch.Tensor, expected: torch.Tensor, dtype: torch.dtype, ulps: float = 4) -> None:
    """``actual`` (device) within ``ulps`` epsilons of ``dtype`` of ``expected`` (CPU), relative to its scale."""
    assert actual.dtype == expected.dtype
    scale = expected.detach().float().abs().max().clamp_min(1.0)
    torch.testing.assert_close(actual.detach().cpu().float(), expected.detach().float(), rtol=0,
                               atol=ulps * torch.finfo(dtype).eps * scale.item())


# ---- the policy: CPU's lists, registered for the device ------------------------------------------------


def test_the_policy_is_cpu_autocasts_op_set_and_every_op_has_a_device_kernel():
    has = torch._C._dispatch_has_kernel_for_dispatch_key
    cpu_ops = {name.removeprefix("aten::") for name in torch._C._dispatch_get_all_op_names()
               if has(name, "AutocastCPU")}
    assert set(AUTOCAST_POLICY) == cpu_ops
    assert all(has(f"aten::{name}", "AutocastPrivateUse1") for name in AUTOCAST_POLICY)


def test_autocast_is_available_and_answers_its_dtype():
    assert torch.amp.is_autocast_available("neuron")
    assert torch.get_autocast_dtype("neuron") is torch.float16  # PyTorch's default for PrivateUse1, as CUDA's
    assert not torch.is_autocast_enabled("neuron")
    with torch.autocast("neuron", dtype=torch.bfloat16):
        assert torch.is_autocast_enabled("neuron") and torch.get_autocast_dtype("neuron") is torch.bfloat16
        with torch.autocast("neuron", enabled=False):
            assert not torch.is_autocast_enabled("neuron")
            assert (torch.ones(2, 2, device="neuron") @ torch.ones(2, 2, device="neuron")).dtype is torch.float32
    assert not torch.is_autocast_enabled("neuron") and torch.get_autocast_dtype("neuron") is torch.float16


@pytest.mark.parametrize("dtype", LOWER)
def test_the_linear_gelu_linear_model(dtype):
    model = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 4))
    on_device = copy.deepcopy(model).to("neuron")
    x = torch.randn(8, 16)
    with torch.autocast("cpu", dtype=dtype):
        expected = model(x)
    with torch.autocast("neuron", dtype=dtype):
        actual = on_device(x.to("neuron"))
    assert actual.device.type == "neuron"
    _close(actual, expected, dtype)


def _randn(*shape: int) -> torch.Tensor:
    return torch.randn(*shape)


#: name -> (function of the inputs, the inputs' shapes and dtypes: None = float32, "lower" = the autocast dtype)
POLICY_CASES = {
    # lower precision
    "mm": (torch.mm, [(4, 8), (8, 3)]),
    "bmm": (torch.bmm, [(2, 4, 8), (2, 8, 3)]),
    "addmm": (torch.addmm, [(3,), (4, 8), (8, 3)]),
    "baddbmm": (torch.baddbmm, [(2, 4, 3), (2, 4, 8), (2, 8, 3)]),
    "matmul": (torch.matmul, [(2, 4, 8), (8, 3)]),
    "linear": (F.linear, [(4, 8), (3, 8), (3,)]),
    "conv2d": (lambda x, w: F.conv2d(x, w, padding=1), [(2, 3, 6, 6), (4, 3, 3, 3)]),
    "conv1d": (F.conv1d, [(2, 3, 8), (4, 3, 3)]),
    "sdpa": (F.scaled_dot_product_attention, [(2, 2, 4, 8)] * 3),
    "prelu": (F.prelu, [(4, 3, 5), (3,)]),
    # float32
    "mse_loss": (F.mse_loss, [(4, 8), (4, 8)]),
    "l1_loss": (F.l1_loss, [(4, 8), (4, 8)]),
    "smooth_l1_loss": (F.smooth_l1_loss, [(4, 8), (4, 8)]),
    "cross_entropy": (lambda x: F.cross_entropy(x, torch.tensor([1, 0, 3, 2], device=x.device)), [(4, 5)]),
    "bce_with_logits": (F.binary_cross_entropy_with_logits, [(4, 8), (4, 8)]),
    "kl_div": (lambda x, y: F.kl_div(x, y.sigmoid(), reduction="batchmean"), [(4, 8), (4, 8)]),
    "prod": (lambda x: (x * 0.1 + 1).prod(), [(4, 8)]),
    "cdist": (torch.cdist, [(4, 8), (3, 8)]),
    # promote
    "cat": (lambda x, y: torch.cat([x, y]), [(4, 8), (2, 8)]),
    "stack": (lambda x, y: torch.stack([x, y]), [(4, 8), (4, 8)]),
    "index_copy": (lambda x, y: x.index_copy(0, torch.tensor([2, 0], device=x.device), y), [(4, 8), (2, 8)]),
    # not listed: they run in the dtype they are given
    "softmax": (lambda x: torch.softmax(x, -1), [(4, 8)]),
    "log_softmax": (lambda x: torch.log_softmax(x, -1), [(4, 8)]),
    "layer_norm": (lambda x, w: F.layer_norm(x, (8,), w), [(4, 8), (8,)]),
    "gelu": (F.gelu, [(4, 8)]),
    "add": (torch.add, [(4, 8), (4, 8)]),
    "sum": (torch.sum, [(4, 8)]),
}


@pytest.mark.parametrize("name", POLICY_CASES)
@pytest.mark.parametrize("dtype", LOWER)
def test_each_policy_gives_cpu_autocasts_dtypes_and_values(name, dtype):
    """Each input once as float32 and once already in the autocast dtype (the promote and pass-through ops
    then see mixed dtypes)."""
    function, shapes = POLICY_CASES[name]
    for lowered in (None, 0):
        inputs = [_randn(*shape) for shape in shapes]
        if lowered is not None:
            inputs[lowered] = inputs[lowered].to(dtype)
        with torch.autocast("cpu", dtype=dtype):
            expected = function(*inputs)
        with torch.autocast("neuron", dtype=dtype):
            actual = function(*(t.to("neuron") for t in inputs))
        _close(actual, expected, expected.dtype if expected.dtype is not torch.float32 else dtype)
    assert neuroncc.get_fallback_ops() == {}


def test_promote_refuses_a_third_floating_dtype_as_cpu_does():
    x, y = torch.randn(2, 3), torch.randn(2, 3, dtype=torch.float16)
    with pytest.raises(RuntimeError, match="prioritize"), torch.autocast("cpu", dtype=torch.bfloat16):
        torch.cat([x.bfloat16(), y])
    with pytest.raises(RuntimeError, match="prioritize"), torch.autocast("neuron", dtype=torch.bfloat16):
        torch.cat([x.bfloat16().to("neuron"), y.to("neuron")])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_an_unsupported_dtype_warns_and_disables_autocast_as_on_cpu(dtype):
    x = torch.randn(4, 8, device="neuron")
    with pytest.warns(UserWarning, match="neuron Autocast only supports dtypes of torch.bfloat16, torch.float16"):
        with torch.autocast("neuron", dtype=dtype):
            assert not torch.is_autocast_enabled("neuron")
            assert (x @ x.T).dtype is torch.float32
    with pytest.warns(UserWarning, match="CPU Autocast only supports"), torch.autocast("cpu", dtype=dtype):
        pass


# ---- a transformer's training steps ---------------------------------------------------------------------


class Block(nn.Module):
    def __init__(self, width: int, heads: int, fused_attention: bool):
        super().__init__()
        self.heads, self.fused_attention = heads, fused_attention
        self.ln1, self.ln2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.qkv, self.proj = nn.Linear(width, 3 * width), nn.Linear(width, width)
        self.fc, self.out = nn.Linear(width, 4 * width), nn.Linear(4 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, width = x.shape
        q, k, v = (t.view(batch, length, self.heads, -1).transpose(1, 2)
                   for t in self.qkv(self.ln1(x)).split(width, dim=-1))
        if self.fused_attention:
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            scores = (q @ k.transpose(-2, -1)) * q.shape[-1] ** -0.5
            future = torch.ones(length, length, dtype=torch.bool, device=x.device).triu(1)
            a = torch.softmax(scores.masked_fill(future, float("-inf")), dim=-1) @ v
        x = x + self.proj(a.transpose(1, 2).reshape(batch, length, width))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class TinyTransformer(nn.Module):
    def __init__(self, vocab: int = 32, width: int = 16, heads: int = 2, length: int = 8):
        super().__init__()
        self.tokens, self.positions = nn.Embedding(vocab, width), nn.Embedding(length, width)
        self.blocks = nn.ModuleList([Block(width, heads, True), Block(width, heads, False)])
        self.ln, self.head = nn.LayerNorm(width), nn.Linear(width, vocab, bias=False)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        x = self.tokens(idx) + self.positions(torch.arange(idx.shape[1], device=idx.device))
        for block in self.blocks:
            x = block(x)
        return F.cross_entropy(self.head(self.ln(x)).flatten(0, 1), targets.flatten())


class DtypeLog(TorchFunctionMode):
    """(function, dtypes of its tensor results) for every torch function called in the block."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[str, tuple[torch.dtype, ...]]] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        result = func(*args, **(kwargs or {}))
        self.calls.append((getattr(func, "__name__", str(func)),
                           tuple(t.dtype for t in tree_leaves(result) if isinstance(t, torch.Tensor))))
        return result


def _train(model: nn.Module, idx: torch.Tensor, targets: torch.Tensor, device: str, dtype: torch.dtype,
           steps: int = 3) -> tuple[list[torch.Tensor], list, list[list[torch.Tensor]]]:
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    losses, logs, grads = [], [], []
    for _ in range(steps):
        with DtypeLog() as log, torch.autocast(device, dtype=dtype):
            loss = model(idx, targets)
        optimizer.zero_grad()
        loss.backward()
        grads.append([p.grad.clone() for p in model.parameters()])
        optimizer.step()
        losses.append(loss.detach())
        logs.append(log.calls)
    return losses, logs, grads


@pytest.mark.parametrize("dtype", LOWER)
def test_transformer_training_steps_match_cpu_autocast(dtype):
    torch.manual_seed(0)
    model = TinyTransformer()
    on_device = copy.deepcopy(model).to("neuron")
    idx, targets = torch.randint(0, 32, (2, 8)), torch.randint(0, 32, (2, 8))
    cpu_losses, cpu_logs, cpu_grads = _train(model, idx, targets, "cpu", dtype)
    losses, logs, grads = _train(on_device, idx.to("neuron"), targets.to("neuron"), "neuron", dtype)
    assert logs == cpu_logs, "every torch function produced the dtypes it produces under CPU autocast"
    assert any(dtypes == (dtype,) for _, dtypes in logs[0]) and logs[0][-1][1] == (torch.float32,)
    for actual, expected in zip(losses, cpu_losses):
        _close(actual, expected, dtype)
    for step_grads, step_cpu_grads in zip(grads, cpu_grads):
        for actual, expected in zip(step_grads, step_cpu_grads):
            assert actual.dtype is torch.float32
            _close(actual, expected, dtype, ulps=8)
    for actual, expected in zip(on_device.parameters(), model.parameters()):
        _close(actual, expected, dtype, ulps=8)
    assert neuroncc.get_fallback_ops() == {}


# ---- GradScaler -------------------------------------------------------------------------------------------


def _scaled_steps(device: str, poisoned: dict[int, float]) -> tuple[list, list[torch.Tensor]]:
    """float16 autocast steps under a GradScaler; at the steps of ``poisoned`` one gradient gets that value."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 4)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler(device, init_scale=2.0**10, growth_factor=2.0, backoff_factor=0.25,
                                  growth_interval=2)
    x = torch.randn(6, 8).to(device)
    history, weights = [], []
    for step in range(7):
        with torch.autocast(device, dtype=torch.float16):
            loss = model(x).float().square().mean()
        optimizer.zero_grad()
        scaler.scale(loss).backward()
        if step in poisoned:
            model[0].weight.grad[1, 2] = poisoned[step]
        before = model[0].weight.detach().cpu().clone()
        scaler.step(optimizer)
        scaler.update()
        history.append((scaler.get_scale(), int(scaler._growth_tracker.item()),
                        torch.equal(before, model[0].weight.detach().cpu())))
        weights.append(model[0].weight.detach().cpu().clone())
    return history, weights


def test_grad_scaler_skips_steps_with_inf_or_nan_and_grows_and_backs_off_as_on_cpu():
    neuroncc.set_fallback_mode("error")  # its unscale and scale update are device kernels, not CPU fallbacks
    poisoned = {1: float("inf"), 4: float("nan")}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", neuroncc.device.diagnostics.DeviceFloat64Warning)  # GradScaler's .double()
        history, weights = _scaled_steps("neuron", poisoned)
    cpu_history, cpu_weights = _scaled_steps("cpu", poisoned)
    assert history == cpu_history
    assert [skipped for _, _, skipped in history] == [False, True, False, False, True, False, False]
    assert [scale for scale, _, _ in history] == [1024.0, 256.0, 256.0, 512.0, 128.0, 128.0, 256.0]
    for actual, expected in zip(weights, cpu_weights):
        _close(actual, expected, torch.float16)


def test_unscale_and_update_scale_ops_match_cpus_kernels():
    grads = [torch.tensor([1.0, 2.0, float("inf")]), torch.randn(3, 4) * 1e3]
    for poison in (float("inf"), float("nan"), None):
        if poison is not None:
            grads[0][2] = poison
        else:
            grads[0][2] = 3.0
        found, inv_scale = torch.zeros(1), torch.full((1,), 1 / 1024)
        device_grads, device_found = [g.to("neuron") for g in grads], found.to("neuron")
        torch._amp_foreach_non_finite_check_and_unscale_(device_grads, device_found, inv_scale.to("neuron"))
        torch._amp_foreach_non_finite_check_and_unscale_(grads, found, inv_scale)
        assert device_found.item() == found.item() == (0.0 if poison is None else 1.0)
        for actual, expected in zip(device_grads, grads):
            torch.testing.assert_close(actual.cpu(), expected, rtol=0, atol=0, equal_nan=True)
    for found_inf, tracker, scale in ((0.0, 0, 8.0), (0.0, 2, 8.0), (1.0, 2, 8.0), (0.0, 2, 3.0e38)):
        values = [torch.tensor([scale]), torch.tensor([tracker], dtype=torch.int32), torch.tensor([found_inf])]
        device_values = [v.to("neuron") for v in values]
        torch._amp_update_scale_(*device_values, 2.0, 0.5, 3)
        torch._amp_update_scale_(*values, 2.0, 0.5, 3)
        for actual, expected in zip(device_values, values):
            assert torch.equal(actual.cpu(), expected), (found_inf, tracker, scale)
    assert neuroncc.get_fallback_ops() == {}


# ---- torch.compile, no_grad, inference ------------------------------------------------------------------


def test_a_compiled_model_under_autocast_and_autocast_inside_a_compiled_function():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 4))
    on_device = copy.deepcopy(model).to("neuron")
    compiled = torch.compile(on_device, backend="neuron", dynamic=False)
    x = torch.randn(8, 16)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        expected = model(x)
    with torch.autocast("neuron", dtype=torch.bfloat16):
        actual = compiled(x.to("neuron"))
    _close(actual, expected, torch.bfloat16)

    @torch.compile(backend="neuron", dynamic=False)
    def product(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        with torch.autocast("neuron", dtype=torch.float16):
            return a @ b

    a, b = torch.randn(4, 8), torch.randn(8, 3)
    with torch.autocast("cpu", dtype=torch.float16):
        expected = a @ b
    _close(product(a.to("neuron"), b.to("neuron")), expected, torch.float16)
    torch._dynamo.reset()


@pytest.mark.parametrize("mode", ["no_grad", "inference_mode"])
def test_autocast_without_gradients(mode):
    model = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 4))
    on_device = copy.deepcopy(model).to("neuron")
    x = torch.randn(8, 16)
    context = torch.no_grad if mode == "no_grad" else torch.inference_mode
    with context(), torch.autocast("cpu", dtype=torch.bfloat16):
        expected = model(x)
    with context(), torch.autocast("neuron", dtype=torch.bfloat16):
        actual = on_device(x.to("neuron"))
    assert not actual.requires_grad
    _close(actual, expected, torch.bfloat16)


# ---- the device's kernels are traced in a clean dispatcher state ----------------------------------------


def test_cpu_autocast_does_not_reach_the_devices_kernels():
    """CPU autocast leaves neuron tensors alone; the first call of an op traced inside its region used to
    cast in the trace and leave a bfloat16 kernel in the signature cache."""
    a, b, c = torch.randn(3, 4, 5), torch.randn(3, 5, 6), torch.randn(4, 6)
    expected = torch.addbmm(c, a, b)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        inside = torch.addbmm(c.to("neuron"), a.to("neuron"), b.to("neuron"))
    after = torch.addbmm(c.to("neuron"), a.to("neuron"), b.to("neuron"))
    for actual in (inside, after):
        assert actual.dtype is torch.float32
        torch.testing.assert_close(actual.cpu(), expected)


def test_a_users_dispatch_mode_does_not_make_ops_fall_back():
    """Inside a TorchDispatchMode (FlopCounterMode, a logging mode) functionalize() found Functionalize
    excluded and every traced op fell back to CPU."""

    class Seen(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.ops: list[str] = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.ops.append(str(func))
            return func(*args, **(kwargs or {}))

    neuroncc.set_fallback_mode("error")
    x = torch.randn(4, 9, device="neuron")
    with Seen() as seen:
        y = torch.log_softmax(x * 1.5, -1)
    torch.testing.assert_close(y.cpu(), torch.log_softmax(x.cpu() * 1.5, -1))
    assert "aten._log_softmax.default" in seen.ops
