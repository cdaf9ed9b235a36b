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

import contextlib
import ctypes
import hashlib
import importlib.util
import os
import sys
import threading
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from neuroncc.errors import TargetCpuError
from neuroncc.hardware.loop_choices import LoopChoices
from neuroncc.hardware.named_cpu import CPU_VARIABLE, llvm_cpu_features, missing_features
from neuroncc.hardware.scratch_poison import poisons_scratch

#: Bytes of one cache line (x86-64 and the common aarch64 cores): the unit of non-temporal stores, of the
#: transposing copies' squares and of buffer alignment in generated CPU code.
CACHE_LINE_BYTES = 64

#: A kernel whose inputs and outputs fill at least 1/STREAM_LLC_SHARE of the last-level cache writes its large
#: outputs past the caches (:meth:`CpuTarget.streams_outputs`) ...
STREAM_LLC_SHARE = 4
#: ... or at least this many bytes per core the process may run on, where that is less: the most of a shared
#: last-level cache a core's kernels keep (:attr:`CpuTarget.stream_footprint_bytes`).
LLC_KEPT_PER_CORE = 16 << 20

#: 4K aliasing: a load is first checked against the older stores still in the store buffer by the low 12 bits
#: of its address only, and one that matches waits as if it depended on the store. A kernel whose output starts
#: a little past one of its inputs modulo this period meets it on every load of that input in the loop that
#: writes the output (the load of x[j] matches the store to out[j - k] issued just before it). The same holds
#: between a kernel's stack buffers (row caches) and the rows it reads and writes (``row_buffers.allocate_rows``).
ALIAS_PERIOD_BYTES = 4096

#: Outputs of at least this many bytes are placed by :func:`placement_shift` (their memory is allocated one
#: alias period longer, so the shift fits); smaller ones are left where the allocator puts them. Not lower: the
#: check is Python per output and call, and at 64 KiB it made the small classifier's compiled AdamW step (dozens
#: of 64-512 KiB outputs and inputs, milliseconds per step) 0.73x -> 0.90x eager's time (session 13, 1 thread).
PLACED_OUTPUT_MIN_BYTES = 1 << 20


def placement_shift(base: int, inputs: Iterable[int], aliased: range | None = None) -> int:
    """Bytes to skip from ``base`` (a cache-line-aligned allocation one alias period longer than needed) so that
    an output starting there is not 4K-aliased with any of ``inputs`` (the data addresses its kernels read: the
    call's inputs and the outputs placed before it): it starts at no distance in ``aliased`` past any of them
    modulo ALIAS_PERIOD_BYTES (by default :func:`aliased_distances`: 0 or at least the host's
    ``alias_window_bytes`` past each, or before it). A multiple of CACHE_LINE_BYTES below ALIAS_PERIOD_BYTES:
    the smallest that works, 0 when none does (more inputs at unlucky offsets than the period has room for). 0
    for an output that is fine where it is: an allocator may check first and allocate the longer memory only
    when needed.

    The smallest shift that works is 0 or the first cache line past the end of some input's window (the shift
    a cache line before it is in some window, and it is not), so only those are tried (~1 us for a few inputs)."""
    period = ALIAS_PERIOD_BYTES
    aliased = aliased_distances() if aliased is None else aliased
    past = [(base - address) % period for address in inputs]  # how far past each input the output would start
    if all(d not in aliased for d in past):
        return 0
    for shift in sorted({-(-((aliased.stop - d) % period) // CACHE_LINE_BYTES) * CACHE_LINE_BYTES for d in past}):
        if shift < period and all((d + shift) % period not in aliased for d in past):
            return shift
    return 0


_ALIASED: list[range] = []  # aliased_distances, once read


def aliased_distances() -> range:
    """The distances past an input (modulo ALIAS_PERIOD_BYTES) at which a large output is 4K-aliased with it, so
    placed elsewhere (:func:`placement_shift`; the one-frame call reads them once, when it is made): 1 to this
    machine's :attr:`CpuTarget.alias_window_bytes` - 1 (the CPU the code runs on, whichever it was compiled for).
    0 is not among them: session 34 mem34 measured Zen 4's rows through ``torch.compile`` with 0 to 1023 counted
    as aliased 0.97-1.03 of the time with 1 to 255 (three processes, 31-61 rounds)."""
    if not _ALIASED:
        _ALIASED.append(range(1, host_cpu().alias_window_bytes))
    return _ALIASED[0]


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
class CpuTarget(LoopChoices):
    """An x86-64 CPU as LLVM names it: ``name`` ("znver3", "znver4", "skylake-avx512") and ``features``, LLVM's
    comma-separated feature string ("+avx2,+fma,-avx512f,..."), with the facts the CPU code generator decides
    by (stated here once; the tile pass, the math library, the emitter and the target machine read them).
    :func:`host_cpu` is this machine's; tests build others to read the code another CPU would get."""

    name: str
    features: str
    #: bytes of the largest cache (the last level, shared by the cores; 0: unknown)
    last_level_cache_bytes: int = 0
    #: CPUs the process may run on (0: unknown)
    cores: int = 0
    #: the checking build: scratch buffers filled with a NaN pattern before each use (``scratch_poison.py``)
    poisons_scratch: bool = False

    def streams_outputs(self, footprint_bytes: int) -> bool:
        """Whether a kernel touching ``footprint_bytes`` (its inputs and outputs together) writes its large
        outputs with non-temporal stores, past the caches: from :attr:`stream_footprint_bytes` on."""
        return footprint_bytes >= self.stream_footprint_bytes

    @property
    def stream_footprint_bytes(self) -> int:
        """The smallest footprint of a kernel whose large outputs are streamed. Streaming saves the
        read-for-ownership of each output line, but a streamed line goes to memory and is fetched back from
        there by its next reader, where a plain store leaves it in the last-level cache; and a fresh output
        usually lands in memory the allocator has just given back, whose lines a plain store finds in the
        cache while a non-temporal one must evict them. So outputs are streamed only when the footprint is at
        least a quarter of that cache (:data:`STREAM_LLC_SHARE`: the cache is shared with the other cores and,
        in a VM, other tenants) and at least :data:`LLC_KEPT_PER_CORE` per core the process may run on, where
        that is less: a VM reports its host's whole last-level cache however few of the host's cores it has.
        With the cache's size unknown, 0 (the emitter's output threshold alone decides).

        Intel Xeon (AVX-512, AMX), 2 cores, L3 reported 480 MiB, session 32 (``bench_stream_choice.py``, three
        processes, each kernel built both ways, interleaved, as a user calls it into a fresh output / into a
        held one / followed by its output's next reader, ``out @ W`` or ``out.sum()``, 1 and 2 threads):
        streamed / plain time 0.70-0.79 / 0.59-0.71 / 0.81-0.96 for LayerNorm, x*w+b and RMSNorm [8192, 1024]
        (64 MiB), 0.78-0.90 / 0.77-0.86 / 0.85-0.95 for softmax [16384, 1024] (128 MiB); softmax [4096, 1024]
        (32 MiB) even with its reader (0.85-1.01 / 0.67-0.81 / 0.96-1.09); softmax [1024, 1024] and [2048,
        1024] (8 and 16 MiB) slower streamed as a user calls them (1.01-1.48 / 0.64-0.90 / 1.00-1.38). A held
        copy back to back keeps ~16 MiB a core in the cache there (1 thread: plain stores 22.7 GB/s at 16 MB,
        19.5 at 32, memory's 13 from 64). The 480 MiB's quarter (120 MiB, the rule before) kept those 64 MiB
        rows on plain stores; the 2 cores' 32 MiB stream them. (Session 8's Intel VM, of the same report,
        found plain stores faster at 32-64 MB against the streamed code of then, which computed each row into
        a buffer and copied it out in one burst of non-temporal stores: since session 9 they leave the compute
        loop a vector at a time.) On Zen 3 and Zen 4 with a 32 MB L3 and 2 cores a quarter is 8 MB, below the
        cores' 32 MiB: the rule of sessions 8-31 (not re-measured), where the emitter's own 4 MiB output
        threshold already made kernels stream."""
        if not self.last_level_cache_bytes:
            return 0
        share = -(-self.last_level_cache_bytes // STREAM_LLC_SHARE)
        return min(share, self.cores * LLC_KEPT_PER_CORE) if self.cores else share

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
    #: a CPU named to compile for (:func:`target_cpu`), not the host's own
    named: bool = False

    @property
    def fingerprint(self) -> str:
        """Triple, CPU name, features, last-level cache size and the footprint from which outputs are streamed
        (:attr:`CpuTarget.stream_footprint_bytes`, which the cores bound): code compiled for one fingerprint
        runs only on that CPU."""
        return (f"{self.triple} {self.name}{'(named)' if self.named else ''} {self.features} "
                f"llc={self.last_level_cache_bytes} streams>={self.stream_footprint_bytes}"
                f"{' poisoned-scratch' if self.poisons_scratch else ''}")


_LOCK = threading.Lock()
#: a fork's child has a fresh lock: a thread of the parent's may have held it (asking LLVM) at the fork. Here, not
#: in codegen/llvm/fork_safety.py's hook, which this layer cannot import: the lock takes no other.
os.register_at_fork(after_in_child=_LOCK._at_fork_reinit)
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


#: The CPU named to compile for (:func:`set_cpu`; else ``$NEURONCC_CPU``), once settled: [name] ('' for the host)
_NAMED: list[str] = []
_TARGETS: dict[tuple[str, HostCpu], HostCpu] = {}


def set_cpu(name: str | None) -> None:
    """Compile for CPU ``name`` (an LLVM ``-mcpu`` name: "znver3", "x86-64-v3", "haswell") instead of this
    host's, in this process; None or "": for the host. Overrides ``$NEURONCC_CPU``. Call it before the first
    compile or cache lookup: the process compiles for one CPU (its caches of compiled code and of cache keys
    hold that CPU's), so naming another one afterwards raises :class:`TargetCpuError`. Checked at once: a CPU
    LLVM does not know, or one with features this host lacks, raises :class:`TargetCpuError`."""
    name = (name or "").strip()
    with _LOCK:
        if _NAMED and _NAMED[0] != name:
            raise TargetCpuError(f"neuroncc.set_cpu({name!r}): this process already compiles for "
                                 f"{_NAMED[0] or 'the host CPU'}; name the CPU before the first compile "
                                 f"(or set {CPU_VARIABLE} before the process starts)")
        _NAMED[:] = [name]
    if name:
        target_cpu()  # the check, before anything is compiled


@contextlib.contextmanager
def compiling_for(name: str | None) -> Iterator[None]:
    """Compile for CPU ``name`` (None or "": the host's) within, whatever the process's setting: for tests and
    benchmarks that build one kernel for two CPUs in one process (``benchmarks/bench_named_cpu.py``). Builds
    only (``build_cpu_executable``): the compile cache's keys are memoized per process (``driver.cache_key``).
    The calling thread's LLVM target machines (``codegen/llvm/jit._thread_machine``) are kept per CPU, and
    compile workers make their own for each build."""
    with _LOCK:
        saved = list(_NAMED)
        _NAMED[:] = [(name or "").strip()]
    try:
        if name:
            target_cpu()
        yield
    finally:
        with _LOCK:
            _NAMED[:] = saved


def named_cpu(environ: Mapping[str, str] | None = None) -> str:
    """The CPU named to compile for ('' for the host's): :func:`set_cpu`'s, else ``$NEURONCC_CPU`` (read once
    per process, at the first compile or cache lookup)."""
    with _LOCK:
        if not _NAMED:
            _NAMED.append((os.environ if environ is None else environ).get(CPU_VARIABLE, "").strip())
        return _NAMED[0]


def target_cpu(host: HostCpu | None = None) -> HostCpu:
    """The CPU the code generator compiles for: :func:`host_cpu` (or ``host``: the same CPU, LLVM's answer
    remembered by the compile cache), or the CPU :func:`named_cpu` names. A named CPU takes its name and
    features from LLVM's definition of it (``named_cpu.llvm_cpu_features``: what the code generator decides by,
    the vector width and the loop choices among them), and the rest from the host: the triple, the cores this
    process may run on and the last-level cache the OS reports (facts of the machine the code runs on, which
    the CPU's name does not fix: a VM's cores, a part's cache size), so the streaming threshold stays the
    host's. Raises :class:`TargetCpuError` when the host lacks a feature of the named CPU."""
    found = _target_cpu(host)
    # the checking build (``scratch_poison.py``): another target, so another fingerprint and cache key
    return replace(found, poisons_scratch=True) if poisons_scratch() else found


def _target_cpu(host: HostCpu | None) -> HostCpu:
    name = named_cpu()
    host = host if host is not None else host_cpu()
    if not name:
        return host
    with _LOCK:
        found = _TARGETS.get((name, host))
    if found is None:
        features = llvm_cpu_features(name, host.features)
        missing = missing_features(features, host.features)
        if missing:
            raise TargetCpuError(f"{CPU_VARIABLE}={name}: this host ({host.name}) cannot run code for {name}: it "
                                 f"lacks {', '.join(missing)} (code made for them would die of an illegal "
                                 f"instruction here); name a CPU whose features this host has, or unset "
                                 f"{CPU_VARIABLE}")
        found = HostCpu(name=name, features=features, last_level_cache_bytes=host.last_level_cache_bytes,
                        cores=host.cores, triple=host.triple, named=True)
        with _LOCK:
            _TARGETS[(name, host)] = found
    return found


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
