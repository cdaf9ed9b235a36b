"""Code generation: LLVM (native CPU) in ``llvm/``, NKI-style kernels in ``nki/``."""
