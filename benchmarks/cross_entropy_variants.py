"""Cross-entropy's code variants for ``bench_cross_entropy.py`` (its module docstring lists them): :func:`variant`
switches the code generator's decisions (``CpuTarget`` properties, ``online``/``prefetch``/``map_stages`` hooks) to
a variant's for the builds inside, and puts every one back after.
"""

from __future__ import annotations

import contextlib

from llvmlite import ir

from neuroncc.codegen.llvm import mathlib, online, prefetch
from neuroncc.codegen.llvm.scalars import I8, I32, I64
from neuroncc.hardware.host import CACHE_LINE_BYTES, CpuTarget


#: Zen 4's code before session 35 (``before35``): the online log-sum-exp's 1024-element blocks, 8-line chunks, block
#: max loops with their NaN bits and no prefetches into L2; the gradient's pieces all through their stack buffer
BEFORE_35 = "block1024+chunks8+nanbits+l2ahead0+registers0+unfused"


@contextlib.contextmanager
def variant(name: str):
    """The code generator as variant ``name`` builds (see the module docstring), for the builds inside; ``a+b``:
    both variants' changes at once."""
    with contextlib.ExitStack() as stack:
        for part in name.replace("before35", BEFORE_35).split("+"):
            stack.enter_context(_variant(part))
        yield


@contextlib.contextmanager
def _variant(name: str):
    """One variant of :func:`variant`."""
    spread, block, burst = online.spread_loop, CpuTarget.online_block_elements, prefetch.MEMORY_BURST_LINES
    streamed, chunks = CpuTarget.streams_outputs, CpuTarget.online_exp_chunk_lines
    if name.startswith(("groups", "loop", "head")):  # these change (or are) the spread groups, not the chunks
        CpuTarget.online_exp_chunk_lines = property(lambda self: 0)  # type: ignore[method-assign]
    saved_exp, next_block, apart = mathlib.POLYNOMIAL["exp_nonpositive"], online._next_blocks, online.SUM_CHUNK_APART
    interleave = CpuTarget.polynomial_interleave
    blocks_ahead, piece_spread = CpuTarget.online_prefetch_blocks_ahead, CpuTarget.online_exp_prefetch_piece_lines
    pieces = CpuTarget.streamed_map_prefetch_pieces
    piece_lines = CpuTarget.streamed_map_piece_lines
    if "pf" in name and name.startswith(("pf", "burst")):  # the backward's input prefetched that many 16-line
        ahead = int(name.split("pf")[1])  # bursts ahead (``pf0``: none; AVX2: 2)
        CpuTarget.streamed_map_prefetch_pieces = property(lambda self: ahead)  # type: ignore[method-assign]
    amax, cached = online.COMBINERS["amax"], online._cached_then_summed
    nan_bits = CpuTarget.online_block_max_without_nan_bits
    if name.startswith("nanbits"):  # the block max loops with the NaN bits (before session 25; AVX-512's code)
        CpuTarget.online_block_max_without_nan_bits = property(lambda self: False)  # type: ignore[method-assign]
    if name == "withoutnan":  # the block max loops without the NaN bits, the row retaken where NaN (AVX2's code)
        CpuTarget.online_block_max_without_nan_bits = property(lambda self: True)  # type: ignore[method-assign]
    if name == "withnear":  # the fused blocks with the L1 stream a block ahead too (``online._next_blocks``' near)
        online._next_blocks = lambda em, source, idx, near=True: next_block(em, source, idx)
    if name.startswith("lse"):  # ``lseN_M``: the exp loops' prefetches N elements ahead into L1 and
        near, far, *far_locality = (int(part) for part in name[3:].split("_"))  # M elements ahead into L2 (0:
        online._next_blocks = lambda em, source, idx, *_: _streams_ahead(  # none; ``lseN_M_L``: with locality L)
            em, source, idx, near, far, *far_locality)
    if name.startswith("block"):  # ``blockN``: blocks of N elements (``CpuTarget.online_block_elements``)
        CpuTarget.online_block_elements = property(lambda self: int(name[5:]))  # type: ignore[method-assign]
    if name == "nonan":  # experiment: the block max loop without its NaN bits (wrong for NaN rows)
        import dataclasses
        from neuroncc.codegen.llvm.reductions import _MAX_INIT, _MAX_UPDATE
        online.COMBINERS["amax"] = dataclasses.replace(
            amax, slots=lambda d: [ir.FloatType()], init=lambda d: _MAX_INIT(d)[:1],
            update=lambda b, d, accs, x, pos: _MAX_UPDATE(b, d, accs + [ir.Constant(I32, 0)], x, pos)[:1],
            collapse=lambda b, d, accs: accs[0])
    if name.startswith("merged"):  # experiment: ``mergedN``: N chunks' exponentials in one loop, then their sums
        merged = int(name[6:])
        CpuTarget.online_exp_chunk_lines = property(lambda self: 32 * merged)  # type: ignore[method-assign]
        online._cached_then_summed = lambda em, summand, idx, partial, chunk: _merged_chunks(
            em, summand, idx, partial, chunk, merged)
    if name.startswith("buf"):  # experiment: ``bufN``: each chunk's buffer N bytes further on the stack
        CpuTarget.online_exp_chunk_lines = property(lambda self: 32)  # type: ignore[method-assign]
        online._cached_then_summed = lambda em, summand, idx, partial, chunk: _merged_chunks(
            em, summand, idx, partial, chunk, 1, int(name[3:]))
    chunk_loop = online.chunk_loop
    if name.startswith("split"):  # experiment: ``splitN``: each chunk's exp loop in N parts, a burst before each
        parts = int(name[5:])
        online._cached_then_summed = lambda em, summand, idx, partial, chunk: (summand, idx, partial, chunk)
        online.chunk_loop = lambda em, lo, hi, body, ahead, lines, whole, *spread: _split_chunks(
            em, lo, hi, body, ahead, lines, whole, parts)
    if name.startswith("burst"):  # the backward's pieces of that many lines (``burst16``: before session 25)
        lines = int(name[5:].split("pf")[0])
        CpuTarget.streamed_map_piece_lines = property(lambda self: lines)  # type: ignore[method-assign]
    if name.startswith("inloop"):  # each chunk's sum in its exp loop (before session 23; AVX-512's code)
        online.SUM_CHUNK_APART = False
    if name.lower().endswith(("i8", "i4", "i2")):  # the polynomial loops interleaved by 8, 4, 2 (AVX2: 4)
        CpuTarget.polynomial_interleave = property(lambda self: int(name[-1]))  # type: ignore[method-assign]
    if name.startswith("ahead"):  # the next blocks' prefetches that many blocks ahead (AVX2: 2, AVX-512: 1)
        CpuTarget.online_prefetch_blocks_ahead = property(lambda self: int(name[5:]))  # type: ignore[method-assign]
    l2_ahead = CpuTarget.online_l2_prefetch_blocks_ahead
    if name.startswith(("l2ahead", "l2only")):  # also (or only) prefetcht2 of the block N blocks ahead
        far = int(name[7:] if name.startswith("l2ahead") else name[6:])
        CpuTarget.online_l2_prefetch_blocks_ahead = property(lambda self: far)  # type: ignore[method-assign]
        if name.startswith("l2only"):
            CpuTarget.online_prefetch_blocks_ahead = property(lambda self: 0)  # type: ignore[method-assign]
    if name.startswith("spread"):  # each chunk's prefetches in pieces of N lines through its loop (AVX2: 2; 0: a
        lines = int(name[6:])  # burst before the chunk's loop, before session 26 and AVX-512's)
        CpuTarget.online_exp_prefetch_piece_lines = property(lambda self: lines)  # type: ignore[method-assign]
    block_max = online._block_max
    if name == "maxline":  # bound: each block's max over its first line alone (not cross-entropy: other values)
        online._block_max = lambda em, x_value, idx, lo, hi, careful: block_max(
            em, x_value, idx, lo, em.min(em.add(lo, 16), hi), careful)
    if name == "noexp":  # the memory skeleton: exp_nonpositive as its clamp alone (not cross-entropy)
        mathlib.POLYNOMIAL["exp_nonpositive"] = lambda b, x, target: mathlib._raised_keeping_nan(b, x, -104.0)
    max_ahead = CpuTarget.online_block_max_ahead
    if name.startswith("maxahead"):  # each block's max taken a block early: 1 before, 2 between the previous
        where = int(name[8:])  # block's chunks; 0 in its own block (before session 28, AVX-512's)
        CpuTarget.online_block_max_ahead = property(lambda self: where)  # type: ignore[method-assign]
    fused_max = CpuTarget.takes_the_next_block_max_in_the_exp_loop
    if name in ("unfused", "fused"):  # each block's max in its own max loop, or in the previous block's exp loop
        on = name == "fused"  # (``CpuTarget.takes_the_next_block_max_in_the_exp_loop``: Zen 4 since session 36)
        CpuTarget.takes_the_next_block_max_in_the_exp_loop = property(lambda self: on)  # type: ignore[method-assign]
    lane_sums = CpuTarget.sums_online_exponentials_apart
    if name == "lanesum":  # each chunk's sum in its exp loop by the target's choice (AVX2: apart, 16 registers), so
        # that ``fused`` can take AVX2 (it needs the sums in the loop)
        CpuTarget.sums_online_exponentials_apart = property(lambda self: False)  # type: ignore[method-assign]
    scale_fold = CpuTarget.folds_row_scale_into_exp
    if name in ("mulscale", "foldscale"):  # the backward's e**x * s as a multiply per element, or s folded into the
        on = name == "foldscale"  # exponential (``CpuTarget.folds_row_scale_into_exp``: Zen 4 since session 36)
        CpuTarget.folds_row_scale_into_exp = property(lambda self: on)  # type: ignore[method-assign]
    registers = CpuTarget.register_piece_lines
    from neuroncc.codegen.llvm import map_stages
    pieces_ahead = map_stages.emit_prefetch_pieces_ahead
    if name.startswith("farN") or name.startswith("far"):  # experiment: ``farN``: also prefetcht1 N x further
        far = int(name[3:])
        map_stages.emit_prefetch_pieces_ahead = lambda em, inputs, prefix, start, piece, pieces: (
            pieces_ahead(em, inputs, prefix, start, piece, pieces),
            _prefetch_l2(em, inputs, prefix, start, piece, far * pieces))
    team_chunks = CpuTarget.__dict__.get("team_guided_chunks")
    if name.startswith("guided"):  # ``guidedN``: the 2+-thread team's guided schedule, chunks down to 1/N of a
        guided = int(name[6:])  # thread's share (``guided0``: chunks of one length; ``CpuTarget.team_guided_chunks``)
        CpuTarget.team_guided_chunks = property(lambda self: guided)  # type: ignore[method-assign]
    lines_of = prefetch._prefetch_lines
    if name.startswith("locality"):  # experiment: ``localityN``: every prefetch with locality N (3: prefetcht0, 2:
        locality = int(name[8:])  # prefetcht1, 1: prefetcht2, 0: prefetchnta)

        def lines_with(em, intrinsic, ahead, start, elements):
            for stream in ahead:
                first = stream.at(start)
                for line in range(-(-elements * stream.itemsize // CACHE_LINE_BYTES)):
                    address = em.b.gep(first, [ir.Constant(I64, line * CACHE_LINE_BYTES)], source_etype=I8)
                    em.b.call(intrinsic, [address, ir.Constant(I32, int(stream.write)), ir.Constant(I32, locality),
                                          ir.Constant(I32, 1)])

        prefetch._prefetch_lines = lines_with
    if name == "nofetch":  # no software prefetch in either kernel (the hardware's prefetchers alone; the same bits)
        prefetch._prefetch_lines = lambda em, intrinsic, ahead, start, elements: None
    if name.startswith("t1only"):  # experiment: the backward's prefetches into L2 (prefetcht1) instead of L1
        map_stages.emit_prefetch_pieces_ahead = lambda em, inputs, prefix, start, piece, pieces: _prefetch_l2(
            em, inputs, prefix, start, piece, pieces)
    if name.startswith("registers"):  # the pieces without the row's target from registers, of N lines (AVX2: 4),
        register_lines = int(name[9:])  # or not (0)
        CpuTarget.register_piece_lines = property(lambda self: register_lines)  # type: ignore[method-assign]
    if name == "plain":
        CpuTarget.streams_outputs = lambda self, footprint_bytes: False  # type: ignore[method-assign]
    elif name.startswith("loop"):
        online.spread_loop = _one_loop
        if name != "loop":
            CpuTarget.online_block_elements = property(lambda self: int(name[4:]))  # type: ignore[method-assign]
    elif name.startswith("head"):
        online.spread_loop = lambda em, lo, hi, body, ahead: _one_loop(em, lo, hi, body, ahead, int(name[4:]))
    elif name.startswith("chunks"):
        CpuTarget.online_exp_chunk_lines = property(lambda self: int(name[6:]))  # type: ignore[method-assign]
    elif name.startswith("groups") and name != "groups":
        prefetch.MEMORY_BURST_LINES = int(name[6:])
    try:
        yield
    finally:
        online.spread_loop, prefetch.MEMORY_BURST_LINES = spread, burst
        CpuTarget.online_block_elements = block  # type: ignore[method-assign]
        mathlib.POLYNOMIAL["exp_nonpositive"], online._next_blocks = saved_exp, next_block
        online.SUM_CHUNK_APART = apart
        CpuTarget.streamed_map_piece_lines = piece_lines  # type: ignore[method-assign]
        online.COMBINERS["amax"], online._cached_then_summed = amax, cached
        CpuTarget.online_block_max_without_nan_bits = nan_bits  # type: ignore[method-assign]
        online.chunk_loop, online._block_max = chunk_loop, block_max
        CpuTarget.polynomial_interleave = interleave  # type: ignore[method-assign]
        CpuTarget.online_prefetch_blocks_ahead = blocks_ahead  # type: ignore[method-assign]
        CpuTarget.online_exp_prefetch_piece_lines = piece_spread  # type: ignore[method-assign]
        CpuTarget.streamed_map_prefetch_pieces = pieces  # type: ignore[method-assign]
        CpuTarget.streams_outputs = streamed  # type: ignore[method-assign]
        CpuTarget.register_piece_lines = registers  # type: ignore[method-assign]
        CpuTarget.online_block_max_ahead = max_ahead  # type: ignore[method-assign]
        CpuTarget.takes_the_next_block_max_in_the_exp_loop = fused_max  # type: ignore[method-assign]
        CpuTarget.folds_row_scale_into_exp = scale_fold  # type: ignore[method-assign]
        CpuTarget.sums_online_exponentials_apart = lane_sums  # type: ignore[method-assign]
        CpuTarget.online_l2_prefetch_blocks_ahead = l2_ahead  # type: ignore[method-assign]
        map_stages.emit_prefetch_pieces_ahead = pieces_ahead
        prefetch._prefetch_lines = lines_of
        CpuTarget.online_exp_chunk_lines = chunks  # type: ignore[method-assign]
        if team_chunks is None:
            if "team_guided_chunks" in CpuTarget.__dict__:
                del CpuTarget.team_guided_chunks
        else:
            CpuTarget.team_guided_chunks = team_chunks  # type: ignore[method-assign]


def _streams_ahead(em, source, idx, near: int, far: int, far_locality: int = 1) -> tuple:
    """``online._next_blocks`` with its streams ``near`` elements ahead into L1 and ``far`` elements ahead into L2."""
    from neuroncc.codegen.llvm.context import Ahead

    def stream(distance: int, locality: int) -> Ahead:
        def at(i):
            return em.b.gep(em.address(source, idx[:-1] + [i]), [ir.Constant(I64, distance)],
                            source_etype=ir.FloatType(), inbounds=False)
        return Ahead(at, 4, locality=locality)

    return tuple(stream(distance, locality) for distance, locality in ((far, far_locality), (near, 3)) if distance)


def _prefetch_l2(em, inputs, prefix, start, piece: int, pieces: int) -> None:
    """``prefetch.emit_prefetch_pieces_ahead`` with ``prefetcht1`` (locality 2: into L2) instead of ``prefetcht0``."""
    for layout in inputs:
        first = em.b.gep(em.address(layout, list(prefix) + [start]), [ir.Constant(I64, pieces * piece)],
                         source_etype=ir.FloatType(), inbounds=False)
        for line in range(-(-piece * 4 // CACHE_LINE_BYTES)):
            address = em.b.gep(first, [ir.Constant(I64, line * CACHE_LINE_BYTES)], source_etype=I8)
            em.b.call(prefetch._prefetch_intrinsic(em.b.module),
                      [address, ir.Constant(I32, 0), ir.Constant(I32, 2), ir.Constant(I32, 1)])


def _split_chunks(em, lo, hi, body, ahead, lines: int, parts_of, parts: int) -> None:
    """``prefetch.chunk_loop`` with each whole chunk's exponentials in ``parts`` loops, each after a burst of
    prefetches of its own lines of the next block; then the chunk's sum in one loop (the same bits)."""
    summand, idx, partial, elements = parts_of
    buffer = em.alloca(ir.FloatType(), elements)
    buffer.align = CACHE_LINE_BYTES
    intrinsic = prefetch._prefetch_intrinsic(em.b.module)
    part = elements // parts

    def one_chunk(g):
        start = em.add(lo, em.mul(g, elements))

        def store(i):
            slot = em.b.gep(buffer, [ir.Constant(I64, 0), em.ir_index(em.sub(i, start))], inbounds=True)
            em.b.store(summand(idx[:-1] + [i]), slot)

        def add(j):
            slot = em.b.gep(buffer, [ir.Constant(I64, 0), em.ir_index(j)], inbounds=True)
            em.b.store(em.b.fadd(em.b.load(partial), em.b.load(slot), flags=online.REASSOC), partial)

        for k in range(parts):
            first = em.add(start, k * part)
            prefetch._prefetch_lines(em, intrinsic, ahead, first, part)
            em.loop(first, em.add(first, part), store)
        em.loop(0, elements, add)

    whole = em.div(em.sub(hi, lo), elements)
    em.loop(0, whole, one_chunk)
    em.loop(em.add(lo, em.mul(whole, elements)), hi, body)


def _merged_chunks(em, summand, idx, partial, elements: int, merged: int, offset: int = 0):
    """``online._cached_then_summed`` over ``merged`` chunks at once: their exponentials in one loop into one
    buffer, then each chunk's sum in a loop of its own (the same additions in the same order)."""
    buffer = em.alloca(ir.FloatType(), elements + offset // 4)
    buffer.align = CACHE_LINE_BYTES
    chunk = elements // merged
    buffer = em.b.gep(buffer, [ir.Constant(I64, 0), ir.Constant(I64, offset // 4)], inbounds=True)

    def whole(start, elements_of):
        def store(i):
            slot = em.b.gep(buffer, [em.ir_index(em.sub(i, start))], source_etype=ir.FloatType(), inbounds=True)
            em.b.store(summand(idx[:-1] + [i]), slot)

        def add(j):
            slot = em.b.gep(buffer, [em.ir_index(j)], source_etype=ir.FloatType(), inbounds=True)
            em.b.store(em.b.fadd(em.b.load(partial), em.b.load(slot), flags=online.REASSOC), partial)

        elements_of(start, store)
        for k in range(merged):
            em.loop(k * chunk, (k + 1) * chunk, add)

    return whole


def _one_loop(em, lo, hi, body, ahead, lines: int = 0) -> None:
    """``prefetch.spread_loop`` as one loop over [lo, hi), after prefetches of the first ``lines`` lines of each
    stream of ``ahead`` (none: no software prefetch)."""
    intrinsic = prefetch._prefetch_intrinsic(em.b.module)
    for stream in ahead:
        first = stream.at(lo)
        for line in range(lines):
            address = em.b.gep(first, [ir.Constant(I64, line * CACHE_LINE_BYTES)], source_etype=I8)
            em.b.call(intrinsic, [address, ir.Constant(I32, 0), ir.Constant(I32, 3), ir.Constant(I32, 1)])
    em.loop(lo, hi, body)
