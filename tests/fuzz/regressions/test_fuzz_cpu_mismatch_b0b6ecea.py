"""Fuzzer regression: mismatch on target cpu (fwd+bwd).

output #0: differs at []: -6 vs eager 9223372036854775803

Found by `python tools/fuzz.py --seed 9019` (program 2), shrunk.
"""

import torch  # noqa: F401 (used by the program)
import torch.nn.functional as F  # noqa: F401

from neuroncc.testing.fuzz import Spec, check_regression

INPUTS = [Spec((1, 1, 1, 4), 'float32', None)]


def program(x2):
    v4 = x2.to(torch.int64)
    v7 = torch.sum(v4, dim=(0, 1, 2, 3), keepdim=False)
    return (v7,)


def test_fuzz_cpu_mismatch_b0b6ecea():
    check_regression(program, INPUTS, data_seed=609584638, specials=True, target='cpu', backward=False, backend='neuron')
