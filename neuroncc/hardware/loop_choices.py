"""How the CPU code generator shapes its row loops on a CPU: each decision a property, measured where it was
made (the numbers and the session in its docstring), read through :class:`~neuroncc.hardware.host.CpuTarget`,
which takes them from :class:`LoopChoices`.

These are the choices that differ between CPUs of one instruction set family only by what was measured: how a
bf16 value is rounded, which rows a loop keeps widened or cached, where prefetches and delayed writes go, how an
online log-sum-exp is chunked, how many polynomial evaluations are interleaved. The CPU's facts themselves (its
vector width, registers, the products it hands to oneDNN, its last-level cache) stay in ``host.py``. A choice
made on AVX2 alone says so and keeps AVX-512's code as it was where it was not measured there.

May import: errors and this package (``host`` imports this module, so not ``host``).
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


class LoopChoices:
    """The row-loop decisions of :class:`~neuroncc.hardware.host.CpuTarget` (its base class): each reads the
    CPU's features through ``has`` and ``vector_bits``, which the target defines."""

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

    @property
    def rounds_bf16_in_word_lanes(self) -> bool:
        """Whether a pair of float32 results is rounded to bf16 and packed in 16-bit lanes (AVX-512 BW's unsigned
        word compare into a mask, masked word add and two-table word permute: 5 vector instructions per 32
        results against 9 in 32-bit lanes; ``codegen/llvm/bf16_words.py``). AVX2 has none of the three."""
        return self.has("avx512bw")

    @property
    def rounds_bf16_pairs_by_conversion(self) -> bool:
        """Whether a pair of float32 results rounded in 16-bit lanes (:attr:`rounds_bf16_in_word_lanes`) is rounded by
        AVX-512 BF16's ``vcvtne2ps2bf16`` and one ``vpermw`` instead, a pair of vectors holding a denormal float32
        (which the instruction takes as zero) by the 16-bit lanes' rounding (``codegen/llvm/bf16_words.py``): per 32
        results 5 instructions (two ``vfpclassps`` and a ``kortestw`` among them) where the 16-bit lanes take 7 (two
        ``vpermt2w``). The same bits. Intel's AVX-512 cores (:meth:`_intel_avx512`; session 32 math32, Granite Rapids
        class, ``bench_bf16_words.py --switch pair-conversion``, two builds each, interleaved medians of 41 rounds):
        the kernels of bf16 LayerNorm [8192, 1024] 0.946 / 0.957 of the time at 1 thread (0.966 / 1.023 at 2),
        softmax [4096, 1024] 0.963 / 0.965 (1.002 / 1.002 at 2), gelu(x*w+b)*sigmoid(x) with its tables 0.973 / 0.983
        (0.958 / 0.990 at 2); with its polynomials instead (not this CPU's code since its tables) 1.06-1.08 at 1
        thread in one run of 25 rounds. Other AVX-512 CPUs (Zen 4 has BF16) keep their code: not measured there."""
        return self.has("avx512bw") and self.has("avx512bf16") and self._intel_avx512()

    @property
    def rounds_bf16_cast_pairs_by_conversion(self) -> bool:
        """Whether a pair of casts' roundings to bf16 (not ops' bf16 results: ``scalars.Rounding.op_result``) is rounded
        by ``vcvtne2ps2bf16`` as :attr:`rounds_bf16_pairs_by_conversion` rounds every pair (``bf16_words.py``: the same
        bits), on every CPU with AVX-512 BF16. Zen 4 (session 33 norm33, ``bench_bf16_words.py --switch pair-conversion
        --force``, two builds each, interleaved medians of 25-31 rounds): bf16 LayerNorm [8192, 1024]'s kernel 0.949 /
        0.949 of the time at 1 thread, 0.948 / 0.986 at 2; bf16 softmax [4096, 1024] 0.980 / 1.011 and 1.020 / 1.004
        (even); but bf16 gelu(x*w+b)*sigmoid(x), whose words are op results in its polynomial loop, 1.16 / 1.16 at 1
        thread and 1.13 / 1.13 at 2 (as math32 found on Intel with the polynomials), so op results keep the 16-bit
        lanes there. (Its tables, :attr:`looks_up_bf16_unary_math`, are 1.17-1.18x slower on Zen 4, whose
        ``vpgatherdd`` is slow: not taken.) A module holding both kinds of words has both pair functions."""
        return self.has("avx512bw") and self.has("avx512bf16")

    @property
    def rounds_bf16_in_word_lanes_with_blends(self) -> bool:
        """Whether, without AVX-512 BW (``rounds_bf16_in_word_lanes``), a pair of float32 results is rounded to bf16
        and packed in 16-bit lanes with AVX2's instructions (``codegen/llvm/bf16_words.py``, 8 pairs a call): per pair
        of vectors the high halves in word order by ``vpsrld`` + ``vpblendw``, the low halves by ``vpslld`` +
        ``vpblendw``, the parity or'ed into the low half, the carry by ``vpmaxuw`` + ``vpcmpeqw``, a ``vpsubw``: 9
        vector instructions and 2 shifts where the 32-bit rounding takes 10 and 3. The same bits. Taken for casts'
        roundings without the NaN case (bf16 LayerNorm's and softmax's outputs). Zen 3 (session 25 round25,
        ``bench_bf16_words.py --switch blended-lanes``, two builds each, 61-301 interleaved rounds): bf16 LayerNorm
        [8192, 1024]'s kernel 0.981 of the time at 1 thread (0.976-0.997, ten A/Bs) and 0.986 at 2 (0.978-1.009, nine),
        bf16 softmax [4096, 1024] 0.993 at both (0.984-0.998); on bf16 row (a)'s op result (its gelu*sigmoid) 1.006
        at 1 thread and 1.007 at 2: not taken there. AVX-512 keeps its code (not measured there)."""
        return self.has("avx2") and not self.has("avx512f")

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
    def looks_up_bf16_library_math(self) -> bool:
        """Whether a unary op of a bf16 value with a bf16 result that the C library computes (sin, cos, tan, atan,
        expm1, log1p: ``mathlib.LIBM``, one scalar call per lane on every CPU) reads its result from a table as
        :attr:`looks_up_bf16_unary_math`'s ops do (``codegen/llvm/bf16_tables.py``: the same bits). Zen 3, bf16
        [4096, 1024] (session 25 lead): sin 1.41 / 0.71 ms at 1 / 2 threads against 35.9 / 18.0 with the calls
        (eager 4.26 / 2.11), cos, expm1, log1p and atan alike: 0.023-0.044 of the time; per element 0.28 ns
        against 3.0 (sin) and 9.3 (expm1) on normal inputs, 0.6 against 3.7 and 4.8 with the table out of L1
        (``bench_math_interleave.py --lookup sin,expm1``). Every CPU: the calls it replaces are as scalar with
        AVX-512 (not measured there), and a table read is a load."""
        return True

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
        (every exponent: the 128 KiB table out of L1) make sigmoid's read 0.99-1.11x its polynomial. Intel's AVX-512
        cores (:meth:`_intel_avx512`; session 32 math32, Granite Rapids class, ``bench_bf16_words.py --switch tables
        --force --rows a16``, two builds each, interleaved medians of 21 rounds, the same bits): bf16 row (a)'s kernel
        0.468 / 0.476 of the time at 1 thread, 0.468 / 0.452 at 2 (4.02 -> 1.88 ms at 1 thread, 2.43 -> 1.14 at 2).
        Other AVX-512 CPUs (Zen 4) keep their code: not measured there; so do CPUs without AVX2."""
        return (self.has("avx2") and not self.has("avx512f")) or self._intel_avx512()

    @property
    def reads_bf16_tables_by_lane_pairs(self) -> bool:
        """Whether a bf16 table read (``codegen/llvm/bf16_tables.py``) of a computed operand (gelu(x*w+b): x*w+b, not
        a word the loop loads) takes its indices out of the vector two lanes at a time: a vector variant of the
        read (``vector_variants.py``) moves each 64-bit pair of lanes to a general register (``vmovq``/``vpextrq``)
        and makes the two byte offsets by integer shifts (``bextr``/``shr``), where LLVM's per-lane form takes a
        ``vpextrw`` (2 uops on the vector pipes) per lane. The same bits. Zen 3 (session 26 a16idx26,
        ``bench_bf16_words.py --switch lane-pairs --rows a16``, two builds each, interleaved medians of 41 and 61
        rounds): bf16 row (a)'s kernel 0.971-0.984 of the time at 1 thread and 0.974-0.979 at 2 (132 -> 142
        instructions per 16 elements, 16 fewer 2-uop extracts on the vector pipes). A table read of a loaded word
        (sigmoid(x)) keeps LLVM's form, whose indices are scalar loads of x (the pairs form there: 1.08 slower).
        AVX2 only: AVX-512 keeps its code (not measured there)."""
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
    def widens_bf16_rows_again_in_the_exp_pass(self) -> bool:
        """Whether a softmax-like row loop over a bf16 row (its exp pass carrying the previous row's delayed write:
        ``delayed_writes.py``) widens the row's words again in its exp pass instead of keeping the row its max pass
        widened in a float32 row cache (:attr:`caches_widened_bf16_rows`, which bf16 LayerNorm keeps). The same
        values, so the same bits. Zen 4 stores 256 bits a cycle: the max pass's two 512-bit stores of the widened
        row per 32 elements bound it once its NaN flag is gone (:attr:`finds_bf16_row_nans_by_the_sum`), and the exp
        loop takes the shift and the and per 32 elements (and one load instead of two) for less. Alone each of the
        two is within noise, together they are faster (session 34 bfsoft34, bf16 softmax [4096, 1024]'s kernel:
        the numbers in :attr:`finds_bf16_row_nans_by_the_sum`; this alone 0.987-1.008 of the time at 1 thread,
        0.984-0.996 at 2, ``bench_bf16_words.py --switch widen-again``, two builds each, 41 rounds). Every AVX-512 CPU but Intel's (:meth:`_intel_avx512`: not
        measured there); AVX2 keeps the row its exp pass reads widened (:attr:`caches_widened_bf16_rows_for_exp`)."""
        return self.has("avx512f") and not self._intel_avx512()

    @property
    def finds_bf16_row_nans_by_the_sum(self) -> bool:
        """Whether a softmax-like row loop whose max pass reduces a bf16 row widened to float32 (bf16 softmax) finds
        its rows' NaNs by the sum as :attr:`finds_row_nans_by_the_sum` (AVX2's) does for every such loop, a NaN sum's
        row rerunning its max pass (:attr:`reruns_the_exp_pass_only_for_another_max`): the max loop 32 -> 16 vector
        instructions per 64 elements on Zen 4 with :attr:`widens_bf16_rows_again_in_the_exp_pass`. The same bits. Zen 4 (session 34 bfsoft34, bf16
        softmax [4096, 1024]'s kernel with :attr:`widens_bf16_rows_again_in_the_exp_pass`, ``bench_bf16_words.py
        --switch widen-again-nans``, two builds each, interleaved medians of 41-61 rounds, the same bits): 1 thread
        0.927 / 0.928, 0.876 / 0.873, 0.954 / 0.963, 0.964 / 0.961, 0.959 / 0.959 of the time, 2 threads 0.923 /
        0.917, 0.943 / 0.938, 0.919 / 0.919 (0.952 / 0.993 in a fourth); on outputs held 0 or 64 past a page 0.90-0.96
        at 1 thread (one build of six 1.06), 0.88-0.96 at 2; the price is a wholly -inf row's max pass
        run twice (a fully masked attention row): every row -inf 1.09 / 1.11 at 1 thread and 1.10 / 1.12 at 2, half
        of them 1.03. This alone (the widened row still stored) 0.989 / 0.997 of the time at 1 thread. Float32
        softmax keeps its flag on Zen 4 (session 33 soft33 read finding its NaNs by the sum 0.96 and 1.07 in two
        processes). Every AVX-512 CPU but Intel's (:meth:`_intel_avx512`: not measured there)."""
        return self.finds_row_nans_by_the_sum or (self.has("avx512f") and not self._intel_avx512())

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
    def writes_delayed_elements_in_the_exp_loop(self) -> bool:
        """Whether a softmax-like row pass writes the previous row's float32 outputs (``delayed_writes.py``) in its
        exp loop, each block of one vector iteration's elements (32 with AVX2) stored with non-temporal stores
        beside the block's exponentials, instead of a loop of its own before or after each group's: the write's
        loads, multiplies and stores ride in the FMA-bound exp loop's iterations (its idle load and store ports)
        instead of a loop between its groups. Zen 3 (AVX2), float32 softmax [4096, 1024]'s row through
        ``bench_bf16_words.py --switch exp-loop-write``, two builds each, the same bits (session 26 softmax26):
        1 thread 0.947 / 0.960 (41 rounds), 0.960 / 0.963 and 0.942 / 0.948 (101); 2 threads 0.951 / 0.959,
        0.962 / 0.966 and 0.953 / 0.945. Other shapes (a one-off, 61 rounds, 1 thread): [8192, 1024] 0.95, [4096,
        512] 0.95, [4096, 768] 0.92, [2048, 2048] 0.90-0.97, [1024, 4096] 1.01; [4096, 1024] 0.93-0.97 in 11 of 13
        processes and 1.06 in 2 (a placement of the process's buffers not pinned down: the input's offset in its
        page alone did not reproduce it); rows of one group (256) 0.98-1.05, so ``prefetch.spread_loop`` leaves
        those as they were. bf16 outputs (words in pairs, built: 1.04 at 1 and 2 threads) keep their write loops.
        Zen 4 (AVX-512 without FP16; session 33 soft33): the row's sum stays in the exp loop there, carried in vector
        lanes through the blocks in the group loop's own order (``reductions.LaneSums``: the same bits, NaN payloads
        too); the loop 32 elements an iteration with no stack access, 4 more instructions than the exp loop for the
        write's 2 ``vmulps`` and 2 ``vmovntps``. Float32 softmax [4096, 1024] (``bench_bf16_words.py --switch
        exp-loop-write``, two builds each, interleaved medians of 61 rounds): 1 thread 0.913 / 0.929, 0.971 /
        0.970, 0.972 / 0.955, 0.962 / 0.950, 0.930 / 0.926, 0.954 / 0.948 of the time (six runs); 2 threads 0.910 /
        0.950, 0.975 / 1.015 (a disturbed run: 2.2 ms), 0.976 / 0.970, 0.930 / 0.938. Intel's AVX-512 cores
        (:meth:`_intel_avx512`) keep their code: not measured there."""
        return self.has("avx2") and not self._intel_avx512()

    @property
    def prefetches_the_next_row_into_l2_in_the_exp_pass(self) -> bool:
        """Whether a float32 softmax-like row pass (its exp loop carries the row loop's prefetches of the next row:
        ``prefetch.carrier_stage``, ``MEMORY_BURST_LINES`` lines before each group of its elements,
        ``prefetch.spread_loop``) prefetches them with ``prefetcht2`` (locality 1) instead of ``prefetcht0`` (3): into
        the L2, leaving the L1's miss buffers to the loop's non-temporal stores of the previous row (the delayed
        write). The same instructions otherwise, the same bits. Zen 4 (AVX-512 without FP16; session 34 soft34,
        float32 softmax [4096, 1024]'s kernel, two builds each on one shared input and output, every timed call after
        a call on other buffers, the fastest and the slowest of 16 input/output pairs, interleaved medians of 41-61
        rounds): ``prefetcht2`` 0.91-1.01 of the time on the fastest pair and 0.72-0.85 on the slowest at 1 thread
        (seven runs), 0.90-1.01 / 0.70-1.07 at 2 (ten runs); ``bench_bf16_words.py --switch next-row-l2`` (fresh
        outputs, the input partly in L3 from the call before) 0.98 at 1 thread, 1.03-1.04 at 2. No prefetches at all:
        0.85-0.95 / 0.69-0.75 at 1 thread, but 0.89-1.11 / 0.69-1.19 at 2 (ten runs); ``prefetchnta`` 0.97-1.00,
        ``prefetcht1`` 1.10, two rows ahead 0.99-1.01, ``prefetcht2`` two rows ahead 0.97-1.05 / 0.83-0.84 at 1
        thread. bf16 rows (not measured) and AVX2 and Intel's AVX-512 cores (:meth:`_intel_avx512`) keep
        ``prefetcht0``."""
        return self.has("avx512f") and not self._intel_avx512()

    @property
    def finds_row_nans_by_the_sum(self) -> bool:
        """Whether a softmax-like row loop (a float max pass, then the sum of row-cached exponentials that carries the
        previous row's delayed write) takes its max without the magnitude bits that flag a NaN (two integer
        instructions per vector beside the vmaxps) and runs the row's max and exp passes once more, as before, where
        its sum is NaN (``codegen/llvm/nan_rows.py``): a NaN in the row makes the sum NaN. The same bits. Zen 3 (session 27
        softmax27; two builds each, interleaved medians of 61 rounds): float32 softmax [4096, 1024] 0.950 / 0.949 of
        the time at 1 thread, 0.952 / 0.960 at 2, bf16 0.975 / 0.977 and 0.965 / 0.966 (``bench_bf16_words.py
        --switch nans-by-sum``); the kernel step (``variant_ab.py``) 0.965 (float32) and 0.956 (L3-resident [256,
        1024] x16) at 1 thread, 0.967 / 0.976 at 2. The max loop is 7 instructions per 32 elements instead of 19.
        The price was a row that is wholly -inf (a fully masked attention row: its sum is NaN): it ran both passes
        twice, ~2.4x a plain row's time (the lead, separate processes: [4096, 1024] all rows masked 3.45-3.50 ms
        against the old code's 1.88-2.02 at 1 thread, 1.73-1.95 against 1.10-1.16 at 2; half of them masked
        2.75-2.86 / 1.42-1.63), the old code's time the same for any row; since session 28 it runs its max pass
        again but not its exp pass (``reruns_the_exp_pass_only_for_another_max``: ~1.2x). AVX2 only (AVX-512 keeps
        its code: not measured there)."""
        return self.has("avx2") and not self.has("avx512f")

    @property
    def reruns_the_exp_pass_only_for_another_max(self) -> bool:
        """Whether a row whose sum is NaN (``finds_row_nans_by_the_sum``) runs only its max pass again, with the NaN
        flag, and its exp pass again only where that max differs in bits from the flagless one (a NaN in the row
        the flagless max did not take; ``nan_rows.redo_nan_row``) instead of both passes again. A row whose sum is
        NaN without a NaN in it (wholly -inf: a fully masked attention row; +inf in it) has the same max both ways,
        so the same exponentials and sum. The same bits. Zen 3 (session 28 softmax28, ``bench_bf16_words.py --switch
        max-rerun --masked F``, two builds each, interleaved medians of 25 rounds): [4096, 1024] with every row -inf
        0.613 / 0.615 of the time at 1 thread (float32; bf16 0.619 / 0.618), 0.622 / 0.624 at 2 (bf16 0.609 /
        0.614); half of the rows -inf 0.742 / 0.743 and 0.724 / 0.730 (bf16 0.745-0.763); no row masked 0.98-1.02
        (the builds' spread). A wholly -inf row now costs ~1.2x a plain row (1.93 against 1.61 ms at 1 thread). The
        price: the changed cold path moved LLVM's register allocation of the fused exp loop (the same 98
        instructions, 8 broadcasts instead of 9-10, one scale's vpslld late), 4.5% slower alone on L1-resident data,
        so plain float32 rows at 1 thread 1.006-1.018 of the time (three runs of 61 rounds; off 2 0.996-1.002), at
        2 threads 0.995-0.999; bf16 0.994-1.023 (noise). No nesting of the branch tried gave the former loop back.
        Off: the former code (its IR hash a08679d2b3be2f42). Zen 4's bf16 rows
        (:attr:`finds_bf16_row_nans_by_the_sum`) take it too (not measured apart there)."""
        return self.finds_row_nans_by_the_sum or self.finds_bf16_row_nans_by_the_sum

    @property
    def caches_variance_deviations(self) -> bool:
        """Whether a variance's deviation pass over a widened bf16 row stores x - mean into a float32 row cache that a
        later stage's x - mean (bf16 LayerNorm's write pass) loads (``refine.deviation_row_cache``) instead of
        widening x and subtracting again: the write loop 20 -> 16 vector instructions per 16 elements (llvm-mca 7.3 ->
        5.4 cycles) for 8 stores per 64 in the deviation loop. Zen 3, bf16 LayerNorm [8192, 1024]'s kernel 0.852-0.854
        of the time at 1 thread, 0.904-0.907 at 2 (session 25 bf16ln25). Zen 4 (AVX-512 without FP16: not
        :meth:`_intel_avx512`) takes it with :attr:`means_a_row_early` and :attr:`places_write_buffers_past_the_output`
        (session 33 norm33, scratch A/B of bf16 LayerNorm [8192, 1024]'s kernel, two builds each, interleaved medians
        of 31 rounds, the same bits): the three together 0.87-0.88 of the time at 1 thread and 0.87-0.90 at 2 on fresh
        outputs, 0.60-0.67 / 0.65-0.91 on held outputs 0 and 64 bytes past a page (where the widened row cache's loads
        were 4K-aliased with the queued stores); the deviations alone 0.99-1.01; with
        :attr:`rounds_bf16_cast_pairs_by_conversion` against main's code 0.76-0.87 (three runs, 41-61 rounds). Intel's
        AVX-512 cores keep their code (not measured there)."""
        return self.has("avx2") and not self._intel_avx512()

    @property
    def places_write_buffers_past_the_output(self) -> bool:
        """Whether a row loop whose write pass streams its output rows and loads the variance's cached deviations
        (``caches_variance_deviations``: bf16 LayerNorm) places the float32 stack buffers that write loop reads (the
        deviations, the widened weight and bias) at run time, 1 KiB past the output row modulo 2 KiB
        (``row_buffers.write_buffer_shift``), instead of where the stack frame puts them (0 and 4032 past a 4 KiB
        boundary). The write loop's loads are checked against its non-temporal stores, which wait in the store
        queue for a write-combining buffer, by their low 12 bits (4K aliasing): a load 32 to ~300 bytes past a
        queued store waits for it. With the frame's placement that was every output starting 0-300 bytes past a
        2 KiB boundary or 32 before one (the ``neuron`` device's large blocks start on a page, torch's first large
        tensors 64 past one, heap blocks anywhere). Zen 3, bf16 LayerNorm [8192, 1024]'s kernel on an output at a
        chosen offset (session 26 bf16ln26, ``bench_bf16_words.py --switch write-buffers --output-offset``, two
        builds each, 61 interleaved rounds): 0 past a 4 KiB boundary 0.80-0.87 of the time at 1 thread and
        0.81-0.90 at 2, 64 past 0.82-0.87 and 0.85, 128 past 0.92 and 0.87, 2016 past 0.70 (1 thread), 2048 past
        0.81; at 448, 896, 1088 and 1280 past and on the benchmarks' heap outputs 0.98-1.02 (the builds' spread);
        the same bits. Zen 4: with :attr:`caches_variance_deviations` (its numbers); Intel's AVX-512 cores keep
        their code (not measured there)."""
        return self.has("avx2") and not self._intel_avx512()

    @property
    def places_delayed_word_write_buffers_past_the_output(self) -> bool:
        """Whether a softmax-like row loop whose delayed write (``delayed_writes.py``) rounds its outputs to bf16
        words in a loop of its own places its row caches (the two copies of the exponentials that write loop loads,
        and the widened row) at run time 1 KiB past the output rows modulo 2 KiB, as
        ``places_write_buffers_past_the_output`` does for bf16 LayerNorm (``row_buffers.write_buffer_shift``),
        instead of on a 4 KiB boundary: the write loop's loads of the exponentials were 4K-aliased with its own
        queued non-temporal stores wherever the output rows started a little past a 2 KiB boundary, where torch's
        large fresh tensors often land (64-256 past one, with glibc's defaults as with the benchmarks' settings).
        Zen 3, bf16 softmax [4096, 1024]'s kernel into an output at a chosen offset past a 4 KiB boundary
        (``bench_bf16_words.py --switch word-write-buffers --output-offset``, two builds each, 41 interleaved rounds;
        session 29 bf16sm29): 64 past 0.94 of the time at 1 and 2 threads, 2112 past 0.95 (1 thread), 2176 past
        0.96 / 0.975 (1 / 2 threads); 0, 128, 512 and 1088 past and heap outputs 0.97-1.01 (the builds' spread).
        The same loops and bits. AVX-512 not measured: its code is left as it was."""
        return self.has("avx2") and not self.has("avx512f")

    @property
    def places_write_buffers_past_partial_period_rows(self) -> bool:
        """Whether ``places_write_buffers_past_the_output`` also places the write loop's buffers where the output rows
        are not whole 2 KiB periods but whole 512 or 1024 bytes (bf16 rows of 768, 1280, 1536, 2560 columns): those
        rows start at offsets that step through the multiples of that period modulo 4 KiB, so no one place is 1 KiB
        from all of them; the buffers start ``period / 2 - 128`` bytes past every output row modulo the period
        (``row_buffers.write_buffer_shift``), between the ~330-byte aliasing window (a load 32 to ~300 bytes past a
        queued store) of one row and the next. Zen 3 (session 27 bf16ln27, 41 interleaved rounds, the kernel
        called on outputs at a chosen offset past a 4 KiB boundary): bf16 LayerNorm [8192, 768]'s kernel at 1
        thread 0, 64, 512 and 1536 past 0.925-0.953 of the time, 896 past 0.995 (placed 256 / 384 past the rows
        modulo 512: 0.94-1.00 / 0.98-1.04); [4096, 1536]'s 0, 64, 1024 and 2048 past 0.89-0.91, 3008 past 1.003;
        ``bench_bf16_words.py --switch partial-rows --rows c16h``: 0.90-0.95 at 1 thread on outputs 0, 64 and 1536
        past, 0.95-0.97 at 2 threads on 0 past, 0.92 / 0.98 at 2 / 1 threads on heap outputs. The same bits.
        AVX-512 (no cached deviations) not measured: left as it was."""
        return self.has("avx2") and not self.has("avx512f")

    @property
    def widens_summed_bf16_by_multiplication(self) -> bool:
        """Whether the even halves of bf16 words a mean's or a variance's float sum widens (bf16 LayerNorm's mean and
        deviation passes) are widened by ``vpmulld`` by 65536 instead of ``vpslld`` by 16 (``codegen/llvm/widening.py``:
        the same bits). Zen 4 issues a 512-bit shift to the pipes that run ``vaddps``, which those loops are bound by,
        and ``vpmulld`` beside them (microbenchmarks, session 34 bfln34: 12 ``vaddps`` and 12 ``vpslld`` in 23 cycles, 12
        ``vaddps`` and 12 ``vpmulld`` in 12; the kernel's mean loop 26 -> 18 ns a row of 1024 on L1 data, its deviation
        loop 44 -> 37). AVX2 CPUs and Intel's AVX-512 cores keep the shift (not measured there)."""
        return self.has("avx512f") and not self._intel_avx512()

    @property
    def means_a_row_early(self) -> bool:
        """Whether a row loop whose first stage is a variance over a widened bf16 row computing its own mean (bf16
        LayerNorm as torch.compile hands it over: ``stages.SharedMean``) runs each row's deviation pass, the next
        row's mean pass, then the row's write pass, so that one row's reductions (horizontal sums, rsqrt: ~80 ns a
        row, session 23) overlap the other row's loops; its prefetches go two rows ahead
        (``emit.EARLY_MEAN_PREFETCH_ROWS``). The same bits. Zen 3, bf16 LayerNorm [8192, 1024]'s kernel: 0.946-0.950
        of the time at 1 and 2 threads (session 25 bf16ln25); float32 LayerNorm (memory-bound) 1.10: not taken.
        Zen 4: with :attr:`caches_variance_deviations` (its numbers), without which it does not apply; Intel's AVX-512
        cores keep their code (not measured there)."""
        return self.has("avx2") and not self._intel_avx512()

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
        (0.98-1.00 in two runs, 1.05 in a third) and stay 16/16. Zen 4 (AVX-512 without FP16: not
        :meth:`_intel_avx512`; session 33 norm33, float32 LayerNorm [8192, 1024]'s kernel, two builds each,
        interleaved medians of 31 rounds, the same bits; ``bench_bf16_words.py --switch row-pass-bursts --force
        --rows c`` and a scratch A/B): 0.889-0.948 of the time at 1 thread in four runs of five (1.006-1.014 in the
        fifth) and 0.898-0.992 at 2
        (bursts 2 rows ahead 1.07-1.13, no prefetches 1.02-1.05, prefetcht1/t2/nta instead of t0 no better);
        RMSNorm's code is unchanged (0.99-1.03). Intel's AVX-512 cores keep two bursts: not measured there."""
        return not self._intel_avx512()

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
    def one_pass_stream_prefetch_lines(self) -> int:
        """Lines ahead that a streamed map stage computing no transcendental function, with float32 outputs, prefetches
        its inputs in its row loop's first pass over them (x*w+b: its only pass; not a norm's write pass, whose row
        the row loop's bursts prefetched: ``prefetch.row_bursts``): one prefetch per piece of one vector
        (``map_stages.py``: two per line), that many lines past the piece; 0: none, the hardware's prefetchers
        alone. Without AVX-512: 24 (1536 bytes; Zen 3's L1 tracks 24 misses). Zen 3, float32 x*w+b [8192, 1024]'s
        kernel against none, two builds each, interleaved in one process (session 26 stream26): 1 thread 0.885-0.955
        of the time on a held output (two runs of 201-301 rounds), 0.908-0.941 through the numpy path
        (``bench_bf16_words.py --switch stream-ahead``, two runs); 2 threads 0.93-0.96 (one build 1.02) and
        0.898-0.984; the copy roof / time 0.86-0.87 -> 0.91-0.98 at 1 thread. 8 lines 0.96-1.02, 16 lines
        0.93-1.03, 32 lines 0.97, 64 (the next row) 0.97-1.06; prefetches in a norm's write pass (RMSNorm: 8-32
        lines) 1.03-1.13. With AVX-512: 0. Zen 4 (session 34 mem34, ``bench_bf16_words.py --switch stream-ahead
        --value N --rows c'``, two builds each, 41 rounds, the same bits): against none at 1 thread 24 lines
        1.01-1.08 in three processes, 4-16 lines 1.00-1.04, 32 lines 0.97-1.00 in two, 48 and 64 1.04-1.06; at 2
        threads 24 and 32 lines 0.99-1.01. Zen 4's own prefetchers keep up with one pass; Intel's not measured."""
        return 0 if self.has("avx512f") else 24

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
    def register_piece_lines(self) -> int:
        """Lines of the whole pieces of a streamed map stage computing a transcendental per element with a one-hot
        compare along the row (cross-entropy's gradient: ``one_hot_rows.py``; float32 outputs) that go out from
        registers; 0: every piece through its stack buffer (:attr:`streamed_map_piece_lines`). A piece that holds
        its row's target is computed as before (its results into the buffer, the target's element corrected
        there, then the copy with `vmovntps`); every other piece (all but one or two of a row's) by code whose
        buffer is written and read whole at constant places only, so LLVM keeps it in registers and stores each
        result with `vmovntps` as it is computed: no buffer stores, reloads and copy loop. The piece is one vector
        iteration of its loop, interleaved by the piece's vectors (4 lines: 8 vectors of 8 float32, where the
        other polynomial loops take :attr:`polynomial_interleave`). The same bits. Without AVX-512: 4. Zen 3,
        cross-entropy's backward kernel [512, 32000], two builds each, interleaved medians of 41-61 rounds
        (``bench_cross_entropy.py``; session 27 xent27): pieces of 2 lines from registers (interleave 4) against
        the buffered pieces 0.89-0.91 of the time at 1 thread and 0.92-0.95 at 2 (three runs), the row through
        torch.compile 0.93-0.95 / 0.94-0.98; 4 lines interleaved by 8 against 2 by 4 0.94-0.96 at 1 thread and
        0.99-1.02 at 2 (three runs); 4 lines by 4 1.09-1.10 / 0.98-1.03, 8 by 8 1.05 / 1.01-1.04, 1 line by 2
        1.15 / 1.07. With AVX-512: 0 (not measured: its code is unchanged)."""
        return 0 if self.has("avx512f") else 4

    @property
    def online_exp_prefetch_piece_lines(self) -> int:
        """Lines of each piece of an online log-sum-exp chunk (:attr:`online_exp_chunk_lines`) whose exponentials
        follow the prefetches of their own lines of the block ahead (``prefetch.chunk_loop``: a loop over the
        chunk's pieces, each piece's prefetches inside it), instead of all the chunk's prefetches in a burst
        before its loop (0). Only for chunks summed apart (:attr:`sums_online_exponentials_apart`): a sum in the
        exp loop would be reduced piece by piece, in another order. Taken with :attr:`online_prefetch_blocks_ahead`
        (2 blocks ahead in bursts was slower, spread 1 block ahead a little faster, both together the most): a
        burst of 32 prefetches is more than the core's 24 L1 miss buffers (Zen 3), so it likely held the exp loop
        behind it, the more so the further ahead (no counters in this VM to show it); spread, 2 lines per 32
        exponentials (one vector iteration), they go out at the pace memory takes them.

        Without AVX-512: 2 lines. Zen 3, cross-entropy's forward kernel [512, 32000] (session 26 xent26,
        ``bench_cross_entropy.py``, two builds each, interleaved medians of 41 rounds, the same bits): spread and 2
        blocks ahead against the burst 1 block ahead 0.90-0.94 at 2 threads and 0.92-0.96 at 1 (five runs); spread
        alone 0.95-1.01 / 0.96-1.01, bursts 2 blocks ahead 1.04-1.07 / 1.00, pieces of 4 lines 0.95 at 1 thread,
        of 1 line 1.03; the fwd+bwd row through torch.compile 0.969-0.975 / 0.978-0.979 (two runs of 61 and 101
        rounds). AVX-512 keeps its bursts (not measured there)."""
        return 0 if self.has("avx512f") else 2

    @property
    def online_prefetch_blocks_ahead(self) -> int:
        """How many blocks ahead (``online.BLOCK`` elements each: 4 KiB of float32) the online log-sum-exp's
        exponential loops prefetch x for the block max loops to come (``online._next_block``). 2 without
        AVX-512, with :attr:`online_exp_prefetch_piece_lines` (its numbers): a block's exponentials take ~650
        cycles at the exp microkernel's rate, about two to three memory latencies on this VM, too short for its 64
        lines to arrive before the next max loop reads them; in the same runs 3 blocks ahead read 0.91-0.94 /
        0.95-0.97 where 2 read 0.91-0.93 / 0.94-0.96, 4 blocks 0.92-0.94 / 0.96-0.97. With AVX-512: 1 (its code
        unchanged)."""
        return 1 if self.has("avx512f") else 2

    @property
    def online_block_max_ahead(self) -> int:
        """Where the online log-sum-exp (``online._row_total``) takes each block's max: 0, in the block, before its
        exponentials, which wait for its loop and reduction; 1, a block early, before the previous block's
        exponentials; 2, a block early, between the previous block's first chunk (its exponentials and their sum)
        and the rest, where the max loop's independent loads and vmaxps run beside the chunk's sum chain (16
        dependent vaddps and the horizontal reduction, the next chunk's exponentials held behind it in the core's
        window). A row's first block takes its max before its loop. The same max values, the same additions in
        the same order: the same bits. Without AVX-512: 2. Zen 3, cross-entropy's forward kernel [512, 32000]
        against 0, two builds each, interleaved medians of 41-61 rounds (``bench_cross_entropy.py --variants
        maxahead0,main``; session 28 xent28): 0.970-0.978 of the time at 1 thread (four runs), 0.949-0.975 at 2
        (two undisturbed runs); 1: 1.010-1.017 / 1.000-1.029; the fwd+bwd row through torch.compile does not
        resolve it (0.979-0.995 at 2 threads, 0.991-1.012 at 1, two runs). With AVX-512: 0 (not measured: its code
        is unchanged)."""
        return 0 if self.has("avx512f") else 2

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
    def scales_one_plus_exp_in_one_step(self) -> bool:
        """Whether sigmoid's and gelu_tanh's e**w (w clamped to [-86, 88.8], ``mathlib.ONE_PLUS_EXP_FLOOR``) and tanh's
        e**2|x| (2|x| in [0, 20]) are scaled by 2**n in one product (``mathlib._exp_in_one_step``: the polynomial times
        2, exactly, then one product with 2**(n - 1), always a normal float there) instead of two (``mathlib._scale``),
        and sigmoid's -x is folded into its constants (no 0 - x): the same bits for every input, 8 vector instructions
        fewer per 8 sigmoids and a shorter chain. Without AVX-512, whose one vscalefps scales by any n (its code is
        unchanged). Zen 3 (session 26 polya26; an exhaustive check of all 2**32 inputs: the same bits): float32
        gelu(x*w+b)*sigmoid(x) [4096, 1024]'s kernel 0.943-0.951 of the time at 1 thread and 0.931-0.956 at 2
        (``bench_bf16_words.py --switch one-step-exp --rows a``, two builds each, interleaved medians of 41-61 rounds,
        three runs); the roofline's microkernels (L1-resident) sigmoid 0.725-0.744, gelu_tanh 0.795, tanh 0.948-0.950 of
        the time (tanh's too: all 2**32 inputs give the same bits)."""
        return self.has("avx2") and not self.has("avx512f")

    @property
    def halves_gelu_in_its_erf(self) -> bool:
        """Whether gelu(x) = (x/2)(1 + erf(x/sqrt 2)) is computed as x (1/2 + erf/2) (``mathlib._gelu``), erf/2 by its
        rational function's numerator coefficients halved: one product per vector fewer and one constant less in
        the loop's registers. The same bits for every input: halving is exact at every step where the values are
        normal; where x/2 is not (|x| < 2**-125) erf(x/sqrt 2) is far below 1's ulp, so 1 + erf is 1 and 1/2 + erf/2
        is 1/2, and x * 1/2 rounds as x/2 did (an exhaustive check of all 2**32 inputs: the same bits). Without
        AVX-512 (its code is unchanged: not measured there). Zen 3 (session 26 polya26, ``bench_bf16_words.py --switch
        gelu-half --rows a``, two builds each, interleaved medians of 41-61 rounds): float32 gelu(x*w+b)*sigmoid(x)
        [4096, 1024]'s kernel 0.975-1.004 of the time at 1 thread and 0.971-0.996 at 2 in four runs,
        0.968-0.978 / 0.967-0.983 in two with its gelu in a loop of its own (``splits_polynomial_math_loops``); the
        gelu microkernel alone (L1-resident) 1.005-1.049: a small gain, kept for the kernel."""
        return self.has("avx2") and not self.has("avx512f")

    @property
    def divides_gelu_erf_ratio(self) -> bool:
        """Whether a float32 gelu (erf form) evaluates ``mathlib._gelu_divided`` (``elementwise.gelu_function``): its
        erf's numerator divided by its denominator with the divide instruction (correctly rounded) instead of the
        reciprocal estimate and a Newton step (``mathlib.RECIP``), 1/2 + erf/2 raised to +0 by a max instead of the
        compare and select below -5.7, the 1/sqrt 2 folded into erf's coefficients. Zen 4's two FMA pipes run the
        estimate, its product and two FMAs in 4 cycles per 512-bit vector, a division in 2 (its divider's 6 beside
        them), a compare and a product in 1 each, a max on the add pipes in none of theirs: row (a)'s loop 66 -> 56
        cycles of the FMA pipes per 32 elements, 130 -> 106 vector instructions. Results within 2**-21 |x| of the
        estimate's form, as close to erf's gelu (1.48e-6 at most on [-8, 8], the mean error 1% more); -0 and NaN in
        the far negative tail as PyTorch's. Zen 4 (session 34 poly34, ``bench_bf16_words.py --switch erf-division
        --rows a``, two builds each, interleaved medians of 41 rounds, two runs): float32 gelu(x*w+b)*sigmoid(x)
        [4096, 1024]'s kernel 0.90-0.91 of the time at 1 thread, 0.91-0.93 at 2 (without the fold 0.93-0.94 /
        0.92-0.96). bf16 gelu keeps the estimate: its loop of four 16-lane chains (pairs) spilled more with the division, 1.05-1.06
        of the time at 1 thread in three runs, 0.98-0.99 at 2; erf halved alone there 0.99-1.07 at 1 thread and
        0.96-1.07 at 2. Intel's AVX-512 cores (not measured) and AVX2 (its division of a 256-bit vector not measured
        against the estimate) keep the estimate."""
        return self.has("avx512f") and not self._intel_avx512()

    @property
    def splits_polynomial_math_loops(self) -> bool:
        """Whether a map stage whose elements evaluate two independent polynomials (gelu(x*w+b)*sigmoid(x)) computes
        all but the last of them by loops of their own over the row into L1 buffers, then its own loop loads them
        (``map_stages.MapStages._split_math``): the same operations (the same bits) in loops whose constants and
        four interleaved chains fit AVX2's 16 registers better. Without AVX-512 (its code is unchanged: not measured
        there). Zen 3 (session 26 polya26, ``bench_bf16_words.py --switch split-math --rows a``, two builds each,
        interleaved medians of 61 rounds, two runs): float32 gelu(x*w+b)*sigmoid(x) [4096, 1024]'s kernel (gelu's loop
        first, then sigmoid's with the product) 0.944-0.948 of the time at 1 thread and 0.932-0.940 at 2; the loop with
        sigmoid first measured alike (0.959 / 0.954 in an exploratory run against 0.941 / 0.970)."""
        return self.has("avx2") and not self.has("avx512f")

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
