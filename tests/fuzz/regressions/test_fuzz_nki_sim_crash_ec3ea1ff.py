"""Fuzzer regression: crash on target nki-sim (fwd+bwd).

UnboundLocalError: cannot access local variable 'mul_6' where it is not associated with a value

Found by `python tools/fuzz.py --seed 3` (program 10), shrunk.
"""

import torch  # noqa: F401 (used by the program)
import torch.nn.functional as F  # noqa: F401

from neuroncc.testing.fuzz import Spec, check_regression

INPUTS = [Spec((1, 3, 4), 'float32', None)]


def program(x2):
    v3 = F.gelu(x2, approximate='tanh')
    return (v3,)


def test_fuzz_nki_sim_crash_ec3ea1ff():
    check_regression(program, INPUTS, data_seed=1771829545, specials=False, target='nki-sim', backward=True, backend='neuron')
