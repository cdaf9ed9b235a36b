"""An example of an out-of-tree neuroncc pass (see docs/writing-a-pass.md in neuroncc)."""

from neuroncc_example_pass.div_to_mul import DivToMul

__all__ = ["DivToMul"]
