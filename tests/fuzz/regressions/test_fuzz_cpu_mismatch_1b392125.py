"""Fuzzer regression: mismatch on target cpu (fwd+bwd).

grad #0: NaN positions differ

Found by `python tools/fuzz.py --seed 9001` (program 81), shrunk.
"""

import torch  # noqa: F401 (used by the program)
import torch.nn.functional as F  # noqa: F401

from neuroncc.testing.fuzz import Spec, check_regression

INPUTS = [Spec((1, 1, 3), 'bfloat16', None)]


def program(x0):
    v0 = F.silu(x0)
    return (v0,)


def test_fuzz_cpu_mismatch_1b392125():
    check_regression(program, INPUTS, data_seed=305421164, specials=True, target='cpu', backward=True, backend='neuron')
