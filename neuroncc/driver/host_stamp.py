"""LLVM's answer about the host CPU, remembered between processes in the cache directory.

The cpu target's cache key includes the host CPU (:func:`neuroncc.hardware.host.host_cpu`), whose name,
features and triple LLVM reports: loading llvmlite's shared library to ask costs ~8-12 ms per process, which
every graph-cache hit paid for three strings. So the answer is stored beside the source digest
(:mod:`neuroncc.driver.source_digest`), under the identity of what it depends on
(:func:`neuroncc.hardware.host.llvm_host_identity`: the CPU as the kernel describes it and the LLVM library):

    <cache dir>/source/host-<identity[:16]>.json
        {"version", "identity", "name", "features", "triple", "checksum"}

A CPU named to compile for (``NEURONCC_CPU``: :func:`remembered_target_cpu`) has LLVM's features of it stamped
beside the host's, under the same identity and the CPU's name, with the host's features it was asked against:

    <cache dir>/source/cpu-<identity[:16]>-<name>.json
        {"version", "identity", "name", "host_features", "features", "checksum"}

A host with another CPU, other flags or another llvmlite has another identity, so machines sharing one cache
directory (over NFS, or containers on different hosts) each find their own file, never another's. A file that is
unreadable, damaged (its checksum), of another version or identity is ignored and rewritten. Where the identity
cannot be read without LLVM (no /proc/cpuinfo) LLVM is asked every time.
"""

from __future__ import annotations

import re
from pathlib import Path

from neuroncc.driver.source_digest import STAMP_DIR, read_checked, write_checked
from neuroncc.hardware.host import (
    HostCpu, LlvmHost, host_cpu, host_cpu_known, llvm_answer_asked, llvm_host, llvm_host_identity, named_cpu,
    target_cpu,
)
from neuroncc.hardware.named_cpu import llvm_cpu_features, remember_features

STAMP_VERSION = 1

_STAMP_ROOT: list[Path] = []
#: The directories whose stamp this process has read or written (each is looked at once per process).
_STAMPED: set[Path] = set()


def remember_host_in(stamp_root: Path) -> None:
    """Make ``stamp_root`` (a trusted cache directory) where :func:`remembered_host_cpu` keeps the answer (the
    first one given in this process, as for the build environment's stamps)."""
    if not _STAMP_ROOT:
        _STAMP_ROOT.append(stamp_root)


def remembered_host_cpu(stamp_root: Path | None = None) -> HostCpu:
    """This machine's CPU, LLVM's part of it taken from the stamp under ``stamp_root`` (default: the one given
    to :func:`remember_host_in`) when one matches this host's identity, else asked of LLVM and stamped."""
    root = stamp_root if stamp_root is not None else (_STAMP_ROOT[0] if _STAMP_ROOT else None)
    if root is None:
        return host_cpu()
    if host_cpu_known():
        stamp_asked_answer(root)
        return host_cpu()
    identity = llvm_host_identity()
    if identity is None:
        return host_cpu()
    path = stamp_path(root, identity)
    answer = _read_stamp(path, identity)
    if answer is None:
        answer = llvm_host()
        _write_stamp(path, identity, answer)
    _STAMPED.add(root)
    return host_cpu(answer)


def remembered_target_cpu(stamp_root: Path | None = None) -> HostCpu:
    """The CPU the code generator compiles for (``hardware.host.target_cpu``) with LLVM's answers from the stamps
    under ``stamp_root`` (default: :func:`remember_host_in`'s): the host's (:func:`remembered_host_cpu`) and, for
    a CPU ``NEURONCC_CPU`` names, LLVM's features of it, kept beside the host's under the same identity and the
    CPU's name (``source/cpu-<identity[:16]>-<name>.json``: asking LLVM loads its bindings and probes, ~70-150 ms
    a process). The check that this host runs the named CPU's code is made either way."""
    host = remembered_host_cpu(stamp_root)
    name = named_cpu()
    root = stamp_root if stamp_root is not None else (_STAMP_ROOT[0] if _STAMP_ROOT else None)
    identity = llvm_host_identity() if name and root is not None and _STAMPABLE.fullmatch(name) else None
    if identity is None:
        return target_cpu(host)
    path = root / STAMP_DIR / f"cpu-{identity[:16]}-{name}.json"
    fields = read_checked(path)
    stamped = fields is not None and fields.get("version") == STAMP_VERSION and fields.get("identity") == identity \
        and fields.get("name") == name and fields.get("host_features") == host.features \
        and type(fields.get("features")) is str and fields.get("features")
    if stamped:
        remember_features(name, host.features, fields["features"])  # type: ignore[index]
    target = target_cpu(host)  # (asks LLVM when not stamped; raises for a CPU this host cannot run)
    if not stamped:
        write_checked(path, {"version": STAMP_VERSION, "identity": identity, "name": name,
                             "host_features": host.features, "features": llvm_cpu_features(name, host.features)})
    return target


#: CPU names a stamp's file name may carry (LLVM's names: "znver3", "x86-64-v3", "skylake-avx512")
_STAMPABLE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


def stamp_asked_answer(stamp_root: Path) -> None:
    """When this process asked LLVM itself (a compile loads it anyway), stamp its answer under ``stamp_root`` if
    the directory has none yet (once per process and directory): so that the next process, a cold compile's
    first graph cache hit among them, does not load LLVM. LLVM's own words only, never a CPU a caller put in
    their place."""
    asked = llvm_answer_asked()
    if stamp_root in _STAMPED or asked is None:
        return
    _STAMPED.add(stamp_root)
    identity = llvm_host_identity()
    if identity is not None and _read_stamp(stamp_path(stamp_root, identity), identity) is None:
        _write_stamp(stamp_path(stamp_root, identity), identity, asked)


def _write_stamp(path: Path, identity: str, answer: LlvmHost) -> None:
    write_checked(path, {"version": STAMP_VERSION, "identity": identity, "name": answer[0],
                         "features": answer[1], "triple": answer[2]})


def stamp_path(stamp_root: Path, identity: str) -> Path:
    return stamp_root / STAMP_DIR / f"host-{identity[:16]}.json"


def _read_stamp(path: Path, identity: str) -> LlvmHost | None:
    fields = read_checked(path)
    if fields is None or fields.get("version") != STAMP_VERSION or fields.get("identity") != identity:
        return None
    answer = fields.get("name"), fields.get("features"), fields.get("triple")
    if any(type(part) is not str for part in answer) or not answer[0] or not answer[2]:
        return None
    return answer  # type: ignore[return-value]


__all__ = ["remember_host_in", "remembered_host_cpu", "remembered_target_cpu", "stamp_asked_answer"]
