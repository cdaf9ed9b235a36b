"""A CPU named by the user (``NEURONCC_CPU=znver3``, ``neuroncc.set_cpu``, ``--cpu``): its LLVM features, and
whether this host can run code made for it.

The CPU code generator compiles for exactly the host CPU unless told otherwise; a named CPU makes it compile for
that CPU instead, as ``-march`` does (:func:`neuroncc.hardware.host.target_cpu`). Two uses: a fleet sharing one
compile cache builds for a baseline CPU every machine runs (one artifact per graph for all of them); and
another machine's code (its vector width, its loop choices) is reproduced and timed here.

LLVM knows what each CPU name means, but llvmlite offers no call that lists a named CPU's features. They are
asked of LLVM's inliner instead (:func:`llvm_cpu_features`): it inlines a function into a caller only when the
callee's features are a subset of the caller's (the target's ``areInlineCompatible``: code for a feature the
caller's CPU lacks must not be moved into it). One module holds a caller compiled for the named CPU and, for
each feature LLVM's host detection knows, a callee compiled for the named CPU plus that feature; after the
inliner, the callees still called name the features the CPU lacks. One module of ~115 tiny functions, 40-110 ms
(LLVM's own tables, so it always agrees with the LLVM that compiles the code).

May import: errors (llvmlite lazily).
"""

from __future__ import annotations

import os
import threading

from neuroncc.errors import TargetCpuError

#: The setting that names the CPU to compile for (:func:`neuroncc.hardware.host.target_cpu`).
CPU_VARIABLE = "NEURONCC_CPU"

#: Features a named CPU has that LLVM emits only for their own intrinsics (system and privileged instructions,
#: random numbers, memory protection keys, TSX, key locker): generated kernels never call those, and virtual
#: machines often hide them (this Firecracker guest on Zen 4 reports neither pku, mwaitx, wbnoinvd nor rdpru,
#: which LLVM's znver3 and znver4 have). A named CPU's code is made with them turned off, so that it neither
#: needs them nor depends on which of them the compiling host has (the same features, the same artifact, on
#: every machine of a fleet), and a host without them can still run it.
INTRINSIC_ONLY_FEATURES = frozenset({
    "clflushopt", "clwb", "clzero", "cldemote", "enqcmd", "fsgsbase", "hreset", "invpcid", "kl", "lwp",
    "movdir64b", "movdiri", "mwaitx", "pconfig", "pku", "ptwrite", "rdpid", "rdpru", "rdrnd", "rdseed", "rtm",
    "serialize", "sgx", "shstk", "tsxldtrk", "uintr", "waitpkg", "wbnoinvd", "widekl", "xsave", "xsavec",
    "xsaveopt", "xsaves",
})

_LOCK = threading.Lock()
_FEATURES: dict[tuple[str, str], str] = {}  # (CPU name, the host's feature string) -> the named CPU's features


def llvm_cpu_features(name: str, host_features: str) -> str:
    """The feature string of CPU ``name`` as LLVM defines it, in the host's form (``+f`` or ``-f`` for every
    feature named in ``host_features``, LLVM's answer for this host: the features its host detection knows,
    sorted by name), with :data:`INTRINSIC_ONLY_FEATURES` turned off. Raises :class:`TargetCpuError` for a
    name LLVM does not know. Asked once per process and name."""
    key = (name, host_features)
    with _LOCK:
        if key not in _FEATURES:
            names = sorted({feature[1:] for feature in host_features.split(",") if feature[:1] in "+-" and feature[1:]})
            has = _probe(name, names)
            _FEATURES[key] = ",".join(("+" if feature in has and feature not in INTRINSIC_ONLY_FEATURES else "-")
                                      + feature for feature in names)
        return _FEATURES[key]


def remember_features(name: str, host_features: str, features: str) -> None:
    """Take ``features`` as :func:`llvm_cpu_features`' answer for ``name`` on a host with ``host_features`` (an
    earlier process's answer on this machine, remembered by the compile cache: ``driver/host_stamp.py``), so that
    this process does not load LLVM to ask again."""
    with _LOCK:
        _FEATURES.setdefault((name, host_features), features)


def missing_features(named: str, host: str) -> list[str]:
    """The features that feature string ``named`` has and ``host`` does not (sorted): what code for the named
    CPU may use that this host cannot run (SIGILL)."""
    have = {feature[1:] for feature in host.split(",") if feature.startswith("+")}
    return sorted(feature[1:] for feature in named.split(",") if feature.startswith("+") and feature[1:] not in have)


def _probe(name: str, features: list[str]) -> set[str]:
    """Which of ``features`` LLVM's CPU ``name`` has: the callees its inliner inlined (see the module docstring)."""
    import llvmlite.binding as llvm

    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    if not name or any(c in name for c in '"\\,\n'):
        raise TargetCpuError(f"{CPU_VARIABLE}={name!r}: not a CPU name")
    lines = []
    for i, _ in enumerate(features):
        lines.append(f"@g{i} = global i32 0\ndefine internal void @f{i}() #{i + 1} {{\n"
                     f"  store volatile i32 {i}, ptr @g{i}\n  ret void\n}}")
    calls = "".join(f"  call void @f{i}()\n" for i in range(len(features)))
    lines.append(f"define void @probe() #0 {{\n{calls}  ret void\n}}")
    lines.append(f'attributes #0 = {{ "target-cpu"="{name}" }}')
    lines += [f'attributes #{i + 1} = {{ "target-cpu"="{name}" "target-features"="+{feature}" }}'
              for i, feature in enumerate(features)]
    target = llvm.Target.from_triple(llvm.get_process_triple())
    with _StderrCapture() as said:  # LLVM warns of a name it does not know when it makes the machine
        machine = target.create_target_machine(cpu=name, features="")
    if "not a recognized processor" in said.text:  # (and its passes would abort the process: x86-64 "needs 64bit")
        raise TargetCpuError(f"{CPU_VARIABLE}={name}: LLVM knows no CPU of that name (an LLVM -mcpu name: "
                             f"znver3, znver4, haswell, skylake-avx512, x86-64-v3, ...)")
    module = llvm.parse_assembly("\n".join(lines))
    module.triple = machine.triple
    module.data_layout = str(machine.target_data)
    builder = llvm.create_pass_builder(machine, llvm.create_pipeline_tuning_options(speed_level=2))
    builder.getModulePassManager().run(module, builder)
    left = {fn.name for fn in module.functions if not fn.is_declaration}
    return {feature for i, feature in enumerate(features) if f"f{i}" not in left}


class _StderrCapture:
    """What is written to file descriptor 2 meanwhile (LLVM warns of an unknown CPU there, not to Python), kept
    from the process's stderr: a pipe (LLVM writes a line or two, far below its 64 KiB; a temporary file's
    module, ``tempfile``, would cost ``import torch`` its import: this module is on that path)."""

    def __enter__(self) -> _StderrCapture:
        self.text = ""
        self._read, write = os.pipe()
        self._saved = os.dup(2)
        os.dup2(write, 2)
        os.close(write)
        return self

    def __exit__(self, *exc: object) -> None:
        os.dup2(self._saved, 2)  # (closes the pipe's last write end: the read below ends)
        os.close(self._saved)
        with os.fdopen(self._read, "rb") as said:
            self.text = said.read().decode("utf-8", "replace")
