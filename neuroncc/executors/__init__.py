"""Executors: what runs a compiled graph, one per compile target.

- ``executable``: the contract (:class:`Executable`: numpy arrays in, numpy arrays out) and the registry of
  targets by name (:func:`build_executable`); ``interpreter_executable``: the ``interp`` target's executable (the
  reference interpreter), imported when that target is built or loaded.
- ``tracing``: who watches an executable run (the step-tracing hook the executors call, a timeline recorder).
- ``cpu``: the host launcher for the LLVM-compiled kernels (buffers, arena, threads, BLAS and ATen externs).
- ``nki_sim``: the ``nki-sim`` target, running the generated NKI kernels in neuroncc's simulator
  (:mod:`neuroncc.nki`), and the cost model's per-kernel estimates of them.

May import: errors, hardware, ir, passes, codegen, nki (torch and llvmlite only inside functions, where a
kernel calls ATen or code is compiled). Imported by: driver and above.
"""
