"""A math library function run over an array with x86's MXCSR exception flags cleared before and read after: which
inputs make its products underflow (a microcode assist per vector on Zen 3) or overflow."""

from __future__ import annotations

import ctypes

import numpy as np
from llvmlite import ir

from neuroncc.codegen.llvm import jit
from neuroncc.codegen.llvm.mathlib import math_call
from neuroncc.codegen.llvm.scalars import F32, I32, I64
from neuroncc.hardware.host import CpuTarget

#: MXCSR's sticky underflow flag
UNDERFLOW = 0x10


def _probe(name: str, target: CpuTarget):
    """(clear, apply, flags): ``clear()`` clears MXCSR's exception flags, ``apply(x, y, n)`` writes ``name`` of n
    floats as ``target`` builds it, ``flags()`` reads the flags back (three calls, so that no optimizer moves the
    math across the reads and writes of MXCSR)."""
    module = ir.Module("mxcsr_probe")
    word = ir.FunctionType(ir.VoidType(), [ir.PointerType(I32)])
    stmxcsr, ldmxcsr = (ir.Function(module, word, f"llvm.x86.sse.{name}") for name in ("stmxcsr", "ldmxcsr"))
    clear = ir.Function(module, ir.FunctionType(ir.VoidType(), []), "clear")
    b = ir.IRBuilder(clear.append_basic_block("entry"))
    slot = b.alloca(I32)
    b.call(stmxcsr, [slot])
    b.store(b.and_(b.load(slot), ir.Constant(I32, ~0x3F)), slot)
    b.call(ldmxcsr, [slot])
    b.ret_void()
    flags = ir.Function(module, ir.FunctionType(I32, []), "flags")
    b = ir.IRBuilder(flags.append_basic_block("entry"))
    slot = b.alloca(I32)
    b.call(stmxcsr, [slot])
    b.ret(b.and_(b.load(slot), ir.Constant(I32, 0x3F)))
    apply = ir.Function(module, ir.FunctionType(ir.VoidType(), [ir.PointerType(F32), ir.PointerType(F32), I64]),
                        "apply")
    entry, loop, done = (apply.append_basic_block(name) for name in ("entry", "loop", "done"))
    b = ir.IRBuilder(entry)
    b.branch(loop)
    b.position_at_end(loop)
    i = b.phi(I64)
    i.add_incoming(ir.Constant(I64, 0), entry)
    x = b.load(b.gep(apply.args[0], [i]))
    b.store(math_call(b, name, x, target=target), b.gep(apply.args[1], [i]))
    following = b.add(i, ir.Constant(I64, 1))
    i.add_incoming(following, loop)
    b.cbranch(b.icmp_signed("<", following, apply.args[2]), loop, done)
    b.position_at_end(done)
    b.ret_void()
    compiled = jit.compile_ir([str(module)])
    calls = (ctypes.CFUNCTYPE(None)(compiled.address("clear")),
             ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)(compiled.address("apply")),
             ctypes.CFUNCTYPE(ctypes.c_int32)(compiled.address("flags")))
    for c in calls:
        c.module = compiled  # keep the code loaded while the functions are in use
    return calls


def with_flags(name: str, target: CpuTarget, x: np.ndarray) -> tuple[int, np.ndarray]:
    """(MXCSR's exception flags raised, results) of math function ``name`` on float32 array ``x``."""
    clear, apply, flags = _probe(name, target)
    y = np.full_like(x, np.nan)
    clear()
    apply(x.ctypes.data, y.ctypes.data, x.size)
    return flags(), y
