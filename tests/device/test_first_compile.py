"""An op's first call waits for its compile: quick-tier code first, the optimized code swapped in when built.

(neuroncc/executors/cpu/tiers.py decides; device/kernels.py CompiledKernel swaps; the disk cache stores the
optimized code.)
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch

from neuroncc.device import dispatch
from neuroncc.device.kernels import CompiledKernel
from neuroncc.driver.publisher import PUBLISHER
from neuroncc.executors.cpu.launcher import CODE_FILES, stored_code
from neuroncc.executors.cpu.tiers import OPTIMIZER

from .conftest import run_python

aten = torch.ops.aten


def _new_kernels(op, run):
    """Run ``run()`` and return its result and the compiled kernels ``op``'s handler made for it."""
    handler = dispatch.handler_for(op)
    before = set(handler.entries)
    result = run()
    made = [entry for key, entry in handler.entries.items() if key not in before]
    return result, [entry for entry in made if isinstance(entry, CompiledKernel)]


def _bits(t):
    return t.cpu().contiguous().view(torch.int32)


def test_the_first_call_runs_quick_code_and_later_calls_the_optimized_code():
    x = torch.randn(7, 131, device="neuron") * 10  # a signature no other test compiles
    first, (kernel,) = _new_kernels(aten.sigmoid.default, lambda: x.sigmoid())
    quick = kernel.executable
    assert quick.optimized is not None, "sigmoid's kernel computes the same bits at both tiers: quick first"
    OPTIMIZER.wait()
    optimized = quick.optimized.result()
    assert kernel.executable is optimized and optimized.optimized is None  # swapped in
    assert optimized.module.objects != quick.module.objects
    second = x.sigmoid()
    assert torch.equal(_bits(first), _bits(second))
    torch.testing.assert_close(second.cpu(), torch.sigmoid(x.cpu()))


def test_a_kernel_made_after_the_optimized_build_starts_with_it():
    x = torch.randn(5, 133, device="neuron")
    y = torch.randn(5, 133, device="neuron")
    _, (kernel,) = _new_kernels(aten.maximum.default, lambda: torch.maximum(x, y))
    OPTIMIZER.wait()
    # maximum.out's kernel (the same program) takes the executable from the device's table: already optimized
    out = torch.empty(5, 133, device="neuron")
    _, made = _new_kernels(aten.maximum.out, lambda: torch.maximum(x, y, out=out))
    assert all(k.executable.optimized is None for k in made)
    assert torch.equal(out.cpu(), torch.maximum(x.cpu(), y.cpu()))


def test_sums_compile_optimized_at_once():
    """A sum's reduction order is the vectorizer's: its quick code would round differently."""
    x = torch.randn(9, 135, device="neuron")
    result, (kernel,) = _new_kernels(aten.sum.dim_IntList, lambda: x.sum(1))
    assert kernel.executable.optimized is None
    torch.testing.assert_close(result.cpu(), x.cpu().sum(1))


def test_the_disk_cache_holds_the_optimized_code():
    x = torch.randn(3, 139, device="neuron")
    _, (kernel,) = _new_kernels(aten.exp.default, lambda: x.exp())
    quick = kernel.executable
    assert quick.optimized is not None
    OPTIMIZER.wait()
    PUBLISHER.flush()
    optimized = stored_code(quick.optimized.result().module)
    stored = [path.read_bytes() for path in (Path(os.environ["NEURONCC_CACHE_DIR"]) / "entries").glob("*/kernels.*")
              if path.name in CODE_FILES.values()]
    assert optimized in stored and stored_code(quick.module) not in stored


def test_a_second_process_loads_the_optimized_code_of_a_process_that_exited_at_once(tmp_path, warm_python):
    """The first process exits right after its ops' quick compiles: the interpreter waits for their optimized
    builds and their cache entries, so the second compiles nothing and runs optimized code."""
    code = ("import json, torch, neuroncc\n"
            "x = torch.randn(6, 141, device='neuron'); y = torch.randn(6, 141, device='neuron')\n"
            "z = ((x * y).exp() + torch.maximum(x, y)).sigmoid()\n"
            "from neuroncc.device import dispatch\n"
            "quick = sum(getattr(getattr(e, 'executable', None), 'optimized', None) is not None\n"
            "            for h in dispatch.handlers() for e in h.entries.values())\n"
            "s = neuroncc.stats(); print(json.dumps([s['eager_kernels_compiled'], s['eager_kernels_loaded'], quick]))")
    env = {"NEURONCC_CACHE_DIR": str(tmp_path / "cache")}
    first = run_python(code, env, python=warm_python)
    assert first.returncode == 0, first.stderr
    compiled, loaded, _ = json.loads(first.stdout.strip().splitlines()[-1])
    assert compiled >= 4 and loaded == 0
    second = run_python(code, env, python=warm_python.other)
    assert second.returncode == 0, second.stderr
    assert json.loads(second.stdout.strip().splitlines()[-1]) == [0, compiled, 0]


def test_an_op_called_with_a_number_takes_the_optimized_code_too():
    """``x * 0.5`` goes straight to the kernel of ``x * tensor(0.5)`` (entries.WrapNumbers): that direct call
    is rebuilt when the kernel's optimized code is swapped in."""
    from neuroncc.device.entries import WrapNumbers

    x = torch.randn(3, 143, device="neuron")
    handler = dispatch.handler_for(aten.mul.Tensor)
    before = set(handler.entries)
    first = x * 0.5
    x * 0.5  # the direct call from here on
    (entry,) = [e for k, e in handler.entries.items() if k not in before and isinstance(e, WrapNumbers)]
    (kernel,) = [e for k, e in handler.entries.items() if k not in before and isinstance(e, CompiledKernel)]
    quick_call = entry.direct
    assert quick_call is not None and kernel.executable.optimized is not None
    OPTIMIZER.wait()
    assert kernel.executable.optimized is None  # swapped
    assert entry.direct is not quick_call and entry.call is entry.direct  # and the direct call rebuilt over it
    assert torch.equal(_bits(x * 0.5), _bits(first))
