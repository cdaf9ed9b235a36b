"""The kernel op's scheduling attributes: defaults elided in text, values round-trip, results unchanged."""

import numpy as np

from neuroncc.ir import interpret, parse, print_function

TILED = """func @f(%x: tensor<256x64xf32>) -> (tensor<256x64xf32>) {
  %0 = kernel %x {domain = [256, 64], matmul_tile = [128, 64, 32], name = "k", partition_dim = 0, sbuf_bytes = 512, target = "trn2", tile = [128, 64], vector_width = 8} : tensor<256x64xf32> region(%p: tensor<256x64xf32>) {
    %1 = exp %p : tensor<256x64xf32>
    return %1
  }
  return %0
}
"""


def test_scheduling_attributes_round_trip_and_do_not_change_results():
    tiled = parse(TILED)
    assert print_function(tiled) == TILED
    plain = parse(TILED.replace('domain = [256, 64], matmul_tile = [128, 64, 32], ', '').replace(
        'partition_dim = 0, sbuf_bytes = 512, target = "trn2", tile = [128, 64], vector_width = 8', ''
    ).replace('name = "k", ', 'name = "k"'))
    attrs = plain.ops[0].attrs
    assert attrs["domain"] == () and attrs["partition_dim"] is None and attrs["tile"] == ()
    assert attrs["vector_width"] == 0 and attrs["matmul_tile"] == () and attrs["sbuf_bytes"] == 0
    assert 'kernel %x {name = "k"}' in print_function(plain)
    x = np.random.default_rng(0).standard_normal((256, 64)).astype(np.float32)
    np.testing.assert_array_equal(interpret(tiled, [x])[0], interpret(plain, [x])[0])
