"""The host CPU as the LLVM code generator sees it: its name, features, vector width and cores (and any other
x86-64 CPU, to read the code it would get: :class:`CpuTarget`).

Read lazily and once per process (:func:`host_cpu`): LLVM reports the name and feature string (llvmlite is
imported only then, so importing this module stays cheap), the operating system the CPUs this process may
run on. The CPU code generator compiles for exactly this CPU; the name and features are part of a compiled
artifact's identity.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass

#: Bytes of one cache line (x86-64 and the common aarch64 cores): the unit of non-temporal stores, of the
#: transposing copies' squares and of buffer alignment in generated CPU code.
CACHE_LINE_BYTES = 64

@dataclass(frozen=True, slots=True)
class CpuTarget:
    """An x86-64 CPU as LLVM names it: ``name`` ("znver3", "znver4", "skylake-avx512") and ``features``, LLVM's
    comma-separated feature string ("+avx2,+fma,-avx512f,..."), with the facts the CPU code generator decides
    by (stated here once; the tile pass, the math library, the emitter and the target machine read them).
    :func:`host_cpu` is this machine's; tests build others to read the code another CPU would get."""

    name: str
    features: str

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
        """Triple, CPU name and features: code compiled for one fingerprint runs only on that CPU."""
        return f"{self.triple} {self.name} {self.features}"


_LOCK = threading.Lock()
_HOST: list[HostCpu] = []


def host_cpu() -> HostCpu:
    """This machine's CPU (read on first use, then cached)."""
    with _LOCK:
        if not _HOST:
            import llvmlite.binding as llvm  # heavy: only when code is generated for (or loaded on) this host

            _HOST.append(HostCpu(name=llvm.get_host_cpu_name(), features=llvm.get_host_cpu_features().flatten(),
                                 triple=llvm.get_process_triple(), cores=available_cores()))
        return _HOST[0]


def available_cores() -> int:
    """CPUs this process may run on (its affinity mask where the OS has one)."""
    try:
        return max(len(os.sched_getaffinity(0)), 1)
    except AttributeError:  # not Linux
        return os.cpu_count() or 1
