"""neuroncc: a standalone tensor-program compiler for PyTorch.

    FX graph (aten) -> typed dataflow IR -> passes -> LLVM CPU code / NKI-style kernels -> cached artifact

``import neuroncc`` is cheap and does not import torch; the torch-facing helpers below load on first use.
"""

from __future__ import annotations

import importlib
from typing import Any

from neuroncc.errors import (
    ArtifactError,
    CodegenError,
    DynamicShapeError,
    InputError,
    NeuronccError,
    ParseError,
    PassError,
    PipelineError,
    SpecializationLimitError,
    UnsupportedOpError,
    VerifyError,
)

__version__ = "0.1.0"

# Public names served lazily from the torch front end, so that `import neuroncc` never imports torch.
_FRONTEND_EXPORTS = {
    "stats": "neuroncc.frontend.stats",
    "reset_stats": "neuroncc.frontend.stats",
    "get_fallback_ops": "neuroncc.frontend.stats",
    "pad_to_bucket": "neuroncc.frontend.bucketing",
    "bucketed": "neuroncc.frontend.bucketing",
}


def __getattr__(name: str) -> Any:
    module_name = _FRONTEND_EXPORTS.get(name)
    if module_name is None:
        raise AttributeError(f"module 'neuroncc' has no attribute '{name}'")
    return getattr(importlib.import_module(module_name), name)


__all__ = [
    "ArtifactError", "CodegenError", "DynamicShapeError", "InputError", "NeuronccError", "ParseError", "PassError", "PipelineError",
    "SpecializationLimitError", "UnsupportedOpError", "VerifyError", "__version__", *_FRONTEND_EXPORTS,
]
