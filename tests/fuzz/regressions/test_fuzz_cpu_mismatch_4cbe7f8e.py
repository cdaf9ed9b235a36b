"""Fuzzer regression: mismatch on target cpu (fwd+bwd).

grad #0: NaN positions differ

Found by `python tools/fuzz.py --seed 9001` (program 181), shrunk.
"""

import torch  # noqa: F401 (used by the program)
import torch.nn.functional as F  # noqa: F401

from neuroncc.testing.fuzz import Spec, check_regression

INPUTS = [Spec((1, 4, 1), 'float32', None), Spec((1, 1, 1), 'float32', None)]


def program(x0, x3):
    v0 = torch.sqrt(torch.abs(x0) + 0.5)
    v2 = torch.maximum(x3, v0)
    return (v2,)


def test_fuzz_cpu_mismatch_4cbe7f8e():
    check_regression(program, INPUTS, data_seed=1773664187, specials=True, target='cpu', backward=True, backend='neuron')
