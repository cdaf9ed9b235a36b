"""Ops whose Python floats are kernel arguments: one kernel for every value, eager's bits for each (session 46).

``clamp``'s bounds (and ``clamp_min``, ``clamp_max``, ``hardtanh``, which are clamps) are attributes of the IR's
clamp, which the lifting passes as 0-d operands (``OpDef.operand_attrs``); ``leaky_relu``, ``elu``, ``softplus``,
``addcmul`` and ``lerp`` go through PyTorch's references, whose number-type checks failed on the lifting's
stand-ins. Before session 46 each compiled a kernel per value (~10 ms each, an entry in the bounded cache). And
clamp's NaN bound: eager fills the result with NaN, the device and torch.compile ignored it before session 46.
"""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
import torch
import torch.nn.functional as F

import neuroncc
from device.conftest import run_python

NAN, INF = float("nan"), float("inf")
BITS = {torch.float32: torch.int32, torch.bfloat16: torch.int16, torch.float16: torch.int16}
FLOATS = (torch.float32, torch.bfloat16, torch.float16)


def assert_same_bits(got: torch.Tensor, expected: torch.Tensor, what: object) -> None:
    """Equal NaN positions, and the other elements bit for bit (signed zeros told apart)."""
    got = got.cpu()
    assert got.dtype == expected.dtype and got.shape == expected.shape, what
    assert torch.equal(got.isnan(), expected.isnan()), (what, got, expected)
    numbers = ~expected.isnan()
    assert torch.equal(got[numbers].view(BITS[got.dtype]), expected[numbers].view(BITS[got.dtype])), \
        (what, got, expected)


def _input(dtype: torch.dtype) -> torch.Tensor:
    special = torch.tensor([-3.0, -1.0, -0.0, 0.0, 0.5, 2.0, NAN, INF, -INF, 1e-3, -0.25, 0.75])
    return torch.cat([special, torch.randn(29) * 2]).to(dtype)


# ---- a NaN bound -----------------------------------------------------------------------------------------

#: bounds eager gives every element NaN for, and others beside them (min > max: max wins; signed zeros)
BOUNDS = [(NAN, None), (None, NAN), (-1.0, NAN), (NAN, 1.0), (NAN, NAN), (1.0, -1.0), (0.0, -0.0), (-0.0, None),
          (None, -0.0), (0.0, None), (-INF, INF), (0.1, 0.7)]
CLAMPS = {
    "clamp": lambda t, low, high: t.clamp(low, high),
    "clamp_": lambda t, low, high: t.clone().clamp_(low, high),
    "clamp_min": lambda t, low, high: t.clamp_min(low) if low is not None else t.clamp_max(high),
    "clamp_max": lambda t, low, high: t.clamp_max(high) if high is not None else t.clamp_min(low),
    "hardtanh": lambda t, low, high: F.hardtanh(t, -INF if low is None else low, INF if high is None else high),
    "clamp.Tensor": lambda t, low, high: t.clamp(None if low is None else torch.full_like(t, low),
                                                 None if high is None else torch.full_like(t, high)),
}


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("name", CLAMPS)
def test_a_nan_bound_gives_eagers_nan_on_the_device_and_through_torch_compile(name, dtype):
    op = CLAMPS[name]
    x = _input(dtype)
    for low, high in BOUNDS:
        if name == "clamp.Tensor" and 0.0 in (low, high):
            continue  # (at a tie of signed zeros clamp.Tensor's maximum/minimum differ from eager: not this test's)
        try:
            expected = op(x, low, high)
        except ValueError as error:  # F.hardtanh's own check of min_val > max_val, in Python: the same
            with pytest.raises(ValueError, match=str(error)):
                op(x.to("neuron"), low, high)
            continue
        assert_same_bits(op(x.to("neuron"), low, high), expected, (name, low, high, "device"))
        # compiled afresh for each: TorchDynamo's guard on a float (``low == -0.0``) would serve -0.0 with the
        # graph compiled for 0.0
        torch._dynamo.reset()
        compiled = torch.compile(op, backend="neuron", dynamic=False)
        assert_same_bits(compiled(x, low, high), expected, (name, low, high, "compiled"))


def test_a_nan_bound_of_an_integer_tensor_gives_float_nan():
    """An integer tensor cannot hold NaN: a float bound promotes it to float32 (the default dtype), all NaN."""
    x = torch.tensor([-3, 0, 5, 100], dtype=torch.int32)
    for low, high in ((NAN, None), (None, NAN), (-1.0, NAN)):
        assert_same_bits(x.to("neuron").clamp(low, high), x.clamp(low, high), (low, high))
        assert_same_bits(torch.compile(lambda t: t.clamp(low, high), backend="neuron")(x), x.clamp(low, high),
                         (low, high))


# ---- one kernel for every value --------------------------------------------------------------------------

OPS = {
    "clamp": lambda t, v: t.clamp(-1.0, v),
    "clamp(min=)": lambda t, v: t.clamp(min=v),
    "clamp(max=)": lambda t, v: t.clamp(max=v),
    "clamp_min": lambda t, v: t.clamp_min(v),
    "clamp_max_": lambda t, v: t.clone().clamp_max_(v),
    "hardtanh": lambda t, v: F.hardtanh(t, -2.0, v) if not v < -2.0 else F.hardtanh(t, v, 3.0),
    "leaky_relu": lambda t, v: F.leaky_relu(t, v),
    "softplus": lambda t, v: F.softplus(t, beta=v),
    "elu": lambda t, v: F.elu(t, v),
    "addcmul": lambda t, v: torch.addcmul(t, t, t, value=v),
    "lerp": lambda t, v: torch.lerp(t, t * 2, v),
}
#: ops whose every result is one of its inputs, a bound or a product of two: eager's bits exactly
EXACT = {"clamp", "clamp(min=)", "clamp(max=)", "clamp_min", "clamp_max_", "hardtanh", "leaky_relu"}
#: three ordinary values, then the special ones
VALUES = (0.25, 0.6, 1.7, -0.0, 0.0, INF, -INF, NAN)


def _compiled() -> int:
    return neuroncc.stats()["eager_kernels_compiled"] + neuroncc.stats()["eager_kernels_loaded"]


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("name", OPS)
def test_ops_with_float_arguments_compile_one_kernel_for_every_value(name, dtype):
    op = OPS[name]
    x = _input(dtype)
    on_device = x.to("neuron")
    for position, value in enumerate(VALUES):
        if name == "softplus" and value in (0.0, -0.0):
            continue  # (beta = 0 divides by zero: NaN and inf, eager's too; not a case worth a kernel)
        expected = op(x, value)
        got = op(on_device, value)
        if name in EXACT:
            assert_same_bits(got, expected, (name, value))
        else:
            torch.testing.assert_close(got.cpu(), expected, equal_nan=True, rtol=0 if dtype is torch.float32 else
                                       1e-2, atol=1e-5 if dtype is torch.float32 else 1e-2, msg=str((name, value)))
        if position == 0:
            compiled = _compiled()
    assert _compiled() == compiled, f"{name}: a kernel per value"


def two_warm_processes(code: str, tmp_path, warm_python) -> tuple[list[Any], list[Any]]:
    """The JSON last printed by ``code`` with ``{value}`` 0.3, then by a second process with 0.55 over the first's
    compile cache (the first loaded nothing: a fresh cache)."""
    env = {"NEURONCC_CACHE_DIR": str(tmp_path / "cache")}
    first = run_python(code.format(value=0.3), env, python=warm_python)
    assert first.returncode == 0, first.stderr
    first_printed = json.loads(first.stdout.strip().splitlines()[-1])
    assert first_printed[1] == 0  # (nothing loaded)
    second = run_python(code.format(value=0.55), env, python=warm_python.other)
    assert second.returncode == 0, second.stderr
    return first_printed, json.loads(second.stdout.strip().splitlines()[-1])


def test_a_warm_process_compiles_nothing_for_new_values(tmp_path, warm_python):
    """The signature index names the lifted kernels: a second process with other values loads them."""
    code = ("import json, sys, torch, neuroncc, torch.nn.functional as F\n"
            "v = float(sys.argv[1]) if len(sys.argv) > 1 else {value}\n"
            "x = torch.randn(6, 7, device='neuron'); h = x.to(torch.bfloat16)\n"
            "x.clamp(max=v); x.clamp(-v, v); h.clamp_min(v); F.hardtanh(x, -v, v); F.leaky_relu(x, v)\n"
            "F.elu(h, v); F.softplus(x, beta=v)\n"
            "s = neuroncc.stats(); print(json.dumps([s['eager_kernels_compiled'], s['eager_kernels_loaded']]))")
    (compiled, _), (compiled_again, loaded) = two_warm_processes(code, tmp_path, warm_python)
    assert compiled >= 6  # (clamp(-v, v) and hardtanh share one)
    assert compiled_again == 0 and loaded >= compiled  # (each op loads the executable they share)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_low_precision_bounds_round_through_float32_as_eager(dtype):
    """Eager converts a bound to float16/bfloat16 through float32 (c10's conversion of a double): 1 + 2**-11 +
    2**-40 is float16's 1.0 there (the double's nearest float16 is 1.0009765625), the lifted bound's too."""
    x = torch.tensor([5.0, -5.0, 1.0009765625, 1.0078125], dtype=dtype)
    for value in (1 + 2 ** -11 + 2 ** -40, 1 + 2 ** -8 + 2 ** -40, 0.1, 1 / 3):
        assert_same_bits(x.to("neuron").clamp(max=value), x.clamp(max=value), value)
        assert_same_bits(x.to("neuron").clamp(min=value), x.clamp(min=value), value)


def test_guarded_branches_on_the_values_stay_correct():
    """softplus's threshold decides per element in the kernel; elu's alpha == 1 is no branch of its reference:
    values either side of such points all give eager's results with the one kernel."""
    x = _input(torch.float32)
    on_device = x.to("neuron")
    for threshold in (20.0, 1.0, 0.0, -1.0):
        torch.testing.assert_close(F.softplus(on_device, 1.0, threshold).cpu(), F.softplus(x, 1.0, threshold),
                                   equal_nan=True)
    for alpha in (1.0, 0.5, 1.0, 2.0):
        torch.testing.assert_close(F.elu(on_device, alpha).cpu(), F.elu(x, alpha), equal_nan=True)
    assert not math.isnan(F.elu(on_device, 1.0).cpu()[0])
