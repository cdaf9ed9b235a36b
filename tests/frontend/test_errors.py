"""Refusals surface as typed errors naming the op/feature and the user's line; fallback mode runs instead."""

from __future__ import annotations

import copy
import re
from pathlib import Path

import pytest
import torch
import torch.nn as nn
from torch._dynamo.exc import BackendCompilerFailed

import neuroncc
from neuroncc.frontend.backend import neuron_backend
from neuroncc.frontend.fallback import FallbackWarning


def _inner(error: BaseException) -> BaseException:
    """The backend's own exception inside TorchDynamo's BackendCompilerFailed wrapper."""
    assert isinstance(error, BackendCompilerFailed), f"expected dynamo to surface the backend error, got {error!r}"
    return error.inner_exception


# An op neuroncc can never lower: a custom op (opaque to every compiler) whose backward calls it again, so
# fallback mode has to run it in the forward and the backward graph.
@torch.library.custom_op("neuroncc_test::running_total", mutates_args=())
def running_total(x: torch.Tensor, dim: int) -> torch.Tensor:
    return torch.cumsum(x, dim=dim)


@running_total.register_fake
def _(x, dim):
    return torch.empty_like(x)


def _running_total_backward(ctx, grad):
    return running_total(grad.flip(ctx.dim), ctx.dim).flip(ctx.dim), None


def _remember_dim(ctx, inputs, output):
    ctx.dim = inputs[1]


running_total.register_autograd(_running_total_backward, setup_context=_remember_dim)
OP = "neuroncc_test.running_total.default"


def running_sum(x):
    return running_total(x * 2, 1) + 1


RUNNING_SUM_LINE = running_sum.__code__.co_firstlineno + 1


class RunningTotalMLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(6, 8)
        self.fc2 = nn.Linear(8, 3)

    def forward(self, x):
        return self.fc2(running_total(torch.tanh(self.fc1(x)), -1))


def test_unsupported_op_names_op_types_file_line_and_fallback_hint():
    compiled = torch.compile(running_sum, backend="neuron", dynamic=False)
    with pytest.raises(BackendCompilerFailed) as info:
        compiled(torch.randn(3, 4))
    error = _inner(info.value)
    assert isinstance(error, neuroncc.UnsupportedOpError)
    message = str(info.value)  # what the user reads
    assert f"{OP}(float32[3, 4], 1)" in message
    assert f"{__file__}:{RUNNING_SUM_LINE}" in message
    assert "running_total(x * 2, 1)" in message
    assert 'options={"fallback": "cpu"}' in message
    assert error.op == OP


def test_fallback_runs_unsupported_op_on_eager_and_records_it():
    compiled = torch.compile(running_sum, backend="neuron", dynamic=False, options={"fallback": "cpu"})
    x = torch.randn(3, 4)
    with pytest.warns(FallbackWarning, match=OP):
        torch.testing.assert_close(compiled(x), running_sum(x))
    assert neuroncc.get_fallback_ops() == {OP: 1}
    counts = neuroncc.stats()
    assert counts["fallback_ops"] == 1
    assert counts["fallback_partitions"] == 2  # x * 2 before the custom op, + 1 after it


def test_fallback_trains_the_same_model_as_eager():
    eager = RunningTotalMLP()
    ours = copy.deepcopy(eager)
    compiled = torch.compile(ours, backend="neuron", dynamic=False, options={"fallback": "cpu"})
    x = torch.randn(5, 6)
    with pytest.warns(FallbackWarning):
        out = compiled(x)
        out.square().sum().backward()
    reference = eager(x)
    reference.square().sum().backward()
    torch.testing.assert_close(out, reference)
    for mine, theirs in zip(ours.parameters(), eager.parameters()):
        torch.testing.assert_close(mine.grad, theirs.grad)
    # the op runs in the forward and (on the flipped gradient) in the backward
    assert neuroncc.get_fallback_ops()[OP] == 2
    assert neuroncc.stats()["backward_graphs"] == 1


def test_fallback_warns_once_per_op():
    compiled = torch.compile(running_sum, backend="neuron", dynamic=False, options={"fallback": "cpu"})
    with pytest.warns(FallbackWarning) as record:
        compiled(torch.randn(3, 4))
        compiled(torch.randn(5, 4))  # a second specialization: counted again, not warned again
    assert len([w for w in record if issubclass(w.category, FallbackWarning)]) == 1
    assert neuroncc.get_fallback_ops() == {OP: 2}


def _vmapped(x):
    return torch.func.vmap(torch.sin)(x)


def _grad_of_sin(x):
    return torch.func.grad(lambda y: y.sin().sum())(x)


def _log_prob(x):
    return torch.distributions.Normal(torch.zeros(3), torch.ones(3)).log_prob(x)


def _nested_sin(x):
    return x.sin()


def _jagged():
    return torch.nested.nested_tensor([torch.randn(2, 4), torch.randn(3, 4)], layout=torch.jagged)


@pytest.mark.parametrize(("fn", "make_input", "feature"), [
    (_log_prob, lambda: torch.randn(3), "torch.distributions"),
    (_nested_sin, _jagged, "nested tensors"),
], ids=["torch.distributions", "nested"])
def test_unsupported_features_raise_typed_errors(fn, make_input, feature):
    compiled = torch.compile(fn, backend="neuron", dynamic=False)
    with pytest.raises(BackendCompilerFailed) as info:
        compiled(make_input())
    assert isinstance(_inner(info.value), neuroncc.UnsupportedOpError)
    assert f"neuroncc does not support {feature}" in str(info.value)
    assert f"{__file__}:" in str(info.value)  # the user's line, found even when the first node has none


@pytest.mark.parametrize("fn", [_vmapped, _grad_of_sin], ids=["vmap", "grad"])
def test_torch_func_transforms_compile(fn):
    """AOTAutograd traces torch.func's transforms away (before session 30 they were refused by name)."""
    x = torch.randn(2, 3)
    torch.testing.assert_close(torch.compile(fn, backend="neuron", dynamic=False)(x), fn(x))


def test_functional_call_is_not_a_transform():
    linear = nn.Linear(3, 2)
    params = dict(linear.named_parameters())
    compiled = torch.compile(lambda p, x: torch.func.functional_call(linear, p, (x,)), backend="neuron", dynamic=False)
    x = torch.randn(4, 3)
    torch.testing.assert_close(compiled(params, x), linear(x))


def test_sparse_inputs_are_refused_by_the_backend():
    # TorchDynamo itself graph-breaks on sparse tensors before calling any backend (use fullgraph=True to
    # get its error); called directly, the backend refuses them by name.
    gm = torch.fx.symbolic_trace(lambda x: x * 2)
    with pytest.raises(neuroncc.UnsupportedOpError, match="sparse tensors"):
        neuron_backend(gm, [torch.eye(3).to_sparse()])


def test_unknown_option_values_are_input_errors():
    compiled = torch.compile(lambda x: x + 1, backend="neuron", options={"fallback": "gpu"})
    with pytest.raises(BackendCompilerFailed) as info:
        compiled(torch.randn(2))
    assert isinstance(_inner(info.value), neuroncc.InputError)
    assert "fallback" in str(info.value)


@pytest.mark.parametrize("options, named", [
    ({"max_specializatons": 3}, "unknown option 'max_specializatons' (did you mean 'max_specializations'?"),
    ({"fallbak": "cpu"}, "unknown option 'fallbak' (did you mean 'fallback'?"),
    ({"turbo": True}, "unknown option 'turbo' (known: compile_threads, dump_dir"),
])
def test_unknown_option_names_are_input_errors(options, named):
    # A misspelled option was ignored without a word: the graph compiled with the option's default.
    compiled = torch.compile(lambda x: x + 1, backend="neuron", options=options)
    with pytest.raises(BackendCompilerFailed) as info:
        compiled(torch.randn(2))
    assert isinstance(_inner(info.value), neuroncc.InputError)
    assert named in str(_inner(info.value))


def test_every_known_option_name_is_accepted():
    from neuroncc.frontend.options import COMPILE_KEYS, FRONTEND_KEYS, BackendOptions
    config = BackendOptions.from_user({"threads": 1, "threading": "python", "compile_threads": 1,
                                       "quick_first": False, "verify_each": True}, {})
    assert dict(config.compile_options) == {"threads": 1, "threading": "python", "compile_threads": 1,
                                            "quick_first": False, "verify_each": True}
    assert not FRONTEND_KEYS & COMPILE_KEYS


#: The modules that read compile_graph's options, and how they read a key (``options.get("threads")``,
#: ``options.pop("pipeline", None)``, ``_count_option(options, "compile_threads", ...)``).
_OPTION_READERS = ("driver/compile.py", "executors/cpu/build_options.py", "executors/nki_sim/executable.py")
_OPTION_READ = re.compile(r"""(?:options(?:\.get\(|\.pop\(|\[)|_count_option\(options, )["']([a-z_]+)["']""")


def test_the_declared_compile_options_are_the_ones_their_readers_read():
    # COMPILE_KEYS is declared in the front end, not imported from its readers: an option a reader gains must be
    # declared (or torch.compile refuses it), and a declared one no reader takes is a typo accepted silently
    from neuroncc.frontend.options import COMPILE_KEYS
    package = Path(neuroncc.__file__).parent
    read = set().union(*(_OPTION_READ.findall((package / path).read_text()) for path in _OPTION_READERS))
    assert {"threads", "compile_threads", "verify_each", "nki_target", "pipeline"} <= read  # the pattern finds them
    assert read - {"pipeline"} == COMPILE_KEYS - {"dump_dir"}  # pipeline: a front-end key; dump_dir: the pass dump's


def test_compile_program_takes_its_pipeline_in_options_too():
    from neuroncc.frontend.options import check_compile_options
    check_compile_options({"pipeline": "canonicalize", "threads": 1})  # compile_graph reads both
    with pytest.raises(neuroncc.InputError, match=r"compile_program: unknown option 'pipelin' \(did you mean"):
        check_compile_options({"pipelin": "canonicalize"})


def test_a_meta_tensor_at_run_time_is_an_input_error():
    # numpy's TypeError ("can't convert meta device type tensor") came out of neuroncc's input conversion
    compiled = torch.compile(lambda x: x + 1, backend="neuron")
    with pytest.raises(neuroncc.InputError, match=r"a meta tensor float32\[3\] was passed to a compiled graph"):
        compiled(torch.ones(3, device="meta"))


@pytest.mark.parametrize("dtype", [torch.uint16, torch.float8_e4m3fn])
def test_an_input_dtype_without_an_element_type_is_refused_at_the_users_line(dtype):
    # the refusal named no input, op or line: "dtype torch.uint16 has no neuroncc element type"
    def scale(x):
        return x.float() * 2

    line = scale.__code__.co_firstlineno + 1
    with pytest.raises(BackendCompilerFailed) as info:
        torch.compile(scale, backend="neuron")(torch.ones(3).to(dtype))
    message = str(_inner(info.value))
    assert isinstance(_inner(info.value), neuroncc.UnsupportedOpError)
    assert f"{str(dtype).removeprefix('torch.')} tensors as graph inputs (input 0" in message, message
    assert f"test_errors.py:{line}" in message and "bfloat16, bool, complex128" in message, message
