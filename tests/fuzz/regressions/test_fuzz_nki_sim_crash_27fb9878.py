"""Fuzzer regression: crash on target nki-sim (fwd+bwd).

ValueError: 10 is not in list

Found by `python tools/fuzz.py --seed 2` (program 76), shrunk.
"""

import torch  # noqa: F401 (used by the program)
import torch.nn.functional as F  # noqa: F401

from neuroncc.testing.fuzz import Spec, check_regression

INPUTS = [Spec((1, 1), 'float32', None), Spec((1, 1), 'float32', None)]


def program(x0, x2):
    v3 = torch.cat([x0, x2], dim=-1)
    return (v3,)


def test_fuzz_nki_sim_crash_27fb9878():
    check_regression(program, INPUTS, data_seed=1237670385, specials=False, target='nki-sim', backward=False, backend='neuron')
