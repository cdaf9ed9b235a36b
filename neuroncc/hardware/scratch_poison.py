"""The checking build's setting (``NEURONCC_POISON_SCRATCH``): scratch buffers filled with a NaN pattern before each
use.

With ``NEURONCC_POISON_SCRATCH=1`` (read once per process, at the first compile or cache lookup; or
:func:`set_poison_scratch` before that) the CPU code generator compiles for a :class:`~neuroncc.hardware.host.HostCpu`
whose ``poisons_scratch`` is set: every stack buffer a kernel reads back (row caches, deviation caches, widened rows,
delayed-write pieces, lane sums, the next row's max lanes, map stages' buffers, transposed tiles) is filled with a
NaN pattern before its use (``codegen/llvm/poison.py``), so a read of a buffer no pass wrote gives NaN on every run
instead of whatever the stack held. The setting is in the target's fingerprint, so it is part of an artifact's
identity and of the compile cache's key: a poisoned build never serves an unpoisoned process, nor the reverse.
A debugging aid (docs/reliability.md): the kernels run slower, and the normal build's code is unchanged.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator, Mapping

from neuroncc.errors import InputError

#: The environment variable that turns the checking build on ("1", "true", "yes", "on"; unset, "", "0", "false",
#: "no", "off": off; anything else raises).
POISON_VARIABLE = "NEURONCC_POISON_SCRATCH"

_LOCK = threading.Lock()
os.register_at_fork(after_in_child=_LOCK._at_fork_reinit)
_SETTING: list[bool] = []  # [on], once settled


#: The setting's words (case aside) for on and off.
_ON, _OFF = ("1", "true", "yes", "on"), ("", "0", "false", "no", "off")


def _parse(text: str) -> bool:
    """The setting ``text`` says; anything else (a typo must not quietly pick a build) is an :class:`InputError`."""
    word = text.strip().lower()
    if word not in _ON + _OFF:
        raise InputError(f"{POISON_VARIABLE}={text!r}: not a setting; use 1 (the checking build: scratch filled with "
                         f"NaN before use) or 0 / unset (the normal build)")
    return word in _ON


def poisons_scratch(environ: Mapping[str, str] | None = None) -> bool:
    """Whether this process compiles the checking build: :func:`set_poison_scratch`'s setting, else
    ``$NEURONCC_POISON_SCRATCH`` (read once per process)."""
    with _LOCK:
        if not _SETTING:
            _SETTING.append(_parse((os.environ if environ is None else environ).get(POISON_VARIABLE, "")))
        return _SETTING[0]


def set_poison_scratch(on: bool) -> None:
    """Compile the checking build (``on``) or the normal one in this process, overriding the environment. Call it
    before the first compile or cache lookup (the compile cache's keys are memoized per process)."""
    with _LOCK:
        _SETTING[:] = [bool(on)]


@contextlib.contextmanager
def poisoning_scratch(on: bool = True) -> Iterator[None]:
    """The checking build (``on``) within, whatever the process's setting: for tests that build one kernel both
    ways in one process. Builds only (``build_cpu_executable``, ``plan_launch``): the compile cache's keys are
    memoized per process, as with :func:`~neuroncc.hardware.host.compiling_for`."""
    with _LOCK:
        saved = list(_SETTING)
        _SETTING[:] = [bool(on)]
    try:
        yield
    finally:
        with _LOCK:
            _SETTING[:] = saved
