"""Facts about the machines neuroncc compiles for, each defined once (a leaf: imports only ``neuroncc.errors``).

- :mod:`~neuroncc.hardware.neuron`: NeuronCore generations (trn1, trn2, trn3): partitions, SBUF and PSUM
  sizes and banks, matmul tile limits, engine clocks and lanes, DMA bandwidth and efficiency, matmul
  destination dtypes. The layout and tile passes, the NKI emitter, the simulator (``neuroncc.nki``) and its
  cost model all read them from here.
- :mod:`~neuroncc.hardware.host`: the host CPU as LLVM sees it (name, features, vector width, cores) and the
  cache line the CPU code generator assumes.

Decisions made with these facts (tile sizes, SBUF budgets, vector widths) are the ``tile`` pass's
(``neuroncc.passes.tile``), not this package's.

Import the facts from their module (``from neuroncc.hardware.host import host_cpu``): this package's face
imports neither, since ``import torch`` imports the host's (the neuron device's allocator aligns blocks by it,
through the ``torch.backends`` entry point) and must not pay for the NeuronCore tables too.

May import: errors (llvmlite lazily, to read the host CPU). Imported by: every layer.
"""
