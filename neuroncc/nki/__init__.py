"""neuroncc's NKI: write kernels against this module as against AWS's ``nki`` and simulate them.

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

See docs/nki.md for the supported subset and the cost model.
"""

from neuroncc.nki import isa, language
from neuroncc.runtime.nki.errors import NKISimulationError
from neuroncc.runtime.nki.launch import (
    BenchmarkResult, HostArray, Kernel, TensorSpec, benchmark, bfloat16_array, host_array, jit, simulate,
    simulate_kernel, trace_kernel,
)
from neuroncc.runtime.nki.profile import EngineUsage, KernelProfile
from neuroncc.runtime.nki.target import TARGET_ENV_VAR, TARGETS, Target

__all__ = [
    "BenchmarkResult", "EngineUsage", "HostArray", "Kernel", "KernelProfile", "NKISimulationError", "TARGETS",
    "TARGET_ENV_VAR", "Target", "TensorSpec", "benchmark", "bfloat16_array", "host_array", "isa", "jit",
    "language", "simulate", "simulate_kernel", "trace_kernel",
]
