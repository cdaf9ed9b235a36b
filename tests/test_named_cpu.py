"""Compiling for a named CPU other than the host's (``NEURONCC_CPU``, ``neuroncc.hardware.host.set_cpu``,
``--cpu``): the CPU's features from LLVM, the check that this host can run its code, the code and the cache
identity that follow it, and nothing changed when it is unset.

Most cases run in a fresh process (the setting is read once per process, as a user's would be)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from neuroncc.errors import InputError, TargetCpuError
from neuroncc.hardware import host as host_module
from neuroncc.hardware.host import CPU_VARIABLE, compiling_for, host_cpu, set_cpu, target_cpu
from neuroncc.hardware.named_cpu import INTRINSIC_ONLY_FEATURES, llvm_cpu_features, missing_features

ROOT = Path(__file__).resolve().parents[1]


def _runnable(*names: str) -> str | None:
    """The first of ``names`` whose code this host can run, or None."""
    host = host_cpu()
    for name in names:
        if not missing_features(llvm_cpu_features(name, host.features), host.features):
            return name
    return None


def _not_runnable(*names: str) -> tuple[str, list[str]] | None:
    host = host_cpu()
    for name in names:
        missing = missing_features(llvm_cpu_features(name, host.features), host.features)
        if missing:
            return name, missing
    return None


#: exp over [64, 1000] float32, as ``neuroncc opt`` reads it
NIR = ("func @f(%x: tensor<64x1000xf32>) -> (tensor<64x1000xf32>) {\n  %0 = exp %x : tensor<64x1000xf32>\n"
       "  return %0\n}\n")


def _avx2_cpu() -> str:
    name = _runnable("znver3", "x86-64-v3")
    if name is None or not host_cpu().has("avx2"):
        pytest.skip("this host cannot run znver3's or x86-64-v3's code")
    return name


def _python(script: str, cpu: str | None, tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if k != CPU_VARIABLE}
    environ.update(env, NEURONCC_CACHE_DIR=str(tmp_path / "cache"))
    if cpu is not None:
        environ[CPU_VARIABLE] = cpu
    return subprocess.run([sys.executable, "-c", script], env=environ, cwd=tmp_path, capture_output=True,
                          text=True, timeout=240)


def test_a_named_cpus_features_are_llvms_definition_of_it():
    host = host_cpu()
    zen3 = llvm_cpu_features("znver3", host.features)
    assert "+avx2" in zen3.split(",") and "+fma" in zen3.split(",") and "-avx512f" in zen3.split(",")
    zen4 = llvm_cpu_features("znver4", host.features)
    assert {"+avx512f", "+avx512bf16", "+avx512vl"} <= set(zen4.split(","))
    base = llvm_cpu_features("x86-64", host.features)
    assert "-avx" in base.split(",") and "+sse2" in base.split(",")
    # every feature the host string names, in its order, signed; the intrinsic-only ones turned off
    assert [f[1:] for f in zen3.split(",")] == sorted(f[1:] for f in host.features.split(","))
    assert not any(f"+{feature}" in zen4.split(",") for feature in INTRINSIC_ONLY_FEATURES)


def test_an_unknown_cpu_name_is_a_typed_error_naming_the_setting():
    with pytest.raises(TargetCpuError, match=rf"{CPU_VARIABLE}=znver99: LLVM knows no CPU"):
        llvm_cpu_features("znver99", host_cpu().features)
    assert issubclass(TargetCpuError, InputError)


def test_a_cpu_the_host_cannot_run_is_an_error_naming_the_setting_the_cpu_and_the_missing_features():
    found = _not_runnable("diamondrapids", "graniterapids", "sapphirerapids", "znver5", "znver4", "znver3")
    if found is None:
        pytest.skip("this host runs every candidate CPU's code")
    name, missing = found
    with compiling_for(None):
        with pytest.raises(TargetCpuError) as error:
            with compiling_for(name):
                pass
    message = str(error.value)
    assert CPU_VARIABLE in message and name in message and all(feature in message for feature in missing)
    assert target_cpu() is host_cpu()  # the setting is back


def test_the_error_comes_before_anything_is_compiled_in_a_fresh_process(tmp_path):
    found = _not_runnable("diamondrapids", "graniterapids", "sapphirerapids", "znver5", "znver4")
    if found is None:
        pytest.skip("this host runs every candidate CPU's code")
    name, missing = found
    script = ("from neuroncc.ir import parse\n"
              "from neuroncc.driver.compile import compile_graph\n"
              "import neuroncc.codegen.llvm.jit as jit\n"
              f"fn = parse({NIR!r})\n"
              "try:\n"
              "    compile_graph(fn, target='cpu')\n"
              "except Exception as e:\n"
              "    print(type(e).__name__, '|', e, '|', len(jit.OBJECT_MEMO))\n")
    out = _python(script, name, tmp_path)
    assert out.returncode == 0, out.stderr
    kind, message, compiled = out.stdout.strip().split(" | ")
    assert kind == "TargetCpuError" and name in message and missing[0] in message
    assert compiled == "0"
    assert not list((tmp_path / "cache").rglob("manifest.json"))


def test_a_kernel_compiled_for_znver3_runs_here_matches_eager_and_has_no_zmm(tmp_path):
    cpu = _avx2_cpu()
    script = ("import torch, json\n"
              "import neuroncc.codegen.llvm.jit as jit\n"
              "from neuroncc.hardware.host import target_cpu, host_cpu\n"
              "from neuroncc.codegen.llvm.program import plan_launch\n"
              "from neuroncc.passes.pipeline import default_pipeline, run_pipeline\n"
              "from neuroncc.passes.manager import PassContext\n"
              "from neuroncc.ir import parse\n"
              "torch.manual_seed(0)\n"
              "x, w, b = torch.randn(64, 1000), torch.randn(1000), torch.randn(1000)\n"
              "f = lambda x: torch.nn.functional.gelu(x * w + b) * torch.sigmoid(x)\n"
              "s = lambda x: torch.softmax(x, -1)\n"
              "diffs = [float((torch.compile(g, backend='neuron')(x) - g(x)).abs().max()) for g in (f, s)]\n"
              f"fn = run_pipeline(default_pipeline('cpu'), parse({NIR!r}), PassContext())\n"
              "plan, texts = plan_launch(fn, *jit.host_cpu())\n"
              "asm = jit.assembly(texts)\n"
              "t = target_cpu()\n"
              "print(json.dumps({'diffs': diffs, 'name': t.name, 'bits': t.vector_bits, 'named': t.named,\n"
              "                  'zmm': 'zmm' in asm, 'ymm': 'ymm' in asm, 'host': host_cpu().name}))\n")
    out = _python(script, cpu, tmp_path)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert report["name"] == cpu and report["named"] and report["bits"] == 256
    assert all(d < 1e-5 for d in report["diffs"]), report["diffs"]  # (max() of [0.0, nan] is 0.0: a NaN passed)
    assert not report["zmm"] and report["ymm"]
    # the artifacts stored are znver3's: their plan says so
    plans = [json.loads(p.read_text()) for p in (tmp_path / "cache").rglob("plan.json")]
    assert plans and all(plan.get("cpu") == cpu for plan in plans)


def _key_script() -> str:
    return ("import sys\n"
            f"sys.path.insert(0, {str(ROOT / 'tests' / 'driver')!r})\n"
            "from cache_testing import sample_function\n"
            "from neuroncc.driver.cache_key import compute_key\n"
            "from neuroncc.driver.compile import make_request\n"
            "key = compute_key(make_request(sample_function(), target='cpu'))\n"
            "print(key.key, '|', key.component('host').summary)\n")


def test_cache_keys_differ_by_the_cpu_compiled_for_and_not_otherwise(tmp_path):
    cpu = _avx2_cpu()
    keys = {}
    for setting in (None, "", cpu, "znver4" if _runnable("znver4") else cpu):
        out = _python(_key_script(), setting, tmp_path)
        assert out.returncode == 0, out.stderr
        keys[setting] = out.stdout.strip().split(" | ")
    assert keys[None] == keys[""]  # unset and empty: the host
    assert host_cpu().name in keys[None][1] and "(named)" not in keys[None][1]
    assert keys[cpu][0] != keys[None][0] and f"{cpu}(named)" in keys[cpu][1]
    if _runnable("znver4") and host_cpu().name == "znver4":
        # the host's own model named: LLVM's definition of it, not the host's answer (a fleet shares it)
        assert keys["znver4"][0] not in (keys[None][0], keys[cpu][0])


def test_the_fingerprint_follows_the_named_cpu_and_keeps_the_hosts_machine_facts():
    cpu = _avx2_cpu()
    host = host_cpu()
    with compiling_for(cpu):
        named = target_cpu()
    assert named.named and named.name == cpu and named.fingerprint != host.fingerprint
    assert (named.triple, named.cores, named.last_level_cache_bytes) == (host.triple, host.cores,
                                                                          host.last_level_cache_bytes)
    assert named.stream_footprint_bytes == host.stream_footprint_bytes
    assert not named.has("avx512f") and named.vector_bits == 256 and named.f32_lanes == 8
    assert not missing_features(named.features, host.features)


def test_unset_changes_nothing():
    assert os.environ.get(CPU_VARIABLE, "") == "" or pytest.skip(f"{CPU_VARIABLE} is set for this run")
    host = host_cpu()
    assert target_cpu() is host and not host.named
    assert "(named)" not in host.fingerprint
    with compiling_for(None):
        assert target_cpu() is host
    import neuroncc.codegen.llvm.jit as jit

    assert jit.host_target() is host and jit.host_cpu() == (host.name, host.features)


def test_set_cpu_is_checked_at_once_and_holds_for_the_process(monkeypatch):
    import neuroncc

    assert neuroncc.set_cpu is set_cpu and neuroncc.TargetCpuError is TargetCpuError
    monkeypatch.setattr(host_module, "_NAMED", [])
    with pytest.raises(TargetCpuError, match="LLVM knows no CPU"):
        set_cpu("not-a-cpu")
    monkeypatch.setattr(host_module, "_NAMED", [])
    set_cpu(None)
    set_cpu("")  # the same: the host
    with pytest.raises(TargetCpuError, match="already compiles for the host CPU"):
        set_cpu("x86-64")
    assert target_cpu() is host_cpu()


def test_the_environment_is_read_once_when_nothing_named_a_cpu(monkeypatch):
    monkeypatch.setattr(host_module, "_NAMED", [])
    assert host_module.named_cpu({CPU_VARIABLE: " x86-64 "}) == "x86-64"
    assert host_module.named_cpu({}) == "x86-64"


def test_the_cli_compiles_for_the_named_cpu_and_says_so(tmp_path):
    cpu = _avx2_cpu()
    script = ("import sys\n"
              "from neuroncc.cli import main\n"
              f"sys.exit(main(['opt', '-', '-p', 'fuse,tile{{target=cpu}}', '--emit', 'llvm', '--cpu', {cpu!r}]))\n")
    environ = {k: v for k, v in os.environ.items() if k != CPU_VARIABLE}
    out = subprocess.run([sys.executable, "-c", script], input=NIR, env=environ, cwd=tmp_path,
                         capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stderr
    assert f"for CPU {cpu})" in out.stdout and "<16 x float>" not in out.stdout  # 256-bit vectors at most
    bad = subprocess.run([sys.executable, "-c", script.replace(repr(cpu), "'no-such-cpu'")], input=NIR,
                         env=environ, cwd=tmp_path, capture_output=True, text=True, timeout=240)
    assert bad.returncode == 2 and re.search(r"neuroncc: error: NEURONCC_CPU=no-such-cpu", bad.stderr)
