"""Fuzzer regression: crash on target nki-sim (fwd+bwd).

ValueError: 5 is not in list

Found by `python tools/fuzz.py --seed 2` (program 11), shrunk.
"""

import torch  # noqa: F401 (used by the program)
import torch.nn.functional as F  # noqa: F401

from neuroncc.testing.fuzz import Spec, check_regression

INPUTS = [Spec((1, 5), 'float32', None), Spec((1,), 'float32', None), Spec((5,), 'float32', None)]


def program(x2, x3, x0):
    v4 = F.linear(x0, x2, x3)
    return (v4,)


def test_fuzz_nki_sim_crash_1edfad6e():
    check_regression(program, INPUTS, data_seed=1626225729, specials=False, target='nki-sim', backward=False, backend='neuron')
