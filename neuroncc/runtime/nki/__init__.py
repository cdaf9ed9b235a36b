"""neuroncc's NKI simulator and cost model (numpy only).

Layers, bottom up:

- ``errors``, ``dtypes``, ``target``: the error type, NKI dtypes (bfloat16 stored as rounded float32),
  per-generation hardware numbers.
- ``tensor``, ``memory``, ``context``, ``trace``: tensors and views, on-chip placement and capacity, the
  state of a launch, and the instruction trace it records.
- ``ops``, ``validate``, ``instructions``, ``isa_*``, ``isa``: the instruction set (``nki.isa``).
- ``allocate``, ``language``, ``language_math``: ``nki.language``.
- ``cost_model``, ``scheduler``, ``profile``: per-instruction costs, a dependency-aware list schedule of
  the trace, and the report. They only read the trace, never the simulator's objects.
- ``launch``: ``jit``, ``simulate``, ``benchmark`` - the API boundary.

The public facades are ``neuroncc.nki``, ``neuroncc.nki.language`` and ``neuroncc.nki.isa``.
"""
