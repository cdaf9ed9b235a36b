"""LLVM plumbing: one target machine for the host, the O3 pipeline, object emission and loading.

Compilation always goes through an object file: ``compile_ir`` verifies and optimizes the module, emits
object code once, and loads that object into an MCJIT engine. Loading a saved artifact is the same second
half (``load_object``), so a cached executable runs exactly the code that was tested, without recompiling.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import llvmlite.binding as llvm

from neuroncc.errors import ArtifactError, CodegenError

_LOCK = threading.Lock()
_STATE: dict[str, object] = {}


def _initialize() -> None:
    if "target" not in _STATE:
        llvm.initialize_native_target()  # llvm.initialize() raises in llvmlite >= 0.45
        llvm.initialize_native_asmprinter()
        _STATE["target"] = llvm.Target.from_triple(llvm.get_process_triple())


def host_cpu() -> tuple[str, str]:
    """The host CPU's name and feature string (part of the artifact's identity: code is CPU-specific)."""
    with _LOCK:
        _initialize()
    return llvm.get_host_cpu_name(), llvm.get_host_cpu_features().flatten()


def target_machine() -> llvm.TargetMachine:
    """A fresh target machine for the host CPU with all of its features, at -O3.

    Fresh per use: an MCJIT engine takes ownership of the target machine it is created with.
    """
    with _LOCK:
        _initialize()
        target = _STATE["target"]
    cpu, features = host_cpu()
    return target.create_target_machine(cpu=cpu, features=features, opt=3, reloc="pic", codemodel="default")


@dataclass
class JitModule:
    """Loaded machine code: symbol addresses stay valid while this object (its engine) is alive."""

    engine: llvm.ExecutionEngine
    object_code: bytes
    llvm_ir: str

    def address(self, symbol: str) -> int:
        address = self.engine.get_function_address(symbol)
        if not address:
            raise ArtifactError(f"symbol '{symbol}' is missing from the compiled kernel object")
        return address


def parse_and_link(ir_texts: list[str]) -> llvm.ModuleRef:
    """Parse and verify each module (one per kernel), then link them into one."""
    with _LOCK:
        _initialize()
    modules = []
    for text in ir_texts:
        try:
            module = llvm.parse_assembly(text)
            module.verify()
        except RuntimeError as exc:
            raise CodegenError(f"generated LLVM IR does not verify: {exc}") from None
        modules.append(module)
    if not modules:
        modules.append(llvm.parse_assembly(""))
    linked = modules[0]
    for module in modules[1:]:
        linked.link_in(module)
    return linked


def optimize(ir_texts: list[str]) -> tuple[llvm.ModuleRef, llvm.TargetMachine, str]:
    """Parse, verify, link and optimize (O3, host CPU, loop + SLP vectorizers); also returns the linked text."""
    tm = target_machine()
    module = parse_and_link(ir_texts)
    linked_text = str(module)
    module.triple = tm.triple
    module.data_layout = str(tm.target_data)
    tuning = llvm.create_pipeline_tuning_options(speed_level=3)
    tuning.loop_vectorization = True
    tuning.slp_vectorization = True
    tuning.loop_unrolling = False
    tuning.loop_interleaving = True
    builder = llvm.create_pass_builder(tm, tuning)
    builder.getModulePassManager().run(module, builder)
    return module, tm, linked_text


def compile_ir(ir_texts: list[str]) -> JitModule:
    """Verify, link, optimize, emit object code once and load it. Raises CodegenError on invalid IR."""
    module, tm, linked_text = optimize(ir_texts)
    object_code = tm.emit_object(module)
    return load_object(object_code, linked_text)


def assembly(ir_texts: list[str]) -> str:
    """The optimized module's assembly (tests check it for vector registers)."""
    module, tm, _ = optimize(ir_texts)
    return tm.emit_assembly(module)


def load_object(object_code: bytes, llvm_ir: str = "") -> JitModule:
    """Load object code produced by :func:`compile_ir` (or read from an artifact) into a new engine."""
    tm = target_machine()
    empty = llvm.parse_assembly("")
    empty.triple = tm.triple
    empty.data_layout = str(tm.target_data)
    engine = llvm.create_mcjit_compiler(empty, tm)
    try:
        engine.add_object_file(llvm.ObjectFileRef.from_data(object_code))
    except Exception as exc:  # llvmlite reports a broken object as a generic error
        raise ArtifactError(f"cannot load kernel object code: {exc}") from None
    engine.finalize_object()
    return JitModule(engine, object_code, llvm_ir)
