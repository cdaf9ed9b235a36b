"""Every op of the registry has a native lowering (or is an extern kernel): nothing falls back by design."""

from neuroncc.codegen.llvm.access import ACCESS
from neuroncc.codegen.llvm.elementwise import ELEMENTWISE
from neuroncc.codegen.llvm.reductions import COMBINERS
from neuroncc.ir import REGISTRY, Category
from neuroncc.executors.cpu.extern_library import LIBRARY_CALLS

EXTERN = {"mm", "bmm", "addmm", "convolution", "convolution_backward"}
SCATTER_STAGES = {"scatter", "index_put"}
#: Complex-only ops never reach a kernel: lower-complex rewrites conj into f32 arithmetic, and the views that
#: change the element type stay at the top level, where the launcher reinterprets the buffer.
NOT_IN_KERNELS = {"conj", "view_as_real", "view_as_complex"}


def test_every_op_has_a_lowering():
    missing = []
    for opdef in REGISTRY:
        name, category = opdef.name, opdef.category
        if category is Category.KERNEL or name in NOT_IN_KERNELS:
            continue
        tables = {
            Category.ELEMENTWISE: ELEMENTWISE, Category.REDUCTION: COMBINERS, Category.MATMUL: EXTERN,
            Category.EXTERN: set(LIBRARY_CALLS),  # library ops: one ATen call each
        }.get(category, set(ACCESS) | SCATTER_STAGES)
        if name not in tables:
            missing.append(name)
    assert missing == []


def test_tables_name_only_real_ops():
    for table in (ELEMENTWISE, ACCESS, COMBINERS):
        assert set(table) <= set(REGISTRY.names())
