"""neuroncc's NKI simulator and cost model (numpy only; see docs/nki.md).

Layers, bottom up:

- ``errors``, ``dtypes``, ``target``: the error type, NKI dtypes (bfloat16 stored as rounded float32),
  per-generation hardware numbers.
- ``tensor``, ``context``, ``trace``: tensors and views, the state of a launch, and the instruction trace
  it records (the trace's docstring defines its format).
- ``ops``, ``validate``, ``instructions``, ``isa_movement``, ``isa_tensor_engine``, ``isa_compute``,
  ``isa``: the instruction set (``nki.isa``).
- ``allocate``, ``language``, ``language_math``: ``nki.language``.
- ``memory``: after a launch, places on-chip tiles by live range and checks SBUF / PSUM capacity.
- ``cost_model``, ``scheduler``, ``profile``: per-instruction costs, a dependency-aware list schedule of
  the placed trace, and the report. They read only the trace, never the simulator's objects.
- ``launch``: ``jit``, ``simulate``, ``benchmark``, ``trace_kernel`` - the API boundary.
- ``kernels``, ``calibration``: reference kernels in NKI 0.2+ style and the cost model's calibration runs.

The public facades are ``neuroncc.nki``, ``neuroncc.nki.language`` and ``neuroncc.nki.isa``.
"""
