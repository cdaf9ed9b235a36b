"""Floats a decomposition derives a constant from, eager's errors for refused values, addmm's scalars and the NaN
sign of clamp_min/clamp_max (session 47).

``celu`` (which reaches the device as ``elu(x, alpha, 1.0, 1 / alpha)``: ``alpha * scale``), ``huber_loss``
(``0.5 * delta``, ``-delta`` in its backward), ``smooth_l1_loss`` (``0.5 * beta``) and ``logit`` (``1 - eps``)
compiled a kernel per value before session 47: their decompositions compute a constant from the float in Python,
which the lifting could not find. The stand-ins now record that arithmetic, and the constant is a kernel argument
each call computes as the decomposition did (``Program.derived``): the per-value kernels' bits, one kernel.
"""

from __future__ import annotations

import json
import math

import pytest
import torch
import torch.nn.functional as F

import neuroncc
from device.test_float_arguments import BITS, FLOATS, INF, NAN, assert_same_bits, two_warm_processes
from neuroncc.device import dispatch, programs, signature_index
from neuroncc.device.stand_ins import evaluate, well_formed


def _compiled() -> int:
    return neuroncc.stats()["eager_kernels_compiled"] + neuroncc.stats()["eager_kernels_loaded"]


def _forget_entries() -> None:
    for handler in dispatch.handlers():
        handler.entries.clear()


def _values_input(dtype: torch.dtype) -> torch.Tensor:
    special = torch.tensor([-3.0, -1.0, -0.0, 0.0, 0.5, 2.0, NAN, INF, -INF, 1e-3, -0.25, 0.75, 1e-20, -80.0])
    return torch.cat([special, torch.randn(30, generator=torch.Generator().manual_seed(47)) * 2]).to(dtype)


def _probabilities(dtype: torch.dtype) -> torch.Tensor:
    special = torch.tensor([0.0, 1.0, -0.0, 0.5, 1e-8, 0.999, 1e-3, NAN, 2.0, -1.0, INF, 0.3])
    return torch.cat([special, torch.rand(30, generator=torch.Generator().manual_seed(47))]).to(dtype)


def _target(x: torch.Tensor) -> torch.Tensor:
    return torch.linspace(-3, 3, x.numel(), dtype=torch.float32).reshape(x.shape).to(x.dtype).to(x.device)


POSITIVE = (0.25, 0.1, 1 / 3, 0.6, 1.7, 7.5, 1e-3, 123.456, 3e-8, 1e30, INF)
#: name: (the call, its input, its floats' values)
DERIVED = {
    "celu": (lambda x, v: F.celu(x, v), _values_input, (0.25, 0.1, 1 / 3, 0.6, 1.7, 7.5, 1e-3, -0.7, -2.0)),
    "huber_loss": (lambda x, v: F.huber_loss(x, _target(x), reduction="none", delta=v), _values_input, POSITIVE),
    "huber_loss(mean)": (lambda x, v: F.huber_loss(x, _target(x), delta=v), _values_input, POSITIVE),
    "smooth_l1_loss": (lambda x, v: F.smooth_l1_loss(x, _target(x), reduction="none", beta=v), _values_input,
                       POSITIVE),
    "smooth_l1_loss(sum)": (lambda x, v: F.smooth_l1_loss(x, _target(x), reduction="sum", beta=v), _values_input,
                            POSITIVE),
    "logit": (lambda x, v: torch.logit(x, v), _probabilities, (0.1, 1 / 3, 2e-3, 1e-6, 0.25, 0.45, 0.0, 1e-30)),
}
#: (op, dtype, backward) whose device results are CPU eager's bits for those values (the per-value kernels' were;
#: the others differ from eager as before session 47: the decompositions' formulas, not the floats)
EAGER_BITS = {
    *((name, dtype, False) for name in ("huber_loss(mean)", "smooth_l1_loss(sum)") for dtype in FLOATS),
    *(("huber_loss", dtype, False) for dtype in (torch.float32, torch.float16)),
    *(("smooth_l1_loss", dtype, False) for dtype in (torch.float32, torch.bfloat16)),
    *((name, dtype, False) for name in ("celu", "logit") for dtype in (torch.bfloat16, torch.float16)),
}


def _run(call, x: torch.Tensor, value: float, backward: bool) -> torch.Tensor:
    if not backward:
        return call(x, value)
    x = x.detach().clone().requires_grad_()
    out = call(x, value)
    out.backward(torch.linspace(-2, 2, out.numel()).reshape(out.shape).to(out.dtype).to(out.device))
    return x.grad


@pytest.mark.parametrize("backward", [False, True], ids=["forward", "backward"])
@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("name", DERIVED)
def test_derived_constants_compile_one_kernel_with_the_per_value_kernels_bits(name, dtype, backward, monkeypatch):
    call, make_input, values = DERIVED[name]
    x = make_input(dtype)
    on_device = x.to("neuron")
    # (an op's first call anywhere goes through its out= form, a signature of its own; this test's are the next)
    _run(call, on_device[:-2], values[0], backward)
    results = []
    for position, value in enumerate(values):
        results.append(_run(call, on_device, value, backward).cpu())
        if position == 0:
            compiled = _compiled()
    assert _compiled() == compiled, f"{name}: a kernel per value"
    # each value's own kernel, built with it (the device's path for these ops before session 47): the same bits
    monkeypatch.setattr(programs, "_lifted", lambda *args, **kwargs: None)
    monkeypatch.setattr(signature_index.Slot, "of", staticmethod(lambda *args: None))  # (nor the lifted ones
    monkeypatch.setattr(signature_index.Slot, "of_values", staticmethod(lambda *args: None))  # indexed)
    _forget_entries()
    try:
        for value, result in zip(values, results):
            assert_same_bits(result, _run(call, on_device, value, backward).cpu(), (name, value, "per value"))
            if (name, dtype, backward) in EAGER_BITS:
                assert_same_bits(result, _run(call, x, value, backward), (name, value, "eager"))
            else:  # (the backward decompositions' gradient at a NaN input is a number where eager's is NaN, and
                # bf16/f16 logit's at 0 and 1 for an eps that rounds to 0 there: reliability.md, as before session 47)
                kept = ~x.isnan() & (x != 0) & (x != 1) if backward else torch.ones_like(result, dtype=torch.bool)
                torch.testing.assert_close(result[kept], _run(call, x, value, backward)[kept], equal_nan=True,
                                           rtol=0.02 if dtype is torch.float32 else 0.1, atol=1e-4 if dtype is
                                           torch.float32 else 0.05, msg=lambda text: f"{name} {value}: {text}")
    finally:
        _forget_entries()  # (no entry of the per-value builds left for later tests)


#: calls eager refuses by their floats' values, with eager's message: the device raises it too (before session 47
#: it computed a result, or raised its own CannotCompile)
REFUSED = [
    ("smooth_l1_loss", lambda x, v: F.smooth_l1_loss(x, _target(x), beta=v), (-1.0, NAN, -INF)),
    ("huber_loss", lambda x, v: F.huber_loss(x, _target(x), delta=v), (-1.0, 0.0, NAN)),
    ("celu", lambda x, v: F.celu(x, v), (1e-40, 1e300)),
    ("elu", lambda x, v: F.elu(x, v), (1e300, -1e39)),
    ("logit", lambda x, v: torch.logit(x, v), (1e300,)),
    ("logit(float16)", lambda x, v: torch.logit(x.half(), v), (1e5,)),
]


@pytest.mark.parametrize("first", [True, False], ids=["first call", "after a valid value"])
@pytest.mark.parametrize("name, call, refused", REFUSED, ids=[case[0] for case in REFUSED])
def test_values_eager_refuses_raise_eagers_error(name, call, refused, first):
    x = torch.rand(7, 5) * 0.9 + 0.05
    on_device = x.to("neuron") if first else x.to("neuron")[:6]  # (another signature: a new entry)
    if not first:
        call(on_device, 0.3)
    for value in refused:
        with pytest.raises(RuntimeError) as eager:
            call(x, value)
        with pytest.raises(RuntimeError, match=str(eager.value).splitlines()[0].replace(".", r"\.")):
            call(on_device, value)
    call(on_device, 0.35)  # (the signature's valid values still run)


@pytest.mark.parametrize("form", ["addmm", "addmm_", "addmm.out"])
def test_addmm_with_float_scalars_compiles_no_kernel_per_value(form):
    """beta/alpha are built into the compiled BLAS call: the first values keep their kernel, the others run
    ATen's kernel on the device's memory (before session 47: a kernel per value, ~3 ms each); eager's bits."""
    bias = torch.randn(8, 16)
    bias[0, 0] = NAN  # (beta = 0 drops it: eager's addmm does not read the bias then)
    m1, m2 = torch.randn(8, 32), torch.randn(32, 16)

    def call(b, x, y, beta, alpha):
        if form == "addmm":
            return torch.addmm(b, x, y, beta=beta, alpha=alpha)
        if form == "addmm_":
            return b.clone().addmm_(x, y, beta=beta, alpha=alpha)
        out = torch.empty_like(b)
        torch.addmm(b, x, y, beta=beta, alpha=alpha, out=out)
        return out

    call(*(torch.ones(2, 2, device="neuron") for _ in range(3)), 0.5, 1.0)  # (the op's first call anywhere goes
    # through its out= form, a signature of its own: not this test's)
    device = [t.to("neuron") for t in (bias, m1, m2)]
    scalars = [(0.5, 1.0), (0.25, 1.0), (1.0, 0.3), (0.0, 2.0), (1 / 3, 0.1), (0.5, 1.0), (2.5, -1.5)]
    for position, (beta, alpha) in enumerate(scalars):
        got = call(*device, beta, alpha)
        assert torch.equal(got.cpu().view(torch.int32), call(bias, m1, m2, beta, alpha).view(torch.int32)), \
            (beta, alpha)
        if position == 0:
            compiled = _compiled()
    assert _compiled() == compiled


NEGATIVE_NAN = math.copysign(NAN, -1.0)
CLAMPS = {
    "clamp_min": lambda t, b: t.clamp_min(b),
    "clamp_max": lambda t, b: t.clamp_max(b),
    "clamp_min_": lambda t, b: t.clone().clamp_min_(b),
    "clamp_max(out=)": lambda t, b: torch.clamp_max(t, b, out=torch.empty_like(t)),
    "clamp(min=)": lambda t, b: t.clamp(min=b),
    "clamp(max=)": lambda t, b: t.clamp(max=b),
    "clamp(b, b)": lambda t, b: t.clamp(b, b),
    "clamp(-1, b)": lambda t, b: t.clamp(-1.0, b),
    "hardtanh(b, b)": lambda t, b: F.hardtanh(t, b, b),
}


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("name", CLAMPS)
def test_a_nan_bound_gives_eagers_nan_bits_on_the_device_and_through_torch_compile(name, dtype):
    """Eager's clamp_min/clamp_max return a NaN bound itself: -nan everywhere for a float32 or float16 tensor
    (bfloat16's kernel, clamp's and hardtanh's give +nan); the NaN's bits compared, not only its place."""
    op = CLAMPS[name]
    x = torch.tensor([-3.0, -0.0, 0.0, 2.0, NAN, INF, -INF]).to(dtype)
    for bound in (NEGATIVE_NAN, NAN, NEGATIVE_NAN):
        expected = op(x, bound).view(BITS[dtype])
        assert torch.equal(op(x.to("neuron"), bound).cpu().view(BITS[dtype]), expected), (name, bound, "device")
        torch._dynamo.reset()
        compiled = torch.compile(op, backend="neuron", dynamic=False)
        assert torch.equal(compiled(x, bound).view(BITS[dtype]), expected), (name, bound, "compiled")


def test_an_integer_tensors_negative_nan_bound():
    x = torch.tensor([-3, 0, 5], dtype=torch.int32)
    for op in (CLAMPS["clamp_min"], CLAMPS["clamp_max"]):
        assert torch.equal(op(x.to("neuron"), NEGATIVE_NAN).cpu().view(torch.int32),
                           op(x, NEGATIVE_NAN).view(torch.int32))


def test_a_warm_process_compiles_nothing_for_new_derived_values(tmp_path, warm_python):
    """The signature index records the derived floats' expressions: a second process with other values loads
    the kernels and computes them."""
    code = ("import json, sys, torch, neuroncc, torch.nn.functional as F\n"
            "v = {value}\n"
            "x = torch.rand(6, 7, device='neuron') * 0.9 + 0.05; h = x.to(torch.bfloat16); t = x.flip(0)\n"
            "r = [F.celu(x, v), F.celu(h, v), F.huber_loss(x, t, delta=v), F.smooth_l1_loss(x, t, beta=v),\n"
            "     torch.logit(x, v / 4)]\n"
            "c = x.cpu(); e = [F.celu(c, v), F.celu(h.cpu(), v), F.huber_loss(c, t.cpu(), delta=v),\n"
            "     F.smooth_l1_loss(c, t.cpu(), beta=v), torch.logit(c, v / 4)]\n"
            "ok = all(torch.allclose(a.cpu().float(), b.float(), atol=1e-2, equal_nan=True) for a, b in zip(r, e))\n"
            "s = neuroncc.stats(); print(json.dumps([s['eager_kernels_compiled'], s['eager_kernels_loaded'], ok]))")
    (compiled, _, first_ok), (compiled_again, loaded, ok) = two_warm_processes(code, tmp_path, warm_python)
    assert compiled >= 5 and first_ok
    assert compiled_again == 0 and loaded >= compiled and ok


def test_derivations_are_data_the_index_checks():
    """A derived float's expression evaluates from a call's floats (as JSON lists too); a record naming anything
    but float arithmetic is refused."""
    expression = ("__mul__", ("number", 0.5), ("__rsub__", ("float", 1), ("number", 1)))
    assert evaluate(expression, [2.0, 0.25]) == 0.5 * (1 - 0.25)
    assert evaluate(json.loads(json.dumps(expression)), [2.0, 0.25]) == 0.375
    assert well_formed(json.loads(json.dumps(expression)))
    assert not well_formed(["__import__", ["float", 0]])
    assert not well_formed(["float", -1]) and not well_formed(["number", "x"]) and not well_formed([])


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_elu_keeps_x_at_zero_for_every_alpha(dtype):
    """ATen's elu computes x * scale for x >= 0: x = +-0 is x for an infinite or NaN alpha too (and -0 for a
    negative one), where PyTorch's reference's ``x > 0`` gave alpha * expm1(+-0), NaN (session 46's deviation)."""
    x = torch.tensor([0.0, -0.0, -1.0, 1.0, -1e-30, 2.5, -0.5, 0.0]).to(dtype)
    for alpha in (INF, -INF, NAN, -1.5, 0.7):
        expected = F.elu(x, alpha)
        assert_same_bits(F.elu(x.to("neuron"), alpha), expected, (alpha, "device"))
        torch._dynamo.reset()
        assert_same_bits(torch.compile(lambda t: F.elu(t, alpha), backend="neuron", dynamic=False)(x), expected,
                         (alpha, "compiled"))

