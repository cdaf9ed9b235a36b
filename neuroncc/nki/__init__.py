"""neuroncc's NKI: write kernels against this package as against AWS's ``nki``, simulate and cost them.

    import neuroncc.nki as nki
    import neuroncc.nki.language as nl
    import neuroncc.nki.isa as nisa

    @nki.jit
    def add(a, b):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        ...
        return out

    result = nki.simulate(add)(a_np, b_np)                 # numpy in, numpy out
    bench = nki.benchmark(add, target="trn1")(a_np, b_np)   # + cost-model estimate
    print(bench.latency_us, bench.report())

This package is the simulator itself (numpy only; it imports nothing of neuroncc but ``errors`` and the
hardware descriptions). Its modules, bottom up:

- ``errors``, ``dtypes``, ``minifloat``, ``target``: the error type, NKI dtypes (bfloat16 stored as rounded
  float32; fp8/fp4/MX with reference rounding), choosing the
  NeuronCore generation (its numbers live in ``neuroncc.hardware``, shared with the compiler).
- ``tensor``, ``blocked``, ``active``, ``context``, ``trace``: tensors and views (NKI 0.1 block dimensions too),
  which launch is running, the state of a launch, and the instruction trace it records (the trace's docstring
  defines its format).
- ``index``, ``masking``: NKI 0.1 index expressions (``nl.arange``/``nl.mgrid``) and ``mask=`` predicates.
- ``ops``, ``validate``, ``instructions``, ``isa_movement``, ``isa_tensor_engine``, ``isa_compute``,
  ``isa_reduce``, ``isa_mx``, ``isa``: the instruction set (``nki.isa``).
- ``allocate``, ``language``, ``language_math``, ``language_grid``: ``nki.language``; ``typing`` and
  ``compiler``: ``nki.typing`` and ``nki.compiler``.
- ``memory``, ``forwarding``: after a launch, places on-chip tiles by live range and checks SBUF / PSUM
  capacity; drops the copies NKI's compiler elides.
- ``cost_model``, ``scheduler``, ``profile``, ``timeline``: per-instruction costs, a dependency-aware list
  schedule of the placed trace, the report and the trace file. They read only the trace.
- ``launch``: ``jit``, ``simulate``, ``benchmark``, ``baremetal``, ``profile``, ``trace_kernel`` - the API
  boundary; ``aliases``: ``import nki`` / ``neuronxcc.nki`` for unchanged kernel files (opt-in).
- ``kernels``, ``calibration``: reference kernels in NKI 0.2+ style and the cost model's calibration runs.

See docs/nki.md for the supported subset and the cost model.

May import: errors, hardware (nothing of the compiler: kernel authors use it on its own).
"""

from neuroncc.nki import compiler, isa, language, typing
from neuroncc.nki.aliases import install_import_aliases, uninstall_import_aliases
from neuroncc.nki.errors import NKISimulationError
from neuroncc.nki.dtypes import HostArray, host_array
from neuroncc.nki.launch import (
    BenchmarkResult, Kernel, TensorSpec, baremetal, benchmark, bfloat16_array, jit, profile, simulate,
    simulate_kernel, trace_kernel,
)
from neuroncc.nki.profile import EngineUsage, KernelProfile
from neuroncc.nki.target import TARGET_ENV_VAR, TARGETS, Target
from neuroncc.nki.unsupported import NKIUnsupportedError
from neuroncc.nki.tensor import Tensor as tensor

__neuroncc_alias__ = True  # install_import_aliases: this package may stand in for `nki` / `neuronxcc.nki`

__all__ = [
    "BenchmarkResult", "EngineUsage", "HostArray", "Kernel", "KernelProfile", "NKISimulationError",
    "NKIUnsupportedError", "TARGETS",
    "TARGET_ENV_VAR", "Target", "TensorSpec", "baremetal", "benchmark", "bfloat16_array", "compiler", "host_array",
    "install_import_aliases", "isa", "jit", "language", "profile", "simulate", "simulate_kernel", "tensor",
    "trace_kernel", "typing", "uninstall_import_aliases",
]
