"""NKI APIs the simulator does not implement: calling one raises ``NKIUnsupportedError`` naming it and why.

``nki.isa`` and ``nki.language`` look names they lack up here (module ``__getattr__``), so a kernel importing
one still loads, and the call fails at the kernel's line with a typed error instead of an AttributeError.
Names NKI does not have stay AttributeErrors.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from neuroncc.nki.errors import NKISimulationError


class NKIUnsupportedError(NKISimulationError):
    """A kernel called an NKI API that neuroncc's simulator does not implement."""


_INDIRECT = "data-dependent addressing (indirect DMA / gathers) is not simulated"
_RANDOM = "the hardware random number generator's algorithm is not published, so its bits cannot be simulated"
_SEARCH = "the top-8 search and match instructions are not simulated"

UNSUPPORTED: dict[str, dict[str, str]] = {
    "nki.isa": {
        "dma_transpose": "the DMA engine's transpose is not simulated; use nisa.nc_transpose or nl.load_transpose2d",
        "local_gather": _INDIRECT, "nc_stream_shuffle": "cross-partition shuffles are not simulated",
        "max8": _SEARCH, "nc_find_index8": _SEARCH, "nc_match_replace8": _SEARCH,
        "tensor_partition_reduce": "reductions along the partition dimension are not simulated",
        "range_select": "range_select is not simulated", "select_reduce": "select_reduce is not simulated",
        "sequence_bounds": "sequence_bounds is not simulated",
        "tensor_scalar_cumulative": "tensor_scalar_cumulative is not simulated (nisa.tensor_tensor_scan is)",
        "dropout": _RANDOM, "rand2": _RANDOM, "rand_set_state": _RANDOM, "rand_get_state": _RANDOM,
        "set_rng_seed": _RANDOM, "dma_compute": "DMA compute is not simulated",
        "tensor_copy_dynamic_src": "dynamic (runtime-valued) indices are not simulated",
        "tensor_copy_dynamic_dst": "dynamic (runtime-valued) indices are not simulated",
    },
    "nki.language": {
        "rand": _RANDOM, "random_seed": _RANDOM, "dropout": _RANDOM, "gather_flattened": _INDIRECT,
        "atomic_rmw": "atomic read-modify-write DMAs are not simulated", "all_reduce": "collectives are not simulated",
        "softmax": "composite language op not simulated: write it with nl.max, nl.exp and nl.sum",
        "rms_norm": "composite language op not simulated: write it with nl.square, nl.mean and nl.rsqrt",
        "erf": "nl.erf is not simulated", "erf_dx": "nl.erf_dx is not simulated",
    },
}


def stub(module: str, name: str) -> Callable[..., Any]:
    """What ``module.name`` is for an unsupported NKI API: a function raising ``NKIUnsupportedError``."""
    why = UNSUPPORTED[module].get(name)
    if why is None:
        raise AttributeError(f"module '{module}' has no attribute '{name}'")

    def unsupported(*_args: Any, **_kwargs: Any) -> Any:
        raise NKIUnsupportedError(f"{module}.{name} is not supported by neuroncc's NKI simulator: {why}")
    unsupported.__name__ = unsupported.__qualname__ = name
    return unsupported
