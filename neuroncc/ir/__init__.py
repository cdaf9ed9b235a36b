"""neuroncc's intermediate representation: types, ops and their traits, graphs, text form, verifier, reference
interpreter, and how view ops window a buffer (``strides``).

Depends on numpy only (no torch), so the IR and the passes stay fast to import and usable without PyTorch.

May import: errors, hardware. Imported by every layer above.
"""

from neuroncc.ir.attrs import Attrs, DenseAttr
from neuroncc.ir.dtypes import DType, round_to_bf16
from neuroncc.ir.graph import (
    Builder, Function, Op, Value, clone_function, collect_resources, print_function, print_module,
)
from neuroncc.ir.interpreter import InterpreterError, interpret
from neuroncc.ir.opdef import Category, OpDef, Trait
from neuroncc.ir.ops import REGISTRY
from neuroncc.ir.parser import parse, parse_module
from neuroncc.ir.types import TensorType
from neuroncc.ir.verifier import verify

__all__ = [
    "Attrs", "Builder", "Category", "DType", "DenseAttr", "Function", "InterpreterError", "Op", "OpDef",
    "REGISTRY", "TensorType", "Trait", "Value", "clone_function", "collect_resources", "interpret", "parse",
    "parse_module", "print_function", "print_module", "round_to_bf16", "verify",
]
