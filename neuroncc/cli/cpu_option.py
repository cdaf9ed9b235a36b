"""``--cpu NAME``: compile for a named CPU instead of the host's, as ``-march`` does (``NEURONCC_CPU``; see
:func:`neuroncc.hardware.host.set_cpu`). Taken by the commands that compile for the cpu target (``compile``,
``run``, ``inspect``, ``evaluate``, ``opt``); applied by ``neuroncc.cli.main`` before the command runs."""

from __future__ import annotations

import argparse
import os

from neuroncc.hardware.host import CPU_VARIABLE, host_cpu, set_cpu, target_cpu

CPU_HELP = ("compile for this CPU instead of the host's, as -march does: an LLVM CPU name (znver3, x86-64-v3, "
            "haswell, skylake-avx512, ...) whose features this host has (default: $NEURONCC_CPU, else the host's)")


def add_cpu_argument(parser: argparse.ArgumentParser, help: str = CPU_HELP) -> None:
    parser.add_argument("--cpu", metavar="NAME", default=None, help=help)
    parser.set_defaults(apply_cpu=apply_cpu_argument)


def apply_cpu_argument(args: argparse.Namespace) -> None:
    """``--cpu NAME``: this process, and the worker processes it starts, compile for CPU NAME, as
    ``NEURONCC_CPU=NAME`` would. Checked here: a name LLVM does not know, or a CPU with features this host lacks,
    is an error (exit 2) before anything is compiled."""
    name = getattr(args, "cpu", None)
    if name:
        set_cpu(name)
        os.environ[CPU_VARIABLE] = name  # (``--jobs``' workers and any process this one starts)


def cpu_line() -> str:
    """Which CPU the cpu target's code is made for: ``znver4 (this host), 512-bit vectors`` or ``znver3
    (NEURONCC_CPU or --cpu; host znver4), 256-bit vectors``."""
    target, host = target_cpu(), host_cpu()
    if not target.named:
        return f"{target.name} (this host), {target.vector_bits}-bit vectors"
    return f"{target.name} ({CPU_VARIABLE} or --cpu; host {host.name}), {target.vector_bits}-bit vectors"


def target_cpu_name() -> str:
    """The name of the CPU the cpu target's code is made for (the host's, or ``NEURONCC_CPU``'s / ``--cpu``'s)."""
    return target_cpu().name
