"""Cost of one instruction: engine time from AWS's published NC-v2 cycle formulas, per generation.

The formulas (NKI ISA docs, "estimated instruction cost") are in NC-v2 engine cycles, where every engine
processes one element per partition per cycle and an instruction occupies its engine for at least the
minimum issue interval (MIN_II, about 64 cycles):

======================  =====================================================================
nc_matmul               max(min(64, M), N) cycles, x4 when the operands are float32 (TensorE)
nc_transpose (TensorE)  max(P, min(64, F)) cycles
activation              max(64, N), + 64 when it also reduces (ScalarE)
tensor_scalar, copy     max(64, N)
tensor_tensor           max(64, 2N); max(64, N) when an input is in PSUM
tensor_copy_predicated  as tensor_tensor
tensor_reduce           max(64, N)
iota                    150 + N (GpSimdE)
======================  =====================================================================

N is the free size (elements per partition) of the streamed operand, M the stationary free size. Later
generations stream more elements per cycle on VectorE/ScalarE (``Target.*_lanes*``; the 16-bit lanes
apply when every operand as large as the streamed one is a 2-byte type), so the N term is divided by
the lanes while MIN_II stays. Cycles become time with the engine's clock.

A DMA's cost is its bytes over the core's DMA bandwidth derated by descriptor efficiency (short
contiguous runs move slowly); the ~1.3 us fixed cost per transfer is added by the scheduler, which
overlaps it across DMA queues.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from neuroncc.hardware.neuron import FP32_MATMUL_SLOWDOWN, MIN_ISSUE_CYCLES, dma_efficiency
from neuroncc.nki.target import Target
from neuroncc.nki.trace import Engine, Instruction, Operand

MIN_II = MIN_ISSUE_CYCLES  # minimum instruction issue interval, engine cycles
#: iota's fixed cost on GpSimdE, cycles (the published ``150 + N``).
IOTA_CYCLES = 150

__all__ = ["CYCLE_RULES", "Cost", "MIN_II", "dma_efficiency", "instruction_cost"]


@dataclass(frozen=True, slots=True)
class Cost:
    """What one instruction costs: engine occupancy and the work it did."""

    engine: Engine
    ns: float  # engine busy time; for DMA, the data-transfer time at the derated bandwidth
    cycles: float = 0.0  # engine cycles (0 for DMA)
    dma_bytes: int = 0
    flops: int = 0  # TensorE multiply-adds x 2
    elements: int = 0  # elements processed by VectorE / ScalarE / GpSimdE


def _first(ins: Instruction, *roles: str) -> Operand:
    for role in roles:
        if ins.has_operand(role):
            return ins.operand(role)
    raise KeyError(f"{ins.op} has none of {roles}")


def _streamed(ins: Instruction) -> Operand:
    """The operand whose free size N drives the instruction's time."""
    if ins.param("broadcast"):
        return ins.operand("dst")
    return _first(ins, "data", "data1", "src", "dst")


def _lanes(ins: Instruction, target: Target) -> int:
    # Only operands as large as the streamed one set the width: a (P, 1) bias or a reduction's small
    # result does not stream through the engine.
    size = _streamed(ins).free_size
    narrow = all(o.itemsize == 2 for o in ins.operands if o.free_size >= size)
    if ins.engine is Engine.VECTOR:
        return target.vector_lanes_16bit if narrow else target.vector_lanes_fp32
    if ins.engine is Engine.SCALAR:
        return target.scalar_lanes_16bit if narrow else target.scalar_lanes_fp32
    return 1


def _matmul(ins: Instruction, target: Target) -> float:
    stationary, moving = ins.operand("stationary"), ins.operand("moving")
    cycles = max(min(MIN_II, stationary.free_size), moving.free_size)
    fp32 = stationary.dtype == "float32" or moving.dtype == "float32"
    return cycles * (FP32_MATMUL_SLOWDOWN if fp32 else 1)


def _transpose(ins: Instruction, target: Target) -> float:
    data = ins.operand("data")
    if ins.engine is Engine.TENSOR:
        return max(data.partitions, min(MIN_II, data.free_size))
    return max(MIN_II, data.free_size / _lanes(ins, target))


def _one_pass(ins: Instruction, target: Target) -> float:
    return max(MIN_II, _streamed(ins).free_size / _lanes(ins, target))


def _two_inputs(ins: Instruction, target: Target) -> float:
    # Two full-size inputs take two passes through the engine's read port unless one comes from PSUM.
    passes = 1 if ins.param("psum_input") else 2
    return max(MIN_II, passes * _streamed(ins).free_size / _lanes(ins, target))


def _activation(ins: Instruction, target: Target) -> float:
    reduce_extra = MIN_II if ins.param("reduce") else 0
    return max(MIN_II, _streamed(ins).free_size / _lanes(ins, target)) + reduce_extra


def _iota(ins: Instruction, target: Target) -> float:
    return IOTA_CYCLES + ins.operand("dst").free_size


def _gpsimd_pass(ins: Instruction, target: Target) -> float:
    return 150 + _streamed(ins).free_size


def _one_pass_reduce(ins: Instruction, target: Target) -> float:
    return max(MIN_II, _streamed(ins).free_size / _lanes(ins, target)) + MIN_II


def _bn_aggr(ins: Instruction, target: Target) -> float:
    return max(MIN_II, 13 * ins.operand("data").free_size / 3)


def _matmul_mx(ins: Instruction, target: Target) -> float:
    # Each moving element streams once, as for a bf16 matmul; it carries 4 contraction values.
    stationary, moving = ins.operand("stationary"), ins.operand("moving")
    return max(min(64, stationary.free_size), moving.free_size)


# Engine cycles per instruction, one rule per op (NC-v2 formulas scaled by lanes; see module docstring).
CYCLE_RULES: dict[str, Callable[[Instruction, Target], float]] = {
    "nc_matmul": _matmul,                        # max(min(64, M), N), x4 fp32
    "nc_transpose": _transpose,                  # TensorE max(P, min(64, F)); VectorE max(64, F)
    "activation": _activation,                   # max(64, N) (+64 with reduce)
    "tensor_scalar": _one_pass,                  # max(64, N)
    "tensor_copy": _one_pass,                    # max(64, N)
    "tensor_copy_predicated": _two_inputs,       # max(64, 2N); max(64, N) with a PSUM input
    "memset": _one_pass,                         # max(64, N)
    "reciprocal": _one_pass,                     # max(64, N)
    "tensor_reduce": _one_pass,                  # N (never below MIN_II)
    "tensor_tensor": _two_inputs,                # max(64, 2N); max(64, N) with a PSUM input
    "scalar_tensor_tensor": _two_inputs,         # as tensor_tensor
    "iota": _iota,                               # 150 + N
    "affine_select": _gpsimd_pass,               # 150 + N (GpSimdE)
    "tensor_scalar_reduce": _one_pass_reduce,    # max(64, N) + 64
    "tensor_tensor_scan": _two_inputs,           # as tensor_tensor (assumed: two streamed inputs)
    "bn_stats": _one_pass,                       # max(64, N)
    "bn_aggr": _bn_aggr,                         # max(64, 13 * N / 3)
    "nc_matmul_mx": _matmul_mx,                  # max(min(64, M), N) (assumed: the bf16 rate per packed element)
    "quantize_mx": _one_pass,                    # max(64, N) (assumed)
}


def _clock_ghz(engine: Engine, target: Target) -> float:
    return {
        Engine.TENSOR: target.tensor_ghz,
        Engine.VECTOR: target.vector_ghz,
        Engine.SCALAR: target.scalar_ghz,
        Engine.GPSIMD: target.gpsimd_ghz,
    }[engine]


def instruction_cost(ins: Instruction, target: Target) -> Cost:
    """Engine time and work of one traced instruction on ``target``."""
    if ins.engine is Engine.DMA:
        src, dst = ins.operand("src"), ins.operand("dst")
        chunk = min(src.contiguous_bytes, dst.contiguous_bytes)
        ns = src.nbytes / (target.dma_gbytes_per_s * dma_efficiency(chunk))  # GB/s == bytes/ns
        return Cost(Engine.DMA, ns, dma_bytes=src.nbytes)
    cycles = CYCLE_RULES[ins.op](ins, target)
    flops = 0
    elements = 0
    if ins.op in ("nc_matmul", "nc_matmul_mx"):
        stationary, moving = ins.operand("stationary"), ins.operand("moving")
        packed = 4 if ins.op == "nc_matmul_mx" else 1
        flops = 2 * stationary.partitions * packed * stationary.free_size * moving.free_size
    elif ins.engine is not Engine.TENSOR:
        streamed = _streamed(ins)
        elements = streamed.partitions * streamed.free_size
    return Cost(ins.engine, cycles / _clock_ghz(ins.engine, target), cycles, flops=flops, elements=elements)
