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

- ``errors``, ``dtypes``, ``target``: the error type, NKI dtypes (bfloat16 stored as rounded float32),
  per-generation hardware numbers.
- ``tensor``, ``context``, ``trace``: tensors and views, the state of a launch, and the instruction trace
  it records (the trace's docstring defines its format).
- ``ops``, ``validate``, ``instructions``, ``isa_movement``, ``isa_tensor_engine``, ``isa_compute``,
  ``isa``: the instruction set (``nki.isa``).
- ``allocate``, ``language``, ``language_math``: ``nki.language``.
- ``memory``: after a launch, places on-chip tiles by live range and checks SBUF / PSUM capacity.
- ``cost_model``, ``scheduler``, ``profile``: per-instruction costs, a dependency-aware list schedule of
  the placed trace, and the report. They read only the trace, never the simulator's objects.
- ``launch``: ``jit``, ``simulate``, ``benchmark``, ``trace_kernel`` - the API boundary.
- ``kernels``, ``calibration``: reference kernels in NKI 0.2+ style and the cost model's calibration runs.

See docs/nki.md for the supported subset and the cost model.
"""

from neuroncc.nki import isa, language
from neuroncc.nki.errors import NKISimulationError
from neuroncc.nki.launch import (
    BenchmarkResult, HostArray, Kernel, TensorSpec, benchmark, bfloat16_array, host_array, jit, simulate,
    simulate_kernel, trace_kernel,
)
from neuroncc.nki.profile import EngineUsage, KernelProfile
from neuroncc.nki.target import TARGET_ENV_VAR, TARGETS, Target

__all__ = [
    "BenchmarkResult", "EngineUsage", "HostArray", "Kernel", "KernelProfile", "NKISimulationError", "TARGETS",
    "TARGET_ENV_VAR", "Target", "TensorSpec", "benchmark", "bfloat16_array", "host_array", "isa", "jit",
    "language", "simulate", "simulate_kernel", "trace_kernel",
]
