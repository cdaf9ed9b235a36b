"""The aten -> IR lowerings: one rule per aten op, in tables the importer (:mod:`neuroncc.frontend.importer`)
dispatches on.

- ``context``: what a lowering rule sees (the builder, the node, value conversion, typed refusals).
- ``elementwise``, ``movement``, ``reductions``, ``library``, ``attention``: the rule tables by kind of op.
- ``coverage`` (+ ``coverage_indexing``, ``coverage_pooling``, ``coverage_products``): aten ops rewritten in
  terms of ops neuroncc lowers (torch-level decompositions of our own), and ``decompositions``: the table the
  backend traces with.
- ``special_*``: the special functions (gamma family, Bessel, orthogonal polynomials, bit tricks) and their
  coefficients, generated from PyTorch's Math.h by tools/gen_special_coefficients.py.

May import: what the front end may import (torch, ir).
"""
