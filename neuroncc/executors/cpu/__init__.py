"""The ``cpu`` target's host launcher: runs a graph's LLVM-compiled kernels on numpy buffers.

- ``launcher``: build (plan, compile each kernel phase, link and load the code) and call (inputs, arena, steps).
- ``steps``: the runners of native kernel steps and direct BLAS steps; ``step_host``: what they may use of the
  executable (``StepHost``) and the kernels' error flag.
- ``threads``: the OpenMP team and the Python pool the phases run across.
- ``blas``, ``extern``, ``extern_library``, ``adopt``: matmul/conv and library ops through MKL and ATen,
  zero-copy, and adopting ATen's fresh result tensors as the call's buffers.
- ``buffers``: flat numpy storage, views and addresses; ``code_files``: an artifact's code as files (the object
  files as one ``ar`` file, ``neuroncc.codegen.llvm.ar_archive``, in the code form without a linker:
  ``neuroncc.codegen.llvm.native_library``).

The launch plan itself (buffers, layouts, steps) is code generation's: :mod:`neuroncc.codegen.llvm.program`.

May import: what ``neuroncc.executors`` may import.
"""
