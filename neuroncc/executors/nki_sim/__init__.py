"""The ``nki-sim`` target: every kernel of a compiled graph runs as generated NKI code in neuroncc's simulator.

- ``executable``: build the NKI program (:func:`neuroncc.codegen.nki.emit_program`), load it against
  :mod:`neuroncc.nki`, and run it (kernels simulated, host steps by the reference interpreter).
- ``costs``: the cost model's estimate of every generated kernel (``neuroncc inspect --cost``).

May import: what ``neuroncc.executors`` may import.
"""
