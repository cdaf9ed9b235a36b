"""Loop hints for LLVM's loop vectorizer: loops computing polynomial math run several vectors interleaved.

The vectorizer picks how many vector iterations of a loop to interleave by its model of register pressure: one
for gelu(x*w+b)*sigmoid(x) with AVX2's 16 registers, two for softmax's exp. Such a loop is not bound by the FMA
ports but by the latency of its long dependent chains (the range reduction, the polynomial by Horner, the scaling,
a division): the core issues a vector iteration's ops in order, they wait for their operands in its FP scheduler,
and with one chain per iteration the scheduler fills with waiting ops while the ports idle. Interleaved vectors are
independent chains side by side, so that ops at the head of the scheduler are ready. The spills that costs with
16 registers are loads, which these loops have to spare. Measured on Zen 3 (AVX2), interleave count 1 / LLVM's /
2 / 4 / 8 (one process, interleaved medians): exp's loop (the roofline's microkernel) 0.76 / - / 0.57 / 0.45 /
0.62 ns per element; gelu(x*w+b)*sigmoid(x) [4096, 1024] at 2 threads 6.21 / 6.20 / 5.33 / 4.70 ms; cross-
entropy forward and backward [512, 32000] 22.0 (LLVM's) / 17.2 (4) / 18.1 (8) ms; softmax [4096, 1024], whose exp
loop LLVM interleaves by 2 already, 2.91 / 2.75 (4) ms.

:func:`math_interleave` is the decision (for the target), :func:`hint_math_loop` its code, for the kernel
emitter's innermost loops (``emit.py``) and for the roofline's math microkernels (which measure the code the
kernels get). A loop reading bf16 tables (:func:`reads_bf16_tables`) gets its vector iteration's lanes and an
interleave count of 1 where :attr:`CpuTarget.bf16_table_loop_lanes` says so (``emit.py``): Zen 4, 8 lanes (2
interleaved measured 1.08 against 0.86 of the polynomials' time, session 37).
"""

from __future__ import annotations

from collections.abc import Iterable

from llvmlite import ir

from neuroncc.codegen.llvm.mathlib import POLYNOMIAL, SCALED_POLYNOMIAL
from neuroncc.codegen.llvm.scalars import I32
from neuroncc.hardware.host import CpuTarget


def math_interleave(target: CpuTarget) -> int:
    """Vector iterations a loop computing polynomial math runs interleaved on ``target``
    (``CpuTarget.polynomial_interleave``). With 16 vector registers (AVX2) 4 chains spill a few constants, 8 spill
    their temporaries too and were slower than 4 (see the module docstring); on AVX-512 (Zen 4) 2 chains of 16
    lanes were as fast as 4 or up to 5% faster, 8 slower (session 19 softmax1t)."""
    return target.polynomial_interleave


def computes_polynomial_math(blocks: Iterable[ir.Block]) -> bool:
    """Whether the instructions of ``blocks`` call a polynomial function of the math library (``mathlib.py``)."""
    return any(isinstance(instruction, ir.CallInstr) and instruction.callee.name.startswith("ncc.math.")
               and instruction.callee.name[len("ncc.math."):] in POLYNOMIAL.keys() | SCALED_POLYNOMIAL.keys()
               for block in blocks for instruction in block.instructions)


class _LoopID(ir.values.MDValue):
    """A loop's ID for LLVM: a distinct metadata node whose first operand is itself, then its properties."""

    def __init__(self, module: ir.Module, properties: list[ir.values.MDValue]):
        super().__init__(module, [], name=str(len(module.metadata)))
        self.operands = (self, *properties)

    def descr(self, buf: list[str]) -> None:
        buf.append("distinct ")
        super().descr(buf)

    def __eq__(self, other: object) -> bool:
        return self is other

    def __hash__(self) -> int:
        return id(self)


def hint_math_loop(latch: ir.Instruction, target: CpuTarget, interleave: int = 0, width: int = 0) -> None:
    """Give the loop whose back edge is the branch ``latch`` the interleave count of :func:`math_interleave`, or
    ``interleave`` where given (a streamed piece's loop: ``CpuTarget.register_piece_lines``); ``width``: its vector
    iterations' lanes too (``llvm.loop.vectorize.width``)."""
    module = latch.parent.parent.module
    properties = [module.add_metadata([ir.MetaDataString(module, "llvm.loop.interleave.count"),
                                       ir.Constant(I32, interleave or math_interleave(target))])]
    if width:
        properties.append(module.add_metadata([ir.MetaDataString(module, "llvm.loop.vectorize.width"),
                                               ir.Constant(I32, width)]))
    latch.set_metadata("llvm.loop", _LoopID(module, properties))


def reads_bf16_tables(blocks: Iterable[ir.Block]) -> bool:
    """Whether the instructions of ``blocks`` read a bf16 math table (``bf16_tables.py``): a load from one, or a call
    of its read by lane pairs."""
    for block in blocks:
        for instruction in block.instructions:
            if isinstance(instruction, ir.CallInstr) and instruction.callee.name.startswith("ncc.bf16_lookup"):
                return True
            if isinstance(instruction, ir.GEPInstr) and isinstance(instruction.pointer, ir.GlobalVariable) \
                    and instruction.pointer.name.startswith("ncc.bf16_table"):
                return True
    return False
