"""First calls built under the device's lock alone while TorchDynamo is not imported (neuroncc/device/build_lock.py).

A warm process (its kernels in the compile cache) makes its first calls' entries without importing TorchDynamo
or sympy (1.0 s of a first op before); a first call that has to trace gives way to a build under TorchDynamo's
compile lock, nested first calls included, and computes what CPU computes. The processes are fresh
interpreters: the tests' own process and the ``warm_python`` server have imported TorchDynamo already.
"""

from __future__ import annotations

import contextlib
import json

import torch

from neuroncc.device import build_lock
from .conftest import run_python

#: ops of several entry kinds: a Python number (a nested first call of the wrapped signature), out=, in place,
#: a reduction, a traced decomposition (softmax, layer_norm), bf16, integers, a matrix product
SCRIPT = r"""
import json, sys, threading, torch, neuroncc
torch.manual_seed(0)
values = [torch.randn(6, 40), torch.randn(40), torch.randn(6, 40).to(torch.bfloat16), torch.randint(0, 9, (6, 40))]

def run(device):
    x, y, h, i = (t.to(device) for t in values)
    z = x.clone()
    z.mul_(0.5)
    out = torch.empty(6, 40, device=device)
    torch.add(x, y, out=out)
    return [(x * 2 + 1).relu(), z, out, x.sum(1), x.softmax(-1), torch.nn.functional.layer_norm(x, (40,)),
            h * 3, (i * 3) % 7, x @ x.T]

expected = run("cpu")
THREADS = int(sys.argv[1]) if len(sys.argv) > 1 else 1
results = [None] * THREADS

def work(k):
    results[k] = [r.cpu() for r in run("neuron")]

threads = [threading.Thread(target=work, args=(k,)) for k in range(THREADS)]
for t in threads:
    t.start()
for t in threads:
    t.join(120)
assert not any(t.is_alive() for t in threads), "a first call did not finish: a deadlock"
same = all(a.dtype == b.dtype and torch.allclose(a.float(), b.float(), rtol=1e-2, atol=1e-2)
           for got in results for a, b in zip(got, expected))
s = neuroncc.stats()
print(json.dumps({"same": same, "dynamo": "torch._dynamo" in sys.modules, "sympy": "sympy" in sys.modules,
                  "compiled": s["eager_kernels_compiled"], "loaded": s["eager_kernels_loaded"]}))
"""


def _run(env: dict[str, str], threads: int = 1) -> dict:
    done = run_python(SCRIPT.replace("sys.argv[1]) if len(sys.argv) > 1 else 1", f"{threads})"), env)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_warm_process_makes_its_first_calls_without_torchdynamo(tmp_path):
    env = {"NEURONCC_CACHE_DIR": str(tmp_path / "cache")}
    cold = _run(env)
    # the first process traced (make_fx imports TorchDynamo): its light builds gave way to full ones
    assert cold["same"] and cold["compiled"] > 0 and cold["dynamo"]
    warm = _run(env)  # (one thread: threads meet the out= and functional forms of an op in varying orders)
    assert warm["same"] and warm["compiled"] == 0 and warm["loaded"] > 0
    assert not warm["dynamo"] and not warm["sympy"]


def test_first_calls_on_threads_that_trace_and_load_at_once_match_cpu(tmp_path):
    """Three threads meet the same new signatures in a process without TorchDynamo: light builds, their
    retries under the compile lock and the entries other threads made meanwhile."""
    result = _run({"NEURONCC_CACHE_DIR": str(tmp_path / "cache")}, threads=3)
    assert result["same"] and result["compiled"] > 0


def test_a_light_build_that_needs_a_trace_builds_again_under_the_compile_lock(monkeypatch):
    """In this process TorchDynamo is imported; the light path is forced, so a new signature that traces
    (softmax's decomposition, nested under a Python number's wrapped call) exercises the give-way."""
    calls = {"light": 0, "gave_way": 0}
    original = build_lock.building_lightly

    def counting():
        calls["light"] += 1
        try:
            with original():
                yield
        except build_lock.TraceLockNeeded:
            calls["gave_way"] += 1
            raise

    monkeypatch.setattr(build_lock, "building_lightly", contextlib.contextmanager(counting))
    monkeypatch.setattr(build_lock, "builds_lightly",
                        lambda: build_lock.in_light_build() or not getattr(build_lock._builds, "full", 0))
    x = torch.randn(3, 59)
    y = (x.to("neuron").softmax(-1) * 0.75).cpu()  # shapes no other test uses: new signatures
    torch.testing.assert_close(y, x.softmax(-1) * 0.75)
    assert calls["light"] >= 1 and calls["gave_way"] >= 1
    assert not build_lock.in_light_build() and not getattr(build_lock._builds, "full", 0)
    # signatures built since are called without any build (the second call meets the functional ops, whose
    # kernels the first call's out= variants registered)
    torch.testing.assert_close((x.to("neuron").softmax(-1) * 0.75).cpu(), y)
    before = calls["light"]
    torch.testing.assert_close((x.to("neuron").softmax(-1) * 0.75).cpu(), y)
    assert calls["light"] == before
