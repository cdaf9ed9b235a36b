"""Fuzzer regression: mismatch on target cpu (fwd+bwd).

grad #2: max |diff| 0.00195 (-0.111413 vs eager -0.10946); error vs float64 0.00158, eager's
0.000369

Found by `python tools/fuzz.py --seed 9005` (program 129), shrunk.
"""

import torch  # noqa: F401 (used by the program)
import torch.nn.functional as F  # noqa: F401

from neuroncc.testing.fuzz import Spec, check_regression

INPUTS = [Spec((4, 3), 'float32', None), Spec((), 'float32', None), Spec((), 'float32', None), Spec((3, 2), 'float32', None), Spec((), 'bfloat16', None), Spec((), 'bfloat16', None)]


def program(x0, x1, x2, x3, x4, x5):
    v0 = torch.isnan(x2)
    v1 = F.softplus(x2)
    v2 = F.silu(v1)
    v3 = x0 @ x3
    v4 = x2.to(torch.bfloat16)
    v5 = torch.rsqrt(torch.abs(v4) + 0.5)
    v6 = v5 * x4
    v7 = v6 * x5
    return (v7, v2, v3,)


def test_fuzz_cpu_mismatch_db8f6d59():
    check_regression(program, INPUTS, data_seed=1309545089, specials=True, target='cpu', backward=True, backend='neuron')
