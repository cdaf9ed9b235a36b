"""neuroncc.frontend.exported: .pt2 -> IR for inference and for training, checked against eager PyTorch."""

import warnings

import pytest
import torch

from neuroncc.examples.classifier import ClassifierConfig, build_example, make_batch
from neuroncc.frontend.exported import call_eager, import_inference, load_program, program_inputs, trace_training
from neuroncc.ir import print_function
from neuroncc.executors.interpreter_executable import InterpreterExecutable
from neuroncc.frontend.serving import CompiledProgram


def _interp(kind, imported):
    return InterpreterExecutable(imported.function)


def test_inference_graph_keeps_weights_as_inputs(classifier_pt2):
    program = load_program(classifier_pt2)
    graph = import_inference(program, "classifier")
    kinds = [i.kind for i in graph.inputs]
    assert kinds.count("input") == 2 and kinds.count("parameter") == len(list(program.parameters()))
    assert [i.target for i in graph.user_inputs] == ["tokens", "labels"]
    assert "constant" not in print_function(graph.imported.function).split("{", 1)[1]  # no weights baked in
    tokens, labels = make_batch(ClassifierConfig(), torch.Generator().manual_seed(3))
    loss = CompiledProgram(graph, InterpreterExecutable(graph.imported.function))(tokens, labels)
    torch.testing.assert_close(loss, build_example()(tokens, labels).detach())
    torch.testing.assert_close(call_eager(program, [tokens, labels])[0].detach(), loss)


def test_training_step_matches_eager_gradients(classifier_pt2):
    graphs = trace_training(load_program(classifier_pt2), "classifier", _interp)
    assert graphs.forward.function.name == "classifier_forward"
    assert graphs.backward.function.name == "classifier_backward"
    _check_one_step_against_eager(graphs)


def _check_one_step_against_eager(graphs, **tolerances):
    """One forward + backward with the traced step and with the eager model: same loss, same gradients."""
    eager = build_example()
    parameters = dict(graphs.module.named_parameters())
    ours = [parameters[n].detach().clone().requires_grad_(True) for n in graphs.parameter_names]
    tokens, labels = make_batch(ClassifierConfig(), torch.Generator().manual_seed(4))
    loss = graphs.step(*ours, tokens, labels)
    loss.backward()
    eager_loss = eager(tokens, labels)
    eager_loss.backward()
    torch.testing.assert_close(loss.detach(), eager_loss.detach(), **tolerances)
    eager_parameters = dict(eager.named_parameters())
    for name, parameter in zip(graphs.parameter_names, ours):
        torch.testing.assert_close(parameter.grad, eager_parameters[name].grad, msg=name, **tolerances)


def test_training_updates_buffers_like_eager(norm_pt2):
    """Training-mode BatchNorm: the compiled step updates the running stats it is given, as eager does."""
    program = load_program(norm_pt2)
    graphs = trace_training(program, "norm", _interp)
    assert graphs.buffer_names == ("norm.running_mean", "norm.running_var", "norm.num_batches_tracked")
    eager = program.module()
    parameters, buffers = dict(graphs.module.named_parameters()), dict(graphs.module.named_buffers())
    ours = [parameters[n].detach().clone().requires_grad_(True) for n in graphs.parameter_names]
    our_buffers = [buffers[n].detach().clone() for n in graphs.buffer_names]
    x = torch.randn(8, 5, generator=torch.Generator().manual_seed(5))
    graphs.step(*ours, *our_buffers, x).sum().backward()
    eager(x).sum().backward()
    eager_buffers = dict(eager.named_buffers())
    for name, ours_buffer in zip(graphs.buffer_names, our_buffers):
        torch.testing.assert_close(ours_buffer, eager_buffers[name], msg=name)
    assert int(our_buffers[2]) == 1


def test_program_inputs_read_types_without_allocating(good_pt2):
    inputs = program_inputs(load_program(good_pt2))
    assert [(i.kind, i.target, i.shape) for i in inputs] == [
        ("parameter", "linear.weight", (3, 4)), ("parameter", "linear.bias", (3,)), ("buffer", "offset", (3,)),
        ("input", "x", (2, 4))]
    assert inputs[-1].nbytes == 32 and inputs[-1].describe() == "float32[2, 4]"


def test_training_on_cpu_keeps_saved_activations_in_our_layout(classifier_pt2, monkeypatch, layout_copies):
    """The forward's saved activations keep the executable's layout (no copies into eager's strides); the
    backward graph is compiled for that layout, and the gradients still match eager's."""
    from neuroncc.frontend import exported
    from neuroncc.executors.executable import build_executable

    compiled = {}
    compiled_graph = exported.CompiledGraph

    def recording(graph, executable, free_layouts=frozenset(), **how):
        compiled[graph.function.name] = result = compiled_graph(graph, executable, free_layouts, **how)
        return result

    monkeypatch.setattr(exported, "CompiledGraph", recording)
    graphs = trace_training(load_program(classifier_pt2), "classifier",
                            lambda kind, imported: build_executable(imported.function, "cpu"))
    forward = compiled["classifier_forward"]
    eager_strides = [getattr(o, "spec", None) and o.spec.stride for o in forward.graph.outputs]
    assert forward.output_strides != eager_strides  # the attention's saved q/k/v/out are ours (contiguous)
    _check_one_step_against_eager(graphs, rtol=1e-4, atol=1e-5)
    saved_copies = [c for c in layout_copies if len(c[0]) == 4]
    assert not saved_copies, f"saved activations copied into eager's layout: {saved_copies}"


class Tagger(torch.nn.Module):
    """A 2-layer bidirectional LSTM tagger: its inputs never require grad, so PyTorch's ``aten.lstm``
    decomposition picks the oneDNN layer op (``mkldnn_rnn_layer``) for the joint graph."""

    def __init__(self, bias):
        super().__init__()
        self.rnn = torch.nn.LSTM(3, 5, num_layers=2, bidirectional=True, batch_first=True, bias=bias)
        self.head = torch.nn.Linear(10, 2)

    def forward(self, x):
        out, (h, c) = self.rnn(x)
        return self.head(out).sum() + (h * c).sum()


@pytest.mark.parametrize("bias", [True, False])
def test_training_an_exported_lstm_matches_eager_gradients(bias):
    """``neuroncc compile --train`` of an exported LSTM refused ``aten.mkldnn_rnn_layer`` (no lowering, nor for its
    oneDNN backward); traced with oneDNN off it is the LSTM's math, and one step's loss and gradients are eager's."""
    torch.manual_seed(0)
    model, x = Tagger(bias), torch.randn(2, 4, 3)
    program = torch.export.export(model, (x,))
    with warnings.catch_warnings(record=True) as caught:  # turning oneDNN off says nothing (no TF32 warning)
        warnings.simplefilter("always")
        graphs = trace_training(program, "tagger", _interp)
    assert not [w for w in caught if "TF32" in str(w.message)]
    parameters = dict(graphs.module.named_parameters())
    ours = [parameters[n].detach().clone().requires_grad_(True) for n in graphs.parameter_names]
    loss = graphs.step(*ours, x)
    loss.backward()
    eager_loss = model(x)
    eager_loss.backward()
    torch.testing.assert_close(loss.detach(), eager_loss.detach())
    eager_parameters = dict(model.named_parameters())
    for name, parameter in zip(graphs.parameter_names, ours):
        torch.testing.assert_close(parameter.grad, eager_parameters[name].grad, msg=name)


class Counted(torch.nn.Module):
    """A counter buffer updated in place and then read by a differentiated product."""

    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 3)
        self.register_buffer("count", torch.zeros((), dtype=torch.int64))

    def forward(self, x):
        self.count += 1
        return (self.linear(x) * self.count).sum()


def test_training_a_program_that_reads_an_updated_counter():
    """torch's module of the exported graph copies the counter onto itself after autograd saved it (its own
    backward raises "modified by an inplace operation"; so did ``neuroncc compile --train``): that no-op copy is
    dropped before the joint graph is traced, and two steps give the model's loss, gradients and count."""
    torch.manual_seed(0)
    model, x = Counted(), torch.randn(2, 4)
    program = torch.export.export(Counted(), (x,))
    graphs = trace_training(program, "counted", _interp)
    parameters, buffers = dict(graphs.module.named_parameters()), dict(graphs.module.named_buffers())
    model.load_state_dict({**parameters, **buffers})
    ours = [parameters[n].detach().clone().requires_grad_(True) for n in graphs.parameter_names]
    count = buffers["count"].clone()
    for _ in range(2):
        loss = graphs.step(*ours, count, x)
        loss.backward()
        eager_loss = model(x)
        eager_loss.backward()
        torch.testing.assert_close(loss.detach(), eager_loss.detach())
    assert int(count) == int(model.count) == 2
    for name, parameter in zip(graphs.parameter_names, ours):
        torch.testing.assert_close(parameter.grad, dict(model.named_parameters())[name].grad, msg=name)
