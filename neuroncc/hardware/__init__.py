"""Facts about the machines neuroncc compiles for, each defined once (a leaf: imports only ``neuroncc.errors``).

- :mod:`~neuroncc.hardware.neuron`: NeuronCore generations (trn1, trn2, trn3): partitions, SBUF and PSUM
  sizes and banks, matmul tile limits, engine clocks and lanes, DMA bandwidth and efficiency, matmul
  destination dtypes. The layout and tile passes, the NKI emitter, the simulator (``neuroncc.nki``) and its
  cost model all read them from here.
- :mod:`~neuroncc.hardware.host`: the host CPU as LLVM sees it (name, features, vector width, cores), the CPU
  the code generator compiles for (``target_cpu``: the host's, or one named by ``NEURONCC_CPU`` /
  ``neuroncc.set_cpu``) and the cache line the CPU code generator assumes.
- :mod:`~neuroncc.hardware.named_cpu`: a named CPU's LLVM features (asked of LLVM's inliner) and what of them
  this host lacks.
- :mod:`~neuroncc.hardware.loop_choices`: how the CPU code generator shapes its row loops on a CPU (bf16
  roundings, row caches, prefetch bursts, online exponentials), each decision measured and read as a property of
  ``host.CpuTarget``.

Decisions made with these facts (tile sizes, SBUF budgets, vector widths) are the ``tile`` pass's
(``neuroncc.passes.tile``), not this package's.

Import the facts from their module (``from neuroncc.hardware.host import host_cpu``): this package's face
imports neither, since ``import torch`` imports the host's (the neuron device's allocator aligns blocks by it,
through the ``torch.backends`` entry point) and must not pay for the NeuronCore tables too.

May import: errors (llvmlite lazily, to read the host CPU). Imported by: every layer.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from neuroncc.hardware.neuron import NeuronCore

#: Targets that name no NeuronCore generation (a shortcut only: a target missing here is looked up in
#: ``hardware.neuron.NEURON_CORES``, where it is not found either).
HOST_TARGETS = frozenset({"any", "cpu"})


def neuron_core(target: str) -> NeuronCore | None:
    """The NeuronCore generation ``target`` names, or None. The NeuronCore tables (~1.5 ms to import) are
    loaded only for a target outside :data:`HOST_TARGETS`: a cpu compile or a warm start never imports them."""
    if target in HOST_TARGETS:
        return None
    from neuroncc.hardware.neuron import NEURON_CORES

    return NEURON_CORES.get(target)
