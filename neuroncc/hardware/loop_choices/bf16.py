"""How a bf16 value is rounded, widened and looked up on a CPU: word-lane and paired roundings, the
conversion instructions, math tables, the widening of summed words.

May import: this package's ``base``.
"""

from __future__ import annotations

from neuroncc.hardware.loop_choices.base import ChoiceBase


class Bf16Choices(ChoiceBase):
    """How a bf16 value is rounded, widened and looked up (a part of
    :class:`~neuroncc.hardware.loop_choices.LoopChoices`)."""

    __slots__ = ()

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
        lanes there. (Its tables, :attr:`looks_up_bf16_unary_math`, were 1.17-1.18x slower on Zen 4 by 16-lane
        ``vpgatherdd``; since session 37 read in 8-lane loops, :attr:`bf16_table_loop_lanes`.) A module holding both
        kinds of words has both pair functions."""
        return self.has("avx512bw") and self.has("avx512bf16")

    @property
    def tests_converted_bf16_pairs_by_their_words(self) -> bool:
        """Whether a pair of vectors rounded by ``vcvtne2ps2bf16`` (:attr:`rounds_bf16_pairs_by_conversion`,
        :attr:`rounds_bf16_cast_pairs_by_conversion`) finds its denormal inputs in the conversion's words instead of
        by two ``vfpclassps``: the instruction gives a signed zero for a denormal input and only for it and zeros,
        so one ``vptestnmw`` of the 32 words against 0x7FFF (the words through an empty ``asm``: LLVM would
        otherwise compare them as widened floats) sends a pair holding a zero word to the ``vfpclassps`` test, and
        a pair holding a denormal on to the 16-bit lanes' rounding (``codegen/llvm/bf16_words.py``). The same bits.
        Zen 4 (session 36 bfw36, ``bench_bf16_words.py --switch word-test``, two builds each, interleaved medians of
        41 rounds, three to five processes): bf16 softmax [4096, 1024]'s kernel 0.92-0.98 of the time at 1
        thread, 0.94-1.00 at 2; bf16 LayerNorm [8192, 1024] and [8192, 768] (bound by their stores) 0.95-1.03 at 1
        and 2 threads, even; softmax rows half masked (half their words zero, each such pair tested both ways)
        0.99-1.02. Intel's AVX-512 cores keep the two tests (not measured there)."""
        return self.has("avx512bw") and self.has("avx512bf16") and not self._intel_avx512()

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
        return self._avx2_only()

    @property
    def rounds_bf16_parity_by_or(self) -> bool:
        """Whether a bf16 rounding in 32-bit lanes (``scalars.round_to``) ors the kept half's parity into the low
        half before adding 0x7FFF instead of adding it (the same carry, so the same bits for every float32:
        ``tests/codegen/test_bf16_parity_by_or.py``): AVX-512's ``vpternlogd`` takes the parity's and and the or,
        4 vector instructions a rounding instead of 5, on the pipes row (a)'s polynomials use: bf16
        gelu(x*w+b)*sigmoid(x)'s kernel 0.957-0.973 of the time at 1 thread, 0.966-0.984 at 2 (Zen 4, seven
        processes; other bf16 kernels rounding op results 0.94-1.00; session 36 bfa36, ``bench_bf16_words.py
        --switch parity-or``). AVX2 (an and and an or: 5 either way) keeps its code (not measured)."""
        return self.has("avx512f")

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
        Zen 4 (session 33 norm33 and 36 bft36: its 16-lane ``vpgatherdd`` reads made row (a) 1.17-1.42x its
        polynomials' time; a gather-free 16-lane read 1.02-1.05x) reads them in 8-lane loops
        (:attr:`bf16_table_loop_lanes`, session 37: row (a) 0.77-0.81 of the polynomials' time). CPUs without AVX2
        keep their code."""
        return (self._avx2_only() or self._intel_avx512()
                or bool(self.bf16_table_loop_lanes))

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
        AVX2, and AVX-512 CPUs reading tables in 8-lane loops (:attr:`bf16_table_loop_lanes`: Zen 4), where every
        read that :attr:`reads_bf16_table_indices_from_loaded_words` does not take goes by lane pairs (LLVM's form
        there is a ``vpgatherdd`` ymm: row (a) 1.07 of the polynomials' time with sigmoid's read so, 0.86 by lane
        pairs), each pair through an empty ``asm`` first (LLVM's combines otherwise made the pairs' shifts 512-bit
        vector code and moved each index out alone: 1.24x). Intel's AVX-512 cores keep their gathers."""
        return self._avx2_only() or bool(self.bf16_table_loop_lanes)

    @property
    def widens_summed_bf16_by_multiplication(self) -> bool:
        """Whether the even halves of bf16 words a mean's or a variance's float sum widens (bf16 LayerNorm's mean and
        deviation passes) are widened by ``vpmulld`` by 65536 instead of ``vpslld`` by 16 (``codegen/llvm/widening.py``:
        the same bits). Zen 4 issues a 512-bit shift to the pipes that run ``vaddps``, which those loops are bound by,
        and ``vpmulld`` beside them (microbenchmarks, session 34 bfln34: 12 ``vaddps`` and 12 ``vpslld`` in 23 cycles,
        12
        ``vaddps`` and 12 ``vpmulld`` in 12; the kernel's mean loop 26 -> 18 ns a row of 1024 on L1 data, its deviation
        loop 44 -> 37). AVX2 CPUs and Intel's AVX-512 cores keep the shift (not measured there)."""
        return self.has("avx512f") and not self._intel_avx512()

    @property
    def sums_bf16_rows_by_dot_products(self) -> bool:
        """Whether a float sum over a row of bf16 words (a sum's, a mean's, bf16 LayerNorm's mean passes) adds them by
        AVX-512 BF16's ``vdpbf16ps`` against bf16 ones, 32 words an instruction on the FMA pipes, instead of widening
        each word's halves and adding them on the add pipes (``codegen/llvm/dot_sums.py``; a row holding a word below
        2^-119, a zero or a denormal, sums in the pair loop: the instruction flushes denormals). Another order of the
        same kind of roundings: a sum's bits may differ by its last place (none of the rows measured did). Zen 4
        (session 38 bfln38, interleaved medians, two builds each, three processes; a microbenchmark's row of 1024
        on L1 data: 15 ns a row, 12 without the flags' tests, the pair loop with shifts 30, session 34's with
        ``vpmulld`` 18): bf16 LayerNorm [8192, 1024]'s kernel 0.963-0.984 of the time at 1 thread,
        0.945-1.003 at 2 (``bench_bf16_words.py --switch dot-sums``), [8192, 768] even (0.97-1.01); a bf16 row
        sum and mean of [8192, 1024] 0.80-0.97 at 1 thread, 0.82-0.99 at 2. Intel's AVX-512 cores (not measured)
        keep their loops."""
        return self.has("avx512bf16") and not self._intel_avx512()

    @property
    def takes_bf16_variance_by_dot_products(self) -> bool:
        """Whether a variance over a row of bf16 words whose mean pass runs a row early (bf16 LayerNorm's:
        :attr:`means_a_row_early`) takes the row's sum of squares in that mean pass's loop, ``vdpbf16ps acc, x, x``
        beside its sum (each square exact in float32, the lanes added in float64), and its sum of squared deviations
        as S2 - n mean^2 in float64, with no deviation pass: no deviation or widened row cache is stored, the write
        pass widens x and subtracts the mean itself, its weight and bias placed past the output
        (:attr:`places_write_buffers_past_the_output`), the rows prefetched 3 ahead instead of 2
        (``codegen/llvm/dot_sums.py``'s ``dot_variance``; a row whose n mean^2 exceeds a quarter of its M2, whose M2
        is below 2^-80 or not finite takes the deviation pass: today's bits there). Other bits in the variance's
        last places, as close to float64's or closer (simulated over 20000 rows of 1024 per shift: mean relative
        error 2.3e-8 against the deviation pass's 3.3e-8 for rows of mean 0-0.25 of their spread, 2.7e-8 at 0.5;
        ``test_dot_variance.py``). Requires :attr:`sums_bf16_rows_by_dot_products`. Zen 4 (session 40 bfln40,
        ``bench_bf16_words.py --switch dot-variance``, two builds each, interleaved medians of 41 rounds): bf16
        LayerNorm [8192, 1024]'s kernel 0.86-0.88 of the time at 1 thread, [8192, 768] 0.87-0.90 (two processes;
        before the weight and bias were placed and the rows prefetched 3 ahead: 0.89-1.03), 0.97-1.00 at 2 threads
        ([8192, 768] 0.91-0.94). Intel's AVX-512 cores and AVX2 keep their code."""
        return self.sums_bf16_rows_by_dot_products and self.means_a_row_early

    @property
    def copies_bf16_rows_for_the_write_pass(self) -> bool:
        """Whether a variance that takes its squares from its early mean pass
        (:attr:`takes_bf16_variance_by_dot_products`) has that pass store each vector of the row's words it sums into
        one of two stack rows (by the row's parity) placed past the output rows as the weight and bias are
        (:attr:`places_write_buffers_past_the_output`: streamed rows of whole 2 KiB), from which its write pass loads
        them instead of from the input row, and prefetches its rows 2 ahead instead of 3
        (``codegen/llvm/word_copies.py``). The write loop's x loads from the input row wait for its queued
        non-temporal stores where x sits a little past the output modulo 4 KiB (4K aliasing); the copy gained at every
        placement measured. The same bits. Zen 4 (session 41 bfln41, ``bench_bf16_words.py --switch word-copies``, two
        builds each, interleaved medians of 41 rounds): bf16 LayerNorm [8192, 1024]'s kernel with its input from
        memory (``--cold``) 0.89-0.93 of the time at 1 thread (four processes; rows 3 ahead: 0.90-0.95 in six), even
        with the input in the L3 at 2 threads (0.97-1.02, four), 0.99-1.06 at 1 (one; 3 ahead 1.00-1.11 in three:
        the store per 32 words); on held buffers from memory at 2 threads (the team's wall clock) 0.84-0.98. The
        gain is the write loop's reads of the copy (the stores alone: 0.98-1.01). AVX2 and Intel's AVX-512 cores keep
        their code."""
        return self.takes_bf16_variance_by_dot_products

    @property
    def fuses_bf16_layer_norm_weight_and_bias(self) -> bool:
        """Whether LayerNorm's ``((x - mean) * rstd) * w + b`` whose float32 sum is only rounded to bf16 takes its
        weight and bias in one fused multiply-add (``codegen/llvm/norm_affine.py``), on rows whose mean is finite and
        whose 1/std is finite and positive in calls of finite weight and bias (a second write loop, the graph's, for
        the others: NaN payloads and infinities as the graph's). One rounding fewer: other bits in a few outputs (170
        of bf16 LayerNorm [8192, 1024]'s 8388608, 114 of them nearer float64's; over normal, far-mean, tiny-variance,
        huge- and tiny-weight rows the mean error in bf16 ulps the same to four digits, the differing outputs about
        2:1 nearer float64's; ``test_norm_affine.py``); per 32 elements 11 vector operations in the write loop where
        there were 13 (2 ``vfmadd213ps`` for 2 ``vmulps`` and 2 ``vaddps``). Zen 4 (session 42 bfln42,
        ``bench_bf16_words.py --switch layer-norm-fma``, two builds each, interleaved medians of 31-41 rounds):
        bf16 LayerNorm [8192, 1024]'s kernel 0.92-0.95 of the time at 1 thread with its input in the L3 (four
        processes), 0.93-0.99 from memory (``--cold``, four), even at 2 threads (0.94-1.03, five); [8192, 768]
        0.92-1.02 (two). Float32 LayerNorm's code unchanged. AVX2 and Intel's AVX-512 cores keep their code (not
        measured)."""
        return self.has("avx512bf16") and not self._intel_avx512()

    @property
    def bf16_table_loop_lanes(self) -> int:
        """Lanes of a vector iteration of a loop reading bf16 tables (:attr:`looks_up_bf16_unary_math`,
        :attr:`looks_up_bf16_library_math`; ``loop_hints.hint_math_loop``'s ``llvm.loop.vectorize.width``, one
        vector iteration at a time); 0: LLVM's choice (the CPU's widest vectors). 8 on AVX-512 CPUs but Intel's:
        the loop at 256 bits with AVX-512 VL/BW instructions, its reads AVX2's (no ``vpgatherdd``: indices moved to
        general registers two or four at a time, :attr:`reads_bf16_tables_by_lane_pairs`,
        :attr:`reads_bf16_table_indices_from_loaded_words`; entries by ``vmovd`` + ``vpinsrd`` per 4 lanes), its
        bf16 pairs by 8-pair variants of the pair functions (op results by the 32-bit rounding, casts by the
        conversion: ``codegen/llvm/bf16_words.py``). The same bits (the tables are the polynomials' results). Only a
        map stage with no other polynomial reads them so (``map_stages.MapStages._map_stage``); one with a float32
        polynomial beside them keeps its polynomials and its 512-bit loop (its loop at 8 lanes measured
        1.04-1.31x). Zen 4 (session 37 bfa37): AVX2's code of bf16 gelu(x*w+b)*sigmoid(x) [4096, 1024]
        (``NEURONCC_CPU=znver3``, its tables in 8 lanes) ran 0.75-0.99 of Zen 4's polynomials' time in one process, Zen
        4's tables by 16-lane ``vpgatherdd`` 1.28x (session 36 bft36); with this, the kernel 0.76-0.77 of the
        polynomials' time at 1 thread and 0.74-0.76 at 2 (``bench_bf16_words.py --switch table-loops``, three processes
        each), AVX2's code 1.01-1.04x its time (``bench_named_cpu.py``, three processes). The 8-lane loop with LLVM's
        own reads (``vpgatherdd`` ymm, or per-lane extracts) 1.07-1.24x the polynomials' time; interleaved 2 0.99
        against 0.86; 16 lanes by the 8-lane reads 1.02-1.06. Other bf16 kernels [4096, 1024] (normal inputs, 1 / 2
        threads): sin 0.56 / 0.58 and expm1 0.57 (library tables before too, by gathers), gelu 0.53 / 0.54, tanh 0.40 /
        0.44, sigmoid 0.70 / 0.71, gelu(x)*sigmoid(x) 0.52-0.56 / 0.61-0.64 of their time; silu(x)*sigmoid(x) and
        silu(x)*exp(x) (a float32 polynomial in the stage) 0.99-1.01. Intel's AVX-512 cores keep their 16-lane gathers
        (session 32: fast there); AVX2 its own loops."""
        return 8 if self.has("avx512bw") and self.has("avx512vl") and not self._intel_avx512() else 0

    @property
    def reads_bf16_table_indices_from_loaded_words(self) -> bool:
        """Whether a bf16 table read of an element a paired loop loads (sigmoid(x): the even or odd half of x's
        32-bit word, ``pairs.py``) is a call of the word with a vector variant of 8 words
        (``codegen/llvm/bf16_tables.py``): each 64 bits of the words (LLVM reads them from memory with a ``movq``)
        hold four indices, the even halves' read and the odd halves' taking the same 64 bits: 4 general-register
        loads per 16 indices, no vector-to-general moves, where the lane pairs of the widened halves take 8 moves
        and LLVM's per-lane form 16. The same bits. Zen 4 (session 37 bfa37, in :attr:`bf16_table_loop_lanes`'s 8-lane
        loops): bf16 gelu(x*w+b)*sigmoid(x)'s kernel 0.745 of its polynomials' time against 0.86 with sigmoid's read
        by lane pairs too (one process, 1 thread; AVX2's code 0.75 there). Where :attr:`bf16_table_loop_lanes` is set,
        and on AVX2 (:meth:`_avx2_only`): Zen 3 (session 39 reg39a, ``bench_bf16_words.py --rows a16 --switch
        loaded-words --force``, interleaved medians of 25 rounds in each process, the same bits) bf16 row (a)'s
        kernel 0.952-0.964 of LLVM's per-lane form's time at 1 thread (three processes), 0.909-0.918 at 2 (one;
        142 instructions per 16 elements either way: x's words read as 64 bits, 4 ``movl`` and ``movzwl`` fewer,
        4 ``bextr`` and ``shrq`` more)."""
        return bool(self.bf16_table_loop_lanes) or self._avx2_only()

    @property
    def packs_computed_bf16_table_operands(self) -> bool:
        """Whether a narrow table loop (:attr:`bf16_table_loop_lanes`) reads the indices of an operand it computes
        (gelu(x*w+b)) from the pair's two rounded operands packed into one 32-bit word (the even one's bits low,
        the odd one's high: a loaded pair's layout) as a loaded word is read (``bf16_tables._word_pairs_variant``,
        :attr:`reads_bf16_table_indices_from_loaded_words`: four indices to 64 bits, 4 vector-to-general moves per
        16 elements and 2 vector instructions to pack), not by lane pairs of the float32 vectors (8 moves and 2
        extracts). The same bits. Zen 4 (session 38 bfa38): bf16 gelu(x*w+b)*sigmoid(x)'s kernel 0.92-0.94 of the
        lane pairs' time at 1 and 2 threads (``bench_bf16_words.py --switch packed-operands``, three processes
        each); the packed words stored to a stack buffer and read back by 64-bit loads instead 1.17-1.18x. Where
        :attr:`bf16_table_loop_lanes` is set (the emitter packs only in narrow table loops: on AVX2 forcing this
        changes no code, session 39)."""
        return bool(self.bf16_table_loop_lanes)

    @property
    def bf16_table_operand_vectors_ahead(self) -> int:
        """How many vector iterations ahead a narrow table loop packing its computed table operands
        (:attr:`packs_computed_bf16_table_operands`) packs them (software pipelining,
        ``map_stages.MapStages._pipelined_pairs``; 0: in the iteration that reads them): each iteration computes and
        packs gelu(x*w+b)'s operand words (x*w+b, its roundings, the pack) of the vector this many iterations on into
        a row buffer and reads its tables at the words packed that many iterations before; a prologue packs a row's
        first vectors, its last vectors pack their own. The same bits. One vector ahead, LLVM's loop load
        elimination carries the words in a register (the moves out to general registers stay); two ahead, they
        go through the buffer (a 256-bit store, four 64-bit loads two iterations later: no vector-to-general
        moves, 81 vector-side ops an iteration against 86). Zen 4 (session 40 bfa40, ``bench_bf16_words.py
        --switch operands-ahead --rows a16``, two builds each, interleaved medians of 25 rounds, one thread count a
        process): bf16 gelu(x*w+b)*sigmoid(x) [4096, 1024]'s kernel, one ahead, 0.950-0.965 of the time at 1 thread
        and 0.939-0.949 at 2 (three processes each); two ahead 0.979-0.989 / 0.961-0.973 of one ahead's (three
        each); two ahead against none 0.894-0.927 at 1 thread in three processes of four (one 1.021), 0.892-0.944
        at 2 (three); three ahead 0.953 / 0.910 (one process each, not taken). Carrying the table entries a vector
        ahead instead (gelu's and sigmoid's reads whole, four registers carried) 1.12-1.13x one ahead's time at 1
        thread. Where :attr:`bf16_table_loop_lanes` is set
        (AVX2 and Intel's AVX-512 cores pack no operands: not measured)."""
        return 2 if self.bf16_table_loop_lanes else 0
