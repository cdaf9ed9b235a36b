"""The device's kernels are never traced by TorchDynamo, as a C++ kernel is not.

The device's kernels are Python functions that PyTorch's dispatcher calls. While a ``torch.compile``d function
runs, TorchDynamo's frame callback is active, also in the code that runs eagerly between its graphs (FSDP2's
hooks, a graph break's resume); without this, every op those run on neuron tensors had its kernel's frames
compiled by TorchDynamo as user code: slow, and wrong where the kernel's numpy code does not trace (the bf16
rounding of an extern op: ``KeyError(torch.uint32)`` in ``torch.compile`` of an FSDP2 model with a bf16
``MixedPrecisionPolicy``, session 27 fsdpmp27). PyTorch runs its own Python kernels (``torch.library``
custom ops) with TorchDynamo disabled; here each kernel's code is marked to be skipped with every frame it calls
(a flag on the code object that TorchDynamo reads only while its callback is active: eager calls cost nothing
more, and ``torch._dynamo`` is not imported).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from torch._C._dynamo.eval_frame import _FrameAction, _FrameExecStrategy, set_code_exec_strategy

Kernel = TypeVar("Kernel", bound=Callable[..., Any])

#: This frame and every frame it calls run as they are, untraced.
_SKIPPED_WITH_CALLEES = _FrameExecStrategy(_FrameAction.SKIP, _FrameAction.SKIP)


def untraced(kernel: Kernel) -> Kernel:
    """``kernel`` (a function, or an object whose class defines ``__call__``), marked so that TorchDynamo never
    traces it or what it calls; returned as it is."""
    code = getattr(kernel, "__code__", None) or type(kernel).__call__.__code__
    set_code_exec_strategy(code, _SKIPPED_WITH_CALLEES)
    return kernel
