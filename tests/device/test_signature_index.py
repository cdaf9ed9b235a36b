"""The signature index (neuroncc/device/signature_index.py): a second process meeting the signatures a first one
compiled loads their kernels without building programs, computes what CPU computes, and survives a damaged or
stale index."""

import json
import shutil
from pathlib import Path

import pytest
import torch

from neuroncc.device import signature_index
from neuroncc.device.signature import describe
from neuroncc.device.signature_index import Unindexable, record_name, signature_text
from .conftest import run_python

#: ops of every kind of entry the index holds: elementwise with a lifted float, in place with a float, out=,
#: several results, a reduction, a decomposed (traced) op, bf16 bits, integer results, a view-free copy
SCRIPT = r"""
import json, sys, torch, neuroncc
from neuroncc.device import signature_index
torch.manual_seed(0)
values = [torch.randn(5, 33), torch.randn(33), torch.randn(5, 33).to(torch.bfloat16), torch.randint(0, 9, (5, 33))]

def run(device):
    x, y, h, i = (t.to(device) for t in values)
    z = x.clone()
    z.add_(y, alpha=0.25)
    out = torch.empty(5, 33, device=device)
    torch.mul(x, y, out=out)
    top = torch.max(x, dim=1)
    return [(x * 1.5 + y).relu(), z, out, top.values, top.indices, x.softmax(-1), torch.nn.functional.layer_norm(x, (33,)),
            torch.nn.functional.gelu(h), (i * 3) % 7, torch.cumsum(x, 1)]

expected = run("cpu")
results = [r.cpu() for r in run("neuron")]
same = all(a.dtype == b.dtype and torch.equal(a, b) if a.dtype in (torch.int64, torch.bool) else
           a.dtype == b.dtype and torch.allclose(a.float(), b.float(), rtol=1e-2 if a.dtype is torch.bfloat16 else 1e-5,
                                                 atol=1e-2 if a.dtype is torch.bfloat16 else 1e-6)
           for a, b in zip(results, expected))
s = neuroncc.stats()
print(json.dumps({"same": same, "compiled": s["eager_kernels_compiled"], "loaded": s["eager_kernels_loaded"],
                  "hits": s["eager_index_hits"], "misfits": s["eager_index_misfits"],
                  "bits": [r.view(torch.int16).tolist() if r.dtype is torch.bfloat16 else r.tolist() for r in results]}))
"""


def _run(env, warm_python):
    done = run_python(SCRIPT, env, python=warm_python)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1]), done.stderr


def _index_dir(cache: Path) -> Path:
    found = [d for d in (cache / "entries").iterdir()
             if json.loads((d / "manifest.json").read_text()).get("graph_name") == "eager:signature-index"]
    assert len(found) == 1
    return found[0]


def test_a_second_process_builds_no_program(tmp_path, warm_python):
    env = {"NEURONCC_CACHE_DIR": str(tmp_path / "cache")}
    first, _ = _run(env, warm_python)
    assert first["same"] and first["compiled"] > 0 and first["hits"] == 0
    second, _ = _run(env, warm_python.other)
    assert second["same"] and second["compiled"] == 0 and second["misfits"] == 0
    # every kernel of the second process came through the index, and computed the first one's bits
    assert second["hits"] == second["loaded"] >= first["compiled"] - 2  # ops sharing a program (mul.out / mul)
    assert second["bits"] == first["bits"]


def test_a_damaged_index_is_a_miss_with_a_warning_and_is_written_again(tmp_path, warm_python):
    cache = tmp_path / "cache"
    env = {"NEURONCC_CACHE_DIR": str(cache)}
    first, _ = _run(env, warm_python)
    payload = _index_dir(cache) / "aot_graph.json"
    payload.write_bytes(payload.read_bytes().replace(b'"inputs":[', b'"inputs":[7,', 1))  # sha256 now wrong
    second, stderr = _run(env, warm_python.other)
    assert second["same"] and second["hits"] == 0 and second["compiled"] == 0  # kernels from the cache as before
    assert "damaged graph cache entry" in stderr
    third, _ = _run(env, warm_python)
    assert third["same"] and third["hits"] == third["loaded"] > 0 and third["bits"] == first["bits"]


def test_records_whose_artifacts_are_gone_build_and_compile_again(tmp_path, warm_python):
    cache = tmp_path / "cache"
    env = {"NEURONCC_CACHE_DIR": str(cache)}
    first, _ = _run(env, warm_python)
    index = _index_dir(cache)
    for entry in (cache / "entries").iterdir():
        if entry != index:
            shutil.rmtree(entry)
    second, _ = _run(env, warm_python.other)
    assert second["same"] and second["hits"] == 0 and second["misfits"] > 0 and second["compiled"] > 0
    assert second["bits"] == first["bits"]


def test_a_record_that_does_not_fit_its_artifact_is_refused():
    """A record naming an artifact whose function takes other parameters than the call gives (a hand-edited
    index whose checksums were redone) is a miss, never a kernel called with the wrong memory."""
    x = torch.randn(3, 7, 11, device="neuron")  # a shape no other test uses: this test's signatures
    y = x.neg()
    y = x.neg()  # eager's first call goes through neg.out; neg.default from the second on
    cache = signature_index._cache()
    if cache is None:
        pytest.skip("no usable compile cache in this test session")
    index = signature_index._index_of(cache)
    name = record_name(torch.ops.aten.neg.default, describe((x,), {})[0])
    assert name in index.records, [n for n in index.records if "[3,7,11]" in n]
    slot = signature_index.Slot(index, name, torch.ops.aten.neg.default)
    assert slot.lookup([x]) is not None  # as recorded, it fits
    original = index.records[slot.name]
    record = dict(original)
    record["inputs"] = [0, 0]  # one source too many
    index.records[slot.name] = record
    before = signature_index.COUNTS["eager_index_misfits"]
    assert slot.lookup([x]) is None
    assert signature_index.COUNTS["eager_index_misfits"] == before + 1
    record["inputs"] = [0]
    record["outputs"] = [["computed", 3, [3, 7, 11], [77, 11, 1], "float32"]]  # an output the function lacks
    assert slot.lookup([x]) is None
    index.records[slot.name] = original
    assert slot.lookup([x.to(torch.bfloat16)]) is None  # a call tensor of another dtype than the parameter's
    assert signature_index.COUNTS["eager_index_misfits"] == before + 3
    assert torch.equal(x.neg().cpu(), y.cpu())


def test_signature_texts_tell_apart_what_kernels_depend_on():
    a = torch.empty(4, 6)
    texts = {signature_text(describe(args, {})[0]) for args in [
        (a, a), (a, a.t().contiguous().t()), (a.double(), a), (a[:, ::2], a[:, :3]), (a, 2), (a, True), (a, [2]),
        (a, (2, 3)), (a, None), (a, "two"), (a, torch.float16), (a, 2.5)]}
    assert len(texts) == 12
    with pytest.raises(Unindexable):
        signature_text(describe((a, torch.Generator()), {})[0])


def test_record_names_carry_the_op_and_the_default_dtype():
    a = torch.empty(3)
    key = describe((a,), {})[0]
    name = record_name(torch.ops.aten.neg.default, key)
    assert name.startswith("aten.neg.default float32 ")
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        assert record_name(torch.ops.aten.neg.default, key) != name
    finally:
        torch.set_default_dtype(previous)


#: a training loop's multi-tensor programs: the routed foreach AdamW and SGD steps, clip_grad_norm_'s two parts,
#: GradScaler's unscale (two programs), the fused AdamW op
STEPS = r"""
import json, warnings, torch, neuroncc
warnings.simplefilter("ignore")  # GradScaler's float64 reciprocal
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.LayerNorm(16), torch.nn.Linear(16, 4)).to("neuron")
params = list(model.parameters())
x, y = torch.randn(5, 8).to("neuron"), torch.randn(5, 4).to("neuron")
optimizers = [torch.optim.AdamW(params, lr=1e-2), torch.optim.SGD(params, lr=1e-2, momentum=0.9),
              torch.optim.AdamW(params, lr=1e-2, fused=True)]
scaler = torch.amp.GradScaler("neuron")
for step in range(6):
    optimizer = optimizers[step % 3]
    loss = torch.nn.functional.mse_loss(model(x), y)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(params, 1.0)
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad()
s, ops = neuroncc.stats(), neuroncc.get_executed_ops()
print(json.dumps({"compiled": s["eager_kernels_compiled"], "loaded": s["eager_kernels_loaded"],
                  "hits": s["eager_index_hits"], "misfits": s["eager_index_misfits"],
                  "routed": [ops.get(name, 0) for name in ("torch.optim._multi_tensor_adam", "torch.optim._multi_tensor_sgd",
                             "torch.nn.utils.clip_grad._get_total_norm", "aten._fused_adamw_.default")],
                  "bits": [p.detach().cpu().view(torch.int32).flatten().tolist() for p in params]}))
"""


def test_a_second_process_builds_no_program_for_a_training_loops_steps(tmp_path, warm_python):
    """The optimizer steps, clip_grad_norm_'s parts, GradScaler's unscale and the fused step are in the index too:
    a warm process traces none of them, and computes the first process's bits."""
    env = {"NEURONCC_CACHE_DIR": str(tmp_path / "cache")}
    runs = []
    for python in (warm_python, warm_python.other):
        done = run_python(STEPS, env, python=python)
        assert done.returncode == 0, done.stderr
        runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
    first, second = runs
    assert first["routed"] == second["routed"] and all(first["routed"]), first["routed"]
    assert first["compiled"] > 0 and second["compiled"] == 0 and second["misfits"] == 0
    assert second["hits"] == second["loaded"] >= first["compiled"] - 2  # ops sharing a program (mul.out / mul)
    assert second["bits"] == first["bits"]


#: ``fill_`` (``torch.ones``/``zeros``/``full``: its value lifted, one kernel for all), and ops whose kernels depend
#: on their floats' values (entries.ByFloatValue: built with them as constants; indexed by the values)
VALUED = r"""
import json, torch, neuroncc
def run(device):
    x = torch.empty(5, 33, device=device)
    y = torch.linspace(-3, 3, 165).reshape(5, 33).to(device)
    full = [torch.full((5, 33), value, device=device) for value in (0.0, -0.0, float("nan"), 2.5)]
    return [torch.ones(5, 33, device=device), torch.zeros(5, 33, device=device), *full, x.fill_(-7.25),
            torch.clamp(y, -0.5, 0.25), torch.clamp(y, -1.5, 1.25), torch.nn.functional.leaky_relu(y, 0.3),
            torch.arange(0, 10.5, 0.5, device=device)]
expected = run("cpu")
results = [r.cpu() for r in run("neuron")]
s = neuroncc.stats()
print(json.dumps({"same": all(torch.equal(a.view(torch.int32), b.view(torch.int32)) for a, b in zip(results, expected)),
                  "compiled": s["eager_kernels_compiled"], "loaded": s["eager_kernels_loaded"],
                  "hits": s["eager_index_hits"], "misfits": s["eager_index_misfits"]}))
"""


def test_fills_and_kernels_built_per_float_value_load_through_the_index(tmp_path, warm_python):
    """A warm process loads every kernel of VALUED through the index (the fills' one kernel, clamp's per pair of
    bounds) and builds no program; -0.0 apart from 0.0, NaN's bits, as CPU."""
    env = {"NEURONCC_CACHE_DIR": str(tmp_path / "cache")}
    first, _ = _run_script(VALUED, env, warm_python)
    assert first["same"] and first["compiled"] >= 4
    second, _ = _run_script(VALUED, env, warm_python.other)
    assert second["same"] and second["compiled"] == 0 and second["misfits"] == 0
    assert second["hits"] == second["loaded"] >= 4


def _run_script(script, env, python):
    done = run_python(script, env, python=python)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1]), done.stderr
