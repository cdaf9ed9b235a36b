"""Eager per-op compilation: signature keys, lifted floats, the kernel caches, CPU fallback and tracking."""

from __future__ import annotations

import copy
import math
import inspect
import json
import re
import warnings

import pytest
import torch
import torch.nn.functional as F

import neuroncc
from neuroncc.device import dispatch
from neuroncc.device.config import CONFIG
from neuroncc.device.diagnostics import DeviceFallbackWarning
from device.conftest import run_python


def _compiled() -> int:
    return neuroncc.stats()["eager_kernels_compiled"] + neuroncc.stats()["eager_kernels_loaded"]


OPS = {
    "add": lambda x, y: x + y, "mul_sub": lambda x, y: x * y - 2.5,
    "maximum_relu": lambda x, y: torch.maximum(x, y).relu(), "matmul_softmax": lambda x, y: (x @ y.t()).softmax(-1),
    "where_exp": lambda x, y: torch.where(x > y, x, y.exp()), "sum_div_mean": lambda x, y: x.sum(1, keepdim=True) / y.mean(),
    "cat_tanh": lambda x, y: torch.cat([x, y], 0).tanh(), "gelu_sigmoid": lambda x, y: F.gelu(x) * torch.sigmoid(y),
    "max_dim": lambda x, y: x.max(1), "layer_norm": lambda x, y: F.layer_norm(x, (5,)),
    "int_floor_div": lambda x, y: x.to(torch.int32) // 2, "atan2": lambda x, y: torch.atan2(x, y),
    "transposed_contiguous": lambda x, y: x.t().contiguous() + 1,
    "max_dim_of_bools": lambda x, y: (x > y).max(1),
}


@pytest.mark.parametrize("fn", OPS.values(), ids=OPS.keys())
def test_ops_match_cpu(fn):
    x, y = torch.randn(4, 5), torch.randn(4, 5)
    expected = fn(x, y)
    actual = fn(x.to("neuron"), y.to("neuron"))
    expected, actual = (expected, actual) if isinstance(expected, tuple) else ((expected,), (actual,))
    for e, a in zip(expected, actual):
        assert a.device.type == "neuron" and a.dtype == e.dtype and a.shape == e.shape and a.stride() == e.stride()
        torch.testing.assert_close(a.cpu(), e)
    assert neuroncc.get_fallback_ops() == {}


def test_a_signature_compiles_once_and_floats_are_kernel_arguments():
    x = torch.randn(8, device="neuron")
    (x * 0.5).add_(x, alpha=0.25)
    compiled = _compiled()
    for step in range(5):  # a learning rate and an alpha that change every step: no new kernels
        y = (x * (0.1 + step)).add_(x, alpha=step * 0.01)
        torch.testing.assert_close(y.cpu(), x.cpu() * (0.1 + step) + x.cpu() * (step * 0.01))
    assert _compiled() == compiled
    x.reshape(2, 4) * 0.5  # another shape: a new kernel
    assert _compiled() == compiled + 1


def test_adam_steps_compile_nothing_after_the_first():
    model = torch.nn.Linear(8, 4).to("neuron")
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.01)
    x = torch.randn(16, 8, device="neuron")

    def step():
        loss = model(x).square().mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

    step()
    step()
    compiled = _compiled()
    for _ in range(3):
        step()
    assert _compiled() == compiled


def test_memory_cache_is_bounded(monkeypatch):
    monkeypatch.setattr(CONFIG, "kernel_capacity", 8)
    x = torch.randn(3, device="neuron")
    for n in range(20):
        x.expand(n + 1, 3).exp()
    kept = sum(entry.holds_kernel for h in dispatch.handlers() for entry in h.entries.values())
    assert kept <= 8
    assert neuroncc.stats()["eager_kernels_evicted"] > 0


def test_a_second_process_compiles_nothing_it_has_seen(tmp_path, warm_python):
    code = ("import json, torch, neuroncc\n"
            "x = torch.randn(16, 32, device='neuron'); w = torch.randn(8, 32, device='neuron', requires_grad=True)\n"
            "loss = torch.nn.functional.linear(x, w).relu().sum(); loss.backward(); w.grad.mul_(0.5).exp()\n"
            "s = neuroncc.stats(); print(json.dumps([s['eager_kernels_compiled'], s['eager_kernels_loaded']]))")
    env = {"NEURONCC_CACHE_DIR": str(tmp_path / "cache")}
    first = run_python(code, env, python=warm_python)
    assert first.returncode == 0, first.stderr
    compiled, loaded = json.loads(first.stdout.strip().splitlines()[-1])
    assert compiled > 3 and loaded == 0
    second = run_python(code, env, python=warm_python.other)
    assert second.returncode == 0, second.stderr
    assert json.loads(second.stdout.strip().splitlines()[-1]) == [0, compiled]


def test_an_op_neuroncc_cannot_compile_falls_back_with_one_warning():
    x = torch.tensor([0.0, 1.5, 0.0, -2.0], device="neuron")
    # a process's first op on the device reaches it as its out= overload (aten.mul.out: dispatch.py's
    # _register_at_first_op), the later ones as aten.mul.Tensor: make this test's mul a later one whatever ran before
    x * 2
    neuroncc.clear_op_tracking()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        first = torch.nonzero(x)
        second = torch.nonzero(x * 2)
    assert first.device.type == "neuron" and first.cpu().flatten().tolist() == [1, 3]
    assert second.cpu().flatten().tolist() == [1, 3]
    fallbacks = [w for w in caught if w.category is DeviceFallbackWarning]
    assert len(fallbacks) == 1
    message = str(fallbacks[0].message)
    assert "aten.nonzero.default" in message and f"{__file__}:" in message
    assert neuroncc.get_fallback_ops() == {"aten.nonzero.default": 2}
    assert neuroncc.get_executed_ops() == {"aten.mul.Tensor": 1}
    assert neuroncc.stats()["eager_fallback_calls"] == 2
    neuroncc.clear_op_tracking()
    assert neuroncc.get_fallback_ops() == {} and neuroncc.get_executed_ops() == {}


def test_fallback_writes_in_place_results_into_device_memory():
    x = torch.randn(6, device="neuron")
    expected = x.cpu().cumsum(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeviceFallbackWarning)
        out = torch.empty(6, device="neuron")
        torch.cumsum(x, 0, out=out)
        x.cumsum_(0)
    torch.testing.assert_close(out.cpu(), expected)
    torch.testing.assert_close(x.cpu(), expected)


def test_fallback_can_be_an_error():
    neuroncc.set_fallback_mode("error")
    x = torch.tensor([1.0, 0.0], device="neuron")
    with pytest.raises(neuroncc.DeviceFallbackError, match="aten.nonzero.default") as error:
        torch.nonzero(x)
    assert error.value.op == "aten.nonzero.default" and __file__ in str(error.value)
    with pytest.raises(neuroncc.InputError):
        neuroncc.set_fallback_mode("gpu")


def test_fallback_mode_from_the_environment(warm_python):
    code = ("import torch\ntry:\n    torch.nonzero(torch.ones(2, device='neuron'))\n"
            "except Exception as e:\n    print(type(e).__name__)")
    result = run_python(code, {"NEURONCC_DEVICE_FALLBACK": "error"}, python=warm_python)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "DeviceFallbackError"


def test_user_errors_are_eagers_errors():
    x, y = torch.randn(3, device="neuron"), torch.randn(4, device="neuron")
    with pytest.raises(RuntimeError, match="must match the size"):
        x + y
    with pytest.raises(RuntimeError, match="result type Float can't be cast"):
        torch.ones(2, dtype=torch.int64, device="neuron").add_(1.5)
    with pytest.raises(IndexError):
        torch.nn.functional.embedding(torch.tensor([7], device="neuron"), torch.randn(3, 2, device="neuron"))


def test_index_errors_name_the_op_the_operand_the_value_and_the_callers_line():
    from neuroncc.errors import RuntimeIndexError

    x, index = torch.randn(4, 8, device="neuron"), torch.tensor([[0, 11, 2]] * 4, device="neuron")
    with pytest.raises(RuntimeIndexError) as caught:
        line = inspect.currentframe().f_lineno + 1
        torch.gather(x, 1, index)
    message = str(caught.value)
    # (gather.out when the call reaches the device through gather's composite kernel, gather.default when a direct
    # kernel is registered for it: the op is named either way)
    assert re.match(rf"aten\.gather\.(out|default) at {re.escape(__file__)}:{line}: ", message), message
    assert "index 11 is out of bounds for dimension 1 with size 8 (operand 'index', int64[4, 3])" in message
    assert isinstance(caught.value, RuntimeError) and caught.value.location == f"{__file__}:{line}"
    weight = torch.randn(3, 2, device="neuron")
    with pytest.raises(IndexError, match="index 7 is out of bounds for dimension 0 with size 3"):  # eager's words
        torch.nn.functional.embedding(torch.tensor([7], device="neuron"), weight)  # leave the value out: the kernel's
    with pytest.raises(IndexError, match=r"index 9 is out of bounds .* \(operand 'indices', int64\[2\]\)"):
        x[torch.tensor([1, 9], device="neuron")]  # a list operand (aten.index's indices) named as the front end does

    def gather(x, index):
        return torch.gather(x * 2, 1, index)

    line = inspect.getsourcelines(gather)[1] + 1
    with pytest.raises(RuntimeIndexError, match=f"aten.gather.default at {__file__}:{line} \\(in gather\\): "
                       "index 11 is out of bounds for dimension 1 with size 8"):
        torch.compile(gather, backend="neuron")(x, index)


def test_integer_division_by_zero_raises_eagers_error_naming_the_op_the_divisor_and_the_line():
    from neuroncc.errors import RuntimeZeroDivisionError

    x, y = torch.tensor([5, 3], device="neuron"), torch.tensor([0, 2], device="neuron")
    for divide in (lambda: x // y, lambda: x % y, lambda: torch.fmod(x, y), lambda: x // 0,
                   lambda: torch.div(x, y, rounding_mode="trunc")):
        with pytest.raises(RuntimeZeroDivisionError) as caught:
            divide()
        error = caught.value
        assert isinstance(error, RuntimeError) and isinstance(error, ZeroDivisionError)
        assert f" at {__file__}:" in str(error) and ": integer division by zero (divisor: operand '" in str(error)
        assert "ZeroDivisionError" in str(error.__cause__)  # the CPU kernel's own error, eager's
    with pytest.raises(RuntimeZeroDivisionError) as caught:
        line = inspect.currentframe().f_lineno + 1
        x.remainder_(y)
    assert f" at {__file__}:{line}: integer division by zero (divisor: operand 'other', int64[2])" in \
        str(caught.value), str(caught.value)
    assert torch.equal((x // (y + 1)).cpu(), torch.tensor([5, 1]))
    assert torch.equal((x.float() / y).cpu(), torch.tensor([float("inf"), 1.5]))  # float division: IEEE


def test_stats_report_the_eager_counters():
    x = torch.randn(5, device="neuron")
    (x + 1).neg()
    counts = neuroncc.stats()
    assert counts["eager_device_calls"] >= 2 and "eager_kernels_compiled" in counts
    neuroncc.reset_stats()
    assert neuroncc.stats()["eager_device_calls"] == 0


def test_bfloat16_and_half_ops():
    for dtype in (torch.bfloat16, torch.float16):
        x = torch.randn(4, 6).to(dtype)
        torch.testing.assert_close((x.to("neuron") * 1.5 + 1).cpu(), x * 1.5 + 1)
        torch.testing.assert_close(x.to("neuron").float().sum(0).cpu(), x.float().sum(0))



def test_bf16_views_that_are_not_dense():
    """A bf16 tensor reaches its kernel converted to float32, in the strides the kernel was compiled for: a
    slice of each row (GPT-2's key and value heads, split from one projection) read rows past its own when the
    conversion made it contiguous (NaN in a bf16 GPT-2's attention on the device); an expanded view (ViT's CLS
    token) overlaps itself."""
    base = torch.randn(2, 8, 96).to(torch.bfloat16)
    views = [lambda t: t[..., 32:64], lambda t: t[..., :32].view(2, 8, 4, 8).transpose(1, 2),
             lambda t: t[:, :1, 64:].expand(2, 8, 32)]
    for view in views:
        for op in (lambda v: v * 2 + 1, lambda v: torch.cat([v, v], dim=1)):
            got = op(view(base.to("neuron"))).cpu()
            torch.testing.assert_close(got.double(), op(view(base)).double(), rtol=1e-2, atol=1e-2)


def test_torch_equal_runs_on_the_device():
    a = torch.randn(3, 4)
    n = a.to("neuron")
    nan = torch.tensor([float("nan"), 1.0])
    cases = [(n, n.clone()), (n, n + 1), (n, n[:2]), (n[:0], n[:0].clone()), (nan.to("neuron"), nan.to("neuron")),
             (torch.arange(4).to("neuron"), torch.arange(4).to("neuron"))]
    for x, y in cases:
        assert torch.equal(x, y) == torch.equal(x.cpu(), y.cpu())
    assert neuroncc.get_fallback_ops() == {}
    assert neuroncc.get_executed_ops()["aten.equal.default"] == len(cases)


def test_batch_norm_backward_of_the_new_batch_norm_op_runs_on_the_device():
    """aten._batch_norm_with_update's derivative is aten.batch_norm_backward: computed as native_batch_norm_backward."""
    weight, bias = torch.rand(3) + 0.5, torch.randn(3)
    x = torch.randn(2, 3, 4, 4)
    grads = {}
    for device in ("cpu", "neuron"):
        inputs = [t.detach().to(device).requires_grad_() for t in (x, weight, bias)]
        out = torch.ops.aten._batch_norm_with_update(*inputs, torch.zeros(3, device=device),
                                                     torch.ones(3, device=device), 0.1, 1e-5)[0]
        out.square().sum().backward()
        grads[device] = [t.grad.cpu() for t in inputs]
    for expected, actual in zip(grads["cpu"], grads["neuron"]):
        torch.testing.assert_close(actual, expected, rtol=1e-4, atol=1e-4)
    assert neuroncc.get_fallback_ops() == {}
    assert "aten.native_batch_norm_backward.default" in neuroncc.get_executed_ops()


def _cholesky_solve(t):
    factor = torch.linalg.cholesky(t[1, :, :6] @ t[1, :, :6].mT + 6 * torch.eye(6, device=t.device))
    return torch.cholesky_solve(t[0, :, :3], factor)


@pytest.mark.parametrize("name, fn", [
    ("cummax", lambda t: torch.cummax(t, -1)), ("cummin", lambda t: torch.cummin(t, 0)),
    ("logcumsumexp", lambda t: torch.logcumsumexp(t, 1)), ("cholesky_solve", _cholesky_solve)])
def test_ops_whose_composite_kernel_calls_an_op_without_a_meta_kernel_run_on_the_device(name, fn):
    """``cummax``, ``cummin``, ``logcumsumexp`` and ``cholesky_solve`` are registered for the device at once
    (registration.REGISTERED_AT_ONCE): their composite kernels call helpers (``_cummax_helper``, ``_logcumsumexp``,
    ``_cholesky_solve_helper``) without a meta kernel, so every call fell back to CPU before session 44. Forward
    (values and indices) and backward match CPU, with no fallback."""
    cpu = torch.randn(3, 6, 7, requires_grad=True)
    device = cpu.detach().to("neuron").requires_grad_()
    expected, actual = fn(cpu), fn(device)
    expected, actual = (expected, actual) if isinstance(expected, tuple) else ((expected,), (actual,))
    for e, a in zip(expected, actual):
        assert a.device.type == "neuron" and a.dtype == e.dtype
        torch.testing.assert_close(a.cpu(), e, rtol=1e-4, atol=1e-5)
    expected[0].pow(2).sum().backward()
    actual[0].pow(2).sum().backward()
    torch.testing.assert_close(device.grad.cpu(), cpu.grad, rtol=1e-4, atol=1e-5)
    assert neuroncc.get_fallback_ops() == {}


@pytest.mark.parametrize("mode", ["bilinear", "bicubic", "nearest-exact"])
def test_ops_torch_decomposes_but_the_front_end_table_does_not_run_on_the_device(mode):
    """torch.compile sees interpolate's .vec overloads, decomposed early; the device is handed the op itself."""
    x = torch.randn(2, 3, 5, 6)
    expected = F.interpolate(x, scale_factor=1.5, mode=mode)
    actual = F.interpolate(x.to("neuron"), scale_factor=1.5, mode=mode)
    torch.testing.assert_close(actual.cpu(), expected, rtol=1e-4, atol=1e-4)
    assert neuroncc.get_fallback_ops() == {}


@pytest.mark.parametrize("name, fn", [
    ("bilinear", lambda t: F.interpolate(t, scale_factor=1.5, mode="bilinear")),
    ("nearest", lambda t: F.interpolate(t, size=(7, 9), mode="nearest")),
    ("replicate_pad", lambda t: F.pad(t, (1, 2, 2, 1), mode="replicate")),
    ("hardshrink", lambda t: F.hardshrink(t, 0.3)),
    ("softshrink", lambda t: F.softshrink(t, 0.3)),
])
def test_ops_whose_backward_op_neuroncc_lacks_are_differentiated_through_their_decomposition(name, fn):
    x = torch.randn(2, 3, 5, 6)
    cpu, neuron = x.clone().requires_grad_(), x.to("neuron").requires_grad_()
    expected, actual = fn(cpu), fn(neuron)
    grad = torch.randn_like(expected)
    expected.backward(grad)
    actual.backward(grad.to("neuron"))
    torch.testing.assert_close(actual.cpu(), expected.detach(), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(neuron.grad.cpu(), cpu.grad, rtol=1e-5, atol=1e-5)
    assert neuroncc.get_fallback_ops() == {}
    neuroncc.clear_op_tracking()
    with torch.no_grad():  # nothing to differentiate: the op itself, one kernel
        torch.testing.assert_close(fn(x.to("neuron")).cpu(), fn(x))
    assert neuroncc.get_fallback_ops() == {}
    assert len(neuroncc.get_executed_ops()) == 1, neuroncc.get_executed_ops()


def test_autograd_zero_gradients_and_ops_that_write_an_argument_and_return_a_new_tensor():
    x = torch.randn(3, 4)
    on_device = x.to("neuron").requires_grad_()
    torch.sgn(on_device).sum().backward()  # sgn's derivative is an _efficientzerotensor on the device
    torch.testing.assert_close(on_device.grad.cpu(), torch.zeros(3, 4))
    torch.manual_seed(0)
    expected = F.rrelu(x, training=True)  # rrelu_with_noise writes its noise argument and returns a new tensor
    torch.manual_seed(0)
    torch.testing.assert_close(F.rrelu(x.to("neuron"), training=True).cpu(), expected)


def test_python_numbers_the_dispatcher_passes_for_tensor_parameters():
    """remainder(int tensor, 12) reaches the device as remainder.Tensor_out(self, 12): 12 stood for a 0-d tensor."""
    index = torch.tensor([0, 5, -1, 7])
    torch.testing.assert_close(torch.remainder(index.to("neuron"), 3).cpu(), torch.remainder(index, 3))
    x, where = torch.randn(3, 4), torch.tensor([[0], [1], [-1]])
    torch.testing.assert_close(torch.take_along_dim(x.to("neuron"), where.to("neuron"), dim=1).cpu(),
                               torch.take_along_dim(x, where, dim=1))
    assert neuroncc.get_fallback_ops() == {}


def test_stats_name_the_eager_counters_before_the_first_op(warm_python):
    result = run_python("import torch, neuroncc; print(neuroncc.stats()['eager_kernels_compiled'])", python=warm_python)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["0"]


def test_a_python_float_under_a_float64_default_dtype_computes_like_cpu():
    """A Python float in a Tensor parameter is wrapped as float32 whatever the default dtype: a float64 one
    gave the call a signature the device runs as float32, i.e. the wrapping entry again (RecursionError)."""
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        x = torch.arange(4, dtype=torch.float32)
        got = x.to("neuron") * 0.5
        assert got.dtype == torch.float32
        torch.testing.assert_close(got.cpu(), x * 0.5)
    finally:
        torch.set_default_dtype(previous)


def test_a_process_whose_first_device_op_is_a_convolution_trains_it(tmp_path, warm_python):
    # ATen sends a convolution on an unknown backend to convolution_overrideable, whose PrivateUse1 entry in
    # PyTorch only raises; its kernel was registered when the first op reached the device's fallback, so a
    # process that ran a convolution (with grad) before any such op raised NotImplementedError
    code = """
import torch
torch.manual_seed(0)
conv = torch.nn.Conv2d(3, 4, 3, padding=1, bias=False)
x = torch.randn(2, 3, 6, 6)
ours = torch.nn.Conv2d(3, 4, 3, padding=1, bias=False).to("neuron")
ours.load_state_dict(conv.state_dict())
y, expected = ours(x.to("neuron")), conv(x)
y.square().sum().backward(); expected.square().sum().backward()
torch.testing.assert_close(y.cpu(), expected, rtol=1e-5, atol=1e-5)
torch.testing.assert_close(ours.weight.grad.cpu(), conv.weight.grad, rtol=1e-4, atol=1e-4)
print("ok")
"""
    done = run_python(code, {"NEURONCC_CACHE_DIR": str(tmp_path / "cache")}, python=warm_python)
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stderr[-2000:]


def test_a_structured_ops_first_call_takes_its_own_kernel_and_builds_one_program(tmp_path, warm_python):
    # a structured op's functional overload has a generic kernel that calls its out= overload; when that reached the
    # device's fallback, the family took device kernels, so each op's first call ran as out= (a program of its
    # own) and its second call built the functional's program: two kernels for bf16 clamp's values 0.25 and 0.6
    # (lifted: one kernel would serve both), mm/addmm/softmax built twice in a training step. Now only the
    # process's first op comes as out=.
    code = """
import json, torch, neuroncc
from neuroncc.device import dispatch
x = torch.randn(64).to(torch.bfloat16).to("neuron")
x.neg()  # the process's first op
def kernels():
    stats = neuroncc.stats()
    return stats["eager_kernels_compiled"] + stats["eager_kernels_loaded"]
neuroncc.clear_op_tracking()
before = kernels()
for value in (0.25, 0.6, 1.7):
    got = x.clamp(value)
    assert torch.equal(got.cpu().view(torch.int16), x.cpu().clamp(value).view(torch.int16)), value
a, b = torch.randn(8, 16).to("neuron"), torch.randn(16, 4).to("neuron")
for _ in range(2):
    torch.testing.assert_close((a @ b).softmax(-1).cpu(), (a.cpu() @ b.cpu()).softmax(-1))
out_entries = sorted(str(h.op) for h in dispatch.handlers() if h.entries and str(h.op).endswith("out"))
print(json.dumps([kernels() - before, sorted(neuroncc.get_executed_ops()), out_entries]))
"""
    done = run_python(code, {"NEURONCC_CACHE_DIR": str(tmp_path / "cache")}, python=warm_python)
    assert done.returncode == 0, done.stderr[-2000:]
    made, executed, out_entries = json.loads(done.stdout.strip().splitlines()[-1])
    assert executed == ["aten._softmax.default", "aten.clamp.default", "aten.mm.default"]
    assert out_entries == ["aten.neg.out"]  # (the first op's)
    assert made == 3  # clamp's lifted kernel, mm's and softmax's


def test_tied_parameters_stay_tied_through_to_neuron_and_train_as_one():
    # GPT-2's lm_head.weight is its wte.weight: Module._apply keeps the Parameter objects (as on CUDA) only where the
    # two tensors are shallow-copy compatible; it gave each module its own copy, and the tie trained apart
    torch.manual_seed(0)
    cpu = torch.nn.ModuleDict({"embed": torch.nn.Embedding(16, 8), "head": torch.nn.Linear(8, 16, bias=False)})
    cpu["head"].weight = cpu["embed"].weight
    device = copy.deepcopy(cpu).to("neuron")
    assert device["head"].weight is device["embed"].weight and device["head"].weight.device.type == "neuron"
    tokens = torch.tensor([[1, 5, 7, 2]])
    for model, where in ((cpu, "cpu"), (device, "neuron")):
        loss = F.cross_entropy(model["head"](model["embed"](tokens.to(where)))[0], tokens[0].to(where))
        loss.backward()
    torch.testing.assert_close(device["embed"].weight.grad.cpu(), cpu["embed"].weight.grad, rtol=1e-5, atol=1e-6)
    back = device.to("cpu")
    assert back["head"].weight is back["embed"].weight and back["head"].weight.device.type == "cpu"


def test_fills_of_any_value_share_one_kernel_and_overflow_as_eager():
    """``fill_``'s value is a kernel argument (a diffusion loop's ``torch.full((n,), t)`` per step compiled a kernel
    per step before session 45); a value beyond the dtype's range raises eager's error, a NaN or infinity fills."""
    neuroncc.reset_stats()
    for step in range(12):
        value = 0.37 * step - 1.1
        torch.testing.assert_close(torch.full((3, 41), value, device="neuron").cpu(), torch.full((3, 41), value),
                                   rtol=0, atol=0)
    assert neuroncc.stats()["eager_kernels_compiled"] <= 1
    bits = {torch.float32: torch.int32, torch.bfloat16: torch.int16, torch.float16: torch.int16}
    for dtype, view in bits.items():
        for value in (-0.0, float("nan"), float("-inf"), 1e-40, 65504.0, 1e5, 3.3e38, 1e39):
            try:
                expected = torch.full((2, 7), value, dtype=dtype)
            except RuntimeError as error:
                with pytest.raises(RuntimeError, match=re.escape(str(error))):
                    torch.full((2, 7), value, dtype=dtype, device="neuron")
                continue
            got = torch.empty((2, 7), dtype=dtype, device="neuron").fill_(value).cpu()
            assert torch.equal(got.view(view), expected.view(view)), (dtype, value)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_floats_eager_converts_with_an_overflow_check_raise_eagers_error(dtype):
    """masked_fill, index_fill, clamp and hardtanh convert their floats to the tensor's dtype as fill does: a
    finite value beyond its range raises eager's error (the device's kernels took it as inf before session 45);
    values in range, infinities and NaN give eager's bits (a NaN bound of clamp or hardtanh fills the result with NaN,
    as eager's: the device ignored it before session 46)."""
    x = torch.randn(4, 6).to(dtype)
    mask = x > 0
    ops = {"masked_fill": lambda t, m, v: t.masked_fill(m, v),
           "masked_fill_": lambda t, m, v: t.clone().masked_fill_(m, v),
           "index_fill": lambda t, m, v: t.index_fill(1, torch.tensor([0, 2], device=t.device), v),
           "clamp": lambda t, m, v: t.clamp(-1.0, v), "clamp_min": lambda t, m, v: t.clamp_min(-v),
           "clamp_max": lambda t, m, v: t.clamp_max(v), "hardtanh": lambda t, m, v: F.hardtanh(t, -v, v)}
    view = torch.int32 if dtype is torch.float32 else torch.int16
    for name, op in ops.items():
        for value in (0.5, float("inf"), float("nan"), 1e5, 4e38, 1e39):
            try:
                expected = op(x, mask, value)
            except RuntimeError as error:
                with pytest.raises(RuntimeError, match=re.escape(str(error))):
                    op(x.to("neuron"), mask.to("neuron"), value)
                continue
            got = op(x.to("neuron"), mask.to("neuron"), value).cpu()
            if name.startswith(("clamp", "hardtanh")) and math.isnan(value):
                # NaN everywhere; its sign bit (clamp_min(-nan) keeps the bound's) is not told apart yet
                assert got.isnan().all() and expected.isnan().all(), (name, value)
                continue
            assert torch.equal(got.view(view), expected.view(view)), (name, value)


@pytest.mark.parametrize("start, end, steps", [(0.0, 1.5, 7), (0.5, 2.5, 5), (2.0, -7.5, 33), (-1.0, 1.0, 100)])
def test_factories_of_two_floats_compute_from_each_calls_floats(start, end, steps):
    """A kernel's floats are lifted when two builds with other sentinel values import the same IR; derived from
    two floats (linspace's step is their difference), a constant matched across builds whose sentinels were
    equally spaced, and ``linspace(0.0, 1.5, 7)`` kept the sentinels' step (3e-7) before session 45."""
    for make in (torch.linspace, torch.logspace):
        torch.testing.assert_close(make(start, end, steps, device="neuron").cpu(), make(start, end, steps),
                                   rtol=1e-6, atol=1e-6)
    x = torch.linspace(-3, 3, 61)
    low, high = start, start + 0.75
    torch.testing.assert_close(torch.clamp(x.to("neuron"), low, high).cpu(), torch.clamp(x, low, high))
    torch.testing.assert_close(torch.arange(start, start + 4.0, 0.25, device="neuron").cpu(),
                               torch.arange(start, start + 4.0, 0.25))


def test_a_value_the_meta_kernel_refuses_leaves_the_signatures_other_values_on_the_device():
    """An ``arange`` whose step has the wrong sign raises eager's error, before and after valid calls of the same
    signature, which run on the device (before session 45 the refused signature's entry sent every later value to
    CPU, and after a valid call the wrong sign recursed until Python's limit: its out= tensor needed no resize, so
    the call came back to the entry that resizes)."""
    neuroncc.reset_stats()
    for _ in range(2):
        with pytest.raises(RuntimeError, match="inconsistent with step sign"):
            torch.arange(0.0, 10.0, -1.0, device="neuron")
        with warnings.catch_warnings():
            warnings.simplefilter("error", DeviceFallbackWarning)
            got = torch.arange(0.0, 10.0, 0.5, device="neuron").cpu()
        assert torch.equal(got, torch.arange(0.0, 10.0, 0.5))
    assert neuroncc.stats()["eager_fallback_calls"] == 0


def test_kernels_built_per_float_value_tell_signed_zeros_apart():
    """``min=-0.0`` after ``min=0.0`` gives eager's signed zeros: clamp's bounds were built into its kernel
    (entries.ByFloatValue), keyed by ``tuple(floats)``, where 0.0 == -0.0, before session 45; kernel arguments
    since session 46, which carry the sign."""
    x = torch.tensor([-1.0, -0.0, 0.5, 2.0, -3.0])
    for low in (0.0, -0.0, 0.0):
        got, expected = x.to("neuron").clamp(low, 1.0).cpu(), x.clamp(low, 1.0)
        assert torch.equal(got.view(torch.int32), expected.view(torch.int32)), low
