"""The one error type the NKI simulator raises on purpose.

AWS's simulator reports broken kernels with assertion-style messages that name the op, the operand and
the limit (``tensor_tensor data1 partition dimension 256 exceeds maximum 128``). We keep that style and
derive from ``AssertionError`` so code written against the real simulator (``pytest.raises(AssertionError)``)
keeps working, while ``NKISimulationError`` lets callers catch only simulator diagnostics.
"""

from __future__ import annotations

from neuroncc.errors import NeuronccError


class NKISimulationError(NeuronccError, AssertionError):
    """A kernel broke an NKI rule: a shape, dtype, memory-space, engine or capacity limit."""


class NKIRuleWarning(UserWarning):
    """A kernel broke a rule of the simulator's own that NKI does not have (e.g. SBUF capacity, which NKI's
    compiler meets by spilling): reported, never raised, so every kernel NKI accepts still runs."""


def require(condition: bool, message: str) -> None:
    """Raise ``NKISimulationError(message)`` unless ``condition`` holds."""
    if not condition:
        raise NKISimulationError(message)
