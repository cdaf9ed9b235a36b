"""Records the LLVM IR of every native kernel a Python process generates, and every launch plan (the
threading decisions of each phase: ``n_outer``, ``work``, ``serial``; slots, row blocking), for
``tools/ir_snapshot.py``.

Active only when ``$NEURONCC_IR_SNAPSHOT`` names a directory. Put this directory first on ``PYTHONPATH`` so that
every process (pytest workers and the subprocesses tests start) loads it at startup; it wraps the launch
planner's ``plan_kernel`` and ``emit_kernel`` (``neuroncc.codegen.llvm.program``) as soon as that module is
imported. Each kernel is keyed by what decides its code: the region's text, its parameter and output layouts,
the block length, the symbol and the aligned argument slots; each launch plan by its graph's hash and CPU.
"""

from __future__ import annotations

import hashlib
import importlib.abc
import importlib.util
import os
import sys
import threading

_DIRECTORY = os.environ.get("NEURONCC_IR_SNAPSHOT")
_PLANNER = "neuroncc.codegen.llvm.program"
_local = threading.local()


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _record(key_text: str, texts: list[str], kind: str = "kernel") -> None:
    ir_text = "\n".join(texts)
    ir_sha = _digest(ir_text)
    store = os.path.join(_DIRECTORY, "ir")
    os.makedirs(store, exist_ok=True)
    path = os.path.join(store, ir_sha + ".ll")
    if not os.path.exists(path):
        with open(path + f".{os.getpid()}", "w") as out:
            out.write(ir_text)
        os.replace(path + f".{os.getpid()}", path)
    with open(os.path.join(_DIRECTORY, f"index-{os.getpid()}.tsv"), "a") as index:
        index.write(f"{kind}:{_digest(key_text)}\t{ir_sha}\t{len(texts)}\n")


def _patch(module) -> None:
    from neuroncc.ir import print_function

    plan_kernel, emit_kernel, plan_launch = module.plan_kernel, module.emit_kernel, module.plan_launch

    def recording_plan_kernel(region, params, outputs, *args, **kwargs):
        _local.key = "\n".join([print_function(region), repr(list(params)), repr(list(outputs)), repr(args),
                                repr(sorted(kwargs.items()))])
        return plan_kernel(region, params, outputs, *args, **kwargs)

    def recording_emit_kernel(plan, symbol, *args, **kwargs):
        texts, symbols = emit_kernel(plan, symbol, *args, **kwargs)
        key = getattr(_local, "key", None)
        if key is not None:
            _record(f"{key}\n{symbol}\n{sorted(plan.aligned_args)}\n{args!r}\n{sorted(kwargs.items())!r}", texts)
        return texts, symbols

    def recording_plan_launch(fn, cpu, features, *args, **kwargs):
        plan, texts = plan_launch(fn, cpu, features, *args, **kwargs)
        _record(f"{plan.function_hash}\n{cpu}\n{features}", [plan.to_json()], kind="launch")
        return plan, texts

    module.plan_kernel, module.emit_kernel = recording_plan_kernel, recording_emit_kernel
    module.plan_launch = recording_plan_launch


class _PatchAfterImport(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name != _PLANNER:
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(name)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return spec
        loader = spec.loader
        exec_module = loader.exec_module

        def exec_and_patch(module):
            exec_module(module)
            _patch(module)

        loader.exec_module = exec_and_patch
        return spec


if _DIRECTORY:
    sys.meta_path.insert(0, _PatchAfterImport())
