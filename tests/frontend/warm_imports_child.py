"""One process of test_warm_imports.py: ``MODE`` is ``backend`` (import TorchDynamo, then neuroncc's backend) or
``step`` (torch.compile(backend="neuron") of a small training step, one forward and backward). Prints one JSON
line: the modules loaded, the classes neuroncc's loaded modules define, and neuroncc's counters and whether
llvmlite's library is mapped (``step`` only)."""

from __future__ import annotations

import json
import sys

import torch
import torch._dynamo  # noqa: F401 - what every torch.compile loads before a backend is looked up


def defined_classes() -> list[str]:
    """``module.Class`` of every class defined by a loaded neuroncc module (each one built at its import)."""
    return sorted(f"{name}.{attr}" for name, module in list(sys.modules.items()) if name.startswith("neuroncc")
                  for attr, value in vars(module).items()
                  if isinstance(value, type) and value.__module__ == name)


mode = sys.argv[1]
if mode == "backend":
    import neuroncc.frontend.backend  # noqa: F401

    print(json.dumps({"modules": sorted(sys.modules), "classes": defined_classes()}))
    sys.exit(0)

import neuroncc  # noqa: E402

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.LayerNorm(16), torch.nn.Linear(16, 4))
x = torch.randn(6, 8)
loss = torch.compile(model, backend="neuron")(x).square().mean()
loss.backward()
try:
    with open("/proc/self/maps") as maps:  # whether llvmlite's shared library was loaded (None: cannot tell)
        llvm_mapped = "libllvmlite" in maps.read()
except OSError:
    llvm_mapped = None
print(json.dumps({"modules": sorted(sys.modules), "classes": defined_classes(), "stats": neuroncc.stats(),
                  "llvm_mapped": llvm_mapped}))
