"""Code generation: LLVM (native CPU) in ``llvm/``, NKI-style kernels in ``nki/``; each also plans the launch of a
whole compiled graph (``llvm/program.py``, ``nki/program.py``).

May import: errors, hardware, ir, passes (llvmlite in ``llvm/``). Imported by: executors and above.
"""
