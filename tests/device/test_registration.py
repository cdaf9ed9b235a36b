"""The device registers through torch's autoload entry point, cheaply, and never breaks ``import torch``."""

from __future__ import annotations

import json

import pytest
import torch

from device.conftest import run_python


def test_a_fresh_process_knows_the_device_without_importing_neuroncc():
    code = ("import sys, torch; t = torch.ones(2, device='neuron'); "
            "print(t.device, t.cpu().tolist(), torch.neuron.is_available())")
    result = run_python(code)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["neuron:0", "[1.0,", "1.0]", "True"]


@pytest.mark.parametrize("first", ["neuroncc.device.dispatch", "neuroncc.device.registration"])
def test_importing_a_device_module_before_torch_still_registers(first):
    """The module's own ``import torch`` runs the autoload hook, which must not meet it half-initialized."""
    result = run_python(f"import {first}, torch; print(torch.ones(1, device='neuron').device)")
    assert result.returncode == 0, result.stderr
    assert "disabled" not in result.stderr, result.stderr
    assert result.stdout.split() == ["neuron:0"]


#: What ``import torch`` may load of the front end: the registration of neuroncc's artifact type with
#: ``torch.compiler.load_cache_artifacts`` (a small module that imports the driver only when a payload arrives).
IMPORTED_AT_AUTOLOAD = ["neuroncc.frontend", "neuroncc.frontend.cache_artifacts"]


def test_autoload_stays_cheap_it_loads_no_compiler():
    code = ("import sys, json, torch; print(json.dumps(sorted(m for m in sys.modules if m.startswith("
            "('neuroncc.frontend', 'neuroncc.driver', 'neuroncc.executors', 'neuroncc.passes', 'neuroncc.ir', "
            "'neuroncc.hardware.neuron', 'llvmlite', 'torch._dynamo', 'torch._inductor')))))")
    result = run_python(code)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == IMPORTED_AT_AUTOLOAD


def test_autoload_defers_the_eager_dispatcher_and_the_process_group_to_their_first_use():
    """Both cost ``import torch`` tens of milliseconds (issue #16 allows the hook 30 ms in all)."""
    deferred = ("neuroncc.device.dispatch", "neuroncc.distributed.process_group")
    code = ("import sys, json, torch\n"
            f"loaded = lambda: [m for m in {deferred!r} if m in sys.modules]\n"
            "at_import = loaded()\n"
            "t = torch.ones(3, device='neuron')\n"
            "value = (t + t).sum().item()\n"
            "print(json.dumps([at_import, loaded(), value]))")
    result = run_python(code)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == [[], ["neuroncc.device.dispatch"], 6.0]


def test_the_eager_device_modules_do_not_import_torchdynamo_or_inductor():
    """Importing TorchDynamo and Inductor costs a process ~2 s; the eager device's first op used to pay it
    through two module-level imports of the front end (``prims.fma``'s definition, ``CheckpointPolicy``)."""
    modules = ("neuroncc.device.entries", "neuroncc.device.kernels", "neuroncc.device.programs",
               "neuroncc.frontend.lowering.decompositions", "neuroncc.frontend.lowering.random_ops")
    code = ("import sys, json, importlib, torch\n"
            f"for name in {modules!r}: importlib.import_module(name)\n"
            "print(json.dumps([m for m in ('torch._dynamo', 'torch._inductor') if m in sys.modules]))")
    result = run_python(code)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == []


def test_autoload_can_be_turned_off():
    code = "import torch\ntry:\n    torch.ones(1, device='neuron')\nexcept RuntimeError as e:\n    print('refused')"
    result = run_python(code, env={"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"})
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "refused"


def test_a_broken_install_disables_the_device_with_one_warning_and_torch_still_imports():
    code = "import torch; print(torch.ones(2).sum().item())"
    result = run_python(code, env={"NEURONCC_DEVICE_COUNT": "many"})  # a bad setting makes registration fail
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "2.0"
    assert result.stderr.count("DeviceDisabledWarning") == 1
    assert "NEURONCC_DEVICE_COUNT must be an integer" in result.stderr


def test_registration_is_idempotent():
    import neuroncc.device

    neuroncc.device.register()
    neuroncc.device.register()
    assert torch._C._get_privateuse1_backend_name() == "neuron"
    assert torch.get_device_module("neuron") is torch.neuron


def test_tensor_and_module_methods_exist():
    t = torch.ones(3).neuron()
    assert t.is_neuron and t.device.type == "neuron"
    module = torch.nn.Linear(2, 2).neuron()
    assert module.weight.device.type == "neuron"


def test_torchdynamo_never_traces_the_device_kernels():
    """Code that runs eagerly inside a compiled function (FSDP2's hooks, skipped by TorchDynamo as torch's own
    files) calls the device's Python kernels with TorchDynamo's frame callback active. It traced them as user
    code, and failed where their numpy code does not trace: a bf16 matmul's rounding raised ``KeyError
    (torch.uint32)`` (``torch.compile`` of an FSDP2 model with a bf16 MixedPrecisionPolicy, session 27)."""
    from torch._dynamo.decorators import skip

    def eager_part(a, b):  # skipped as FSDP2's hooks are; what it calls is not
        return a.bfloat16() @ b.bfloat16()

    skip(eager_part)

    def step(a, b):
        return eager_part(a, b).float() + 1

    a, b = torch.randn(4, 8), torch.randn(8, 3)
    compiled = torch.compile(step, backend="neuron", dynamic=False)
    result = compiled(a.to("neuron"), b.to("neuron"))
    # within one bf16 rounding of each product (both round an fp32 dot product once)
    bound = torch.finfo(torch.bfloat16).eps * (a.abs() @ b.abs()).max().item()
    torch.testing.assert_close(result.cpu(), step(a, b), rtol=0, atol=bound)
