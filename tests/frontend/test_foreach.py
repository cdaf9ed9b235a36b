"""Multi-tensor (``torch._foreach_*``) ops through the neuron backend: compiled optimizer steps against eager."""

from __future__ import annotations

import pytest
import torch

from neuroncc.frontend.lowering.foreach import foreach_decompositions


def _params(seed: int) -> list[torch.nn.Parameter]:
    generator = torch.Generator().manual_seed(seed)
    shapes = [(33, 17), (17,), (5, 3, 4), (64, 8)]
    params = [torch.nn.Parameter(torch.randn(s, generator=generator)) for s in shapes]
    for p in params:
        p.grad = torch.randn(p.shape, generator=generator)
    return params


@pytest.mark.parametrize("make", [
    lambda ps: torch.optim.AdamW(ps, lr=1e-2, weight_decay=0.1, foreach=True),
    lambda ps: torch.optim.Adam(ps, lr=1e-2, foreach=True),
    lambda ps: torch.optim.SGD(ps, lr=1e-2, momentum=0.9, nesterov=True, foreach=True),
], ids=["adamw", "adam", "sgd-nesterov"])
def test_compiled_optimizer_step_matches_eager(make):
    torch._dynamo.reset()
    eager_params, compiled_params = _params(0), _params(0)
    eager, compiled = make(eager_params), make(compiled_params)
    step = torch.compile(compiled.step, backend="neuron", dynamic=False)
    for _ in range(3):  # the first step creates the state; later steps read and update it in place
        eager.step()
        step()
    for e, c in zip(eager_params, compiled_params):
        torch.testing.assert_close(c, e, rtol=1.3e-6, atol=1e-6)
    for e, c in zip(eager_params, compiled_params):
        for key, value in eager.state[e].items():
            torch.testing.assert_close(compiled.state[c][key], value, rtol=1.3e-6, atol=1e-6)


def test_foreach_ops_with_every_argument_kind():
    torch._dynamo.reset()
    xs = [torch.randn(4, 5), torch.randn(7)]
    ys = [torch.rand(4, 5) + 0.5, torch.rand(7) + 0.5]

    def f(xs, ys):
        a = torch._foreach_add(xs, ys, alpha=2.0)  # List with a keyword
        b = torch._foreach_mul(xs, [2.0, -3.0])  # ScalarList
        c = torch._foreach_addcdiv(xs, ys, ys, [0.5, 2.0])  # ScalarList
        d = torch._foreach_pow(2.0, ys)  # ScalarAndTensor
        e = torch._foreach_maximum(xs, 0.1)  # Scalar: a clamp
        g = torch._foreach_sqrt(ys)
        return a + b + c + d + e + g

    got = torch.compile(f, backend="neuron", dynamic=False)(xs, ys)
    for g, e in zip(got, f(xs, ys), strict=True):
        torch.testing.assert_close(g, e, rtol=1.3e-6, atol=1e-5)


def test_every_out_of_place_foreach_op_of_the_optimizers_is_decomposed():
    table = foreach_decompositions()
    names = {f"{op._schema.name}.{op._overloadname}" for op in table}
    for needed in ["aten::_foreach_add.Scalar", "aten::_foreach_add.List", "aten::_foreach_addcdiv.Scalar",
                   "aten::_foreach_addcmul.Scalar", "aten::_foreach_lerp.Scalar", "aten::_foreach_mul.Scalar",
                   "aten::_foreach_div.List", "aten::_foreach_sqrt.default", "aten::_foreach_pow.ScalarAndTensor",
                   "aten::_foreach_neg.default", "aten::_foreach_reciprocal.default", "aten::_foreach_sub.List"]:
        assert needed in names
    assert not any(name.endswith("_.Scalar") or "_foreach_add_." in name for name in names)  # in-place: functionalized


def test_per_position_tensor_scalars_decompose_like_eager():
    # addcdiv/addcmul's ``Tensor scalars`` overload (dynamo cannot trace it with fake tensors yet): the
    # decomposition itself against eager's kernel
    xs, ys, zs = ([torch.randn(3, 4), torch.randn(5)] for _ in range(3))
    scalars = torch.tensor([0.5, -2.0])
    table = foreach_decompositions()
    for op, eager in [(torch.ops.aten._foreach_addcdiv.Tensor, torch._foreach_addcdiv),
                      (torch.ops.aten._foreach_addcmul.Tensor, torch._foreach_addcmul)]:
        for got, want in zip(table[op](xs, ys, zs, scalars), eager(xs, ys, zs, scalars), strict=True):
            torch.testing.assert_close(got, want)
