"""FX -> IR importer, op by op: traced with make_fx (fake tensors), imported, run by the interp target."""

from __future__ import annotations

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx
from torch.utils import _pytree as pytree

import neuroncc
from neuroncc.frontend.compiled import CompiledGraph
from neuroncc.frontend.importer import LOWERINGS, import_graph
from neuroncc.ir import DType, parse, print_function, verify
from neuroncc.executors.executable import build_executable

aten = torch.ops.aten


def run_imported(fn, *inputs, **tolerance):
    """Trace ``fn``, import it, check the IR (verify, print/parse round trip), run it and compare with eager."""
    gm = make_fx(fn, tracing_mode="fake")(*inputs)
    imported = import_graph(gm, "test")
    verify(imported.function)
    assert parse(print_function(imported.function)) == imported.function
    compiled = CompiledGraph(imported, build_executable(imported.function, "interp"))
    expected, _ = pytree.tree_flatten(fn(*[t.clone() for t in inputs]))
    got = compiled(list(inputs))
    assert len(got) == len(expected)
    for ours, eager in zip(got, expected):
        assert ours.dtype == eager.dtype
        torch.testing.assert_close(ours, eager, **tolerance)
    return imported


def ir_ops(imported):
    return [op.name for op in imported.function.ops]


def test_scalar_arguments_become_0d_constants_of_the_promoted_dtype():
    ints = torch.tensor([1, 2, 3])
    imported = run_imported(lambda x: x + 2.5, ints)  # int64 + float -> float32
    assert ir_ops(imported) == ["cast", "full", "add"]
    assert imported.function.ops[1].attrs["dtype"] is DType.f32 and imported.function.ops[1].result.type.shape == ()


def test_binary_ops_cast_operands_to_one_dtype():
    run_imported(lambda a, b: (a * b, a - b, a // 2), torch.tensor([3, -7], dtype=torch.int32), torch.tensor([2, 2]))
    run_imported(lambda a, b: (a < b, a == 1.5, b > 0), torch.tensor([1, 2]), torch.tensor([1.5, 1.0]))
    run_imported(lambda a: (a.half() + 1, a.to(torch.bfloat16) * 0.1, a / 3), torch.tensor([1, 2, 7]))
    run_imported(lambda a, b: torch.where(a > 0, a, b), torch.randn(4), torch.tensor(2))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_low_precision_scalar_operands_read_as_eager_reads_them(dtype):
    """mul/div read a second-operand scalar (a Python number or a 0-dim float32 tensor) unrounded; add, sub,
    remainder and fmod narrow it to the result dtype first. Bit-exact against eager (found by the fuzzer:
    bf16 / (|f32 0-dim| + 0.5) was one ulp off, and its gradient more)."""
    torch.manual_seed(0)
    x, s = (torch.randn(256) * 4).to(dtype), torch.tensor(0.1228)

    def program(x, s):
        return (x * s, x / s, s * x, x + s, x - s, x * 0.3, x / 0.3, x + 0.3, x - 1 / 3, 0.3 - x,
                torch.remainder(x, 0.3), torch.fmod(x, 7.77), torch.div(x, s, rounding_mode="floor"),
                x ** 3, x ** -2, x ** 2, x.abs() ** 0.5)  # bf16 x**3 is x*x*x, x**-2 is 1/(x*x), rounded each

    run_imported(program, x, s, rtol=0, atol=0)


def test_reductions_expand_empty_dims_and_normalize_negative_dims():
    x = torch.randn(2, 3, 4)
    imported = run_imported(lambda t: aten.sum.dim_IntList(t, []), x, rtol=1e-5, atol=1e-5)
    assert imported.function.ops[-1].attrs["dims"] == (0, 1, 2)
    run_imported(lambda t: (t.sum(-1), t.mean((-1, 0), keepdim=True), t.amax(-2), t.argmax(-1)), x)
    run_imported(lambda t: (t.var(-1), torch.var_mean(t, dim=1, correction=0), t.max(dim=-1)), x)
    run_imported(lambda b: (b.sum(), b.any(-1), b.all()), torch.tensor([[True, False], [True, True]]))


def test_views_resolve_minus_one_and_clamp_slices():
    x = torch.arange(24.0).reshape(2, 3, 4)
    run_imported(lambda t: (t.view(-1, 4), t.reshape(6, -1), t.permute(-1, 0, 1), t.unsqueeze(-1), t.expand(3, -1, -1, -1)), x)
    imported = run_imported(lambda t: (aten.slice.Tensor(t, -1, -100, 100), aten.slice.Tensor(t, 2, 1, -1, 2),
                                       aten.slice.Tensor(t, 0, 5, 2), t.select(-1, -1)), x)
    slices = [op.attrs for op in imported.function.ops if op.name == "slice"]
    assert [(a["start"], a["end"], a["step"]) for a in slices] == [(1, 3, 2), (2, 2, 1)]  # the first is a no-op
    run_imported(lambda t: (t.split(2, dim=-1), t.squeeze(), t[:, None].squeeze(1), t.flip(-1)), x)


def test_tuples_and_getitem():
    run_imported(lambda t: torch.max(t, 1)[0] + torch.min(t, 1)[1], torch.randn(3, 5))


def test_get_attr_tensors_become_constant_ops():
    def fn(x):
        return x * torch.tensor([1.0, -2.0, 3.0]) + torch.arange(3)

    imported = run_imported(fn, torch.randn(2, 3))
    assert "constant" in ir_ops(imported) and "iota" in ir_ops(imported)


def test_params_carry_input_strides():
    x = torch.randn(4, 3).t()  # a transposed (non-contiguous) input
    imported = run_imported(lambda t: t * 2, x)
    assert imported.function.params[0].type.strides == (1, 3)


def test_indexing_and_scatter_ops():
    x = torch.randn(5, 6)
    idx = torch.tensor([4, 0, 2])
    run_imported(lambda t, i: (t[i], t[:, i], t.index_select(0, i), t.gather(1, i.view(3, 1).expand(3, 6))), x, idx)
    run_imported(lambda t, i: aten.index_put(t, [i], torch.ones(3, 6), True), x, torch.tensor([1, 1, 3]))
    run_imported(lambda t, i: t.scatter_add(0, i.view(3, 1).expand(3, 6), torch.ones(3, 6)), x, idx)


def test_input_mutation_via_copy_is_written_back():
    def fn(buffer, x):
        buffer.copy_(x * 2)
        return x + 1

    buffer, x = torch.zeros(3), torch.randn(3)
    gm = make_fx(torch.func.functionalize(fn, remove="mutations_and_views"), tracing_mode="fake")(buffer, x)
    assert any(n.target is aten.copy_.default for n in gm.graph.nodes)
    imported = import_graph(gm, "mutation")
    assert len(imported.mutations) == 1
    compiled = CompiledGraph(imported, build_executable(imported.function, "interp"))
    (out,) = compiled([buffer, x])
    torch.testing.assert_close(buffer, x * 2)
    torch.testing.assert_close(out, x + 1)


def test_an_exact_view_of_an_input_is_that_input_not_a_copy():
    # logits.detach() (cross-entropy's training step) was a computed output: the kernels copied the whole
    # input into a new buffer. A view covering the input exactly is the input; a clone still owns its memory.
    x = torch.randn(4, 8)
    gm = make_fx(lambda t: (t.detach(), aten.alias(t), t.view(4, 8), t.clone(), t.view(8, 4)),
                 tracing_mode="fake")(x)
    imported = import_graph(gm, "views")
    kinds = [type(output).__name__ for output in imported.outputs]
    assert kinds == ["InputOutput", "InputOutput", "InputOutput", "ComputedOutput", "ComputedOutput"]
    assert len(imported.function.outputs) == 2  # the clone and the reshape
    compiled = CompiledGraph(imported, build_executable(imported.function, "interp"))
    detached, aliased, same, cloned, reshaped = compiled([x])
    assert detached is x and aliased is x and same is x
    assert cloned.data_ptr() != x.data_ptr()
    torch.testing.assert_close(cloned, x)
    torch.testing.assert_close(reshaped, x.view(8, 4))


def test_bool_mask_indexing_is_refused_by_name():
    gm = make_fx(lambda t, m: aten.index.Tensor(t, [m]), tracing_mode="real")(torch.randn(4), torch.tensor([True, False, True, False]))
    with pytest.raises(neuroncc.UnsupportedOpError, match=r"(?s)aten.index.Tensor\(float32\[4\], \[bool\[4\]\]\).*boolean-mask"):
        import_graph(gm, "mask")


def test_op_without_lowering_is_refused_by_name():
    gm = make_fx(lambda t: torch.special.bessel_j0(t).abs(), tracing_mode="fake")(torch.randn(4))
    with pytest.raises(neuroncc.UnsupportedOpError, match="aten.special_bessel_j0.default") as info:
        import_graph(gm, "bessel")
    assert "no lowering" in str(info.value)


def test_lowering_table_keys_are_aten_overloads():
    # with_effects (the effect-token wrapper of _linalg_check_errors) is the one higher-order op
    assert all(isinstance(op, torch._ops.OpOverload) or op is torch.ops.higher_order.with_effects for op in LOWERINGS)
    assert len(LOWERINGS) > 150
