"""One device segment of a planned region as an ``@nki.jit`` kernel function (source text).

    @nki.jit
    def fused_3_softmax(x):
        out = nl.ndarray((4096, 1024), dtype=nl.float32, buffer=nl.shared_hbm)   # results
        ...                                                                     # one loop nest per stage
        return (out,)

Arguments are the HBM tensors the segment reads (region parameters, constants, earlier steps' results) in
the order of :attr:`DeviceSegment.inputs`; results are returned as a tuple in the order of
:attr:`DeviceSegment.outputs`. Values passed between stages of the same kernel live in private HBM scratch
tensors (``nl.hbm``).
"""

from __future__ import annotations

from neuroncc.codegen.nki.body import KernelContext, Tiling
from neuroncc.codegen.nki.matmul import emit_matmul_stage
from neuroncc.codegen.nki.plan import DeviceSegment, RegionPlan
from neuroncc.codegen.nki.source import Names, SourceWriter, identifier, literal, nki_dtype, shape_tuple
from neuroncc.codegen.nki.stages import TRANSFERS, emit_tile_stage, emit_transfer_stage
from neuroncc.hardware.neuron import NeuronCore
from neuroncc.ir import Value


def _allocation(value: Value, name: str, buffer: str, fill: float | int | None) -> str:
    shape = shape_tuple([str(n) for n in value.type.shape]) if value.type.shape else "()"
    dtype = f"nl.{nki_dtype(value.type.dtype)}"
    if fill is not None:
        return f"{name} = nl.full({shape}, {literal(fill)}, dtype={dtype}, buffer=nl.{buffer})"
    return f"{name} = nl.ndarray({shape}, dtype={dtype}, buffer=nl.{buffer})"


def emit_segment(function_name: str, plan: RegionPlan, segment: DeviceSegment, core: NeuronCore, tiling: Tiling,
                 names: Names) -> str:
    """The source of ``@nki.jit def function_name(...)`` computing ``segment`` on ``core`` as ``tiling`` (the
    kernel's tile decisions) says; ``names`` holds the module's names (the kernel's own names are kept apart
    from other kernels')."""
    local = Names(set(names.taken))
    ctx = KernelContext(function_name, plan, local, core, tiling)
    arguments = []
    for value in segment.inputs:
        ctx.hbm[value] = local.fresh(identifier(value.hint or "x"))
        arguments.append(ctx.hbm[value])
    for stage in segment.stages:
        for op in stage.ops:
            fill = TRANSFERS[op.name].fill(plan, op) if op.name in TRANSFERS else None
            if fill is not None:
                ctx.fills[op.result] = fill  # the output is allocated filled
    writer = SourceWriter()
    writer.line("@nki.jit")
    writer.open(f"def {function_name}({', '.join(arguments)}):")
    results = []
    for value in segment.outputs:
        ctx.hbm[value] = local.fresh(identifier(f"{value.hint}_out" if value.hint else "out"))
        writer.line(_allocation(value, ctx.hbm[value], "shared_hbm", ctx.fills.get(value)))
        results.append(ctx.hbm[value])
    for value in segment.scratch:
        ctx.hbm[value] = local.fresh(identifier(f"{value.hint}_hbm" if value.hint else "scratch"))
        writer.line(_allocation(value, ctx.hbm[value], "hbm", ctx.fills.get(value)))
    in_hbm = set(segment.outputs) | set(segment.scratch)
    for stage in segment.stages:
        if stage.kind == "transfer":
            emit_transfer_stage(ctx, stage, writer)
        elif stage.kind == "matmul":
            emit_matmul_stage(ctx, stage, writer, in_hbm)
        else:
            emit_tile_stage(ctx, stage, writer, in_hbm)
    writer.line(f"return ({', '.join(results)}{',' if len(results) == 1 else ''})")
    writer.close()
    return writer.text()
