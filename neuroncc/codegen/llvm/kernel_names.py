"""Phase functions named by their code: kernels that differ only in their names become one function.

A model's identical layers (and a forward and a backward that fuse the same pattern) make kernels whose
LLVM modules differ only in the kernel's name, which was its op's index (``k12_p0``, ``k40_p0``): LLVM then
optimized and emitted the same code once per layer. Measured before this module (session 22, Zen 3), of the
LLVM modules a training step's first compile made: GPT-2 with 2 layers 117, of which 48 repeated another's
code under another name (2.8 s of its 6.3 s of LLVM CPU time), with 4 layers 210, 138 repeats (7.8 s of
11.4 s); Llama with 4 layers 178, 117 repeats (8.5 s of 11.8 s); the transformer block's step (one block) none.

So the launch planner emits each phase under :data:`PLACEHOLDER` and names it by a digest of the module text
it gets (:func:`name_by_content`): two kernels with the same code get the same text and the same name, the
planner adds that module once, and each kernel's launch step calls the one function. Which ops a function
serves stays in the launch plan (each step: its op index and its phases' symbols), so a kernel shared by
layers 0 and 1 is still explained by both steps; what a user sees is named after the steps, never the
symbols (``inspect --kernels``' summary of the IR's kernels, the profiler's ``fused_3_softmax``:
``executors/cpu/step_names.py``). The name depends on the text alone: the same graph gives
the same names and library bytes in every build, and the same code in another graph of the process (the
backward, a recompile, another model) has the same text, which ``jit``'s object memo compiles once.
"""

from __future__ import annotations

import hashlib

from neuroncc.errors import CodegenError

#: The kernel symbol phases are emitted under before they are named by content (their functions:
#: ``k_p0``, ``k_p0.body``, ``k_mm``, ...).
PLACEHOLDER = "k"
#: Hex digits of the text's sha256 in a name: 64 bits (a planner checks that one name never means two texts).
DIGEST_DIGITS = 16


def name_by_content(text: str, symbol: str) -> tuple[str, str]:
    """Module ``text`` of phase function ``symbol`` (``{PLACEHOLDER}_{phase}``) with that function renamed to
    ``k{digest}_{phase}``, the digest of ``text``; returns (new text, new symbol).

    Names in LLVM text are quoted (``@"k_p0"``, ``@"k_p0.body"``, ``; ModuleID = "k_p0"``), so the quoted
    prefix is replaced and nothing else can match it."""
    prefix = f'"{PLACEHOLDER}_'
    if not symbol.startswith(PLACEHOLDER + "_") or f'"{symbol}"' not in text:
        raise CodegenError(f"phase function '{symbol}' is not named '{PLACEHOLDER}_...' in its module")
    name = f"k{hashlib.sha256(text.encode()).hexdigest()[:DIGEST_DIGITS]}"
    return text.replace(prefix, f'"{name}_'), name + symbol[len(PLACEHOLDER):]
