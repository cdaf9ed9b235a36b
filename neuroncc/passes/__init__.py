"""Compiler passes over the IR: one pass per module, each registered by its command-line name.

    from neuroncc.passes import run_pipeline, PassContext
    fused = run_pipeline("canonicalize,static-shape,fuse,layout,tile{target=trn2}", fn, PassContext(verify_each=True))

See docs/passes.md for what each pass does and :mod:`neuroncc.passes.pipeline` for the registry and the
default pipeline of each target.

May import: errors, hardware, ir. Imported by: codegen and above.
"""

from neuroncc.passes.canonicalize import Canonicalize
from neuroncc.passes.fuse import Fuse
from neuroncc.passes.kernels import KernelSummary, check_kernel_contract, kernel_domain, kernel_summary
from neuroncc.passes.layout import ChooseLayouts
from neuroncc.passes.manager import Pass, PassContext, Pipeline
from neuroncc.passes.one_hot_sums import FoldOneHotSums
from neuroncc.passes.pipeline import (
    DEFAULT_PIPELINES, ENTRY_POINT_GROUP, IN_TREE_PASSES, default_pipeline, parse_pipeline, pass_registry,
    run_pipeline,
)
from neuroncc.passes.plan_memory import MemoryPlan, PlanMemory, plan, value_indices
from neuroncc.passes.product_words import Bf16ProductWords
from neuroncc.passes.static_shape import StaticShape
from neuroncc.passes.tile import Tile

__all__ = [
    "Bf16ProductWords", "Canonicalize", "ChooseLayouts", "DEFAULT_PIPELINES", "ENTRY_POINT_GROUP", "FoldOneHotSums",
    "Fuse", "IN_TREE_PASSES", "KernelSummary", "MemoryPlan", "Pass", "PassContext", "Pipeline", "PlanMemory",
    "StaticShape", "Tile", "check_kernel_contract", "default_pipeline", "kernel_domain", "kernel_summary",
    "parse_pipeline", "pass_registry", "plan", "run_pipeline", "value_indices",
]
