"""Fuzzer regression: crash on target nki-sim (fwd+bwd).

UnboundLocalError: cannot access local variable 'tangents_2_tile' where it is not associated with a
value

Found by `python tools/fuzz.py --seed 3` (program 33), shrunk.
"""

import torch  # noqa: F401 (used by the program)
import torch.nn.functional as F  # noqa: F401

from neuroncc.testing.fuzz import Spec, check_regression

INPUTS = [Spec((2, 4), 'float32', None)]


def program(x0):
    v0 = torch.cos(x0)
    return (v0,)


def test_fuzz_nki_sim_crash_ba54c719():
    check_regression(program, INPUTS, data_seed=1674759464, specials=False, target='nki-sim', backward=True, backend='neuron')
