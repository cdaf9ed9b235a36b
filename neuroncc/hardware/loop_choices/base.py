"""What every group of loop decisions reads: the CPU's features (``has``, defined by the target) and whether it is
one of Intel's AVX-512 cores of Sapphire Rapids' generation, and the burst of cache lines the loops move at once.

May import: nothing of neuroncc.
"""

from __future__ import annotations

#: Cache lines a compute-bound loop moves to or from memory in one burst: its prefetches and its non-temporal
#: stores go out this many lines at a time, spread through the loop (``codegen/llvm/prefetch.py``, the streamed
#: pieces of ``codegen/llvm/emit.py``). A core tracks that many lines in flight at once (its L1 miss buffers, which
#: also combine non-temporal stores: AMD Zen 3 24, Intel Ice Lake 16, Skylake 12); a longer burst waits for free
#: buffers with the loop's own loads queued behind it. Measured on Zen 3: 8 and 16 lines alike, a whole 4 KiB row
#: (64 lines) of prefetches at once 7% slower (softmax [4096, 1024]), 16 KiB of non-temporal stores at once 13%
#: slower than 1 KiB (cross-entropy's gradient [512, 32000]).
MEMORY_BURST_LINES = 16


class ChoiceBase:
    """The base of each group of decisions in this package (:class:`~neuroncc.hardware.loop_choices.LoopChoices`
    joins them): reads the CPU's features through ``has`` and ``vector_bits``, which the target defines."""

    __slots__ = ()

    def has(self, feature: str) -> bool:  # (the target's)
        raise NotImplementedError

    def _intel_avx512(self) -> bool:
        """Whether the CPU is one of Intel's AVX-512 cores of Sapphire Rapids' generation or later (session 32
        measured a Granite Rapids-class Xeon): AVX-512 FP16 marks them here, AMD's Zen 4 has AVX-512 BF16 without
        it. Their 512-bit vector instructions issue to two ports (0 and 5), where Zen 4 splits each into two 256-bit
        halves; decisions measured on them alone say so and keep other AVX-512 CPUs' code. Decisions measured on Zen 4
        (session 33) apply to every AVX-512 CPU but these, Intel's before Sapphire Rapids (AVX-512 without FP16)
        among them: not measured there."""
        return self.has("avx512f") and self.has("avx512fp16")

    def _avx2_only(self) -> bool:
        """Whether the CPU has AVX2 without AVX-512 (AMD's Zen 3 and other x86-64-v3 CPUs): decisions measured on
        Zen 3 (sessions 12-31, 39) say so and keep AVX-512 CPUs' code."""
        return self.has("avx2") and not self.has("avx512f")
