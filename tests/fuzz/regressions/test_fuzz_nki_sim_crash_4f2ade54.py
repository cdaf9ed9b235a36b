"""Fuzzer regression: crash on target nki-sim (fwd+bwd).

UnboundLocalError: cannot access local variable 'sign_2' where it is not associated with a value

Found by `python tools/fuzz.py --seed 3` (program 108), shrunk.
"""

import torch  # noqa: F401 (used by the program)
import torch.nn.functional as F  # noqa: F401

from neuroncc.testing.fuzz import Spec, check_regression

INPUTS = [Spec((1, 1, 3, 5), 'float32', None), Spec((1, 1, 3, 5), 'float32', None)]


def program(x0, x1):
    v0 = x0 / (torch.abs(x1) + 0.5)
    return (v0,)


def test_fuzz_nki_sim_crash_4f2ade54():
    check_regression(program, INPUTS, data_seed=533696400, specials=False, target='nki-sim', backward=True, backend='neuron')
