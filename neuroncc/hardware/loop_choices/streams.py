"""How a streamed map stage and an online log-sum-exp (cross-entropy) move their data on a CPU: chunk and piece
lengths, prefetch distances, block maxima ahead, sums apart.

May import: this package's ``base``.
"""

from __future__ import annotations

from neuroncc.hardware.loop_choices.base import MEMORY_BURST_LINES, ChoiceBase


class StreamChoices(ChoiceBase):
    """How streamed map stages and online log-sum-exps move their data (a part of
    :class:`~neuroncc.hardware.loop_choices.LoopChoices`)."""

    __slots__ = ()

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
        1.02-1.04. The row through ``torch.compile`` did not show it (0.98-1.01, two runs of 31 and 61 rounds).

        Zen 4 (AVX-512 without FP16): 16 lines, with its blocks of 4096 elements and its prefetches into L2
        (:attr:`online_block_elements`): half the chunks' horizontal adds and bursts. Cross-entropy's forward
        [512, 32000] with the other two, against 8 lines (session 35 xent35, ``bench_cross_entropy.py``, two builds,
        interleaved medians of 25-31 rounds, two runs): 0.91-0.97 of the time at 1 thread, 0.92-0.94 at 2; 32 lines
        1.08-1.11 (one run)."""
        if not self.has("avx512f"):
            return 32
        return 8 if self._intel_avx512() else 16

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
        1.15 / 1.07. Zen 4 (AVX-512 without FP16): 4 (4 zmm vectors a piece). Its backward kernel against the
        buffered pieces (session 35 xent35, ``bench_cross_entropy.py --kernels backward``, two builds, one shared
        input, interleaved medians of 25-31 rounds): 0.81-0.87 of the time at 1 thread (four runs), 0.958-0.985 at 2
        (three runs); 2 lines 0.79-0.88 / 0.96-0.98, 8 lines 0.83-0.90 at 1 thread, 16 lines 1.58-1.64 (spilled).
        Intel's AVX-512 cores: 0 (not measured: their code is unchanged)."""
        return 0 if self._intel_avx512() else 4

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
        """How many blocks ahead (:attr:`online_block_elements` elements each) the online log-sum-exp's
        exponential loops prefetch x for the block max loops to come (``online._next_blocks``). 2 without
        AVX-512, with :attr:`online_exp_prefetch_piece_lines` (its numbers): a block's exponentials take ~650
        cycles at the exp microkernel's rate, about two to three memory latencies on this VM, too short for its 64
        lines to arrive before the next max loop reads them; in the same runs 3 blocks ahead read 0.91-0.94 /
        0.95-0.97 where 2 read 0.91-0.93 / 0.94-0.96, 4 blocks 0.92-0.94 / 0.96-0.97. With AVX-512: 1 (its code
        unchanged)."""
        return 1 if self.has("avx512f") else 2

    @property
    def online_block_elements(self) -> int:
        """Elements of a block of the online log-sum-exp (``codegen/llvm/online.py``): its max loop, then its
        exponentials against the running max while the block is in L1. 1024 (4 KiB of float32) but on Zen 4 (AVX-512
        without FP16), where it is 4096 (16 KiB: the block, and the next one as it is prefetched, fill the 32 KiB L1),
        with 16-line chunks (:attr:`online_exp_chunk_lines`), the block max loops without the NaN bits
        (:attr:`online_block_max_without_nan_bits`) and x prefetched into L2 4 blocks ahead
        (:attr:`online_l2_prefetch_blocks_ahead`). A block's max loop waits for the block's loads and its
        reduction before the block's exponentials can start (its exp loop's FMA pipes idle meanwhile): a quarter as
        many blocks, a quarter as many waits. Other bits than 1024's blocks (the running max grows at other places,
        the block's float32 partial sum carries 4x as many chunk sums), as accurate.

        Zen 4, cross-entropy's forward kernel [512, 32000], against main's code (1024-element blocks, 8-line chunks,
        the max loops with their NaN bits, prefetches 1 block ahead into L1 alone; session 35 xent35,
        ``bench_cross_entropy.py --kernels forward``, one shared input, two builds each, interleaved medians of 25-31
        rounds, three runs): the four together 0.78-0.83 of the time at 1 thread, 0.78-0.81 at 2; without the NaN-bit
        change 0.82-0.84 / 0.83-0.84, with 8-line chunks 0.835-0.86 / 0.87, with 2048-element blocks (8 blocks ahead
        into L2) 0.79-0.81 / 0.80-0.81; with L2 prefetches alone (1024-element blocks, 4 ahead) 0.94 / 0.92-0.93.
        With x resident in the L2 (``bench_cross_entropy.py --memory l2``: the same loops and addresses on 512 KB
        of physical rows) main took 3.8-4.1 ms at 1 thread against the exp loop's 2.65 ms floor, this code 3.4:
        most of the kernel's excess was its loops' structure, not memory."""
        return 4096 if self.has("avx512f") and not self._intel_avx512() else 1024

    @property
    def online_l2_prefetch_blocks_ahead(self) -> int:
        """How many blocks ahead (:attr:`online_block_elements` each) the online log-sum-exp's exponential loops also
        prefetch x into L2 (``prefetcht2``, ``online._next_blocks``), beside :attr:`online_prefetch_blocks_ahead`'s
        prefetches into L1; 0: none. Zen 4 (AVX-512 without FP16): 4 (64 KiB ahead with its 4096-element blocks),
        so that the L1 prefetches of the next block (and its max loop) find it in L2: each 4 KiB page of x starts a
        new stream, where the hardware's prefetchers stop. Cross-entropy's forward kernel [512, 32000] with
        :attr:`online_block_elements`'s other changes (session 35 xent35, interleaved in one process, at 1 / 2
        threads): 2 blocks ahead 0.797 / 0.80-0.83 of main's time, 4 ahead 0.78-0.83 / 0.78-0.81; without them (the
        other three changes alone) 0.98-1.01 / 1.00-1.01; ``prefetcht1`` 2 ahead 0.905 / 0.86 where ``prefetcht2``
        read 0.885 / 0.84, ``prefetcht0`` and ``prefetchnta`` 0.97-1.00. Elsewhere 0 (not
        measured)."""
        return 4 if self.has("avx512f") and not self._intel_avx512() else 0

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
    def takes_the_next_block_max_in_the_exp_loop(self) -> bool:
        """Whether the online log-sum-exp (``online._fused_chunks``) takes each block's max in the previous block's
        exponential loop: a vector of the next block loaded beside each vector of this block's, into a running max in
        vector lanes (a load and a vmaxps per vector, off the FMA pipes that bound the loop), so that only a row's
        first block runs a max loop of its own; the block's sums in the vector lanes of the loop they replace
        (``reductions.LaneSums``), reduced once per block instead of once per chunk (each chunk's horizontal sum
        started the next chunk's sums: a chain of ~50 cycles the exponentials waited behind); no prefetches of the
        next block into L1 (the loop loads it: :attr:`online_prefetch_blocks_ahead` is for the max loops). The same
        max values (and NaN rows' bits: taken again with the max loops as before), the sums in another order (as
        accurate). Needs the block max loops without the NaN bits (:attr:`online_block_max_without_nan_bits`).

        Zen 4 (AVX-512 without FP16). Cross-entropy's forward kernel [512, 32000] against the max loops (session 36
        xent36, ``bench_cross_entropy.py --variants unfused,main --memory dram,l3,l2``, two builds each, interleaved
        medians of 25 rounds, five processes): 0.90-0.94 of the time at 1 thread on its logits, 0.88-0.97 with them
        in the L3, 0.91-0.94 in the L2 (one process 0.94-1.01); at 2 threads 0.98-1.03 on the logits (there it reads
        memory at ~31 GB/s either way), 0.88-0.95 in the L3 and L2. The max alone in the loop, the sums per chunk as
        before (the same bits): 0.97-0.99 at 1 and 2 threads; with the L1 prefetches kept: as without them (0.99-1.02
        at 1 thread, 0.96-1.01 at 2). Elsewhere false (not measured)."""
        return self.has("avx512f") and not self._intel_avx512()

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
        AVX-512: false (not measured: its code is unchanged), but on Zen 4 (AVX-512 without FP16), where the loop
        without them has a quarter of the instructions: cross-entropy's forward with
        :attr:`online_block_elements`'s other changes, against the loops with them (session 35 xent35, two builds each,
        interleaved medians of 25-31 rounds, two runs): 0.94-1.00 of the time at 1 thread, 0.95-0.98 at 2."""
        return not self.has("avx512f") or not self._intel_avx512()

    @property
    def alias_window_bytes(self) -> int:
        """How far past an input (modulo the 4 KiB alias period) a large output starting there is 4K-aliased with
        it: a kernel's loads of the input then wait on its older stores to the output whose low 12 address bits
        match (``hardware/host.py``: ``aliased_distances``, ``placement_shift``, which places outputs at 0 or at
        least this far past each input, or before it). A multiple of the cache line dividing 4096 (the ``neuron``
        device's large blocks step through the page by it).

        Without AVX-512, and on Intel's AVX-512 cores (not measured there): 256. Zen 3 (RMSNorm and LayerNorm
        [8192, 1024], the output at a chosen distance d past the input, 1 and 2 threads; session 13): d = 32 9-33%
        slower than d = 0, 64 4-15%, 128 and 192 up to 7%, 256 to 3072 and outputs before their input within 3%.

        Zen 4 (AVX-512 without FP16): 512, where float32 softmax's fused exp loop (which loads the next row ahead of
        its delayed stores) is still slow at 256-384 past. ``bench_placement.py --sweep``, session 41 place41 (each
        row's kernel into outputs d past its input on huge pages, interleaved, against d = 0; three processes):
        softmax [4096, 1024] at 1 thread 1.17-1.57 at 64-192, 1.04-1.08 at 256-320, 1.00-1.04 at 384, 0.97-1.04 from
        448 (-256: 0.96-1.02); at 2 threads 1.01-1.46, 1.00-1.22, 1.00-1.09, 1.00-1.04. LayerNorm [8192, 1024] 1.11-1.20
        at 64 at 1 thread, x*w+b and RMSNorm 1.04-1.09; the bf16 rows and row (a) within 4% past 64 at 1 thread (a up
        to 1.09 at 2). The rows through ``torch.compile`` with the output's ring storage 256-384 past the input, this
        window against 256 (``benchmarks/bench_alias_window.py``, 21-41 rounds): softmax 0.84-0.97 at 1 thread in
        four processes of five (0.99-1.23 in the fifth, load 1.9), 0.79-1.05 at 2 (even); the other rows within the
        0.92-1.04 that one placement for both gave. Session 34 mem34
        found d = 0 itself a few % slow at 1 thread on Zen 4 (RMSNorm 0.92-0.96 of it past 128 here), but the rows
        through ``torch.compile`` with 0 to 1023 counted aliased ran 0.97-1.03 of 1 to 255's time: 0 stays placed."""
        return 512 if self.has("avx512f") and not self._intel_avx512() else 256
