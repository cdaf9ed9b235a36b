"""bf16 tensors cross the cpu target's boundary as their bits (i16 views of the tensors' memory), converted
inside the kernels: no float32 copy of any bf16 input or output, and eager's results."""

from __future__ import annotations

import numpy as np
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from neuroncc.frontend.convert import ParameterViews, TensorSpec, to_numpy, to_torch
from neuroncc.frontend.importer import import_graph
from neuroncc.executors.executable import build_executable
from neuroncc.ir import DType, interpret, parse, print_function, verify

F = torch.nn.functional


def test_bits_cross_without_a_copy_both_ways():
    x = torch.tensor([1.5, -2.25, float("nan"), float("-inf"), 3e38, -1e-39], dtype=torch.bfloat16)
    bits = to_numpy(x, bf16_bits=True)
    assert bits.dtype == np.int16 and np.shares_memory(bits, x.view(torch.int16).numpy())
    back = to_torch(bits, TensorSpec((6,), (1,), torch.bfloat16))
    assert back.dtype == torch.bfloat16 and back.data_ptr() == x.data_ptr()
    assert torch.equal(back.view(torch.int16), x.view(torch.int16))  # every pattern, NaN's too
    weight = torch.nn.Parameter(torch.randn(3, 4, dtype=torch.bfloat16))
    views = ParameterViews(1, bf16_bits=True)  # a bf16 parameter's view is kept, like a float32 one's
    assert views.arrays([weight], [0])[0] is views.arrays([weight], [0])[0]


def test_the_graph_takes_and_returns_i16_bits():
    x, y = torch.randn(4, 8, dtype=torch.bfloat16), torch.randn(8, dtype=torch.bfloat16)
    gm = make_fx(lambda x, y: torch.exp(x) * y - x, tracing_mode="fake")(x, y)
    graph = import_graph(gm, "bits", bf16_bits=True)
    assert [p.type.dtype for p in graph.function.params] == [DType.i16, DType.i16]
    assert [v.type.dtype for v in graph.function.outputs] == [DType.i16]
    verify(graph.function)
    assert parse(print_function(graph.function)) == graph.function
    plain = import_graph(gm, "plain")
    assert [p.type.dtype for p in plain.function.params] == [DType.bf16, DType.bf16]
    # the conversions are exact: the interpreter, on the bits, gives the float32-copy graph's values
    bits = interpret(graph.function, [to_numpy(x, bf16_bits=True), to_numpy(y, bf16_bits=True)])[0]
    copies = interpret(plain.function, [to_numpy(x), to_numpy(y)])[0]
    np.testing.assert_array_equal(bits.view(np.uint16).astype(np.uint32) << 16, copies.view(np.uint32))


def _layernorm_softmax(x, w, b, buffer):
    buffer.add_(1)  # an in-place update of a bf16 input, written back through its bits
    y = F.layer_norm(x, (x.shape[-1],), w, b)
    return torch.softmax(y, -1), y.t(), (x[::2] * 2).sum()


def test_compiled_bf16_matches_eager_with_strided_inputs_and_in_place_updates():
    torch._dynamo.reset()
    generator = torch.Generator().manual_seed(0)

    def inputs():
        base = torch.randn(16, 40, generator=torch.Generator().manual_seed(0)).to(torch.bfloat16)
        w = torch.randn(16, generator=generator.manual_seed(1)).to(torch.bfloat16)
        b = torch.randn(16, generator=generator.manual_seed(2)).to(torch.bfloat16)
        return [base[:, ::2].t(), w, b, torch.zeros(3, dtype=torch.bfloat16)]  # a transposed, strided x

    got_inputs, want_inputs = inputs(), inputs()
    got = torch.compile(_layernorm_softmax, backend="neuron", dynamic=False)(*got_inputs)
    want = _layernorm_softmax(*want_inputs)
    for g, w in zip(got, want, strict=True):
        assert g.dtype == torch.bfloat16 and g.stride() == w.stride()
        torch.testing.assert_close(g, w, rtol=1.6e-2, atol=1e-5)
    assert torch.equal(got_inputs[3], want_inputs[3])


def test_the_bits_convert_with_one_bitcast_each_way_exactly_for_every_pattern():
    # i16 -> bf16 is the bits in a float32's high half, bf16 -> i16 that half back: one IR bitcast each way.
    # They were cast/and/mul/bitcast/cast chains whose cast to bf16 rounded a value that is already bf16 (a
    # NaN select per element on every kernel input) and quieted signalling NaNs that eager passes through.
    every = torch.arange(-(2**15), 2**15, dtype=torch.int32).to(torch.int16).view(torch.bfloat16)
    gm = make_fx(lambda x: (-x, x.view(torch.int16)), tracing_mode="fake")(every)
    graph = import_graph(gm, "bits", bf16_bits=True)
    assert [op.name for op in graph.function.ops] == ["bitcast", "neg", "bitcast", "bitcast"]
    executable = build_executable(graph.function, "cpu")
    negated, bits = executable(to_numpy(every, bf16_bits=True))
    assert np.array_equal(negated, (-every).view(torch.int16).numpy())  # NaN payloads kept, sign flipped
    assert np.array_equal(bits, every.view(torch.int16).numpy())
    # the numpy reference agrees (it quiets signalling NaNs, as its bf16 storage does after every op)
    def values(bits):
        return (bits.view(np.uint16).astype(np.uint32) << 16).view(np.float32)

    for ref, ours in zip(interpret(graph.function, [to_numpy(every, bf16_bits=True)]), (negated, bits)):
        np.testing.assert_array_equal(values(ref), values(ours))


def test_a_bf16_int16_view_is_a_bitcast():
    x = torch.randn(5, 6).to(torch.bfloat16)
    got = torch.compile(lambda t: (t.view(torch.int16) + 1, (t * 2).view(torch.int16)), backend="neuron",
                        dynamic=False)(x)
    assert torch.equal(got[0], x.view(torch.int16) + 1) and torch.equal(got[1], (x * 2).view(torch.int16))
