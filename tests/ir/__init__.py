"""Tests of the IR foundation (types, ops, text form, verifier, interpreter).

The hypothesis tests run a modest number of examples so the directory stays fast in CI; set
``NEURONCC_TEST_EXAMPLES_SCALE`` (e.g. 20) to multiply every example count for a long soak run; CI runs are
derandomized (the same examples every time), soak runs draw new ones.
"""
