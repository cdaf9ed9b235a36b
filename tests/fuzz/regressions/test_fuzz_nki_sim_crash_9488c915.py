"""Fuzzer regression: crash on target nki-sim (fwd+bwd).

ValueError: 5 is not in list

Found by `python tools/fuzz.py --seed 2` (program 53), shrunk.
"""

import torch  # noqa: F401 (used by the program)
import torch.nn.functional as F  # noqa: F401

from neuroncc.testing.fuzz import Spec, check_regression

INPUTS = [Spec((1, 1, 5), 'float32', None), Spec((5, 1), 'float32', None)]


def program(x1, x3):
    v0 = x1 @ x3
    return (v0,)


def test_fuzz_nki_sim_crash_9488c915():
    check_regression(program, INPUTS, data_seed=507388941, specials=False, target='nki-sim', backward=False, backend='neuron')
