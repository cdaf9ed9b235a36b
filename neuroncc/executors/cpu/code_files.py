"""An artifact's kernel code files: their names, what is stored of loaded code, and its checked load.

``CpuExecutable.save`` writes plan.json, kernels.ll and the code file its plan's ``code_form`` names; loading
checks the code file against the plan's sha256 before anything in it runs (an artifact may come from a remote
cache: docs/cache.md).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from neuroncc.codegen.llvm.launch_plan import CpuLaunchPlan
from neuroncc.codegen.llvm.native_library import CodeForm, load_library
from neuroncc.errors import ArtifactError
from neuroncc.codegen.llvm.ar_archive import read_archive, split_modules, write_archive

#: kernels.so: the kernel phases linked into one shared library; kernels.a (where the compiling process had no
#: linker): their object files in one ar archive (codegen/llvm/ar_archive.py). The plan's code_form says which.
PLAN_FILE, IR_FILE, LIBRARY_FILE, OBJECT_FILE = "plan.json", "kernels.ll", "kernels.so", "kernels.a"
CODE_FILES = {CodeForm.SHARED_LIBRARY: LIBRARY_FILE, CodeForm.OBJECTS: OBJECT_FILE}


def stored_code(module: Any) -> bytes:
    """What an artifact stores of loaded code (``jit.LoadedCode``): the library, or the objects' archive."""
    return module.library if module.form is CodeForm.SHARED_LIBRARY else write_archive(module.objects)


class CodeFiles:
    """An artifact's files for its loader: the bytes its manifest check read (``checked``: name -> bytes), or,
    for a file not among them (a caller without that check), the file in ``directory``."""

    def __init__(self, directory: Path, checked: Mapping[str, bytes] | None = None):
        self.directory, self.checked = directory, checked or {}

    def path(self, name: str) -> Path:
        return self.directory / name

    def has(self, name: str) -> bool:
        return name in self.checked or (self.directory / name).exists()

    def data(self, name: str) -> bytes:
        data = self.checked.get(name)
        return data if data is not None else (self.directory / name).read_bytes()

    def text(self, name: str) -> str:
        return self.data(name).decode("utf-8")


def load_code(files: CodeFiles, plan: CpuLaunchPlan) -> Any:
    """The kernels' code of an artifact (``jit.LoadedCode``), checked against the plan's checksum before it is
    loaded: a shared library through the dynamic loader (no LLVM), objects through MCJIT."""
    directory = files.directory
    try:
        form = CodeForm(plan.code_form)
    except ValueError:
        raise ArtifactError(f"{directory}: unknown code form {plan.code_form!r}") from None
    path = files.path(CODE_FILES[form])
    try:
        code = files.data(CODE_FILES[form])
    except OSError as exc:
        raise ArtifactError(f"cannot read kernel object code in {directory}: {exc}") from None
    if hashlib.sha256(code).hexdigest() != plan.object_sha256:
        raise ArtifactError(f"{path} is corrupt (checksum mismatch)")
    try:
        llvm_ir = split_modules(files.text(IR_FILE)) if files.has(IR_FILE) else []
    except (OSError, UnicodeDecodeError):
        llvm_ir = []  # for inspection only: the code file is what runs
    if form is CodeForm.SHARED_LIBRARY:
        return load_library(code, llvm_ir=llvm_ir)  # the bytes just checked, through a private file
    import neuroncc.codegen.llvm.jit as jit  # LLVM's MCJIT: only for an artifact of objects

    return jit.load_objects(read_archive(code, str(path)), llvm_ir)


__all__ = ["CODE_FILES", "CodeFiles", "IR_FILE", "LIBRARY_FILE", "OBJECT_FILE", "PLAN_FILE", "load_code", "stored_code"]
