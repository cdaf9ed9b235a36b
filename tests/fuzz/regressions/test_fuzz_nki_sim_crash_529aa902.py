"""Fuzzer regression: crash on target nki-sim (fwd+bwd).

ValueError: 64 is not in list

Found by `python tools/fuzz.py --seed 2` (program 57), shrunk.
"""

import torch  # noqa: F401 (used by the program)
import torch.nn.functional as F  # noqa: F401

from neuroncc.testing.fuzz import Spec, check_regression

INPUTS = [Spec((1, 4, 4, 2), 'bfloat16', None), Spec((1, 4, 4, 2), 'bfloat16', None)]


def program(x0, x2):
    v1 = torch.stack([x0, x2], dim=4)
    return (v1,)


def test_fuzz_nki_sim_crash_529aa902():
    check_regression(program, INPUTS, data_seed=1805774199, specials=False, target='nki-sim', backward=False, backend='neuron')
