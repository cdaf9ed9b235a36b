"""neuroncc: a standalone tensor-program compiler for PyTorch.

    FX graph (aten) -> typed dataflow IR -> passes -> LLVM CPU code / NKI-style kernels -> cached artifact

``import neuroncc`` is cheap and does not import torch; the torch-facing helpers below load on first use.
"""

from __future__ import annotations

import importlib
import sys
import warnings
from typing import Any

from neuroncc.errors import (
    ArtifactError,
    CodegenError,
    DeviceDisabledWarning,
    DeviceFallbackError,
    DynamicShapeError,
    InputError,
    NeuronccError,
    ParseError,
    PassError,
    PipelineError,
    SharedLibraryWarning,
    SpecializationLimitError,
    SpecializationLimitWarning,
    TargetCpuError,
    UnsupportedOpError,
    VerifyError,
)

__version__ = "0.1.0"

# Public names served lazily from the torch front end, so that `import neuroncc` never imports torch.
_FRONTEND_EXPORTS = {
    "stats": "neuroncc.frontend.stats",
    "reset_stats": "neuroncc.frontend.stats",
    "get_fallback_ops": "neuroncc.frontend.stats",
    "get_executed_ops": "neuroncc.device.tracking",
    "clear_op_tracking": "neuroncc.device.tracking",
    "set_fallback_mode": "neuroncc.device.tracking",
    "get_fallback_mode": "neuroncc.device.tracking",
    "pad_to_bucket": "neuroncc.frontend.bucketing",
    "bucketed": "neuroncc.frontend.bucketing",
    "evaluate": "neuroncc.evaluation.runner",
    "compile_program": "neuroncc.frontend.serving",
    "CompiledProgram": "neuroncc.frontend.serving",
    "set_cpu": "neuroncc.hardware.host",  # (no torch: compile for a named CPU, NEURONCC_CPU)
}


def _autoload_device() -> None:
    """The ``torch.backends`` entry point: register the ``neuron`` device while torch is being imported.

    Never raises (a broken install must not break ``import torch``): a failure disables the device with one
    ``DeviceDisabledWarning``. Not called at all when ``TORCH_DEVICE_BACKEND_AUTOLOAD=0``."""
    try:
        importlib.import_module("neuroncc.device.registration").register()
        # the torch.distributed backend for the device: cheap (no process group is made until asked for)
        importlib.import_module("neuroncc.distributed.registration").register()
    except Exception as error:  # noqa: BLE001 - any failure, reported once, keeps torch importable
        warnings.warn(f"neuroncc: the neuron device is disabled: {type(error).__name__}: {error}",
                      DeviceDisabledWarning, stacklevel=2)
    try:
        # torch.compiler.load_cache_artifacts() refuses a whole payload whose artifact types it does not know, and
        # is usually called before the backend is first used: know neuroncc's from `import torch` on
        importlib.import_module("neuroncc.frontend.cache_artifacts").register()
    except Exception as error:  # noqa: BLE001 - likewise
        warnings.warn(f"neuroncc: torch.compiler.load_cache_artifacts() will not know neuroncc's artifacts: "
                      f"{type(error).__name__}: {error}", DeviceDisabledWarning, stacklevel=2)


#: Counter functions that report the neuron device's counters too, once the device is registered.
_DEVICE_REPORTED = ("stats", "reset_stats", "get_fallback_ops")


def __getattr__(name: str) -> Any:
    module_name = _FRONTEND_EXPORTS.get(name)
    if module_name is None:
        raise AttributeError(f"module 'neuroncc' has no attribute '{name}'")
    if name in _DEVICE_REPORTED and "neuroncc.device.registration" in sys.modules:  # the device may be in use
        importlib.import_module("neuroncc.device.tracking").report_to_stats()  # idempotent
    return getattr(importlib.import_module(module_name), name)


__all__ = [
    "ArtifactError", "CodegenError", "DynamicShapeError", "InputError", "NeuronccError", "ParseError", "PassError", "PipelineError",
    "SpecializationLimitError", "SpecializationLimitWarning", "UnsupportedOpError", "VerifyError", "DeviceFallbackError", "DeviceDisabledWarning",
    "SharedLibraryWarning", "TargetCpuError",
    "__version__", *_FRONTEND_EXPORTS,
]
