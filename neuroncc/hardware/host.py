"""The host CPU as the LLVM code generator sees it: its name, features, vector width and cores.

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

#: SIMD register widths, widest first, and the LLVM feature that provides each (x86); other hosts (aarch64
#: NEON, ...) get the last entry.
_VECTOR_BITS = (("avx512f", 512), ("avx", 256), ("", 128))


@dataclass(frozen=True, slots=True)
class HostCpu:
    """The CPU generated code runs on."""

    triple: str  # LLVM's process triple, e.g. x86_64-unknown-linux-gnu
    name: str  # LLVM's host CPU name, e.g. znver3
    features: str  # LLVM's feature string, e.g. +64bit,+adx,...,+avx2,...,-avx512f,...
    cores: int  # CPUs this process may run on

    @property
    def vector_bits(self) -> int:
        """Width of the widest SIMD registers LLVM may use on this CPU."""
        enabled = {item[1:] for item in self.features.split(",") if item.startswith("+")}
        return next(bits for feature, bits in _VECTOR_BITS if not feature or feature in enabled)

    @property
    def f32_lanes(self) -> int:
        """float32 elements in one of the widest vectors (8 with AVX2, 16 with AVX-512)."""
        return self.vector_bits // 32

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

            _HOST.append(HostCpu(llvm.get_process_triple(), llvm.get_host_cpu_name(),
                                 llvm.get_host_cpu_features().flatten(), available_cores()))
        return _HOST[0]


def available_cores() -> int:
    """CPUs this process may run on (its affinity mask where the OS has one)."""
    try:
        return max(len(os.sched_getaffinity(0)), 1)
    except AttributeError:  # not Linux
        return os.cpu_count() or 1
