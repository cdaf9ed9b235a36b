"""The CPU generated code is compiled for: LLVM's name and features for it, and the facts the code generator
decides by (stated here once; the math library, the emitter and the target machine read them).

The host's :class:`CpuTarget` comes from :func:`neuroncc.codegen.llvm.jit.host_target`; tests build others
(``CpuTarget("znver4", "+avx512f,...")``) to check the code another CPU would get, on any machine.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CpuTarget:
    """An x86-64 CPU as LLVM names it: ``name`` ("znver3", "znver4", "skylake-avx512") and ``features``, LLVM's
    comma-separated feature string ("+avx2,+fma,-avx512f,...")."""

    name: str
    features: str

    def has(self, feature: str) -> bool:
        """Whether the CPU has ``feature`` (an LLVM feature name without its sign: "avx512f", "fma")."""
        return f"+{feature}" in self.features.split(",")

    @property
    def vector_bits(self) -> int:
        """The width of the vectors generated loops use: the widest the CPU has.

        On AVX-512 CPUs LLVM's tuning for most models (Skylake-SP to Sapphire Rapids) prefers 256-bit vectors
        (it guards against the frequency drop of heavy 512-bit code on early models), while its Zen 4 model
        uses 512. The kernels here are either memory-bound (the width does not matter) or polynomial-bound
        (full width halves the instructions: twice the throughput on two 512-bit FMA ports, and half the
        front-end work where 512-bit operations are split in two, as on Zen 4), so every AVX-512 CPU gets
        512-bit vectors, and the same code shape on Intel and AMD."""
        if self.has("avx512f"):
            return 512
        return 256 if self.has("avx") else 128

    @property
    def scalef(self) -> bool:
        """Whether ``llvm.ldexp`` is one instruction (AVX-512's vscalefps). Without AVX-512 LLVM lowers a
        vector ldexp to one call of the C library's ``ldexpf`` per lane, so the math library scales by
        powers of two built from exponent bits instead."""
        return self.has("avx512f")

    @property
    def machine_features(self) -> str:
        """The feature string for LLVM's target machine: the CPU's features with the vector width above
        made explicit (``prefer-256-bit`` is a tuning flag LLVM sets per CPU model)."""
        if self.vector_bits == 512:
            return f"{self.features},-prefer-256-bit" if self.features else "-prefer-256-bit"
        return self.features
