"""Compiling an op program into the device's kernel: through the compile cache, one executable per program text.

Its own module because several kinds of entry compile (entries.py's per-signature programs, fused_optimizers.py's
multi-tensor steps) and the signature index (signature_index.py) keys by the options and records the artifact
keys kept here.
"""

from __future__ import annotations

import weakref
from typing import Any, Protocol

import torch

from neuroncc.device.counters import COUNTS
from neuroncc.device.kernels import CompiledKernel
from neuroncc.device.op_forms import OpForm
from neuroncc.device.programs import CannotCompile, Program
from neuroncc.driver.compile import compile_graph
from neuroncc.driver.process_cache import CACHE_STATS
from neuroncc.errors import NeuronccError
from neuroncc.ir import print_function


class Recorder(Protocol):
    """Where a compiled program is recorded (the signature index's ``Slot``, which imports this module)."""

    def record(self, program: Program, executable: Any) -> None: ...


#: executable -> the compile-cache key it was compiled or loaded under (the signature index records it)
ARTIFACT_KEYS: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()


#: executables by their program's canonical text, while some entry uses them: ops that compute the same
#: program (``mul.out`` as a process's first op, ``mul.Tensor`` after it; ``maximum`` and ``maximum.out``) share one
#: executable
_EXECUTABLES: weakref.WeakValueDictionary[str, Any] = weakref.WeakValueDictionary()


#: The call that compiles an op waits for it: LLVM's quick tier first where it computes the same bits, the
#: optimized code swapped in from the background (neuroncc.executors.cpu.tiers; the disk cache stores that)
COMPILE_OPTIONS = {"quick_first": True}


def compile_kernel(form: OpForm, program: Program, index: int, tensors: list[torch.Tensor], state: Any,
                   slot: Recorder | None = None, options: dict[str, Any] | None = None) -> CompiledKernel:
    """Compile ``program`` for the cpu target through the compile cache (memory here, disk there); ``slot``:
    the signature's place in the signature index, where the program's binding and artifact are recorded;
    ``options``: the compile options (:data:`COMPILE_OPTIONS` unless given)."""
    text = print_function(program.function, canonical=True)
    if options is None:
        options = COMPILE_OPTIONS
    else:
        text += f"\n{sorted(options.items())!r}"
    executable = _EXECUTABLES.get(text)
    if executable is None:
        before = CACHE_STATS.snapshot()
        keys: list[str | None] = []
        try:
            executable = compile_graph(program.function, target="cpu", options=options,
                                       on_compiled=lambda record: keys.append(record.key))
        except NeuronccError as error:
            raise CannotCompile(f"compiling it failed: {str(error).splitlines()[0]}") from error
        except Exception as error:  # noqa: BLE001 - a compiler bug: the op still runs (on CPU), the warning says it
            raise CannotCompile(f"neuroncc failed compiling it (a compiler bug: {type(error).__name__}: "
                                f"{str(error).splitlines()[0] if str(error) else ''})") from error
        after = CACHE_STATS.snapshot()
        COUNTS["eager_kernels_loaded" if after["hits"] > before["hits"] else "eager_kernels_compiled"] += 1
        _EXECUTABLES[text] = executable
        if keys and keys[0] is not None:
            ARTIFACT_KEYS[executable] = keys[0]
    if slot is not None:
        slot.record(program, executable)
    return CompiledKernel(form, program, executable, index, tensors, state)
