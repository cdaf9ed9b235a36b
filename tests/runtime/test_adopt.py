"""Results the launcher returns or passes on without copying them: outputs that are views of intermediates,
and ATen results (oneDNN products, library ops) adopted as the call's buffer."""

from __future__ import annotations

import numpy as np
import pytest

from neuroncc.ir import Builder, DType, TensorType, interpret
from neuroncc.runtime.launcher import CpuExecutable, build_cpu_executable


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(0)


@pytest.fixture
def no_output_copies(monkeypatch):
    """Fail the test if the launcher copies an output out of its buffers."""
    monkeypatch.setattr(CpuExecutable, "_fresh_copy", lambda *a: pytest.fail("an output was copied"))


def _assert_fresh_and_equal(exe, fn, inputs, rtol=1.3e-6, atol=1e-5):
    first = exe(*inputs)
    second = exe(*inputs)
    for got, want in zip(first, interpret(fn, inputs)):
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)
    for i, a in enumerate(first):  # outputs never alias each other, nor an earlier call's
        assert not any(np.shares_memory(a, b) for b in first[i + 1:])
        assert not any(np.shares_memory(a, b) for b in second)
        assert not any(np.shares_memory(a, x) for x in inputs)
    return first


def _view_of_kernel_result(view: str):
    b = Builder("views")
    x = b.param(TensorType((8, 6), DType.f32), "x")
    k = b.op("exp", x)
    if view == "reshape":
        o = b.op("reshape", k, shape=(48,))
    elif view == "permute":
        o = b.op("permute", k, dims=(1, 0))
    else:
        o = b.op("slice", k, dim=0, start=0, end=4, step=1)
    return b.build([o, b.op("neg", k)])


def test_output_view_of_an_intermediate_is_its_storage(rng, no_output_copies):
    fn = _view_of_kernel_result("reshape")
    exe = build_cpu_executable(fn, {"threads": 1})
    kinds = [b.kind for b in exe.plan.buffers]
    assert "arena" not in kinds  # exp's result lives in the output's fresh storage
    _assert_fresh_and_equal(exe, fn, [rng.standard_normal((8, 6)).astype(np.float32)])


@pytest.mark.parametrize("view", ["permute", "slice"])
def test_views_in_another_layout_or_of_part_of_the_storage_are_copied(rng, view):
    fn = _view_of_kernel_result(view)
    exe = build_cpu_executable(fn, {"threads": 1})
    assert [b.kind for b in exe.plan.buffers].count("arena") == 1
    (out, _) = _assert_fresh_and_equal(exe, fn, [rng.standard_normal((8, 6)).astype(np.float32)])
    assert out.flags.c_contiguous


def test_two_views_of_one_intermediate_do_not_share_it(rng):
    b = Builder("twice")
    x = b.param(TensorType((8, 6), DType.f32), "x")
    k = b.op("exp", x)
    fn = b.build([b.op("reshape", k, shape=(48,)), b.op("reshape", k, shape=(6, 8)), b.op("neg", k)])
    exe = build_cpu_executable(fn, {"threads": 1})
    _assert_fresh_and_equal(exe, fn, [rng.standard_normal((8, 6)).astype(np.float32)])
