"""How the polynomial math functions are evaluated on a CPU: exp's scaling in one step, gelu's erf halved or
divided, split and interleaved math loops.

May import: this package's ``base``.
"""

from __future__ import annotations

from neuroncc.hardware.loop_choices.base import ChoiceBase


class PolynomialChoices(ChoiceBase):
    """How the polynomial math functions are evaluated (a part of
    :class:`~neuroncc.hardware.loop_choices.LoopChoices`)."""

    __slots__ = ()

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
        return self._avx2_only()

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
        return self._avx2_only()

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
        0.92-0.96). bf16 gelu keeps the estimate: its loop of four 16-lane chains (pairs) spilled more with the
        division, 1.05-1.06 of the time at 1 thread in three runs, 0.98-0.99 at 2; erf halved alone there 0.99-1.07 at 1
        thread and 0.96-1.07 at 2. AVX2 divides too (its gelu in a loop of its own,
        :attr:`splits_polynomial_math_loops`): on Zen 3 the estimate form's gelu loop ran 80 FMA-pipe ops per 32
        elements (of them 4 vrcpps, 12 for the Newton step, 4 compares, 4 products by 1/sqrt 2), the divided one 56 and
        4 vdivps on the divider beside them (the sigmoid loop's 4 already there), and its chains are shorter (the loops
        run at ~60% of the pipes' rate: too few independent chains in 16 registers, not the pipes). Zen 3 (session 39
        a39, ``bench_bf16_words.py --switch erf-division --force --rows a``, two builds each, interleaved medians of 25
        rounds): float32 gelu(x*w+b)*sigmoid(x) [4096, 1024]'s kernel 0.962-0.981 of the time at 1 thread (two
        processes), 0.956-0.978 at 2 (two processes; a third drifted); with the guided team (:attr:`team_guided_chunks`)
        against neither 0.957-0.966 at 2. Its results as close to erf's gelu as the estimate form's (row (a) against
        float64: max error 1.18e-6 against 1.20e-6, the mean 1% less; 27% of its outputs other bits). Intel's AVX-512
        cores (not measured) keep the estimate; every AVX2 CPU divides (Intel's AVX2 cores, whose 256-bit division is
        slower than Zen 3's, not measured)."""
        return (self.has("avx512f") or self.has("avx2")) and not self._intel_avx512()

    @property
    def splits_polynomial_math_loops(self) -> bool:
        """Whether a map stage whose elements evaluate two independent polynomials (gelu(x*w+b)*sigmoid(x)) computes
        all but the last of them by loops of their own over the row into L1 buffers, then its own loop loads them
        (``map_stages.MapStages._split_math``): the same operations (the same bits) in loops whose constants and
        four interleaved chains fit AVX2's 16 registers better. Without AVX-512 (its code is unchanged: not measured
        there). Zen 3 (session 26 polya26, ``bench_bf16_words.py --switch split-math --rows a``, two builds each,
        interleaved medians of 61 rounds, two runs): float32 gelu(x*w+b)*sigmoid(x) [4096, 1024]'s kernel (gelu's loop
        first, then sigmoid's with the product) 0.944-0.948 of the time at 1 thread and 0.932-0.940 at 2; the loop with
        sigmoid first measured alike (0.959 / 0.954 in an exploratory run against 0.941 / 0.970). Rows of whole pieces
        of :attr:`function_piece_lines` take those instead (session 41: faster with gelu divided)."""
        return self._avx2_only()

    @property
    def bf16_pair_split_interleave(self) -> int:
        """Vector iterations interleaved in each loop of a map stage over bf16 element pairs (``pairs.py``) whose
        elements evaluate two independent polynomials (bf16 gelu(x*w+b)*sigmoid(x)) split as
        :attr:`splits_polynomial_math_loops` splits float32's (``map_stages.MapStages._split_math``), but the other way
        round: all but the first (gelu's) by paired loops of their own (sigmoid's) into L1 buffers in pair order (the
        evens, then the odds), then the stage's paired loop (gelu, the product) loads them; 0: the one pair loop. The
        same operations on the same values (the same bits). Zen 4 (session 35 bfsplit35, ``bench_bf16_words.py --switch
        split-pairs --rows a16``, two builds each, interleaved medians of 41 rounds, three processes): bf16
        gelu(x*w+b)*sigmoid(x) [4096, 1024]'s kernel 0.90-0.95 of the time at 1 thread and 0.91-0.95 at 2 with 4 vectors
        (8 chains of 16 lanes) in each loop; other bf16 maps of two polynomials 0.95-0.97 at 1 thread, 0.95-1.00 at 2.
        The pair loop's 334 vector instructions per 64 elements are the roof's, at ~61% of its pipes' rate: too few
        independent chains for the core's schedulers. Gelu's loop first (AVX2's order): 1.04-1.06 at 1 thread with 2
        vectors in each loop, 0.98-1.00 with 4; sigmoid's first with 2 and 2 0.98-1.04, 2 and 4 0.95-0.98, 4 and 8
        0.92-1.02, 8 and 4 0.97-1.01. AVX2 (tables) and Intel's AVX-512 cores (not measured) keep the one loop."""
        return 4 if self.has("avx512f") and not self._intel_avx512() else 0

    @property
    def function_piece_lines(self) -> int:
        """Lines of float32 output per piece of a map stage's rows where each element evaluates two or more
        transcendental functions (gelu(x*w+b)*sigmoid(x): ``map_stages.MapStages._function_pieces``): each piece is one
        vector iteration of its loop, its vectors interleaved (4 lines: 4 zmm vectors, where other math loops
        interleave :attr:`polynomial_interleave` 2), after the prefetches of its inputs' lines
        :attr:`function_prefetch_lines` ahead; 0: the stage's one loop over the row as other map stages. The same
        operations, plain stores: the same bits. Zen 4 (session 35 bfa35; the loop is FMA-pipe bound, 56 cycles of
        the pipes per 32 elements, and its two long chains per vector wait on one another: on data in L1/L2 the
        row's phase ran 0.95 of the time at 1 thread with 4 vectors in flight): float32 gelu(x*w+b)*sigmoid(x)
        [4096, 1024]'s kernel against the loop (``bench_bf16_words.py --switch function-pieces --rows a``, two builds
        each, interleaved medians of 41 rounds, four processes per thread count) 0.94-0.96 of the time at 1 thread,
        0.92-0.97 at 2 on fresh outputs and 0.88-0.91 on a held one. Of it: 4 vectors without the prefetches
        0.94-1.00 at 1 thread and 0.95-1.01 at 2; the pieces' stores non-temporal (from registers, no stack buffer)
        as fast or up to 3% slower than plain. AVX2 too (4 lines: 8 ymm vectors of both functions; rows of whole pieces
        take them before :attr:`splits_polynomial_math_loops`, other rows keep the split loops): its pieces with gelu's
        erf divided (:attr:`divides_gelu_erf_ratio`) give 16 independent chains in flight where the split loops give 4
        per loop, 458 instructions per 64 elements against the split loops' 454 (80 of them stack operands: vectors the
        16 registers do not hold, stored and reloaded; the split loops' 42). Zen 3 (session 39 a39,
        ``bench_bf16_words.py --switch unsplit-pieces --value 4 --rows a``, gelu divided in both builds, two builds
        each, interleaved medians of 25 rounds, two processes per thread count): the kernel 0.92-0.96 of the split
        loops' time at 1 thread, 0.94-0.95 at 2 (with gelu's estimate form the pieces lost, 1.08 / 1.16). A proxy on Zen
        4 hardware (session 41 avx41: the AVX2 code compiled for ``NEURONCC_CPU=znver3`` and run on an AVX-512 Zen 4,
        whose 256-bit vectors run at full width on its four FP pipes; not the Zen 3 itself; ``--switch function-pieces``
        and ``unsplit-pieces --value 4``, 25 rounds, 6-8 processes per thread count): the kernel 0.76-0.92 of the split
        loops' time at 1 thread (0.87-0.92 in the host's fast mode, the larger gains in its slow spells), 0.78-0.93 at
        2; the same bits. 2-line pieces (4 vectors) 1.05-1.08 of 4-line pieces' time at 1 thread, 1.04-1.05 at 2; 8
        lines 1.13 / 1.19; the prefetches alike with or without (0.98-1.04). Intel's AVX2 cores (not measured) take the
        pieces too, rows longer than the split loops' (``map_stages.SPLIT_MATH_MAX``) too (not measured: their one loop
        as Zen 4's was); Intel's AVX-512 cores (not measured) keep their code."""
        return 4 if (self.has("avx512f") and not self._intel_avx512()) or self._avx2_only() else 0

    @property
    def function_piece_interleave(self) -> int:
        """Vectors of a piece of :attr:`function_piece_lines` interleaved in one vector iteration of its loop (the
        piece then several vector iterations); 0: the whole piece in one. Fewer vectors side by side spill fewer of
        them but give the core fewer independent chains: AVX2's row (a) piece loop (8 ymm vectors) stores and reloads
        80 vectors per 64 elements, 4 side by side 42 (21 per 32), 2 20, 1 none. A proxy on Zen 4 hardware (session 43
        spill43: the AVX2 code compiled for ``NEURONCC_CPU=znver3`` and run on the Zen 4; ``bench_bf16_words.py
        --switch piece-interleave --value N --rows a``, two builds each, interleaved medians of 25 rounds, one
        process each): float32 gelu(x*w+b)*sigmoid(x) [4096, 1024]'s kernel with 4 vectors 1.07 of the whole
        piece's time at 1 thread and 1.05-1.06 at 2, 2 vectors 1.27 and 1 vector 1.47 at 1 thread: the spills cost
        less than the chains they buy. 0 everywhere (a switch for a real Zen 3's measurement)."""
        return 0

    @property
    def aligns_vector_spill_slots(self) -> bool:
        """Whether a phase that runs rows in pieces of :attr:`function_piece_lines` aligns its stack to its vectors'
        width (``entries.align_phase_entry_stack``: ``alignstack``, a frame pointer and one ``andq`` in the
        prologue), so that each vector its loop spills has a slot of its own width and alignment, inside one cache
        line and one page. AVX2's row (a) piece loop spills 39 ymm vectors and reloads 41 per 64 elements (16
        registers for 8 vectors of two functions); in a frame aligned to 16 bytes only, a caller's stack 16 past a
        32-byte boundary puts every slot across one, and where the frame then spans a 4 KiB boundary one slot
        straddles two pages (the likely cost; no counters here): the kernel ran 1.3-1.7x its time at 1-3 of 13 C
        stack depths per process (session 43 avx43 found the lottery, with a 4 KiB period of the stack pointer; it
        is gone with aligned slots, which move the frame by less than a line: not 4K aliasing of the slots with
        the streams). The same instructions otherwise (aligned moves), the same bits. A proxy on Zen 4 hardware
        (session 43 spill43: the AVX2 code compiled for ``NEURONCC_CPU=znver3`` and run on the Zen 4): float32
        gelu(x*w+b)*sigmoid(x) [4096, 1024]'s kernel at 13 stack depths per process (nested calls, interleaved, 11
        rounds; ``scratch/spill43/probe_depth.py``) 1.02 / 1.02 / 1.20 (a noisy spell) of its fastest depth at the
        slowest at 1 thread (three processes; unaligned 1.59 / 1.62 / 1.71), 1.04 / 1.13 at 2 (1.30 / 1.24); its
        median depth 0.99 / 0.99 / 0.95 of the unaligned one's; at the process's own depth (``bench_bf16_words.py
        --switch aligned-spills --rows a``, two builds each, interleaved medians of 25 rounds, three processes)
        0.97-1.01 at 1 thread, 0.98-1.01 at 2. Without AVX-512 (Zen 4's pieces spill nothing; its code unchanged);
        the split loops (rows of partial pieces, :attr:`splits_polynomial_math_loops`) keep their frame (flat at 13
        depths in the one process measured)."""
        return self._avx2_only()

    @property
    def function_prefetch_lines(self) -> int:
        """Lines ahead of each piece of :attr:`function_piece_lines` that the piece prefetches its inputs' lines
        (into L1, ``prefetch.emit_prefetch_pieces_ahead``); 0: none. Zen 4 (session 35 bfa35, row (a) as there, one
        process, 41 rounds): 8, 16, 32 and 64 lines alike (0.94-0.97 of the loop's time at 2 threads, 0.95-0.96 at
        1); 16 (1 KiB of x, 16 misses in flight)."""
        return 16 if self.function_piece_lines else 0

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
    def folds_row_scale_into_exp(self) -> bool:
        """Whether e**x * s, x <= 0 and s one value per row (cross-entropy's gradient: the softmax times the upstream
        gradient over the row's count), is one function (``mathlib._exp_nonpositive_times``): s's mantissa in the
        polynomial's coefficients, its exponent in vscalefps' scale, no multiply per element (4 of the backward loop's
        40 FMA-pipe ops per 64 elements, a vaddps of s's exponent into the scale instead). Zen 4 (AVX-512 without FP16):
        cross-entropy's backward kernel [512, 32000] against the multiply (session 36 xent36b, ``bench_cross_entropy.py
        --variants mulscale,foldscale --kernels backward --memory dram,l3,l2``, two builds each, interleaved medians of
        41 rounds, five processes): 0.977-0.986 of the time at 1 thread on its logits, 0.982-0.999 in the L3,
        0.979-0.987 in the L2; at 2 threads (its output's write stream) 0.985-1.003, 0.994-1.016, 0.996-1.001. The
        row through ``torch.compile`` (``--row``, three processes): 0.988-0.999 at 1 thread, 0.997-1.012 at 2.
        Elsewhere false (not measured; AVX2 has no vscalefps)."""
        return self.scalef and not self._intel_avx512()

    @property
    def evaluates_exp_for_bf16_results_in_degree_five(self) -> bool:
        """Whether an exp whose every result is rounded to bf16 through sums, products and quotients only (bf16
        softmax: ``elementwise.reaches_only_bf16``) evaluates ``mathlib._exp_nonpositive_for_bf16``: its polynomial in
        degree 5 and r = x - n ln 2 in one FMA, two FMAs fewer per element (28 FMA-pipe ops per 64 elements where
        there were 36), within 2.7 ulp of e**x for x >= -20 and 5 below where the degree-6 exp is within ~1;
        a bf16 result's rounding is 2**-9. Other bits in ~50-60 of bf16 softmax [4096, 1024]'s 4.2M words, about as
        many correctly rounded against float64 as the degree-6 code's and eager's (randn: 75 against 37 and 60;
        randn * 10: 87 against 72 and 58; every output within a bf16 ulp). Zen 4 (AVX-512 without FP16; session 37
        bfsm37, ``bench_bf16_words.py --switch exp-degree-5 --rows b16``, two builds each, interleaved medians of 41
        rounds, three processes at 1 thread and four at 2): bf16 softmax's kernel 0.896-0.903 of the time at 1
        thread, 0.88-0.96 at 2 (the degree-5 polynomial alone 0.945-0.957 / 0.94-0.955). AVX2 (no vscalefps:
        ``_exp_nonpositive``'s scale by 2**(n + 24), r in one FMA too; 10 -> 8 FMA-pipe ops per vector), Zen 3
        (session 39 reg39n, ``--switch exp-degree-5 --force --rows b16``, two builds each, interleaved medians of
        31 rounds): bf16 softmax's kernel 0.873-0.880 of the time at 1 thread, 0.889-0.892 at 2 (the degree-5
        polynomial with r's two FMAs 0.916-0.945 at 1). Intel's AVX-512 cores keep the degree-6 exp (not
        measured)."""
        return (self.scalef and not self._intel_avx512()) or self._avx2_only()
