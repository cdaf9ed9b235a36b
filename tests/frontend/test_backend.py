"""The backend's contract with torch.compile: registration, options, dtypes, layouts, aliasing, logging, dumps."""

from __future__ import annotations

import logging
import subprocess
import sys

import pytest
import torch

import neuroncc
from neuroncc.frontend.backend import neuron_backend
from neuroncc.frontend.diagnostics import Float64Warning
from neuroncc.ir import parse, verify


def test_backend_is_found_through_the_entry_point():
    assert "neuron" in torch._dynamo.list_backends()
    # the device's entry point: the front end's backend, also taking neuron tensors (neuroncc/device/compiled.py)
    from neuroncc.device import compiled

    assert torch._dynamo.lookup_backend("neuron") is compiled.neuron_backend


def test_the_entry_point_leaves_the_device_kernels_unimported():
    """A CPU warm start resolves the backend without importing the device's eager-op machinery (~15 ms)."""
    import subprocess
    import sys

    code = ("import sys, torch, neuroncc.device.compiled; "
            "print('neuroncc.device.kernels' in sys.modules, 'neuroncc.device.programs' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    assert out.split() == ["False", "False"]


def test_set_default_backend_makes_plain_torch_compile_use_neuron():
    torch.compiler.set_default_backend("neuron")
    try:
        model = torch.nn.Linear(4, 3)
        x = torch.randn(2, 4)
        torch.testing.assert_close(torch.compile(model)(x), model(x))
    finally:
        torch.compiler.set_default_backend(None)
    assert neuroncc.stats()["dynamo_graphs"] == 1


def test_import_neuroncc_does_not_import_torch():
    code = "import sys, neuroncc; neuroncc.stats(); assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_float64_runs_as_float32_with_one_warning_and_float64_outputs():
    model = torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.Tanh(), torch.nn.Linear(7, 2)).double()
    x = torch.randn(3, 5, dtype=torch.float64)
    compiled = torch.compile(model, backend="neuron", dynamic=False)
    with pytest.warns(Float64Warning) as record:
        out = compiled(x)
        out.sum().backward()
    assert len([w for w in record if issubclass(w.category, Float64Warning)]) == 1
    assert out.dtype == torch.float64
    assert all(p.grad.dtype == torch.float64 for p in model.parameters())
    grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    reference = model(x)
    reference.sum().backward()
    torch.testing.assert_close(out, reference, rtol=1e-5, atol=1e-6)  # float32 accuracy
    for ours, eager in zip(grads, [p.grad for p in model.parameters()]):
        torch.testing.assert_close(ours, eager, rtol=1e-5, atol=1e-6)


def test_bfloat16_and_mixed_dtypes_follow_type_promotion():
    def fn(x, idx):
        return (x * 0.1 + idx).float().sum(0), (idx > 1.5).sum()

    x = torch.randn(4, 3).to(torch.bfloat16)
    idx = torch.tensor([[0, 1, 2]] * 4)
    compiled = torch.compile(fn, backend="neuron", dynamic=False)
    for ours, eager in zip(compiled(x, idx), fn(x, idx)):
        assert ours.dtype == eager.dtype
        torch.testing.assert_close(ours, eager)


def test_outputs_have_eager_strides():
    def fn(x):
        y = x * 2
        return y.t(), y.sum(0).expand(3, 4), y[:, ::2]

    x = torch.randn(3, 4)
    compiled = torch.compile(fn, backend="neuron", dynamic=False)
    for ours, eager in zip(compiled(x), fn(x)):
        assert ours.stride() == eager.stride()
        torch.testing.assert_close(ours, eager)


def test_view_outputs_alias_their_input_as_in_eager():
    def fn(x):
        return x.view(-1), x.transpose(0, 1), x + 1

    x = torch.randn(2, 3)
    flat, transposed, _ = torch.compile(fn, backend="neuron", dynamic=False)(x)
    x.add_(10)  # visible through the views, as in eager
    torch.testing.assert_close(flat, x.view(-1))
    torch.testing.assert_close(transposed, x.t())


def test_input_mutation_is_written_back():
    def fn(x, buffer):
        buffer.mul_(2)
        x[0] = 5.0
        return x + buffer

    x, buffer = torch.randn(3), torch.randn(3)
    x_eager, buffer_eager = x.clone(), buffer.clone()
    out = torch.compile(fn, backend="neuron", dynamic=False)(x, buffer)
    torch.testing.assert_close(out, fn(x_eager, buffer_eager))
    torch.testing.assert_close(x, x_eager)
    torch.testing.assert_close(buffer, buffer_eager)


def test_inputs_without_gradient_get_none():
    def fn(x, w, unused):
        return (x @ w).sum()

    x, w, unused = (torch.randn(2, 3, requires_grad=True), torch.randn(3, 4, requires_grad=True),
                    torch.randn(5, requires_grad=True))
    torch.compile(fn, backend="neuron", dynamic=False)(x, w, unused).backward()
    assert unused.grad is None
    torch.testing.assert_close(w.grad, x.detach().sum(0, keepdim=True).t().expand(3, 4))


def test_new_shape_recompiles_and_logs_why(caplog):
    compiled = torch.compile(lambda x: torch.relu(x) - 1, backend="neuron", dynamic=False)
    with caplog.at_level(logging.INFO, logger="neuroncc.frontend"):
        compiled(torch.randn(3))
        compiled(torch.randn(5))
        compiled(torch.randn(3))  # the first specialization again: no compile
    assert neuroncc.stats()["dynamo_graphs"] == 2
    messages = [r.getMessage() for r in caplog.records if r.name == "neuroncc.frontend"]
    assert any("specialization #1" in m and "size mismatch" in m for m in messages), messages


def test_dump_env_var_writes_parsable_ir(tmp_path, monkeypatch):
    monkeypatch.setenv("NEURONCC_DUMP", str(tmp_path))
    model = torch.nn.Linear(4, 2)
    torch.compile(model, backend="neuron", dynamic=False)(torch.randn(3, 4)).sum().backward()
    dumped = sorted(p.name for p in tmp_path.glob("*.nir"))
    assert dumped == ["g0_0_backward.nir", "g0_0_forward.nir"]
    for path in tmp_path.glob("*.nir"):
        fn = parse(path.read_text())
        verify(fn)
        assert fn.name == path.stem


def test_stats_count_and_reset():
    counts = neuroncc.stats()
    assert set(counts) >= {"graphs_compiled", "forward_graphs", "backward_graphs", "inference_graphs", "kernels",
                           "cache_hits", "cache_misses", "fallback_ops", "interpreted_kernels", "native_kernels"}
    with torch.no_grad():
        torch.compile(torch.nn.Linear(3, 3), backend="neuron", dynamic=False)(torch.randn(2, 3))
    counts = neuroncc.stats()
    assert counts["inference_graphs"] == counts["graphs_compiled"] == 1
    assert counts["kernels"] >= 1 and counts["interpreted_kernels"] == 0  # Linear is one extern addmm on cpu
    neuroncc.reset_stats()
    assert not any(neuroncc.stats().values())


def test_second_compile_of_the_same_graph_hits_the_compile_cache(monkeypatch):
    # the graph cache would serve the second compile without AOTAutograd (test_graph_cache.py); off, AOTAutograd
    # runs again and each aten graph is a compile-cache hit
    monkeypatch.setenv("NEURONCC_DISABLE_GRAPH_CACHE", "1")
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())
    x = torch.randn(2, 4)
    with torch.no_grad():
        torch.compile(model, backend="neuron", dynamic=False)(x)
        assert neuroncc.stats()["cache_misses"] == 1
        torch._dynamo.reset()  # forget the compiled frame: the next call compiles again, from the cache
        out = torch.compile(model, backend="neuron", dynamic=False)(x)
    torch.testing.assert_close(out, model(x))
    counts = neuroncc.stats()
    assert counts["cache_hits"] == 1 and counts["cache_misses"] == 1 and counts["inference_graphs"] == 2


def test_prims_fma_decomposes_when_the_table_was_built_before_torchdynamo_loaded():
    """``addcmul_(value=...)`` reaches the backend as ``prims.fma``, an op Inductor's module defines. The
    decomposition table does not import that module (it would load TorchDynamo into eager-only processes), so
    the entry must join a table built earlier, once TorchDynamo has loaded it."""
    code = (
        "import sys, torch\n"
        "from neuroncc.frontend.lowering.decompositions import decomposition_table\n"
        "decomposition_table()\n"
        "assert 'torch._inductor.inductor_prims' not in sys.modules\n"
        "def f(p, a, b):\n"
        "    p.addcmul_(a, b, value=0.5)\n"
        "    return p * 2\n"
        "p, a, b = torch.randn(16), torch.randn(16), torch.randn(16)\n"
        "want_p = p.clone(); want = f(want_p, a, b)\n"
        "got = torch.compile(f, backend='neuron', dynamic=False)(p, a, b)\n"
        "torch.testing.assert_close(got, want); torch.testing.assert_close(p, want_p)\n"
        "assert torch.ops.prims.fma.default in decomposition_table()\n")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=300)


def _training_step(logits, target):
    logits = logits.detach().requires_grad_()  # a graph break: TorchDynamo's first graph is this detach alone
    loss = torch.nn.functional.cross_entropy(logits, target)
    loss.backward()  # a graph break: the last graph is the loss's detach alone
    return loss.detach(), logits.grad


def test_graphs_of_detaches_run_as_traced():
    """TorchDynamo's graphs around a training step's graph breaks compute nothing (their outputs alias their
    inputs): they run as traced, eager's detach, not through AOTAutograd's runtime and a launch of ours."""
    torch._dynamo.reset()
    neuroncc.reset_stats()
    logits, target = torch.randn(8, 40), torch.randint(0, 40, (8,))
    compiled = torch.compile(_training_step, backend="neuron", dynamic=False)
    for _ in range(2):
        loss, grad = compiled(logits, target)
        want_loss, want_grad = _training_step(logits, target)
        torch.testing.assert_close(loss, want_loss)
        torch.testing.assert_close(grad, want_grad)
        assert not loss.requires_grad and loss.grad_fn is None
    counts = neuroncc.stats()
    assert counts["dynamo_graphs"] == 3 and counts["detach_graphs"] == 2
    assert counts["inference_graphs"] == 0  # (each detach graph was an inference graph compiled before)


def test_only_a_graph_of_nothing_but_detaches_is_left_uncompiled():
    from neuroncc.frontend.backend import detaches_only

    graph_of = torch.fx.symbolic_trace
    assert detaches_only(graph_of(lambda x: x.detach()))
    assert detaches_only(graph_of(lambda x, y: (torch.detach(x), y.detach())))
    assert not detaches_only(graph_of(lambda x: x.detach() + 1))
    assert not detaches_only(graph_of(lambda x: x.detach().clone()))
    assert not detaches_only(graph_of(lambda x: x))  # no op at all: TorchDynamo hands over no such graph
