"""The ops the NKI backend runs on the host (numpy, as the reference interpreter computes them), and why.

These are the NKI lowering's own per-op decisions (the simulated NKI subset has no instruction for them), one
table entry per op; the planner (:mod:`neuroncc.codegen.nki.plan`) reads them.
"""

from __future__ import annotations

#: Ops always run on the host, and why.
HOST_OPS: dict[str, str] = {
    "embedding": "rows picked by data-dependent indices (an indirect DMA, outside the simulated NKI subset)",
    "gather": "data-dependent indices (indirect DMA)",
    "index_select": "data-dependent indices (indirect DMA)",
    "index": "data-dependent indices (indirect DMA)",
    "scatter": "writes through data-dependent indices (indirect DMA)",
    "index_put": "writes through data-dependent indices (indirect DMA)",
    "bitcast": "reinterprets bits (no bitcast between engine dtypes in the simulated NKI subset)",
    "argmax": "needs an index reduction (max8/find_index8 are outside the simulated NKI subset)",
    "argmin": "needs an index reduction (max8/find_index8 are outside the simulated NKI subset)",
}

#: int64 ops whose results can leave the int32 range the device holds int64 in: they run on the host, where
#: int64 arithmetic is exact (comparisons, selects, max / min and bitwise ops on in-range values stay on the
#: device; the executable checks that int64 kernel arguments fit int32). So does any int64 result computed from
#: float operands (a cast: the float may hold any integer).
INT64_HOST_OPS = frozenset({"add", "sub", "mul", "div", "pow", "remainder", "fmod", "neg", "abs", "sum", "prod"})

#: Integer division and remainder run on the host too, whatever the width: a zero divisor raises there (eager's
#: ZeroDivisionError, the reference's typed error), where the simulated engines divide in float32 and would
#: return a wrong integer.
INT_DIVISION_HOST_OPS = frozenset({"div", "remainder", "fmod"})
