"""Fuzzer regression: crash on target nki-sim (fwd+bwd).

ValueError: 4 is not in list

Found by `python tools/fuzz.py --seed 2` (program 35), shrunk.
"""

import torch  # noqa: F401 (used by the program)
import torch.nn.functional as F  # noqa: F401

from neuroncc.testing.fuzz import Spec, check_regression

INPUTS = [Spec((2, 2), 'float32', None)]


def program(x0):
    v2 = torch.chunk(x0, 2, dim=0)[0]
    return (v2,)


def test_fuzz_nki_sim_crash_da82b5c5():
    check_regression(program, INPUTS, data_seed=1450341556, specials=False, target='nki-sim', backward=True, backend='neuron')
