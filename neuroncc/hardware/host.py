"""The host CPU as the LLVM code generator sees it: its name, features, vector width and cores (and any other
x86-64 CPU, to read the code it would get: :class:`CpuTarget`).

Read lazily and once per process (:func:`host_cpu`): LLVM reports the name and feature string (asked of
llvmlite's shared library through ctypes, without importing llvmlite's Python bindings: a process that only loads
cached kernel libraries never needs them), the operating system the CPUs this process may run on. The CPU code
generator compiles for exactly this CPU; the name and features are part of a compiled artifact's identity.

Loading that library still costs ~8-12 ms, so LLVM's answer may come from an earlier process on this machine
instead: :func:`llvm_host_identity` digests what the answer depends on, read without LLVM, and the compile
cache keeps answers by it (``neuroncc/driver/host_stamp.py``, which passes one to :func:`host_cpu`).
"""

from __future__ import annotations

import ctypes
import hashlib
import importlib.util
import os
import sys
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

#: Bytes of one cache line (x86-64 and the common aarch64 cores): the unit of non-temporal stores, of the
#: transposing copies' squares and of buffer alignment in generated CPU code.
CACHE_LINE_BYTES = 64

#: Cache lines a compute-bound loop moves to or from memory in one burst: its prefetches and its non-temporal
#: stores go out this many lines at a time, spread through the loop (``codegen/llvm/prefetch.py``, the streamed
#: pieces of ``codegen/llvm/emit.py``). A core tracks that many lines in flight at once (its L1 miss buffers, which
#: also combine non-temporal stores: AMD Zen 3 24, Intel Ice Lake 16, Skylake 12); a longer burst waits for free
#: buffers with the loop's own loads queued behind it. Measured on Zen 3: 8 and 16 lines alike, a whole 4 KiB row
#: (64 lines) of prefetches at once 7% slower (softmax [4096, 1024]), 16 KiB of non-temporal stores at once 13%
#: slower than 1 KiB (cross-entropy's gradient [512, 32000]).
MEMORY_BURST_LINES = 16

#: A kernel whose inputs and outputs fill at least 1/STREAM_LLC_SHARE of the last-level cache writes its large
#: outputs past the caches (:meth:`CpuTarget.streams_outputs`).
STREAM_LLC_SHARE = 4

#: 4K aliasing: a load is first checked against the older stores still in the store buffer by the low 12 bits
#: of its address only, and one that matches waits as if it depended on the store. A kernel whose output starts
#: a little past one of its inputs modulo this period meets it on every load of that input in the loop that
#: writes the output (the load of x[j] matches the store to out[j - k] issued just before it). The same holds
#: between a kernel's stack buffers (row caches) and the rows it reads and writes (``row_buffers.allocate_rows``).
ALIAS_PERIOD_BYTES = 4096

#: An output that starts 1 to ALIAS_WINDOW_BYTES - 1 bytes past an input modulo ALIAS_PERIOD_BYTES is 4K-aliased
#: with it (:func:`placement_shift`). Measured on Zen 3 (RMSNorm and LayerNorm [8192, 1024], the output at a chosen
#: distance d past the input, 1 and 2 threads; docs/performance-history.md, session 13): d = 32 9-33% slower than
#: d = 0, 64 4-15%, 128 and 192 up to 7%, 256 to 3072 and outputs before their input within 3%.
ALIAS_WINDOW_BYTES = 256

#: Outputs of at least this many bytes are placed by :func:`placement_shift` (their memory is allocated one
#: alias period longer, so the shift fits); smaller ones are left where the allocator puts them. Not lower: the
#: check is Python per output and call, and at 64 KiB it made the small classifier's compiled AdamW step (dozens
#: of 64-512 KiB outputs and inputs, milliseconds per step) 0.73x -> 0.90x eager's time (session 13, 1 thread).
PLACED_OUTPUT_MIN_BYTES = 1 << 20


def placement_shift(base: int, inputs: Iterable[int]) -> int:
    """Bytes to skip from ``base`` (a cache-line-aligned allocation one alias period longer than needed) so that
    an output starting there is not 4K-aliased with any of ``inputs`` (the data addresses its kernels read: the
    call's inputs and the outputs placed before it): it starts 0 or at least ALIAS_WINDOW_BYTES bytes past each
    modulo ALIAS_PERIOD_BYTES. A multiple of CACHE_LINE_BYTES below ALIAS_PERIOD_BYTES: the smallest that
    works, 0 when none does (more than 15 inputs at unlucky offsets). 0 for an output that is fine where it is:
    an allocator may check first and allocate the longer memory only when needed.

    The smallest shift that works is 0 or the first cache line past the end of some input's window (the shift
    a cache line before it is in some window, and it is not), so only those are tried (~1 us for a few inputs)."""
    period, window = ALIAS_PERIOD_BYTES, ALIAS_WINDOW_BYTES
    past = [(base - address) % period for address in inputs]  # how far past each input the output would start
    if all(not 0 < d < window for d in past):
        return 0
    for shift in sorted({-(-((window - d) % period) // CACHE_LINE_BYTES) * CACHE_LINE_BYTES for d in past}):
        if shift < period and all(not 0 < (d + shift) % period < window for d in past):
            return shift
    return 0


def block_alignment(nbytes: int) -> int:
    """The alignment of a fresh block of ``nbytes`` from an allocator that does not know which memory the kernels
    writing it will read (the ``neuron`` device's): a large block starts on an alias period, so that all of them
    start at the same page offset, 0 bytes from each other (not aliased: :func:`placement_shift`); a small one
    on a cache line (the kernels' vector stores rely on it)."""
    return ALIAS_PERIOD_BYTES if nbytes >= PLACED_OUTPUT_MIN_BYTES else CACHE_LINE_BYTES


#: Without AVX-512, a float32 product goes to oneDNN only when its second factor has at least this many bytes
#: (:meth:`CpuTarget.onednn_takes`).
ONEDNN_MIN_WEIGHT_BYTES = 8 << 20

#: With AVX-512, a float32 product goes to oneDNN from this many multiply-adds (:meth:`CpuTarget.onednn_takes`):
#: below it oneDNN's fixed cost per call outweighs what its kernels gain.
ONEDNN_MIN_MACS_AVX512 = 1 << 26


#: With AVX-512, a float32 mm/addmm of at most this many multiply-adds runs as generated code
#: (:attr:`CpuTarget.small_mm_max_macs`).
SMALL_MM_MAX_MACS_AVX512 = 1 << 25

#: Without AVX-512, a float32 mm/addmm of at most this many multiply-adds runs as generated code
#: (:attr:`CpuTarget.small_mm_max_macs`).
SMALL_MM_MAX_MACS_AVX2 = 1 << 23


@dataclass(frozen=True, slots=True)
class CpuTarget:
    """An x86-64 CPU as LLVM names it: ``name`` ("znver3", "znver4", "skylake-avx512") and ``features``, LLVM's
    comma-separated feature string ("+avx2,+fma,-avx512f,..."), with the facts the CPU code generator decides
    by (stated here once; the tile pass, the math library, the emitter and the target machine read them).
    :func:`host_cpu` is this machine's; tests build others to read the code another CPU would get."""

    name: str
    features: str
    #: bytes of the largest cache (the last level, shared by the cores; 0: unknown)
    last_level_cache_bytes: int = 0

    def streams_outputs(self, footprint_bytes: int) -> bool:
        """Whether a kernel touching ``footprint_bytes`` (its inputs and outputs together) writes its large
        outputs with non-temporal stores, past the caches. Streaming saves the read-for-ownership of each
        output line, but a streamed line goes to memory and is fetched back from there by its next reader,
        where a plain store leaves it in the last-level cache. So outputs are streamed only when the footprint
        is at least a quarter of that cache (:data:`STREAM_LLC_SHARE`): the cache is shared with the other
        cores (and, in a VM, other tenants), so less of it than its size holds a kernel's data. Measured on an
        Intel Xeon reporting a 480 MB L3 (one process, the same kernel built both ways, interleaved), plain
        stores won up to 64 MB (softmax [4096, 1024], 32 MB, 1 thread: 2.41 ms against 3.47 streamed; LayerNorm
        [8192, 1024], 64 MB, 2 threads: 2.07 against 3.07) and streaming from 128 MB (softmax [16384, 1024],
        1 thread: 9.45 against 12.52; 512 MB: 20.8 against 27.7 at 2 threads). On a Zen 3 with a 32 MB L3 a
        quarter is 8 MB, where the emitter's own 4 MB output threshold already made kernels stream. With the
        size unknown, large outputs are streamed (the emitter's threshold alone decides)."""
        return not self.last_level_cache_bytes or footprint_bytes * STREAM_LLC_SHARE >= self.last_level_cache_bytes

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
        512-bit vectors, and the same code shape on Intel and AMD. (aarch64 NEON and others: 128.)"""
        if self.has("avx512f"):
            return 512
        return 256 if self.has("avx") else 128

    @property
    def f32_lanes(self) -> int:
        """float32 elements in one of the widest vectors (8 with AVX2, 16 with AVX-512)."""
        return self.vector_bits // 32

    @property
    def scalef(self) -> bool:
        """Whether ``llvm.ldexp`` is one instruction (AVX-512's vscalefps). Without AVX-512 LLVM lowers a
        vector ldexp to one call of the C library's ``ldexpf`` per lane, so the math library scales by
        powers of two built from exponent bits instead."""
        return self.has("avx512f")

    @property
    def scales_by_float_exponent(self) -> bool:
        """Whether exp scales by its float n itself (vscalefps takes a float exponent, ``llvm.ldexp`` an integer:
        ``codegen/llvm/vector_variants.py``), saving the integer n and its conversion back; its 128- and 256-bit
        forms are AVX-512 VL's. Softmax on L2-resident rows 6-7% faster on Zen 4 (session 18 exppass)."""
        return self.scalef and self.has("avx512vl")

    @property
    def rounds_bf16_in_word_lanes(self) -> bool:
        """Whether a pair of float32 results is rounded to bf16 and packed in 16-bit lanes (AVX-512 BW's unsigned
        word compare into a mask, masked word add and two-table word permute: 5 vector instructions per 32
        results against 9 in 32-bit lanes; ``codegen/llvm/bf16_words.py``). AVX2 has none of the three."""
        return self.has("avx512bw")

    @property
    def rounds_bf16_op_results_without_nan_case(self) -> bool:
        """Whether an op with a bf16 result (eager's bf16 ops round after each op) drops its rounding's NaN case
        where its NaNs are already quiet with zero low halves (``codegen/llvm/nan_payloads.py``), as a cast to
        bf16 does everywhere. With AVX-512's 32 vector registers: bf16 gelu(x*w+b)*sigmoid(x)'s loop (Zen 4, its
        five roundings' cases gone) 0.87-0.88 of the time at 1 and 2 threads (session 18). With AVX2 (Zen 3, 16
        registers) the case is a compare and a blend on the two FMA pipes and an or per rounding: the same loop
        992 -> 873 instructions per 64 elements, 196 -> 157 stack accesses; its kernel 0.833-0.836 of the time at 1
        and 2 threads (session 24 bf16a24, ``bench_bf16_words.py --switch op-results --force``, two builds each,
        interleaved medians of 41; sessions 11 and 13 had measured the arithmetic ops' alone 2-5% slower, on code
        since changed: its loops now run four vectors interleaved). Other CPUs (no AVX2) keep the case: not
        measured."""
        return self.has("avx512f") or self.has("avx2")

    @property
    def looks_up_bf16_unary_math(self) -> bool:
        """Whether a unary polynomial op of a bf16 value with a bf16 result (gelu, sigmoid, exp, ...) reads its
        result from a 65536-entry table of its rounded results (``codegen/llvm/bf16_tables.py``: the same bits)
        instead of computing it. On Zen 3 (AVX2, session 25 table25), 1 thread: a table read by the lanes' scalar
        loads that LLVM's vectorizer makes 0.28-0.34 ns an element against gelu's polynomial and rounding 0.68-0.71
        and sigmoid's 0.57-0.62 on normal bf16 inputs (0.41-0.55 of the time; AVX2's ``vpgatherdd`` 0.48-0.52), and
        bf16 gelu(x*w+b) * sigmoid(x) [4096, 1024] 0.504-0.506 of its kernel's time at 1 thread, 0.512-0.525 at 2
        with the entries read as 32-bit words' high halves (0.53-0.60 with 16-bit reads; ``bench_bf16_words.py
        --switch tables``, ``bench_math_interleave.py --lookup``). Uniform random bit patterns
        (every exponent: the 128 KiB table out of L1) make sigmoid's read 0.99-1.11x its polynomial. AVX-512 keeps its
        code (its polynomials run 16 lanes at a time, and it was not measured there); so do CPUs without AVX2."""
        return self.has("avx2") and not self.has("avx512f")

    @property
    def caches_widened_bf16_rows(self) -> bool:
        """Whether a row loop that reduces a bf16 row widened to float32 and reads it again in later passes
        (bf16 LayerNorm: the mean, variance and write passes) keeps the widened row in a float32 row cache that
        its first pass fills (``refine.widened_row_cache``): the later passes load float32 from L1 instead of
        widening each word again (a shift and an and per 32 elements per pass). With AVX-512 the first pass's
        two stores per 32 elements stay in its one loop (``stages.SUM_IN_LOOP_MIN_REGISTERS``); AVX2's code is
        left as it was (its row-cached sums are added in a loop of their own)."""
        return self.has("avx512f")

    @property
    def caches_widened_bf16_rows_for_exp(self) -> bool:
        """Whether a softmax-like row loop (its exp pass carries the next row's prefetches and the previous row's
        delayed write: ``prefetch.carrier_stage``, ``delayed_writes.py``) keeps the bf16 row its max pass reduced
        widened to float32 for the exp pass (``refine.widened_row_cache``'s ``read_by``), where
        ``caches_widened_bf16_rows`` (AVX-512) does not keep every such row already. Zen 3 (AVX2): the exp loop no
        longer spills the words it widens (183 -> 179 instructions per 64 elements, 11 -> 6 stack accesses), the
        max pass stores two vectors per word; bf16 softmax [4096, 1024] 0.982-0.986 of the time at 1 thread and
        0.976-0.987 at 2, the same bits (session 25 softmax25, ``bench_bf16_words.py --switch widened-rows-exp``).
        Loops without a transcendental (bf16 LayerNorm: session 20 read the cache mixed on AVX2) widen again."""
        return self.has("avx2") and not self.has("avx512f")

    @property
    def writes_delayed_group_before_the_exponentials(self) -> bool:
        """Whether each group of a softmax-like row pass (``prefetch.spread_loop``: the next row's prefetches, the
        group's exponentials) writes its share of the previous row (``delayed_writes.py``) before the exponentials
        rather than after them: the sum's loop then follows a row's last exponentials directly. Zen 3 (AVX2), ten
        one-process A/Bs of 61-151 rounds (session 25 softmax25): float32 softmax [4096, 1024] medians 0.980 of
        the time at 1 thread (0.954-1.019) and 0.986 at 2 (0.963-1.056); bf16 0.918-0.977 and 0.945-0.980 in four
        (``bench_bf16_words.py --switch write-first``); the same bits. AVX-512: not measured, as before."""
        return self.has("avx2") and not self.has("avx512f")

    @property
    def caches_variance_deviations(self) -> bool:
        """Whether a variance's deviation pass over a widened bf16 row stores x - mean into a float32 row cache that a
        later stage's x - mean (bf16 LayerNorm's write pass) loads (``refine.deviation_row_cache``) instead of
        widening x and subtracting again: the write loop 20 -> 16 vector instructions per 16 elements (llvm-mca 7.3 ->
        5.4 cycles) for 8 stores per 64 in the deviation loop. Zen 3, bf16 LayerNorm [8192, 1024]'s kernel 0.852-0.854
        of the time at 1 thread, 0.904-0.907 at 2 (session 25 bf16ln25). AVX-512 (whose widened row cache spares
        the widening) not measured: its code is left as it was."""
        return self.has("avx2") and not self.has("avx512f")

    @property
    def means_a_row_early(self) -> bool:
        """Whether a row loop whose first stage is a variance over a widened bf16 row computing its own mean (bf16
        LayerNorm as torch.compile hands it over: ``stages.SharedMean``) runs each row's deviation pass, the next
        row's mean pass, then the row's write pass, so that one row's reductions (horizontal sums, rsqrt: ~80 ns a
        row, session 23) overlap the other row's loops; its prefetches go two rows ahead
        (``emit.EARLY_MEAN_PREFETCH_ROWS``). The same bits. Zen 3, bf16 LayerNorm [8192, 1024]'s kernel: 0.946-0.950
        of the time at 1 and 2 threads (session 25 bf16ln25); float32 LayerNorm (memory-bound) 1.10: not taken.
        AVX-512 not measured: its code is left as it was."""
        return self.has("avx2") and not self.has("avx512f")

    @property
    def sums_paired_row_caches_apart(self) -> bool:
        """Whether a float sum of row-cached terms computed by a loop over bf16 element pairs (bf16 softmax's
        exp(x - max)) adds them in a loop of its own, as float32 loops do with fewer than
        ``stages.SUM_IN_LOOP_MIN_REGISTERS`` registers (AVX2; ``stages._Reducer._sums_row_cache_apart``). On Zen 3
        the paired exp loop ran eight chains of exp (interleave 4, two halves each) and four partial sums in 16
        registers: 230 -> 184 instructions per 64 elements without the sums (fewer spills), bf16 softmax
        [4096, 1024] 0.972-0.987 of the time at 1 thread and 0.973-0.993 at 2 (three one-process A/Bs, session
        20 bf16avx2). AVX-512 never sums apart (32 registers)."""
        return not self.has("avx512f")

    @property
    def bursts_before_each_row_pass(self) -> bool:
        """Whether a cheap row loop's prefetches of the next row (``prefetch.row_bursts``) go out in a burst before
        each of its passes over the row, a variance's own mean pass counted apart from its deviations' pass
        (``stages.passes_over_row``), rather than one burst per stage. torch.compile hands float32 LayerNorm over
        as a var and then a mean of x: one stage of two passes (the variance stores the mean, ``stages.SharedMean``),
        so its 64-line rows went out in two bursts of 32, before the mean and the write passes, where a mean
        before the var (the hand-built graphs of earlier sessions) gives three stages and bursts of 22/22/20. Now
        torch's form gets those three too. Zen 3, LayerNorm [8192, 1024]: 0.845-0.915 of the time at 1 thread,
        0.863-0.902 at 2 (docs/performance-history.md, session 21 ln21). Not the burst size alone: RMSNorm's two
        bursts of 32 (unchanged) run at ~90% of the copy, and capping them at 24 or 16 lines was 7-26% slower.
        Only rows of at least ``MEMORY_BURST_LINES`` lines per pass: bf16 LayerNorm's 32 lines would go 16/16/0
        (0.98-1.00 in two runs, 1.05 in a third) and stay 16/16. AVX-512 not measured: its code is left as it
        was."""
        return not self.has("avx512f")

    @property
    def column_sums_share_a_loop(self) -> bool:
        """Whether the column sums of a chunked row phase that run over the same columns add to their partials in
        one loop (``emit.KernelEmitter._chunk_row``) rather than in a loop per sum. The bits are the same either
        way (each partial takes the rows in the same order); what changes is LLVM's work: on Zen 3 (AVX2) the
        transformer step's two LayerNorm-backward O3 modules (three and two sums) compiled in 0.71-0.89 of their
        time, the backward's first call waited ~18 ms less for its code, and the kernels ran 1-4% faster at 1
        thread, within +-8% at 2 (docs/performance-history.md, session 20 cold20). AVX-512 not measured: its
        code is left as it was."""
        return not self.has("avx512f")

    def onednn_takes(self, rows: int, depth: int, cols: int) -> bool:
        """Whether a float32 mm/addmm of ``[rows, depth] x [depth, cols]`` (logical shapes) runs as oneDNN's
        linear rather than MKL's sgemm (called directly, ``executors/cpu/blas.py``). oneDNN pays a fixed cost
        per call that MKL's direct call does not: its primitive (~10-30 us), and the call is Python (torch's
        dispatch, the adopted tensor) where an sgemm runs inside the native launch sequence
        (``executors/cpu/native_sequence.py``). Its advantage is its AVX-512 kernels, which only show on
        products big enough to hide that cost.

        With AVX-512: from :data:`ONEDNN_MIN_MACS_AVX512` multiply-adds. Zen 4, 2026-12-03, interleaved in one
        process (``benchmarks/bench_products.py``), oneDNN's product adopted (no copy) against MKL, 1 / 2
        threads: the small classifier's products lose (512 x 64 x 64 1.33x / 1.30x, 512 x 64 x 192 1.01x /
        1.12x, 512 x 128 x 64 1.14x / 1.07x;
        in the training step, where each breaks the native sequence, its AdamW step 1.22x -> 1.06x eager's time
        at 1 thread, 1.43x -> 1.16x at 2), 512 x 256 x 256 (33M) is even (0.97 / 0.94), and from 134M they
        win: 1024 x 256 x 512 0.96 / 0.92, 2048 x 512 x 512 0.86 / 0.88, 256 x 1024 x 4096 0.74 / 0.61. (The
        Zen 4 of sessions 1-4 measured 45 -> 25 ms on 256 x 1024 x 4096, and took oneDNN from 2M
        multiply-adds, which sent every product of the classifier there.) Without AVX-512 MKL is as fast or
        faster at up to ~270M multiply-adds (Zen 3, 2026-12-02: [1024, 256] x [256, 256] 1.06 ms against
        oneDNN's 1.78, 2 threads), and from there on the second factor (a linear's weight) decides (Zen 3, 2
        threads, 2026-12-03, interleaved in one process): with a 1-4 MB one MKL wins, [2048, 2048] x [2048, 512]
        23.9 ms against 31.4, [2048, 512] x [512, 2048] 24.8 against 26.6, [2048, 512] x [512, 512] 6.1 against
        6.9 (the transformer block of bench_models.py: 0.91x -> 0.99x eager); with a 16 MB one oneDNN wins on a
        busy host, [256, 1024] x [1024, 4096] 32.0 ms against 46.4, [256, 4096] x [4096, 1024] 32.2 against
        40.0 (quiet: 15.6 against 15.2, 14.3 against 13.3). :data:`ONEDNN_MIN_WEIGHT_BYTES` lies between the
        two."""
        macs = rows * depth * cols
        if self.has("avx512f"):
            return macs >= ONEDNN_MIN_MACS_AVX512
        return macs >= 1 << 29 and depth * cols * 4 >= ONEDNN_MIN_WEIGHT_BYTES

    @property
    def online_exp_chunk_lines(self) -> int:
        """Cache lines of x per chunk of the online log-sum-exp's exponential loop (``codegen/llvm/online.py``):
        each chunk is a loop of constant length after the prefetches of its lines in the next block
        (``prefetch.chunk_loop``); 0: the block's exponentials in ``prefetch.spread_loop``'s groups of
        :data:`MEMORY_BURST_LINES` lines, each a loop of run-time length (a vector loop, its remainder and
        the math's constants loaded again per group).

        With AVX-512: 8 lines (128 float32, two iterations of four zmm vectors, the constants in registers,
        one horizontal add per chunk). Zen 4, cross-entropy's forward [512, 32000], interleaved in one process
        (``benchmarks/bench_cross_entropy.py``, session 18): 0.89-0.94 of the groups' time when memory was
        slow (the groups at 5.3-6.0 ms at 1 thread, 3.0 at 2) and 0.99-1.00 when it was fast (4.6 / 2.3 ms);
        chunks of 4 lines 1.00-1.06, 2 lines 1.18-1.25 (a horizontal add per 64 or 32 elements), 16 lines
        0.91-1.04, 32 lines 0.97-1.15.

        With AVX2: 32 lines (512 float32, two chunks per 1024-element block; the loop spills a few constants and
        partial sums with 16 registers either way, the constant length drops the groups' remainder loops and
        reloads). Zen 3, the same A/B (session 20 expavx2), against the groups: 32 lines 0.88-1.00 at 2 threads
        and 0.91-0.98 at 1 (three runs, seven builds; the least where memory was fast), 16 lines 0.94-0.97 /
        0.955-0.976 (three runs), 8 lines 1.01-1.04 / 1.02, 4 lines 1.12-1.22, 64 lines (one chunk per block)
        1.02-1.04. The row through ``torch.compile`` did not show it (0.98-1.01, two runs of 31 and 61 rounds)."""
        return 8 if self.has("avx512f") else 32

    @property
    def streamed_map_prefetch_pieces(self) -> int:
        """Bursts of ``MEMORY_BURST_LINES`` lines ahead that a streamed map stage computing a transcendental per
        element (``_map_stage``: pieces of :attr:`streamed_map_piece_lines` lines through a stack buffer, written
        with non-temporal stores; cross-entropy's gradient) prefetches its inputs' lines, a burst before each piece
        (``prefetch.emit_prefetch_pieces_ahead``); 0: none, the hardware's prefetchers alone. Without AVX-512: 2.
        Zen 3, cross-entropy's backward kernel [512, 32000] against none, two builds each, interleaved medians of
        61-101 rounds (``benchmarks/bench_cross_entropy.py --variants pf0,main``, three runs): 0.83-0.93 at 2
        threads, 0.82-0.88 at 1 (1 piece ahead 0.89-0.97, 3 and 4 as 2); the whole fwd+bwd row through
        torch.compile 0.956 / 0.977 (``--row``). With AVX-512: 0 (not measured: its code is unchanged).
        docs/performance-history.md, session 23 softmax23."""
        return 0 if self.has("avx512f") else 2

    @property
    def streamed_map_piece_lines(self) -> int:
        """Lines of a piece of a streamed map stage computing a transcendental per element (``_map_stage``), for
        float32 outputs: each piece is computed into a stack buffer, then written out with non-temporal stores.
        Without AVX-512: 2 (32 float32, one vector iteration of the interleaved math loop), so that the stores
        spread through the math; in 16-line pieces the core waited on them (Zen 3, cross-entropy's backward
        [512, 32000] at 1 thread: 17% of its samples on the copy loop after its `vmovntps`). Zen 3, that kernel
        against 16 lines, two builds each, interleaved medians of 21-41 rounds (``bench_cross_entropy.py
        --variants burst16,main``, five runs): 0.85-0.96 at 2 threads, 0.94-0.98 at 1; 4 lines 0.90-1.03 / 0.96-0.97,
        8 lines 0.95-1.00 / 0.94; sigmoid, exp and tanh over [4096, 4096] 0.95-0.995 (session 25 xent25). With
        AVX-512, and 16-bit outputs (not measured): ``MEMORY_BURST_LINES``."""
        return MEMORY_BURST_LINES if self.has("avx512f") else 2

    @property
    def sums_online_exponentials_apart(self) -> bool:
        """Whether the online log-sum-exp (``codegen/llvm/online.py``) stores each whole chunk's exponentials
        into a buffer on the stack and sums them in a loop of its own (the same additions in the same order:
        the same bits) instead of in the exp loop: without AVX-512, where the exp loop's four interleaved chains
        and the polynomial's constants fill the 16 registers and the four partial sums beside them spilled
        (Zen 3: 101 instructions per 32 elements, 10 of them stack accesses, 12 broadcasts; session 20 expavx2),
        as softmax's sum of its row cache is apart (``stages._Reducer._sums_row_cache_apart``). With AVX-512's
        32 registers the sums fit in the loop: its code is unchanged. Zen 3, cross-entropy's forward kernel
        [512, 32000] against the sums in the loop, two builds each, interleaved medians of 101-151 rounds
        (``benchmarks/bench_cross_entropy.py --variants inloop,main``, three runs): 0.959-0.988 at 2 threads,
        0.962-0.993 at 1 (the exp loop: 93 instructions per 32 elements and no spill, the sum's loop 7 more,
        against 104 with 8 stack accesses); the whole fwd+bwd row through torch.compile does not resolve it
        (its runs spread +-5%; docs/performance-history.md, session 23 softmax23)."""
        return self.vector_registers < 32

    @property
    def online_block_max_without_nan_bits(self) -> bool:
        """Whether the online log-sum-exp's block max loops run without the amax's NaN bits (an and and a umax
        per vector beside its vmaxps), the row taken again with them where its total says it may hold a NaN
        (``online.online_total``: the same bits in every case). Without AVX-512. Zen 3, cross-entropy's forward
        kernel [512, 32000] against the NaN bits, two builds each, interleaved medians of 41 rounds
        (``bench_cross_entropy.py --variants nanbits,main``, two runs): 0.94-1.01 at 2 threads, 0.93-0.95 at 1
        (the bare loop without the retake: 0.94-0.98 and 0.96-0.97 in four runs; session 25 xent25). With
        AVX-512: false (not measured: its code is unchanged)."""
        return not self.has("avx512f")

    @property
    def polynomial_interleave(self) -> int:
        """Vector iterations a loop computing polynomial math runs side by side (``loop_hints.py``): 4 with AVX2,
        2 with AVX-512, the same 32 float lanes in flight (Zen 4 runs a 512-bit op as two 256-bit halves).
        On Zen 4, 2 against 4, three interleaved A/B runs: cross-entropy fwd+bwd 0.95-0.99 at 1 and 2 threads,
        softmax on L2-resident rows 0.97-0.99 at 1 thread, the memory-bound rows within the noise (0.95-1.07);
        8 was 1.09x slower (session 19 softmax1t, ``benchmarks/bench_math_interleave.py``). On Zen 3 (AVX2), two
        runs against 4 (session 20 expavx2): 2 slower on softmax and gelu (softmax [4096, 1024] 1.07-1.32,
        gelu*sigmoid 1.09-1.14, L2-resident softmax 1.07-1.09; cross-entropy 0.98-0.99), 8 slower on
        gelu*sigmoid (1.04-1.06) and on softmax [4096, 1024] at 1 thread (1.05-1.09), faster on L2-resident
        softmax at 1 thread only (0.93-0.96; 0.90 and 1.05 at 2), cross-entropy even (0.98-1.01): 4 stays."""
        return 2 if self.has("avx512f") else 4

    @property
    def vector_registers(self) -> int:
        """Vector registers the code generator can keep values in (16 ymm with AVX2, 32 zmm with AVX-512)."""
        return 32 if self.has("avx512f") else 16

    @property
    def matmul_tile_vectors(self) -> int:
        """Vectors of columns per register tile of a generated product (``small_matmul.py``,
        ``SmallMatmul.column_blocks``; its rows fill the other registers: 2 vectors x 6 rows with AVX2's 16);
        0: the width whose tiles do the most multiply-adds per load. With AVX-512: 0 (Zen 4, 4 x 6 tiles 105
        GFLOP/s against 88 in 8 x 2). Without AVX-512: 2, MKL's AVX2 kernel's shape. Zen 3, 2026-12-04,
        ``benchmarks/bench_products.py --tiles``, the classifier's products generated / ATen's sgemm, 1 thread
        / 2 threads, quiet host (MKL at 72-82 GFLOP/s on a core, 2 x 6 tiles at 79-93): forward and data
        products in 2 x 6 tiles 0.83-0.91 / 0.82-0.93, in session 10's 4 x 2 (the fewest blocks of 4 vectors)
        0.80-1.05 / 0.82-1.02, scored (3 x 4 and a narrower rest) 0.82-0.92 / 0.82-0.94; weight gradients (A
        read down columns) 0.84-0.99 / 0.90-0.96, 4 x 2 1.42-1.55 / 1.15-1.47, scored 0.94-1.12 / 0.90-1.07
        (16 accumulators, vectors and broadcast: every register). A busy host's run ranked them alike."""
        return 0 if self.has("avx512f") else 2

    @property
    def small_bmm_max_macs(self) -> int:
        """The most multiply-adds per batch item for which a float32 bmm runs as generated code
        (``codegen/llvm/small_matmul.py``) instead of MKL's ``sgemm_batch``, whose fixed cost per product
        dominates small ones. Zen 3, 2026-12-02, ``benchmarks/bench_smallbmm.py``, us per bmm, generated vs
        sgemm_batch (1 thread / 2 threads): 128 x 16^3 24 vs 71 / 26 vs 47 (A@B; A@B^T 38 vs 86 / 29 vs 49);
        64 x 32^3 57 vs 83 / 74 vs 94; 48 x 48^3 141 vs 179 / 113 vs 163; 32 x 64^3 282 vs 333 / 184 vs 243
        (A^T@B: 314 vs 324 / 217 vs 220, even); from 96^3 MKL's blocked kernels win (16 x 96^3 489 vs 475 /
        378 vs 358, 8 x 128^3 853 vs 587 / 504 vs 405). So up to 64^3. In 2 x 6 tiles (2026-12-04,
        :attr:`matmul_tile_vectors`) as before: 32 x 64^3 0.83-0.87 / 0.83-0.99 of sgemm_batch's time, 48 x
        48^3 0.74-0.81 / 0.62-0.85, 64 x 32^3 0.72-0.79 / 0.73-0.78. Not measured with AVX-512 (twice the
        lanes and registers: the generated tiles scale, MKL's kernels too): the same bound."""
        return 64 * 64 * 64

    @property
    def small_mm_max_macs(self) -> int:
        """The most multiply-adds for which a float32 mm/addmm runs as generated register tiles
        (``codegen/llvm/small_matmul.py``, rows as the batch) instead of MKL's sgemm (or oneDNN, from
        :data:`ONEDNN_MIN_MACS_AVX512`). With AVX-512: Zen 4, 2026-12-03, ``benchmarks/bench_products.py``,
        generated / direct sgemm, 1 thread / 2 threads: the classifier's products of 2.1M-6.3M multiply-adds
        0.64-0.80 / 0.58-0.80 (MKL at 68-87 GFLOP/s on one core, the tiles at 96-110); 8M-33.6M
        (``--mid``: x @ W^T + b, dY @ W, dY^T @ X, K up to 1024) 0.72-0.86 / 0.72-0.84 (oneDNN 0.85-1.17 /
        0.83-1.68). Not measured between 2^25 and oneDNN's 64M: MKL there.
        Without AVX-512 (2 x 6 tiles, :attr:`matmul_tile_vectors`): Zen 3, 2026-12-04, the same harness,
        generated / ATen's sgemm (the direct sgemm within 0.96-1.17 of ATen), 1 thread / 2 threads: the
        classifier's products of 2.1M-6.3M 0.83-0.99 / 0.82-0.96 (a busy host: 0.85-1.01 / 0.68-0.95);
        8.4M-16.8M linears (``--mid``) 0.90-0.95 / 0.92-1.04; at 33.6M the data products 0.87-0.96 / 0.86-1.01
        but the weight gradients (A read down columns, K 512-1024) 1.19-1.38 / 1.16-1.27. Weight gradients
        between 6.3M and 33.6M not measured: :data:`SMALL_MM_MAX_MACS_AVX2`, every product of the classifier
        (its AdamW step 0.73 -> 0.71 of eager's time at 1 thread, 0.74 -> 0.73 at 2, ``bench_launch.py
        --ab-mm``)."""
        return SMALL_MM_MAX_MACS_AVX512 if self.has("avx512f") else SMALL_MM_MAX_MACS_AVX2

    @property
    def machine_features(self) -> str:
        """The feature string for LLVM's target machine: the CPU's features with the vector width above
        made explicit (``prefer-256-bit`` is a tuning flag LLVM sets per CPU model)."""
        if self.vector_bits == 512:
            return f"{self.features},-prefer-256-bit" if self.features else "-prefer-256-bit"
        return self.features


@dataclass(frozen=True, slots=True)
class HostCpu(CpuTarget):
    """The CPU generated code runs on: a :class:`CpuTarget` with the process's triple and usable cores."""

    triple: str = ""  # LLVM's process triple, e.g. x86_64-unknown-linux-gnu
    cores: int = 1  # CPUs this process may run on

    @property
    def fingerprint(self) -> str:
        """Triple, CPU name, features and last-level cache size: code compiled for one fingerprint runs only on
        that CPU (the cache size decides which outputs are streamed: :meth:`CpuTarget.streams_outputs`)."""
        return f"{self.triple} {self.name} {self.features} llc={self.last_level_cache_bytes}"


_LOCK = threading.Lock()
_HOST: list[HostCpu] = []
_ASKED: list[tuple[str, str, str]] = []  # LLVM's own answer, when this process asked it (llvm_answer_asked)


#: LLVM's answer about the host: (CPU name, feature string, process triple)
LlvmHost = tuple[str, str, str]


def host_cpu(llvm_answer: LlvmHost | None = None) -> HostCpu:
    """This machine's CPU (read on first use, then cached). ``llvm_answer``: what :func:`llvm_host` answered in
    an earlier process on this machine (remembered by the compile cache, keyed by :func:`llvm_host_identity`),
    used instead of asking LLVM when the CPU is not yet read in this process."""
    with _LOCK:
        if not _HOST:
            if llvm_answer is None:
                llvm_answer = llvm_host()
                _ASKED[:] = [llvm_answer]
            name, features, triple = llvm_answer
            _HOST.append(HostCpu(name=name, features=features, last_level_cache_bytes=last_level_cache_bytes(),
                                 triple=triple, cores=available_cores()))
        return _HOST[0]


def llvm_answer_asked() -> LlvmHost | None:
    """What LLVM answered when :func:`host_cpu` asked it in this process (None when it did not: the answer was
    given, remembered by an earlier process)."""
    return _ASKED[0] if _ASKED else None


def host_cpu_known() -> bool:
    """Whether this process has read its CPU already (:func:`host_cpu` then asks nothing)."""
    return bool(_HOST)


#: The lines of /proc/cpuinfo that say which CPU this is and what it can do (x86-64; aarch64): what LLVM's
#: answer depends on, read from CPUID (and XGETBV: the kernel drops the flags of state it does not enable) by the
#: kernel as by LLVM. Not the clock, microcode, core or package numbers.
CPU_IDENTITY_FIELDS = frozenset({"vendor_id", "cpu family", "model", "model name", "stepping", "flags",
                                 "CPU implementer", "CPU architecture", "CPU variant", "CPU part", "CPU revision",
                                 "Features"})


def llvm_host_identity(cpuinfo: Path = Path("/proc/cpuinfo")) -> str | None:
    """A sha256 of what :func:`llvm_host`'s answer depends on, read without LLVM (~0.1 ms): the first CPU's
    identity and feature flags as the kernel reports them (:data:`CPU_IDENTITY_FIELDS`), the machine and
    platform, and llvmlite's shared library (path, size, mtime, inode: another LLVM may name CPUs and features
    differently). None where the kernel does not describe the CPU so (not Linux) or the library is not found:
    then LLVM is asked. Another CPU model, one with other flags (an AVX2 host sharing a cache directory with an
    AVX-512 one, a VM migrated to a host the hypervisor presents differently: its flags and model are what the
    guest's CPUID says, which is also what LLVM reads) or another library is another identity."""
    fields = _first_cpu_fields(cpuinfo)
    library = _llvmlite_library_path()
    if not fields or library is None:
        return None
    try:
        st = library.stat()
    except OSError:
        return None
    uname = os.uname()
    lines = [f"{key}: {value}" for key, value in fields] + [
        f"platform: {sys.platform} {uname.sysname} {uname.machine}",
        f"library: {library} {st.st_size} {st.st_mtime_ns} {st.st_ino}"]
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()


def _first_cpu_fields(cpuinfo: Path) -> list[tuple[str, str]]:
    """The identity lines of the first processor's block of ``cpuinfo`` (only that block is read: the file
    grows with the cores, and its other blocks repeat the same CPU), or [] when it cannot be read."""
    text = b""
    try:
        with open(cpuinfo, "rb") as f:
            while b"\n\n" not in text:
                chunk = f.read(16384)
                if not chunk:
                    break
                text += chunk
    except OSError:
        return []
    found = []
    for line in text.split(b"\n\n")[0].decode("utf-8", "replace").splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() in CPU_IDENTITY_FIELDS:
            found.append((key.strip(), " ".join(value.split())))
    return found


def llvm_host() -> LlvmHost:
    """LLVM's host CPU name, feature string (as llvmlite's ``FeatureMap.flatten()`` makes it: ``+name`` or
    ``-name``, sorted by name) and process triple.

    Asked of llvmlite's shared library directly (the three C functions its bindings wrap): importing the bindings
    costs ~25-45 ms, which a process that only loads cached kernel libraries would pay for three strings; loading
    the library itself costs ~7-10 ms. Through the bindings when the library is not where llvmlite keeps it."""
    library = _llvmlite_library()
    if library is None:
        import llvmlite.binding as llvm

        return llvm.get_host_cpu_name(), llvm.get_host_cpu_features().flatten(), llvm.get_process_triple()
    name, triple = _llvm_string(library, "LLVMPY_GetHostCPUName"), _llvm_string(library, "LLVMPY_GetProcessTriple")
    found = _llvm_string(library, "LLVMPY_GetHostCPUFeatures")
    flags = sorted((feature[1:], feature[0]) for feature in found.split(",") if feature)
    return name, ",".join(sign + feature for feature, sign in flags), triple


def _llvmlite_library() -> ctypes.CDLL | None:
    """llvmlite's shared library (the one its bindings load, so the process maps it once), or None."""
    path = _llvmlite_library_path()
    try:
        return None if path is None else ctypes.CDLL(str(path))
    except OSError:
        return None


def _llvmlite_library_path() -> Path | None:
    """Where llvmlite keeps its shared library (found without importing llvmlite), or None."""
    try:
        spec = importlib.util.find_spec("llvmlite")  # finds the package without importing it
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    name = {"darwin": "libllvmlite.dylib", "win32": "llvmlite.dll"}.get(sys.platform, "libllvmlite.so")
    path = Path(list(spec.submodule_search_locations)[0]) / "binding" / name
    return path if path.is_file() else None


def _llvm_string(library: ctypes.CDLL, function: str) -> str:
    """The string LLVM C-API wrapper ``function`` of llvmlite writes to its ``char **`` argument (then freed)."""
    out = ctypes.c_char_p()
    call = getattr(library, function)
    call.argtypes = [ctypes.POINTER(ctypes.c_char_p)]
    call(ctypes.byref(out))
    try:
        return (out.value or b"").decode()
    finally:
        if out.value is not None:
            library.LLVMPY_DisposeString(out)


def last_level_cache_bytes(cpu_dir: Path = Path("/sys/devices/system/cpu/cpu0/cache")) -> int:
    """The size of the largest data or unified cache of CPU 0 as the OS reports it (Linux sysfs: ``index*/size``,
    e.g. "32768K"); 0 where the OS does not say."""
    sizes = [0]
    try:  # listdir, not Path.glob: its first use costs ~0.25 ms (listdir: 0.05), on every warm start
        for index in (cpu_dir / name for name in os.listdir(cpu_dir) if name.startswith("index")):
            if (index / "type").read_text().strip() in ("Data", "Unified"):
                sizes.append(_cache_size_bytes((index / "size").read_text().strip()))
    except (OSError, ValueError):
        return 0
    return max(sizes)


def _cache_size_bytes(text: str) -> int:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(text[:-1]) * units[text[-1]] if text and text[-1] in units else int(text)


def available_cores() -> int:
    """CPUs this process may run on (its affinity mask where the OS has one)."""
    try:
        return max(len(os.sched_getaffinity(0)), 1)
    except AttributeError:  # not Linux
        return os.cpu_count() or 1
