"""The kernel op's scheduling attributes: defaults elided in text, values round-trip, results unchanged, and
values beyond the target's hardware limits do not verify."""

import re

import numpy as np
import pytest

from neuroncc.errors import ParseError
from neuroncc.ir import interpret, parse, print_function

TILED = """func @f(%x: tensor<256x64xf32>) -> (tensor<256x64xf32>) {
  %0 = kernel %x {domain = [256, 64], inner_block = 4096, matmul_blocks = [1, 1, 1], matmul_tile = [128, 64, 32], name = "k", partition_dim = 0, sbuf_budget = 512, target = "trn2", tile = [128, 64], vector_width = 8} : tensor<256x64xf32> region(%p: tensor<256x64xf32>) {
    %1 = exp %p : tensor<256x64xf32>
    return %1
  }
  return %0
}
"""

SCHEDULING = ('domain = [256, 64], inner_block = 4096, matmul_blocks = [1, 1, 1], matmul_tile = [128, 64, 32], ',
              'partition_dim = 0, sbuf_budget = 512, target = "trn2", tile = [128, 64], vector_width = 8')


def test_scheduling_attributes_round_trip_and_do_not_change_results():
    tiled = parse(TILED)
    assert print_function(tiled) == TILED
    plain = parse(TILED.replace(SCHEDULING[0], '').replace(SCHEDULING[1], '').replace('name = "k", ', 'name = "k"'))
    attrs = plain.ops[0].attrs
    assert attrs["domain"] == () and attrs["partition_dim"] is None and attrs["tile"] == ()
    assert attrs["vector_width"] == 0 and attrs["matmul_tile"] == () and attrs["sbuf_budget"] == 0
    assert attrs["inner_block"] == 0 and attrs["matmul_blocks"] == () and attrs["target"] == "any"
    assert 'kernel %x {name = "k"}' in print_function(plain)
    x = np.random.default_rng(0).standard_normal((256, 64)).astype(np.float32)
    np.testing.assert_array_equal(interpret(tiled, [x])[0], interpret(plain, [x])[0])


@pytest.mark.parametrize(("change", "message"), [
    (("tile = [128, 64]", "tile = [256, 64]"), "tile [256, 64]: partitions 256 exceeds trn2's 128"),
    (("matmul_tile = [128, 64, 32]", "matmul_tile = [128, 1024, 32]"),
     "moving (one PSUM bank) 1024 exceeds trn2's 512"),
    (("matmul_tile = [128, 64, 32]", "matmul_tile = [128, 64, 256]"), "contraction 256 exceeds trn2's 128"),
    (("sbuf_budget = 512", "sbuf_budget = 300000"), "sbuf_budget 300000 exceeds trn2's 229376 bytes"),
    (("tile = [128, 64]", "tile = [128]"), "tile must be 2 non-negative sizes, got [128]"),
    (("partition_dim = 0", "partition_dim = 2"), "partition_dim 2 is not a dim of domain [256, 64]"),
    (("vector_width = 8", "vector_width = -8"), "vector_width must not be negative"),
    (("matmul_blocks = [1, 1, 1]", "matmul_blocks = [1, 1, 3], matmul_k_group = 2"),
     "matmul_k_group 2 does not divide the K block's [3] tiles"),
])
def test_decisions_beyond_the_hardware_do_not_verify(change, message):
    with pytest.raises(ParseError, match=re.escape(message)):
        parse(TILED.replace(*change))


def test_hardware_limits_apply_to_nki_targets_only():
    cpu = parse(TILED.replace('target = "trn2"', 'target = "cpu"').replace("tile = [128, 64]", "tile = [256, 64]")
                .replace("sbuf_budget = 512", "sbuf_budget = 300000"))
    assert cpu.ops[0].attrs["tile"] == (256, 64)
    trn1 = TILED.replace('target = "trn2"', 'target = "trn1"').replace("sbuf_budget = 512", "sbuf_budget = 200000")
    with pytest.raises(ParseError, match="exceeds trn1's 196608 bytes"):
        parse(trn1)  # 200000 fits trn2's SBUF partition, not trn1's
