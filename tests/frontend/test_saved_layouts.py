"""Activations saved for the backward keep the layout our forward executable gives them.

Eager lays q/k/v of an attention out as views of the projection (strided); neuroncc's projection kernel writes
them contiguously. Copying them into eager's strides after every forward would buy nothing, since only our
backward graph reads them: the forward reports its layouts to AOTAutograd, which compiles the backward for them.
"""

import torch
import torch.nn.functional as F



class Attention(torch.nn.Module):
    def __init__(self, dim=32, heads=4):
        super().__init__()
        self.heads = heads
        self.qkv = torch.nn.Linear(dim, 3 * dim)

    def forward(self, x):
        b, s, d = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        return F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, s, d)



def _train_step(module, x):
    module.zero_grad(set_to_none=True)
    out = module(x)
    out.square().mean().backward()
    return out, [p.grad.clone() for p in module.parameters()]


def _trains_like_eager(model, x, dynamic: bool) -> None:
    """Two compiled training steps of ``model`` give eager's output and gradients, the gradients in eager's
    strides."""
    expected_out, expected_grads = _train_step(model, x)
    compiled = torch.compile(model, backend="neuron", dynamic=dynamic)
    for _ in range(2):
        out, grads = _train_step(compiled, x)
        torch.testing.assert_close(out, expected_out, rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(grads, expected_grads, rtol=1e-4, atol=1e-5)
        assert [g.stride() for g in grads] == [g.stride() for g in expected_grads]


def test_saved_activations_keep_our_layout_and_gradients_match(compiled_graphs, layout_copies):
    model = Attention()
    _trains_like_eager(model, torch.randn(2, 8, 32), dynamic=False)
    forward, backward = compiled_graphs["forward"], compiled_graphs["backward"]
    # the saved q/k/v: eager's are strided views of the projection, ours are contiguous
    eager_strides = [o.spec.stride for o in forward.graph.outputs if hasattr(o, "spec")]
    assert forward.output_strides != [None if s is None else s for s in eager_strides], "nothing kept our layout"
    assert not layout_copies, f"outputs copied into eager's layout: {layout_copies}"
    # the backward graph was compiled for the layouts the forward returns: its inputs need no copies either
    backward_params = {p.type.layout_strides for p in backward.executable.function.params if p.type.rank == 4}
    assert (256, 64, 8, 1) in backward_params


def test_user_visible_outputs_keep_eager_strides(compiled_graphs):
    model = Attention()
    x = torch.randn(2, 8, 32)
    compiled = torch.compile(model, backend="neuron", dynamic=False)
    out = compiled(x)
    assert out.stride() == model(x).stride()
    forward = compiled_graphs["forward"]
    user_output = forward.graph.outputs[0]
    assert forward.output_strides[0] == user_output.spec.stride


def test_inference_graphs_report_nothing(compiled_graphs):
    model = Attention()
    x = torch.randn(2, 8, 32)
    with torch.no_grad():
        out = torch.compile(model, backend="neuron", dynamic=False)(x)
    torch.testing.assert_close(out, model(x), rtol=1e-4, atol=1e-5)
    assert set(compiled_graphs) == {"inference"}


def test_specializations_keep_saved_activations_in_our_layout(compiled_graphs, layout_copies):
    """A graph with symbolic sizes compiles a static specialization per shape (frontend/specializations.py),
    outside TorchDynamo's tracing context. Without a context of its own AOTAutograd did not ask the forward
    for its output strides: a channels_last CNN's saved activations took eager's channels_last layout,
    transposed out of the forward's buffers after every call and read with a stride by the backward's kernels
    (a training step 1.3x its contiguous one)."""
    cl = torch.channels_last
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
                                torch.nn.Conv2d(8, 8, 3), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1),
                                torch.nn.Flatten(), torch.nn.Linear(8, 4)).to(memory_format=cl)
    _trains_like_eager(model, torch.randn(2, 3, 10, 10).to(memory_format=cl), dynamic=True)
    activations = [copy for copy in layout_copies if copy[0][0] == 2]
    assert not activations, f"saved activations copied into eager's layout: {activations}"
    backward = compiled_graphs["backward"]
    strided = [p.hint for p in backward.executable.function.params  # the model's input x is channels_last
               if p.type.rank == 4 and not p.type.is_contiguous and not p.hint.startswith("primals")]
    assert not strided, f"the backward reads saved activations with a stride: {strided}"
