"""Kernels compile on several LLVM workers (codegen/llvm/jit.py KernelCompiler) while they are generated."""

from __future__ import annotations

import sys
import threading

import numpy as np
import pytest
from codegen_helpers import many_kernels

from neuroncc.codegen.llvm import jit
from neuroncc.codegen.llvm.ar_archive import read_archive, write_archive
from neuroncc.errors import ArtifactError, CodegenError, InputError
from neuroncc.executors.cpu.launcher import CODE_FILES, build_cpu_executable, load_cpu_executable, stored_code
from neuroncc.ir import interpret


def inputs(rng):
    return [rng.standard_normal((16, 32)).astype(np.float32), rng.standard_normal((32, 24)).astype(np.float32)]


@pytest.mark.parametrize("workers", [1, 2, 5])
def test_any_number_of_workers_compiles_the_same_objects(rng, workers):
    fn = many_kernels()
    args = inputs(rng)
    exe = build_cpu_executable(fn, {"compile_threads": workers})
    phases = {phase.symbol for step in exe.plan.steps if step.native for phase in step.phases}  # (named by code)
    assert len(exe.plan.steps) >= 4 and len(exe.module.objects) == len(exe.module.llvm_ir) == len(phases)
    for got, want in zip(exe(*args), interpret(fn, args)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    serial = build_cpu_executable(fn, {"compile_threads": 1})
    assert exe.module.objects == serial.module.objects  # in submission order, whoever compiled them


def test_artifact_keeps_the_code_in_one_file(rng, tmp_path, code_form):
    fn = many_kernels()
    exe = build_cpu_executable(fn, {"compile_threads": 2})
    assert exe.module.form is code_form
    exe.save(tmp_path)
    assert (tmp_path / CODE_FILES[code_form]).read_bytes() == stored_code(exe.module)
    if code_form is code_form.OBJECTS:
        assert read_archive((tmp_path / "kernels.a").read_bytes()) == exe.module.objects
    loaded = load_cpu_executable(tmp_path, fn)
    assert loaded.module.form is code_form and stored_code(loaded.module) == stored_code(exe.module)
    # kernels.ll splits back into its modules
    assert [m.strip() for m in loaded.module.llvm_ir] == [m.strip() for m in exe.module.llvm_ir]
    args = inputs(rng)
    for got, want in zip(loaded(*args), exe(*args)):
        np.testing.assert_array_equal(got, want)


def test_archive_round_trip_and_corruption():
    members = [b"", b"a", b"odd", b"\x7fELF" + bytes(range(200))]
    blob = write_archive(members)
    assert blob.startswith(b"!<arch>\n") and read_archive(blob) == members
    for broken, message in [(b"nope", "not an ar archive"), (blob[:-3], "past the end"),
                            (blob[:70], "truncated"), (blob.replace(b"1.o/", b"7.o/"), "unexpected member")]:
        with pytest.raises(ArtifactError, match=message):
            read_archive(broken, "kernels.a")


def test_a_bad_module_raises_codegen_error_and_stops_every_worker():
    before = threading.active_count()
    compiler = jit.KernelCompiler(3)
    good = 'define void @"ok"(ptr %".1") {\nentry:\n  ret void\n}\n'
    compiler.submit(good)
    compiler.submit("define void @broken( {")
    compiler.submit(good.replace("ok", "ok2"))
    compiler.submit(good.replace("ok", "ok3"))  # queued behind the broken one on its worker
    with pytest.raises(CodegenError, match="does not verify"):
        compiler.finish()
    assert threading.active_count() == before


def test_compile_threads_run_llvm_outside_llvmlites_lock():
    """The O3 pipeline and object emission go through the unlocked ctypes function (else workers serialize)."""
    for name in ("LLVMPY_RunNewModulePassManager", "LLVMPY_TargetMachineEmitToMemory"):
        fn = jit._unlocked(name)
        assert fn is not getattr(jit.ffi.lib, name)
        assert fn.argtypes == getattr(jit.ffi.lib, name).argtypes


@pytest.mark.parametrize("name", ["threads", "compile_threads"])
@pytest.mark.parametrize("value", [0, -2, 1.5, "2", True])
def test_bad_thread_counts_are_input_errors_naming_the_option(name, value):
    with pytest.raises(InputError, match=f"option {name} must be a positive integer"):
        build_cpu_executable(many_kernels(), {name: value})


def _module(name: str, flags: str = "") -> str:
    return (f'define float @"{name}"(float %".1") {{\nentry:\n  %".2" = fadd {flags}float %".1", %".1"\n'
            f'  ret float %".2"\n}}\n')


def test_optimized_modules_jump_the_queue_and_objects_keep_submission_order(monkeypatch):
    """A worker takes the queued optimized modules (the long ones) before the quick ones queued earlier."""
    started, release, order = threading.Event(), threading.Event(), []
    real = jit._compile_module

    def compile_module(text, context, tm, tier):
        order.append(text.split('@"')[1].split('"')[0])
        started.set()
        release.wait(10)
        return real(text, context, tm, tier)

    monkeypatch.setattr(jit, "_compile_module", compile_module)
    compiler = jit.KernelCompiler(1, quick_when_independent=True)
    compiler.submit(_module("first"))  # the one worker takes it at once and waits for the release
    assert started.wait(10)
    for name, flags in [("quick1", ""), ("sum", "reassoc "), ("quick2", "contract "), ("div", "arcp ")]:
        compiler.submit(_module(name, flags))
    release.set()
    module = compiler.finish()
    assert order == ["first", "sum", "div", "quick1", "quick2"]
    assert compiler.tiers == [jit.Tier.QUICK, jit.Tier.QUICK, jit.Tier.OPTIMIZED, jit.Tier.QUICK, jit.Tier.OPTIMIZED]
    serial = jit.KernelCompiler(1, quick_when_independent=True)
    for text in compiler.texts:
        serial.submit(text)
    assert module.objects == serial.finish().objects  # in submission order, whichever ran first


def test_the_gil_switch_interval_is_short_while_workers_run_and_restored_after():
    default = sys.getswitchinterval()
    outer, inner = jit.KernelCompiler(2), jit.KernelCompiler(2)
    assert sys.getswitchinterval() == default  # no worker yet
    outer.submit(_module("a"))
    assert sys.getswitchinterval() == min(default, jit.WORKER_SWITCH_INTERVAL)
    inner.submit(_module("b"))
    outer.finish()
    assert sys.getswitchinterval() == min(default, jit.WORKER_SWITCH_INTERVAL)  # inner's workers still run
    inner.submit("define void @broken( {")
    with pytest.raises(CodegenError):
        inner.finish()
    assert sys.getswitchinterval() == default
    inner.close()  # a second close changes nothing
    assert sys.getswitchinterval() == default
