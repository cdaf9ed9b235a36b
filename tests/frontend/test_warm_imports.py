"""A warm start imports only what it runs: importing the backend loads no compiler, and a fresh process whose graph
is a graph cache hit loads neither AOTAutograd's partitioner nor
neuroncc's importer, passes, kernel emitters or NKI simulator (each import costs the first call time, and a full
garbage collection falls due sooner the more objects the imports leave behind). No process, a cold compile
included, loads Inductor's pattern matcher.

torch.compile itself loads AOTAutograd's modules and networkx for every backend (TorchDynamo's debug backends,
imported when a backend is looked up), so a warm process is checked for what only a compile would load."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from neuroncc.codegen.llvm import native_library
from neuroncc.hardware import host
from warm_python import WarmPython

CHILD = Path(__file__).parent / "warm_imports_child.py"

#: Modules a compile loads and a graph cache hit must not: the miss path (AOTAutograd and neuroncc's compilers,
#: frontend/aot_compile.py, aten_compiler.py), the lowering rules (with random_ops.py's torch.library
#: registrations: each scans sys.modules through inspect, ~35 ms for the first), the compiler below it (with the
#: view ops' layouts, codegen/llvm/views.py; the kernel plans' vocabulary, kernel_plan.py, a dozen dataclasses;
#: the kernels' names by content, kernel_names.py), the request and records of what it compiled
#: (driver/compile_request.py, driver/records.py).
COMPILE_ONLY = (
    "neuroncc.frontend.aot_compile", "neuroncc.frontend.aten_compiler", "neuroncc.frontend.importer",
    "neuroncc.frontend.lowering", "neuroncc.frontend.lowering.random_ops", "neuroncc.driver.compile",
    "neuroncc.driver.compile_request", "neuroncc.driver.records", "neuroncc.passes", "neuroncc.codegen.llvm.emit",
    "neuroncc.codegen.llvm.schedule", "neuroncc.codegen.llvm.program", "neuroncc.codegen.llvm.kernel_plan",
    "neuroncc.codegen.llvm.kernel_names", "neuroncc.codegen.llvm.views",
)
#: Loaded by no neuroncc run, a compile included: Inductor's pattern matcher (and ~100 Inductor modules with it,
#: ~0.55 s of a cold first call), which AOTAutograd's own CSE before the min-cut partitioner imports; neuroncc
#: merges the joint graph's common subexpressions itself (frontend/joint_cse.py).
NEVER_BY_NEURONCC = ("torch._inductor.pattern_matcher",)
#: What only compiling LLVM code loads (a hit whose artifacts hold a shared library never does): the JIT, its
#: process memo of object code, the module text printer.
LLVM_ONLY = ("llvmlite", "neuroncc.codegen.llvm.jit", "neuroncc.codegen.llvm.object_memo",
             "neuroncc.codegen.llvm.ir_text")
#: Loaded by no cpu run at all, a compile included: the NKI target, the NeuronCore tables (hardware/neuron.py)
#: and the NKI tiling rules (passes/tile_nki.py), which the kernel op's check and the layout and tile passes read
#: for an NKI target only (hardware.neuron_core).
NEVER_ON_CPU = ("neuroncc.nki", "neuroncc.executors.nki_sim", "neuroncc.codegen.nki", "pydantic",
                "neuroncc.hardware.neuron", "neuroncc.passes.tile_nki")
#: Loaded by no whole-graph compile (no fallback, no collectives), though its module imports them: PyTorch's
#: capability partitioner (frontend/fallback.py's, ~2 ms of a cold first call's import; aot_eager loads neither).
PARTITIONED_ONLY = ("torch.fx.passes.infra.partitioner", "torch.fx.passes.utils.fuser_utils")
#: What importing the backend must not load beyond TorchDynamo: AOTAutograd's tracing and partitioners, networkx
#: (the fusion pass's), LLVM (the first artifact load brings it).
NOT_AT_IMPORT = ("torch._functorch.aot_autograd", "torch._functorch.partitioners", "networkx", "llvmlite")
#: The compile cache's modules a hit does not need when no remote tier is configured: the remote tier's client,
#: signed bundles (loaded when save_cache_artifacts() exports an entry, not when a hit records it), why a compile
#: missed, the entries the cache CLI lists, the interp target's executable, the front end's record of a compile
#: (tests/test_layering.py's OFF_THE_HIT_PATH: imported inside the functions that use them), and the view ops'
#: windows (ir/view_windows.py: the passes'); the last four hold dataclasses a hit never makes, ~2.5 ms of import.
OFF_THE_HIT_PATH = ("neuroncc.driver.remote", "neuroncc.driver.bundle", "neuroncc.driver.miss_explanation",
                    "neuroncc.driver.cache_entry", "neuroncc.executors.interpreter_executable",
                    "neuroncc.frontend.compiled_graph_record", "neuroncc.ir.view_windows")
#: Classes a graph cache hit never makes, once defined in modules it loads (each dataclass ~0.4-0.9 ms of an
#: import: docs/performance-history.md, session 23 hit23): the interp target's executable, the cache CLI's entry,
#: the front end's record of a compile, the view ops' windows. By name, wherever they are defined.
NEVER_MADE_BY_A_HIT = ("InterpreterExecutable", "CacheEntry", "CompiledGraphRecord", "StridedView")
#: Signs the entries a hit records for save_cache_artifacts() (driver.portable): the path that loaded bundles.
ARTIFACTS_KEY = "warm-imports-test-secret-0123456789"


def _run(python: WarmPython, mode: str, cache_dir: Path) -> dict:
    """One fresh process, forked from a warm interpreter (tests/warm_python.py) that has imported torch and
    TorchDynamo, as the child does first, and nothing of neuroncc: what neuroncc loads is the child's own."""
    environ = {k: v for k, v in os.environ.items()
               if k not in ("NEURONCC_DISABLE_CACHE", "NEURONCC_DISABLE_GRAPH_CACHE", "NEURONCC_REMOTE_CACHE")}
    environ["NEURONCC_CACHE_DIR"] = str(cache_dir)
    environ["NEURONCC_CACHE_ARTIFACTS_KEY"] = ARTIFACTS_KEY
    completed = python.run([sys.executable, str(CHILD), mode], env=environ, timeout=300)
    assert completed.returncode == 0, completed.stderr[-3000:]
    return json.loads(completed.stdout.strip().splitlines()[-1])


def _defined(report: dict, classes: tuple[str, ...]) -> list[str]:
    """The classes of ``classes`` (by name) that a module the child had loaded defines."""
    return [c for c in report["classes"] if c.rsplit(".", 1)[1] in classes]


def _loaded(report: dict, names: tuple[str, ...]) -> list[str]:
    """The modules of ``names`` (or below them) that the child had loaded."""
    modules = report["modules"]
    return [name for name in names if any(m == name or m.startswith(name + ".") for m in modules)]


def test_importing_the_backend_loads_no_compiler(warm_python, tmp_path):
    report = _run(warm_python, "backend", tmp_path)
    assert _loaded(report, NOT_AT_IMPORT + COMPILE_ONLY + NEVER_ON_CPU + OFF_THE_HIT_PATH) == []
    assert _defined(report, NEVER_MADE_BY_A_HIT) == []


def test_a_graph_cache_hit_loads_no_compiler(warm_python, tmp_path):
    cold = _run(warm_python, "step", tmp_path)
    assert cold["stats"]["aot_autograd_runs"] == 1 and cold["stats"]["graph_cache_stores"] == 1
    assert _loaded(cold, COMPILE_ONLY) == list(COMPILE_ONLY)  # what the warm process is checked for is real
    warm = _run(warm_python.other, "step", tmp_path)
    assert warm["stats"]["graph_cache_hits"] == 1 and warm["stats"]["aot_autograd_runs"] == 0
    assert warm["stats"]["cache_misses"] == 0
    assert _loaded(warm, COMPILE_ONLY + NEVER_ON_CPU + OFF_THE_HIT_PATH + NEVER_BY_NEURONCC) == []
    assert _defined(warm, NEVER_MADE_BY_A_HIT) == []
    assert {c.rsplit(".", 1)[1] for c in _defined(cold, NEVER_MADE_BY_A_HIT)} >= {"CompiledGraphRecord", "StridedView"}
    assert "neuroncc.driver.portable" in warm["modules"]  # the hit recorded its entries for save_cache_artifacts()
    assert _loaded(cold, NEVER_ON_CPU + NEVER_BY_NEURONCC) == []
    assert "neuroncc.frontend.fallback" in cold["modules"] and _loaded(cold, PARTITIONED_ONLY) == []


def test_a_graph_cache_hit_loads_its_kernels_without_llvm(warm_python, tmp_path):
    """With a linker, artifacts hold their kernels as a shared library (codegen/llvm/native_library.py): a hit
    loads it with the dynamic loader and never imports llvmlite's bindings (nor llvmlite.ir), nor loads llvmlite's
    library (the host CPU LLVM named is remembered in the cache directory: driver/host_stamp.py, also by the cold
process that created the directory)."""
    if native_library.linker() is None:
        pytest.skip("no linker: artifacts hold object files, which load through LLVM's MCJIT")
    cache_dir = tmp_path / "cache"  # made by the cold process (whose first lookup comes before it exists)
    cold = _run(warm_python, "step", cache_dir)
    warm = _run(warm_python.other, "step", cache_dir)
    assert warm["stats"]["graph_cache_hits"] == 1 and warm["stats"]["cache_misses"] == 0
    assert _loaded(cold, LLVM_ONLY) == list(LLVM_ONLY) and _loaded(warm, LLVM_ONLY) == []
    if host.llvm_host_identity() is not None and cold["llvm_mapped"] is not None:
        assert cold["llvm_mapped"] and not warm["llvm_mapped"]
