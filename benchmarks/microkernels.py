"""Machine-limit microkernels for ``roofline.py``, written in LLVM IR and compiled for the host like neuroncc's
kernels (same target machine, same O3 pipeline), each run on 1 thread or on ATen's OpenMP team.

- ``fma``: independent chains of vector FMAs in registers: the floating-point peak (FLOP/s).
- ``stream``: reads ``n_read`` floats and writes ``n_write`` (the first min(n_read, n_write) copied, the rest
  of the reads summed, the rest of the writes filled), 64-byte vectors, plain or non-temporal stores: the
  memory traffic of a kernel with nothing else in the way, at the kernel's working-set size.
- ``math``: ``y[i] = f(x[i])`` over an L1-resident block, repeated: the throughput of each polynomial function
  exactly as neuroncc's math library emits it (``neuroncc.codegen.llvm.mathlib``), vectorized by O3 with the
  loop hints neuroncc's kernels give such loops (``neuroncc.codegen.llvm.loop_hints``).
- ``element`` (session 30): the same loop over any element arithmetic: ``roofline_work.py``'s necessary work of a
  row per element (its ops, polynomial functions and bf16 conversions in one loop), measured as the math is.

Every kernel is a phase-style function ``void f(ptr args, i64 start, i64 end)``, so it runs under the same
thread runner (and OpenMP team entry) as the generated kernels.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from llvmlite import ir

from neuroncc.codegen.llvm import jit
from neuroncc.hardware.host import CpuTarget
from neuroncc.codegen.llvm.entries import RECIPROCAL_ESTIMATES
from neuroncc.codegen.llvm.loop_hints import hint_math_loop
from neuroncc.codegen.llvm.mathlib import POLYNOMIAL, math_call
from neuroncc.executors.cpu.threads import get_team

F32 = ir.FloatType()
I32 = ir.IntType(32)
I64 = ir.IntType(64)
PTR = ir.PointerType()
VOID = ir.VoidType()
PHASE = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64)

#: Floats per block of the stream kernel (the unit its parallel loop hands out): 32 KiB read per block.
STREAM_BLOCK = 8192
#: FMA chains: enough independent accumulators to cover FMA latency (4-5 cycles) times 2 FMA pipes.
FMA_CHAINS = 12
#: Elements of the math kernel's block: 8 KiB in + 8 KiB out, resident in L1 across repetitions.
MATH_BLOCK = 2048


def _function(module: ir.Module, name: str) -> tuple[ir.Function, ir.IRBuilder, ir.Value, ir.Value, ir.Value]:
    fn = ir.Function(module, ir.FunctionType(VOID, [PTR, I64, I64]), name)
    builder = ir.IRBuilder(fn.append_basic_block("entry"))
    args, start, end = fn.args
    return fn, builder, args, start, end


def _loop(b: ir.IRBuilder, lo: ir.Value, hi: ir.Value, body: Callable[[ir.Value], None],
          step: int = 1) -> ir.Instruction:
    """for (i = lo; i < hi; i += step) body(i), with the bounds check first; returns the back-edge branch."""
    head, loop, done = (b.append_basic_block(n) for n in ("head", "body", "done"))
    entry = b.block
    b.branch(head)
    b.position_at_end(head)
    i = b.phi(I64)
    i.add_incoming(lo, entry)
    b.cbranch(b.icmp_signed("<", i, hi), loop, done)
    b.position_at_end(loop)
    body(i)
    i.add_incoming(b.add(i, ir.Constant(I64, step)), b.block)
    latch = b.branch(head)
    b.position_at_end(done)
    return latch


def _arg(b: ir.IRBuilder, args: ir.Value, slot: int, t: ir.Type) -> ir.Value:
    return b.load(b.gep(args, [ir.Constant(I64, slot)], source_etype=I64), typ=t)


def fma_module(target: CpuTarget) -> str:
    """``fma(args = {iterations, sink}, start, end)``: each outer iteration runs ``iterations`` rounds of
    FMA_CHAINS independent vector FMAs (vector width: the target's) and stores their sum, a whole vector, to
    ``sink`` (16 floats)."""
    lanes = target.vector_bits // 32
    vector = ir.VectorType(F32, lanes)
    module = ir.Module("fma")
    fma = ir.Function(module, ir.FunctionType(vector, [vector] * 3), f"llvm.fma.v{lanes}f32")
    fn, b, args, start, end = _function(module, "fma")
    iterations = _arg(b, args, 0, I64)
    sink = _arg(b, args, 1, PTR)
    a = ir.Constant(vector, [ir.Constant(F32, 0.999999)] * lanes)
    c = ir.Constant(vector, [ir.Constant(F32, 1e-7)] * lanes)

    def outer(_: ir.Value) -> None:
        accs = [b.alloca(vector) for _ in range(FMA_CHAINS)]
        for k, slot in enumerate(accs):
            b.store(ir.Constant(vector, [ir.Constant(F32, 1.0 + k)] * lanes), slot)

        def round_(_: ir.Value) -> None:
            for slot in accs:
                b.store(b.call(fma, [b.load(slot), a, c]), slot)

        _loop(b, ir.Constant(I64, 0), iterations, round_)
        total = b.load(accs[0])
        for slot in accs[1:]:
            total = b.fadd(total, b.load(slot))
        b.store(total, sink, align=4)

    _loop(b, start, end, outer)
    b.ret_void()
    return str(module)


def stream_module(nontemporal: bool) -> str:
    """``stream(args = {src, dst, n_read, n_write, sink}, start, end)`` over blocks of STREAM_BLOCK floats."""
    vector = ir.VectorType(F32, 16)  # 64 bytes: one cache line per load and store
    module = ir.Module("stream")
    fn, b, args, start, end = _function(module, "stream")
    src, dst = _arg(b, args, 0, PTR), _arg(b, args, 1, PTR)
    n_read, n_write = _arg(b, args, 2, I64), _arg(b, args, 3, I64)
    sink = _arg(b, args, 4, PTR)
    marker = module.add_metadata([ir.Constant(I32, 1)])
    acc = b.alloca(vector)
    b.store(ir.Constant(vector, [ir.Constant(F32, 0.0)] * 16), acc)

    def smin(x: ir.Value, y: ir.Value) -> ir.Value:
        return b.select(b.icmp_signed("<", x, y), x, y)

    def smax(x: ir.Value, y: ir.Value) -> ir.Value:
        return b.select(b.icmp_signed(">", x, y), x, y)

    def store(value: ir.Value, i: ir.Value) -> None:
        instruction = b.store(value, b.gep(dst, [i], source_etype=F32), align=64)
        if nontemporal:
            instruction.set_metadata("nontemporal", marker)

    def block(k: ir.Value) -> None:
        lo = b.mul(k, ir.Constant(I64, STREAM_BLOCK))
        hi = b.add(lo, ir.Constant(I64, STREAM_BLOCK))
        both = smin(n_read, n_write)
        # loads assume 4-byte alignment only: ``src`` may be a kernel's own input (a torch tensor's memory)
        _loop(b, lo, smin(hi, both),
              lambda i: store(b.load(b.gep(src, [i], source_etype=F32), typ=vector, align=4), i), step=16)
        _loop(b, smax(lo, both), smin(hi, n_read), lambda i: b.store(
            b.fadd(b.load(acc), b.load(b.gep(src, [i], source_etype=F32), typ=vector, align=4)), acc), step=16)
        _loop(b, smax(lo, both), smin(hi, n_write),
              lambda i: store(ir.Constant(vector, [ir.Constant(F32, 0.0)] * 16), i), step=16)

    _loop(b, start, end, block)
    total = b.load(acc)
    b.store(b.extract_element(total, ir.Constant(I32, 0)), sink, align=4)
    if nontemporal:
        b.fence("seq_cst")
    b.ret_void()
    return str(module)


def math_module(name: str, target: CpuTarget) -> str:
    """``math(args = {x, y, repeats}, start, end)``: each outer iteration computes y = f(x) over MATH_BLOCK
    elements ``repeats`` times (x and y: per-thread blocks, MATH_BLOCK floats each): :func:`element_module` with
    polynomial function ``name`` as the element's work."""
    return element_module(f"math_{name}", target, lambda b, value: math_call(b, name, value, target=target))


def element_module(name: str, target: CpuTarget, element: Callable[[ir.IRBuilder, ir.Value], ir.Value],
                   interleave: int = 0) -> str:
    """``math(args = {x, y, repeats}, start, end)``: each outer iteration computes y = element(x) over MATH_BLOCK
    elements ``repeats`` times (x and y: per-thread blocks, MATH_BLOCK floats each). The element loop is a
    function of its own whose pointers are ``noalias``, like a kernel phase's (``emit.py``): no runtime alias
    check, and LLVM's vectorizer takes the loop's hints (it ignores an interleave count where it must check).
    ``element(builder, x)`` builds the element's float32 arithmetic (``roofline_work.py``: a row's necessary
    work per element; :func:`math_module`: one polynomial function). ``interleave``: the loop's interleave count
    (0: the math loops' own, ``loop_hints.math_interleave``)."""
    module = ir.Module(name)
    block = ir.Function(module, ir.FunctionType(VOID, [PTR, PTR]), "math.block")
    block.linkage = "internal"
    set.add(block.attributes, RECIPROCAL_ESTIMATES)  # as on every generated phase (see ``entries``)
    for pointer in block.args:
        pointer.add_attribute("noalias")
    xs, ys = block.args
    b = ir.IRBuilder(block.append_basic_block("entry"))

    def body(i: ir.Value) -> None:
        value = b.load(b.gep(xs, [i], source_etype=F32, inbounds=True), typ=F32)
        b.store(element(b, value), b.gep(ys, [i], source_etype=F32, inbounds=True))

    # the loop hints neuroncc's kernels give their math loops (interleaved vectors: loop_hints.py)
    hint_math_loop(_loop(b, ir.Constant(I64, 0), ir.Constant(I64, MATH_BLOCK), body), target, interleave)
    b.ret_void()

    fn, b, args, start, end = _function(module, "math")
    set.add(fn.attributes, RECIPROCAL_ESTIMATES)
    x, y = _arg(b, args, 0, PTR), _arg(b, args, 1, PTR)
    repeats = _arg(b, args, 2, I64)

    def outer(k: ir.Value) -> None:
        offset = b.mul(b.and_(k, ir.Constant(I64, 1)), ir.Constant(I64, MATH_BLOCK))  # two threads: two blocks
        xs = b.gep(x, [offset], source_etype=F32)
        ys = b.gep(y, [offset], source_etype=F32)
        _loop(b, ir.Constant(I64, 0), repeats, lambda _: b.call(block, [xs, ys]))

    _loop(b, start, end, outer)
    b.ret_void()
    return str(module)


@dataclass
class Compiled:
    """A microkernel's entry points and the engine that keeps them alive."""

    jit_module: jit.JitModule
    fn: Callable[[int, int, int], None]
    address: int


def compile_kernel(text: str, symbol: str) -> Compiled:
    module = jit.compile_ir([text])
    address = module.address(symbol)
    return Compiled(module, PHASE(address), address)


def run(kernel: Compiled, args: ctypes.Array, n: int, threads: int) -> None:
    """Run outer iterations [0, n) on ``threads`` threads (1: the calling thread)."""
    address = ctypes.addressof(args)
    if threads <= 1:
        kernel.fn(address, 0, n)
        return
    team = get_team(threads)
    if team is None:
        raise RuntimeError("libgomp (bundled with torch) not found: cannot run on several threads")
    team.run(kernel.fn, kernel.address, address, 0, n, 1 << 30)


def aligned_empty(count: int) -> np.ndarray:
    """A float32 array of ``count`` elements whose data starts 64-byte aligned."""
    raw = np.empty(count + 16, np.float32)
    offset = (-raw.ctypes.data // 4) % 16
    return raw[offset: offset + count]


class Stream:
    """The memory traffic of a kernel: read ``read_bytes``, write ``write_bytes`` (see the module docstring).

    ``source`` (an address and its size in bytes), when it holds (nearly) all the reads, is read instead of
    a buffer of the stream's own: the kernel's own input, so that the stream sees the cache residency the
    implementations see (they read the same input one after the other)."""

    def __init__(self, plain: Compiled, streaming: Compiled, read_bytes: int, write_bytes: int,
                 source: tuple[int, int] | None = None):
        self.n_read = read_bytes // 64 * 16
        self.n_write = -(-write_bytes // 64) * 16
        self.src = None
        if source is not None and source[1] >= 0.99 * read_bytes:  # the small inputs (weights) aside
            address = source[0]
            self.n_read = min(self.n_read, source[1] // 64 * 16)
        else:
            self.src = aligned_empty(max(self.n_read, 16))
            self.src[:] = 1.0
            address = self.src.ctypes.data
        self.dst = aligned_empty(max(self.n_write, 16))
        self.dst[:] = 0.0
        self.sink = np.zeros(1, np.float32)
        self.args = (ctypes.c_int64 * 5)(address, self.dst.ctypes.data, self.n_read, self.n_write,
                                         self.sink.ctypes.data)
        self.blocks = -(-max(self.n_read, self.n_write) // STREAM_BLOCK)
        self.kernels = {"plain": plain, "streaming": streaming}

    @property
    def write_bytes(self) -> int:
        """The bytes a destination of :meth:`runner` must hold."""
        return max(self.n_write, 16) * 4

    def runner(self, stores: str, threads: int,
               destination: Callable[[], tuple[int, object]] | None = None) -> Callable[[], object]:
        """The stream with ``stores`` on ``threads`` threads, into the stream's own buffer or, with
        ``destination``, into the memory at the address ``destination()`` gives on each call (with an object
        that keeps it alive for the call: a fresh tensor, as an implementation's call makes its output)."""
        kernel = self.kernels[stores]
        if destination is None:
            return lambda: run(kernel, self.args, self.blocks, threads)
        slots = list(self.args)

        def call() -> object:
            address, keep = destination()
            args = (ctypes.c_int64 * 5)(*slots)
            args[1] = address
            run(kernel, args, self.blocks, threads)
            return keep

        return call


def fma_peak(target: CpuTarget, threads: int, clock: Callable[[], float], iterations: int = 200_000,
             repeats: int = 5) -> float:
    """FLOP/s of independent vector FMA chains on ``threads`` threads: the fastest of ``repeats`` runs (a limit is
    what the machine reaches; another process taking a core only ever slows a sample, and a median of samples taken
    while it does halved the 2-thread limits of a session 17 run)."""
    kernel = compile_kernel(fma_module(target), "fma")
    sink = np.zeros(16, np.float32)  # a whole vector (of up to 512 bits) is stored there
    args = (ctypes.c_int64 * 2)(iterations, sink.ctypes.data)
    n = max(threads, 1) * 4
    flops = 2 * (target.vector_bits // 32) * FMA_CHAINS * iterations * n
    run(kernel, args, n, threads)
    times = []
    for _ in range(repeats):
        begin = clock()
        run(kernel, args, n, threads)
        times.append(clock() - begin)
    return flops / min(times)


def math_throughput(name: str, target: CpuTarget, threads: int, clock: Callable[[], float], repeats: int = 200,
                    samples: int = 7) -> float:
    """Elements per second of polynomial function ``name`` on L1-resident data, on ``threads`` threads: the fastest
    of ``samples`` runs (see ``fma_peak``)."""
    low, high = (0.01, 8.0) if name.startswith("log") else (-12.0, 0.0) if name.endswith("nonpositive") else \
        (-6.0, 6.0)
    return module_throughput(math_module(name, target), threads, clock, (low, high), repeats, samples)


def module_throughput(text: str | Compiled, threads: int, clock: Callable[[], float],
                      inputs: tuple[float, float] = (-6.0, 6.0), repeats: int = 200, samples: int = 7) -> float:
    """Elements per second of an :func:`element_module` (its IR ``text``, or its kernel compiled) on L1-resident
    inputs drawn uniformly from ``inputs``, on ``threads`` threads: the fastest of ``samples`` runs (see
    ``fma_peak``)."""
    kernel = compile_kernel(text, "math") if isinstance(text, str) else text
    rng = np.random.default_rng(0)
    x = aligned_empty(2 * MATH_BLOCK)
    x[:] = rng.uniform(inputs[0], inputs[1], x.size)
    y = aligned_empty(2 * MATH_BLOCK)
    args = (ctypes.c_int64 * 3)(x.ctypes.data, y.ctypes.data, repeats)
    n = max(threads, 1) * 2
    run(kernel, args, n, threads)
    times = []
    for _ in range(samples):
        begin = clock()
        run(kernel, args, n, threads)
        times.append(clock() - begin)
    return MATH_BLOCK * repeats * n / min(times)


def loop_instructions(name: str, target: CpuTarget, text: str | None = None) -> tuple[int, int]:
    """(vector instructions, elements) of the hottest loop of the math kernel for ``name`` (or of the
    :func:`element_module` ``text``) in the assembly LLVM emits for ``target``: the instruction count per element
    that the throughput comes from."""
    asm = jit.assembly([text if text is not None else math_module(name, target)], target)
    body = asm.split("\nmath:")[1].split(".Lfunc_end")[0]
    blocks: list[list[str]] = [[]]
    for line in body.splitlines():
        if line.startswith(".LBB"):
            blocks.append([])
        elif line.startswith("\t") and not line.startswith("\t."):
            blocks[-1].append(line.strip())
    best = max(blocks, key=lambda lines: sum(1 for line in lines if line.startswith("v")))
    count = sum(1 for line in best if line.startswith("v") and "vzeroupper" not in line)
    stores = [line for line in best if line.split()[0] in ("vmovups", "vmovaps", "vmovdqu", "vmovdqa")
              and line.endswith(")")
              and "(%rsp" not in line and "(%rbp" not in line]  # y's vector stores, not spills
    return count, max(len(stores), 1) * target.vector_bits // 32


def lookup_throughput(target: CpuTarget, threads: int, clock: Callable[[], float], samples: int = 41) -> float:
    """Elements per second of a bf16 table read (:func:`bf16_math_module`'s ``lookup`` form, as the kernels read it,
    or ``lookup16``, whichever is faster: load, table entry, store) over L1-resident normal bf16 inputs (activations'
    few thousand entries: the table's hot part in L1), on ``threads`` threads: the fastest of ``samples`` runs (see
    ``fma_peak``; at 2 threads the runs' rates spread 4.0-7.2 Gelem/s on Zen 3, more than the FMA peak's). The same
    for every function."""
    table = bf16_table("sigmoid", target)
    values = np.random.default_rng(0).standard_normal(2 * MATH_BLOCK).astype(np.float32)
    x = ((values.view(np.uint32) + 0x8000) >> 16).astype(np.uint16).view(np.int16)  # (no NaNs: no tie care)
    rates = []
    # (the kernels' read and the 16-bit one: about as fast here; the faster; where the CPU reads tables in narrow
    # loops, also those loops' read, as its kernels' paired loops read their loaded words)
    forms = ("lookup", "lookup16") + (("lookup-pairs",) if target.bf16_table_loop_lanes else ())
    for form in forms:
        call, _, elements = bf16_math_runner("sigmoid", target, form, x, table, threads, repeats=400)
        call()
        times = []
        for _ in range(samples):
            begin = clock()
            call()
            times.append(clock() - begin)
        rates.append(elements / min(times))
    return max(rates)


__all__ = ["Stream", "aligned_empty", "compile_kernel", "element_module", "fma_peak", "math_throughput",
           "module_throughput", "stream_module",
           "POLYNOMIAL", "bf16_math_module", "bf16_table", "lookup_throughput"]


#: The forms of :func:`bf16_math_module`'s element loop (``lookup-pairs`` only on CPUs with narrow table loops).
BF16_MATH_FORMS = ("polynomial", "lookup16", "lookup", "gather", "lookup-pairs")
#: The forms whose output is the entries' float32 (bf16 bits in the high halves).
_FLOAT_OUTPUT_FORMS = ("lookup", "lookup-pairs")


def bf16_math_module(name: str, target: CpuTarget, form: str, block: int = MATH_BLOCK) -> str:
    """``bf16_math(args = {x, y, repeats, table}, start, end)``: each outer iteration computes y = bf16(f(x)) over
    ``block`` bf16 elements (their i16 bits) ``repeats`` times, as ``math_module`` does for float32, in one of three
    forms (session 25 table25: a bf16 unary op's result depends on its input's 16 bits only):

    - ``polynomial``: x widened (its bits in a float32's high half), neuroncc's polynomial for ``name``, the result
      rounded to bf16 without the NaN case (as AVX2 and AVX-512 round an op's bf16 result) and narrowed: the code a
      kernel has today, vectorized by O3 with the math loops' hints;
    - ``lookup16``: ``y[i] = table[x[i]]`` as scalar IR (a 65536-entry i16 table), vectorized as LLVM chooses;
    - ``lookup``: the same entry read as neuroncc's kernels read it (``codegen/llvm/bf16_tables.py``): the high half of
      the 32 bits from 2 bytes before it, masked to the float32 of the bf16 result, which is what y holds here
      (float32: stored as 16 bits, LLVM would narrow the read to them);
    - ``gather``: explicit vectors of 8: the 32-bit words at byte offsets 2 * x (``vpgatherdd``, scale 2; the
      table padded by 2 bytes) of which the low halves are kept;
    - ``lookup-pairs``: the loop of a kernel on a CPU with narrow table loops (``CpuTarget.bf16_table_loop_lanes``,
      Zen 4): x read as 32-bit words of two elements, each element's entry read by ``bf16_tables.looked_up`` as
      such a loop reads it (indices from the loaded words), the loop's vector iterations that many lanes."""
    from neuroncc.codegen.llvm.scalars import bf16_bits, round_to
    from neuroncc.ir.dtypes import DType
    i16 = ir.IntType(16)
    module = ir.Module(f"bf16_{form}_{name}")
    fn_block = ir.Function(module, ir.FunctionType(VOID, [PTR, PTR, PTR]), "bf16.block")
    fn_block.linkage = "internal"
    set.add(fn_block.attributes, RECIPROCAL_ESTIMATES)
    for pointer in fn_block.args:
        pointer.add_attribute("noalias")
    xs, ys, table = fn_block.args
    b = ir.IRBuilder(fn_block.append_basic_block("entry"))
    if form == "gather":
        lanes = 8
        words = ir.VectorType(I32, lanes)
        gather = ir.Function(module, ir.FunctionType(words, [words, PTR, words, words, ir.IntType(8)]),
                             "llvm.x86.avx2.gather.d.d.256")
        ones = ir.Constant(words, [ir.Constant(I32, -1)] * lanes)
        zeros = ir.Constant(words, [ir.Constant(I32, 0)] * lanes)

        def vector(i: ir.Value) -> None:
            bits = b.load(b.gep(xs, [i], source_etype=i16, inbounds=True), typ=ir.VectorType(i16, lanes), align=2)
            got = b.call(gather, [zeros, table, b.zext(bits, words), ones, ir.Constant(ir.IntType(8), 2)])
            b.store(b.trunc(got, ir.VectorType(i16, lanes)), b.gep(ys, [i], source_etype=i16, inbounds=True),
                    align=2)

        _loop(b, ir.Constant(I64, 0), ir.Constant(I64, block), vector, step=lanes)
    elif form == "lookup-pairs":
        from neuroncc.codegen.llvm.bf16_tables import looked_up

        def pair(i: ir.Value) -> None:
            word = b.load(b.gep(xs, [i], source_etype=I32, inbounds=True), typ=I32)
            for half, bits in enumerate((b.trunc(word, i16), b.trunc(b.lshr(word, ir.Constant(I32, 16)), i16))):
                value = b.bitcast(b.shl(b.zext(bits, I32), ir.Constant(I32, 16)), F32)
                entry = looked_up(b, name, False, target, value, narrow=True)
                b.store(entry, b.gep(ys, [b.add(b.add(i, i), ir.Constant(I64, half))], source_etype=F32,
                                     inbounds=True))

        hint_math_loop(_loop(b, ir.Constant(I64, 0), ir.Constant(I64, block // 2), pair), target,
                       width=target.bf16_table_loop_lanes)
    else:
        def element(i: ir.Value) -> None:
            bits = b.load(b.gep(xs, [i], source_etype=i16, inbounds=True), typ=i16)
            if form == "lookup":
                index = b.sub(b.zext(bits, I64), ir.Constant(I64, 1))
                word = b.load(b.gep(table, [index], source_etype=i16), typ=I32, align=2)
                value = b.bitcast(b.and_(word, ir.Constant(I32, 0xFFFF0000 - (1 << 32))), F32)
                b.store(value, b.gep(ys, [i], source_etype=F32, inbounds=True))
                return
            if form == "lookup16":
                out = b.load(b.gep(table, [b.zext(bits, I64)], source_etype=i16, inbounds=True), typ=i16)
            else:
                value = b.bitcast(b.shl(b.zext(bits, I32), ir.Constant(I32, 16)), F32)
                out = bf16_bits(b, round_to(b, math_call(b, name, value, target=target), DType.bf16, False))
            b.store(out, b.gep(ys, [i], source_etype=i16, inbounds=True))

        hint_math_loop(_loop(b, ir.Constant(I64, 0), ir.Constant(I64, block), element), target)
    b.ret_void()

    fn, b, args, start, end = _function(module, "bf16_math")
    set.add(fn.attributes, RECIPROCAL_ESTIMATES)
    x, y = _arg(b, args, 0, PTR), _arg(b, args, 1, PTR)
    repeats, table = _arg(b, args, 2, I64), _arg(b, args, 3, PTR)

    def outer(k: ir.Value) -> None:
        offset = b.mul(b.and_(k, ir.Constant(I64, 1)), ir.Constant(I64, block))  # two threads: two blocks
        xs = b.gep(x, [offset], source_etype=i16)
        ys = b.gep(y, [offset], source_etype=F32 if form in _FLOAT_OUTPUT_FORMS else i16)
        _loop(b, ir.Constant(I64, 0), repeats, lambda _: b.call(fn_block, [xs, ys, table]))

    _loop(b, start, end, outer)
    b.ret_void()
    return str(module)


def bf16_table(name: str, target: CpuTarget) -> np.ndarray:
    """The 65536 bf16 results (i16 bits) of the ``polynomial`` form of :func:`bf16_math_module` over every input's
    bits, with 2 bytes of padding before the first (the ``lookup`` form's 32-bit read of it) and after the last (the
    ``gather`` form's): the table its other forms read (``table[1:-1]`` its entries)."""
    kernel = compile_kernel(bf16_math_module(name, target, "polynomial", block=1 << 16), "bf16_math")
    x = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.int16)
    table = np.zeros((1 << 16) + 2, np.int16)
    args = (ctypes.c_int64 * 4)(x.ctypes.data, table.ctypes.data + 2, 1, 0)
    run(kernel, args, 1, 1)
    return table


def bf16_math_runner(name: str, target: CpuTarget, form: str, x: np.ndarray, table: np.ndarray, threads: int,
                     repeats: int = 200) -> tuple[Callable[[], None], np.ndarray, int]:
    """(a call of ``form``'s kernel over ``x`` (2 * MATH_BLOCK bf16 bits) on ``threads`` threads, its output (the bf16
    bits), the elements a call computes). ``table``: :func:`bf16_table`'s."""
    kernel = compile_kernel(bf16_math_module(name, target, form), "bf16_math")
    y = np.zeros(2 * MATH_BLOCK, np.int32 if form in _FLOAT_OUTPUT_FORMS else np.int16)
    args = (ctypes.c_int64 * 4)(x.ctypes.data, y.ctypes.data, repeats, table.ctypes.data + 2)
    n = max(threads, 1) * 2

    def call() -> None:
        run(kernel, args, n, threads)

    call.keep = (kernel, args, x, y, table)  # alive while the call is
    # (the lookup form's float32 results: their high halves, a view, are the bf16 bits)
    return call, y.view(np.int16)[1::2] if form in _FLOAT_OUTPUT_FORMS else y, MATH_BLOCK * repeats * n
