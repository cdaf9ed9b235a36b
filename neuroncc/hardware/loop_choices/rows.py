"""How a softmax-like or norm-like row loop is shaped on a CPU: which rows it keeps widened or cached, where its
delayed write and its next row's prefetches go, how its NaNs are found, where its write buffers sit, its bursts.

May import: this package's ``base``.
"""

from __future__ import annotations

from neuroncc.hardware.loop_choices.base import ChoiceBase


class RowLoopChoices(ChoiceBase):
    """How a softmax-like or norm-like row loop is shaped (a part of
    :class:`~neuroncc.hardware.loop_choices.LoopChoices`)."""

    __slots__ = ()

    @property
    def team_guided_chunks(self) -> int:
        """How a 2+-thread OpenMP team splits a phase's rows (``executors/cpu/threads.py``, the team entry
        ``codegen/llvm/team_entry.py``; read by an executable when it is made). 0: 4 chunks per thread of one
        length, taken in order from a shared counter. G > 0: a guided schedule, each take the rows left over
        4 (two per thread of 2), down to chunks of 1/G of a thread's share, so the threads end within a small
        chunk of each other where equal chunks leave them up to a whole chunk (an eighth of the rows) apart.
        Zen 4, 2 threads (session 37 team37): per-thread clock stamps of the team's calls (softmax [4096, 1024],
        x*w+b [8192, 1024]) showed both threads start within 1-2 us of the call (after an eager ATen call as after
        another team call) and end 60-150 us apart with equal chunks (the median), 6-12 us apart guided; the
        kernels against equal chunks (``bench_bf16_words.py --switch team-guided --value 32``, two builds each,
        interleaved medians of 41 rounds, four processes): softmax 0.94-0.99, row (a) 0.92-1.00, LayerNorm
        0.95-1.00, x*w+b 0.98-1.01, RMSNorm 1.00-1.02, the bf16 rows 0.92-1.01, cross-entropy's kernels 0.95-1.00,
        the AdamW step 0.93-1.00: faster in the processes where the threads fall out of step, even elsewhere.
        Finer chunks of one length cost each chunk's start (a row's prefetches begin again: cross-entropy's forward
        1.05-1.30x with 32-256 chunks per thread); coarser ones (1-2 per thread: the read streams farther apart)
        measured even. AVX2 too (Zen 3, 2 threads, session 39, ``bench_bf16_words.py --switch team-guided --value 32``,
        two builds each, interleaved medians of 25-41 rounds, the same bits): float32 softmax [4096, 1024]'s kernel
        (sm39, four processes) 0.897, 0.989, 0.941, 0.959 (the most where equal chunks took 1.04-1.05 ms, guided
        0.93-0.94); row (a) (a39, its gelu divided, two processes) 0.922-0.938; cross-entropy's kernels (sm39,
        ``bench_cross_entropy.py --variants main,guided32``) 1.003 / 1.007; LayerNorm, x*w+b and RMSNorm (ln39, three
        processes on a noisy host) LayerNorm 0.91-0.92 / 1.17-1.22 / 1.00, x*w+b 1.04-1.05 / 0.99-1.01 / 1.00-1.02,
        RMSNorm 1.00 / 1.03-1.05 / 0.97: faster where the threads fall out of step, as on Zen 4, the memory-bound rows
        even but for one process. Intel's AVX-512 cores and CPUs without AVX2 (not measured) keep equal chunks."""
        zen4 = self.has("avx512f") and not self._intel_avx512()
        return 32 if zen4 or self._avx2_only() else 0

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
        0.984-0.996 at 2, ``bench_bf16_words.py --switch widen-again``, two builds each, 41 rounds). Every AVX-512 CPU
        but Intel's (:meth:`_intel_avx512`: not
        measured there); AVX2 keeps the row its exp pass reads widened (:attr:`caches_widened_bf16_rows_for_exp`)."""
        return self.has("avx512f") and not self._intel_avx512()

    @property
    def finds_bf16_row_nans_by_the_sum(self) -> bool:
        """Whether a softmax-like row loop whose max pass reduces a bf16 row widened to float32 (bf16 softmax) finds
        its rows' NaNs by the sum as :attr:`finds_row_nans_by_the_sum` (AVX2's) does for every such loop, a NaN sum's
        row rerunning its max pass (:attr:`reruns_the_exp_pass_only_for_another_max`): the max loop 32 -> 16 vector
        instructions per 64 elements on Zen 4 with :attr:`widens_bf16_rows_again_in_the_exp_pass`. The same bits. Zen 4
        (session 34 bfsoft34, bf16
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
        return self._avx2_only()

    @property
    def writes_delayed_group_before_the_exponentials(self) -> bool:
        """Whether each group of a softmax-like row pass (``prefetch.spread_loop``: the next row's prefetches, the
        group's exponentials) writes its share of the previous row (``delayed_writes.py``) before the exponentials
        rather than after them: the sum's loop then follows a row's last exponentials directly. Zen 3 (AVX2), ten
        one-process A/Bs of 61-151 rounds (session 25 softmax25): float32 softmax [4096, 1024] medians 0.980 of
        the time at 1 thread (0.954-1.019) and 0.986 at 2 (0.963-1.056); bf16 0.918-0.977 and 0.945-0.980 in four
        (``bench_bf16_words.py --switch write-first``); the same bits. AVX-512: not measured, as before."""
        return self._avx2_only()

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
    def takes_the_next_row_max_in_the_exp_loop(self) -> bool:
        """Whether a softmax row loop's exp loop (the carrier of the previous row's delayed write) also takes the next
        row's max, with no max pass of the row's own (``codegen/llvm/next_max.py``): float32 rows where the write is
        fused into the exp loop (:meth:`writes_delayed_elements_in_the_exp_loop`), their prefetches two rows ahead
        (``next_max.ROWS_AHEAD``: the next row's loads then find it in the L2); bf16 rows in the exp loop's own
        vectorized loop, a flagless max (:meth:`finds_bf16_row_nans_by_the_sum`). The same bits. Zen 4 (AVX-512
        without FP16; session 35 sm35, softmax [4096, 1024], two builds each, interleaved medians of 31-41 rounds):
        float32 at 1 thread 0.81-0.89 of the time on fresh outputs (nine processes), 0.74-0.80 into held outputs,
        0.96-0.98 on L2-resident rows; at 2 threads 0.91-0.96 (seven processes; 0.99-1.01 in two, near the
        machine's bandwidth). With the prefetches one row ahead the next row's loads waited for memory: 0.86-1.11
        at 1 thread, 0.93-1.09 at 2; the prefetches two rows ahead without the fusion 0.94-0.95 at 1 thread,
        0.90-0.97 at 2. bf16 at 1 thread 0.93-1.01 (seven processes; 0.93-0.98 in six), at 2 threads 0.94-1.03
        (five). AVX2 and Intel's AVX-512 cores (:meth:`_intel_avx512`) keep their code: not measured there."""
        return self.has("avx512f") and not self._intel_avx512()

    @property
    def finds_next_row_max_nans_by_the_sum(self) -> bool:
        """Whether a float32 softmax row loop whose exp loop takes the next row's max
        (:meth:`takes_the_next_row_max_in_the_exp_loop`) takes it without the NaN magnitudes beside it (a ``vandps``
        and a ``vpmaxud`` per 16 elements in the FMA-bound exp loop), the row's NaNs found by its sum as
        :meth:`finds_row_nans_by_the_sum` (AVX2's) finds them: a NaN-sum row runs its max pass again with the
        magnitudes, and its exp pass where that max differs (:meth:`reruns_the_exp_pass_only_for_another_max`). The
        same bits. Zen 4 (AVX-512 without FP16; session 36 sm36, float32 softmax [4096, 1024]'s kernel, two builds
        each, interleaved medians of 41 rounds): ``bench_bf16_words.py --switch next-max-nans-by-sum`` 0.946 / 0.925
        and 0.924 / 0.916 of the time at 1 thread, 0.988 / 0.990 and 0.991 / 0.993 at 2 (``--switch nans-by-sum
        --force``, the same code: 0.919 / 0.926 and 0.994 / 1.011); ``bench_softmax_prefetch.py --variants
        flag,flagless`` 0.95-0.97 on the fastest input/output pair and 0.92 on the slowest at 1 thread (two
        processes), 1.00 / 0.95 at 2 (two); on L2-resident rows 0.91-0.94. The price is a wholly -inf row's max pass run
        twice (a fully masked attention row): every row -inf 1.02-1.05 at 1 thread, half of them 0.97-0.99. AVX2 and
        Intel's AVX-512 cores (:meth:`_intel_avx512`) keep their code: not measured there."""
        return self.has("avx512f") and not self._intel_avx512()

    @property
    def carries_the_row_sum_in_lanes_through_the_groups(self) -> bool:
        """Whether a float32 softmax row whose write is fused into its exp loop
        (:meth:`writes_delayed_elements_in_the_exp_loop`) keeps its sum in vector lanes through all the row's groups
        (``delayed_writes.DelayedGroups.around_groups``: one horizontal sum a row) instead of reducing them at the end
        of each group of 256 elements (the next group's lanes started from that sum: a chain of ~8 adds and the
        reduction every group). The sum's terms are added in another order, so a row's sum, and its outputs, may
        differ by an ulp or so (as accurate: on [4096, 1024] of randn its largest relative error against float64
        5.4e-7 where the groups' form had 6.9e-7, the rows' sums' largest deviation from 1 1.6e-7 where 3.8e-7). Zen 4
        (AVX-512 without FP16; session 36 sm36b, float32 softmax [4096, 1024]'s kernel, ``bench_bf16_words.py --switch
        row-sum-lanes``, two builds each, interleaved medians of 41-61 rounds, five processes): 1 thread 0.942 /
        0.942, 0.946 / 0.951, 0.948 / 0.958, 0.964 / 0.940, 0.930 / 0.935 of the time; 2 threads 0.986 / 1.001,
        0.992 / 0.981, 0.995 / 0.994, 0.971 / 0.968, 0.979 / 0.992; L2-resident rows ([64, 1024]) 0.95 at 1 thread.
        bf16 rows (their sums in their groups' own vectorized loops, pairs) keep their code. AVX2 and Intel's
        AVX-512 cores (:meth:`_intel_avx512`) keep theirs: not measured there."""
        return self.has("avx512f") and not self._intel_avx512()

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
        its sum is NaN (``codegen/llvm/nan_rows.py``): a NaN in the row makes the sum NaN. The same bits. Zen 3 (session
        27
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
        return self._avx2_only()

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
        The same loops and bits. Zen 4 (session 40 bfsm40; its write loop loads the two halves of a row's
        exponentials 2 KiB apart beside one ``vmovntdq`` per 32 words, the caches on the frame's 4 KiB boundaries
        without this; ``--switch word-write-buffers --force``, two builds each, interleaved medians of 41-61
        rounds, on 1 / on 2 (off 2) of "off 1", one process each): output 64 past a 4 KiB boundary, 1 thread 0.929
        / 0.925 (0.958), 0.933 / 0.888 (0.960), 0.957 / 0.957 (1.021), 0.907 / 0.898 (0.967), 0.934 / 1.005
        (1.012); 2 threads 0.955 / 0.951 (1.010), 0.915 / 0.958 (1.033), 0.980 / 0.990 (1.023), 0.971 / 0.908
        (1.061), 0.927 / 0.901 (0.891); 0, 192 and 1088 past and heap outputs within this host's spread (heap:
        0.90-1.01 at 1 thread, 0.99-1.04 at 2, "off 2" 0.97-1.02). Intel's AVX-512 cores keep their code: not
        measured."""
        return self.has("avx2") and not self._intel_avx512()

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
        return self._avx2_only()

    @property
    def means_a_row_early(self) -> bool:
        """Whether a row loop whose first stage is a variance over a widened bf16 row computing its own mean (bf16
        LayerNorm as torch.compile hands it over: ``stages.SharedMean``) runs each row's deviation pass, the next
        row's mean pass, then the row's write pass, so that one row's reductions (horizontal sums, rsqrt: ~80 ns a
        row, session 23) overlap the other row's loops; its prefetches go two rows ahead
        (``early_means.EARLY_MEAN_PREFETCH_ROWS``). The same bits. Zen 3, bf16 LayerNorm [8192, 1024]'s kernel:
        0.946-0.950 of the time at 1 and 2 threads (session 25 bf16ln25); float32 LayerNorm (memory-bound) 1.10: not
        taken. Zen 4: with :attr:`caches_variance_deviations` (its numbers), without which it does not apply, or
        with :attr:`takes_bf16_variance_by_dot_products` (its rows three ahead); Intel's AVX-512 cores keep their code
        (not measured there)."""
        return self.has("avx2") and not self._intel_avx512()

    @property
    def takes_the_variance_in_one_pass(self) -> bool:
        """Whether a float32 variance that computes its own mean (LayerNorm's var_mean) reads its row once, summing x,
        x - c and (x - c)^2 with c the mean of the row's first 16 elements (``shifted_moments.py``), instead of a
        mean pass and then a deviation pass: the mean keeps its bits, the variance is taken about the mean in float64
        (other bits in its last places, as close to float64's or closer); a row whose shift is far from its mean takes
        the deviation pass again. Zen 4 (AVX-512 without FP16: not :meth:`_intel_avx512`; session 36 ln36, float32
        LayerNorm [8192, 1024]'s kernel, ``bench_bf16_words.py --switch one-pass-variance --rows c``, two builds
        each, interleaved medians of 41 rounds): 0.87-0.98 of the time at 1 thread in five processes, 0.96-1.01 at 2
        (memory-bound there); held outputs 64 past a page 0.89, after an eager call each round 0.94-0.95. bf16 rows
        (over element pairs) keep their passes: their pair sums need as many adds in one pass as in two, and the
        write pass would subtract the mean again (1.10-1.12 of the time at 1 thread). AVX2 and Intel's AVX-512
        cores keep their code (Intel not measured; Zen 3, AVX2, session 39 ln39, the same A/B with ``--force``, three
        processes: 1.13-1.21 of the time at 1 thread, 1.00-1.11 at 2, so AVX2 keeps its two passes).

        Switched off after session 36 (the zoo's bf16-parameter training of bert, gpt2 and convnext read losses
        0.015-0.14 from float64, eager's 0.0005, differently from run to run), on again since session 37 (lnfix37):
        where a variance's operand was a widened bf16 value the one pass did not unroll in element pairs (a sum of
        two bf16 products' float32 words), the write stage loaded its x - mean from the deviation row cache
        (:attr:`caches_variance_deviations`) that only a deviation pass stores: uninitialized stack. A variance read
        in one pass now gets no deviation cache (``emit._cache_rows``); its write stage subtracts the mean."""
        return self.has("avx512f") and not self._intel_avx512()

    @property
    def one_pass_row_prefetch_lines(self) -> int:
        """Lines of the next row that a cheap row loop whose variance takes one pass (:attr:`takes_the_variance_in_one
        _pass`: float32 LayerNorm) prefetches, the row's first ones, in its first burst (``prefetch.row_bursts``);
        the core's prefetchers fetch the rest; 0: all of them, in a burst before each pass (32 and 32 for rows of
        64 lines). Zen 4 (AVX-512 without FP16; session 40 ln40, float32 LayerNorm [8192, 1024]'s kernel, two builds
        each, interleaved medians of 41 rounds in one process, the same bits, ratio to the two bursts of 32): 16
        lines 0.90-0.97 of the time at 1 thread in seven processes, 1.01-1.05 in an eighth, the host's slow mode
        (the kernel 2.9 ms, the copy roof 1.9); 8 lines 0.90-1.02, 4 lines 0.93-1.08, 24 and 32 lines (the first
        burst alone) 0.94-0.96 fast and 1.10-1.25 slow, none 0.88-1.12; at 2 threads 4-8 lines and none 0.95-1.03
        (memory-bound there); ``bench_bf16_words.py --switch one-pass-row-lines --rows c`` 0.924-0.956 at 1 thread
        (three processes), 0.97-1.01 at 2 (two). RMSNorm's rows (no variance): 16 lines 0.95-1.17 (session 40);
        since session 42 none at all (:attr:`leaves_sum_rows_to_the_core_prefetchers`). AVX2 and Intel's AVX-512
        cores keep theirs (not measured)."""
        return 16 if self.has("avx512f") and not self._intel_avx512() else 0

    @property
    def leaves_sum_rows_to_the_core_prefetchers(self) -> bool:
        """Whether a cheap row loop of a float32 row's float sum and then its write (RMSNorm: the mean of x*x, then
        x * rsqrt(...) * w; ``prefetch.leaves_sum_rows_to_the_core``) sends no bursts of the next row's lines before
        its passes (:attr:`bursts_before_each_row_pass`), leaving the rows to the core's own prefetchers and the page
        touches (:attr:`touches_input_pages_rows_ahead`). Zen 4 (AVX-512 without FP16; session 42 rms42, RMSNorm
        [8192, 1024]'s kernel, two builds each, interleaved medians of 41 rounds in one process, the same bits;
        ``bench_bf16_words.py --switch sum-rows-core --rows rms``, ratio to the two bursts of 32 lines): 0.76-0.83 of
        the time at 1 thread with its input from memory (``--cold``, five processes, three output offsets), 0.79-0.83
        warm (two), at 2 threads 0.98-0.99 in two processes and 0.77-0.82 in two (0.94-0.96 in a scratch A/B), never
        slower. In a scratch A/B with both kernels writing one held output the kernel went from 1.22-1.26x a
        non-temporal copy of its bytes to 0.95-1.02x, where LayerNorm's one pass (16 lines) ran at 0.97-1.11x; without
        the page touches too it takes 1.15-1.18x the time (the touches carry the row now). Fewer lines in the first
        burst alone lose less (4 lines 0.80, 8 lines 0.91-0.98, 16 lines 1.00-1.03, the first 32 alone 1.17-1.20:
        the more lines go out at the row's start, the slower). Rows of 512, 768, 2048 and 4096 float32 the same way
        (0.77-0.91, cold, one process). LayerNorm keeps its 16 lines (none 0.96-1.05, two processes), bf16 RMSNorm its
        bursts of 16 (none 1.03-1.06 cold, 0.98 warm: float32 rows only). AVX2 and Intel's AVX-512 cores keep their
        bursts (AVX2's code on Zen 4's cores, ``--force`` with ``NEURONCC_CPU=znver3``, no page touches there: 0.92
        cold at 1 thread, 0.99 at 2, one process each; not measured on Zen 3, where session 21 found RMSNorm's
        bursts capped at 16-24 lines 7-26% slower)."""
        return self.has("avx512f") and not self._intel_avx512()

    @property
    def touches_streamed_output_rows_ahead(self) -> int:
        """Rows ahead at which a row loop prefetches (``prefetchnta``) one line of each 4 KiB page of its streamed
        (non-temporal) outputs' row (``prefetch.emit_touch_pages_ahead``), so that the page's translation is in the
        TLB when the row's stores reach it; 0: none. Zen 4 (AVX-512 without FP16), with
        :attr:`touches_input_pages_rows_ahead`, session 40 stream40: a KVM guest on 4 KiB pages (the benchmarks'
        inputs and held outputs; each TLB miss a nested walk) where a standalone C loop of the kernel's shape ran
        0.54-0.67 of its time with both buffers on 2 MiB pages, and 0.63-0.68 of it on 4 KiB pages with the two
        page touches; ``bench_bf16_words.py --switch touch-pages --cold``, 1 thread, both touches against none,
        six processes: softmax [4096, 1024] 0.78-0.96, LayerNorm [8192, 1024] 0.63-0.90, RMSNorm 0.78-0.98 (1.07-1.09
        in one); bf16 softmax 0.78-0.94, bf16 LayerNorm 0.84-0.92 (1.02-1.03 in one of four); warm at 2 threads
        0.98-1.03 (RMSNorm 0.79 in one of three), bf16 0.93-0.97 (one). The output's touch alone (``--switch
        touch-output``): softmax 0.93-1.03 and LayerNorm 0.87-1.09 (six processes), RMSNorm 0.89-0.97 (four); 1, 4
        and 8 rows ahead the same within the noise. Re-measured on the merged tree (the lead, both touches, ``--cold``,
        1 thread, one process each): softmax 0.69-0.96 and LayerNorm 0.73-0.98 (two), bf16 LayerNorm with
        :attr:`takes_bf16_variance_by_dot_products` 0.76-0.88 (one); RMSNorm 1.00-1.10x in three processes in the
        host's fast mode (its kernel 1.8-2.6 ms) and 0.76-0.89 in three in its slow mode (3.3-3.6 ms): kept, the
        walks cost most where the host is slow. AVX2 and Intel's AVX-512 cores: none (not measured)."""
        return 2 if self.has("avx512f") and not self._intel_avx512() else 0

    @property
    def touches_one_pass_rows(self) -> bool:
        """Whether a row loop of one memory-bound pass (one map stage, no transcendental per element, its output
        streamed: x*w+b) takes the touches of :attr:`touches_input_pages_rows_ahead` and
        :attr:`touches_streamed_output_rows_ahead` too (``prefetch.touches_one_pass``). Zen 4 (AVX-512 without
        FP16), session 40 stream40, ``bench_bf16_words.py --switch touch-one-pass``: x*w+b [8192, 1024] 0.74-0.79 of
        the time at 1 thread (``--cold``, four processes), 1.00-1.01 at 2 (warm, one); row (a)'s gelu (a
        transcendental, compute-bound) 0.99-1.01 with them, so it keeps its code. AVX2 and Intel's AVX-512 cores:
        none (not measured)."""
        return self.has("avx512f") and not self._intel_avx512()

    @property
    def touches_wide_row_pages_up_to_bytes(self) -> int:
        """The longest rows (bytes) whose pages a cheap row loop of several passes (no transcendental per element:
        LayerNorm, RMSNorm) touches ahead (:attr:`touches_input_pages_rows_ahead`, and its streamed output's
        :attr:`touches_streamed_output_rows_ahead`; ``prefetch.touched_row_max_bytes``) where it does not prefetch
        its rows (longer than ``prefetch.ROW_MAX_BYTES``, 16 KiB); at most ``ROW_MAX_BYTES``: those it prefetches
        only. Zen 4 (AVX-512 without FP16): 32 KiB (8192 float32: a 70B LLaMA's width), session 42 wide42: such rows
        had no page touches at all (a TLB miss a page, a nested walk in a KVM guest, four pages a row each way);
        ``bench_bf16_words.py --switch wide-row-touches``, two builds each, interleaved medians of 31 rounds, ratio to
        none: RMSNorm [1024, 8192]'s kernel 0.71-0.86 of the time at 1 thread with its input from memory (``--cold``,
        three processes), 0.87 warm, 0.93-0.94 at 2 threads (two); LayerNorm [1024, 8192] 0.73-0.83 cold, 0.75 warm,
        0.94-0.96 at 2; the same bits; rows of up to 16 KiB (the roofline's, [2048, 4096]) build the same code.
        Touches 2, 4 or 16 rows ahead, or the output's 1 or 4, within the noise of these. Longer rows not measured;
        AVX2 (no page touches) and Intel's AVX-512 cores: 0, their code unchanged."""
        return 1 << 15 if self.has("avx512f") and not self._intel_avx512() else 0

    @property
    def touches_input_pages_rows_ahead(self) -> int:
        """Rows ahead at which a row loop that prefetches its inputs' next rows (``prefetch.rows_to_prefetch``)
        prefetches (``prefetchnta``) one line of each 4 KiB page of their row (``prefetch.emit_touch_pages_ahead``):
        the page's translation is then in the TLB when the next rows' own prefetches (one or two rows ahead) reach
        it; 0: none. Zen 4 (AVX-512 without FP16), session 40 stream40: the standalone loop with its output on 2 MiB
        pages and its input on 4 KiB ones ran 0.72-0.84 of its time with the input touched 4, 8 or 16 rows ahead (all
        the same); in the kernels with the output's touch (:attr:`touches_streamed_output_rows_ahead`) on both ways
        (``bench_bf16_words.py --switch touch-input --cold``, 1 thread, two processes): softmax 0.97-1.00, LayerNorm
        0.87-0.98, RMSNorm 0.89-1.00. AVX2 and Intel's AVX-512 cores: none (not measured)."""
        return 8 if self.has("avx512f") and not self._intel_avx512() else 0

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
