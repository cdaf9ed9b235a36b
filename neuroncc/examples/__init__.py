"""Bundled examples: small models defined in Python and exported at run time (no binary archive is shipped).

``neuroncc demo`` trains :mod:`neuroncc.examples.classifier`; the tests export it too.

May import: torch and the front end.
"""
