"""Every NKI limit violation raises NKISimulationError with its own assertion-style message; the simulator's own
rules that NKI does not have (on-chip capacity, which NKI's compiler meets by spilling) warn instead."""

from __future__ import annotations

import re

import numpy as np
import pytest

import neuroncc.nki as nki
import neuroncc.nki.isa as nisa
import neuroncc.nki.language as nl
from neuroncc.nki import NKISimulationError
from neuroncc.nki.errors import NKIRuleWarning

from sim_helpers import run


def _fails(kernel, message, *args, target=None):
    with pytest.raises(NKISimulationError, match=re.escape(message)):
        run(kernel, *args, target=target)


def _warns(kernel, message, *args, target=None):
    """A rule NKI does not enforce (its compiler spills): reported as a warning, and the kernel still runs."""
    with pytest.warns(NKIRuleWarning, match=re.escape(message)):
        run(kernel, *args, target=target)


def test_the_error_type_is_an_assertion_error():
    assert issubclass(NKISimulationError, AssertionError)


def test_partition_dimension_limit_names_op_and_operand():
    def kernel():
        big = nl.zeros((128, 64), dtype=nl.float32)
        tall = nl.ndarray((256, 64), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=big, data1=tall, data2=big, op=nl.add)

    _fails(kernel, "tensor_tensor data1 partition dimension 256 exceeds maximum 128")


def test_load_from_sbuf_is_an_address_space_error():
    def kernel():
        nl.load(nl.zeros((4, 4), dtype=nl.float32))

    _fails(kernel, "Expected operand 'src' of 'load' to be in address space 'hbm', but got a tile in 'sbuf' instead.")


def test_dma_into_psum_is_rejected():
    # nl.store of a PSUM tile is accepted (NKI: "an extra copy will be performed", see tests/nki/public);
    # a DMA itself never touches PSUM.
    def dma_psum(x):
        nisa.dma_copy(dst=nl.ndarray((4, 4), dtype=nl.float32, buffer=nl.psum), src=x)

    _fails(dma_psum, "Expected operand 'dst' of 'dma_copy' to be in address space 'hbm' or 'sbuf', but got a tile "
           "in 'psum' instead. (DMA engines cannot access PSUM)", np.zeros((4, 4), np.float32))


@pytest.mark.parametrize("k, m, n, message", [
    (256, 64, 64, "nc_matmul stationary partition dimension 256 exceeds maximum 128"),
    (128, 256, 64, "nc_matmul stationary free dimension 256 exceeds maximum 128"),
    (128, 64, 1024, "nc_matmul moving free dimension 1024 exceeds maximum 512"),
])
def test_matmul_tile_limits(k, m, n, message):
    def kernel():
        stationary = nl.ndarray((k, m), dtype=nl.bfloat16, buffer=nl.sbuf)
        moving = nl.ndarray((k, n), dtype=nl.bfloat16, buffer=nl.sbuf)
        dst = nl.ndarray((m, n), dtype=nl.float32, buffer=nl.psum)
        nisa.nc_matmul(dst=dst, stationary=stationary, moving=moving)

    _fails(kernel, message)


def test_matmul_contraction_mismatch_dst_space_shape_and_dtype():
    def mismatch():
        nisa.nc_matmul(nl.ndarray((8, 8), dtype=nl.float32, buffer=nl.psum), nl.zeros((64, 8), dtype=nl.float32),
                       nl.zeros((32, 8), dtype=nl.float32))

    _fails(mismatch, "nc_matmul stationary and moving partition dimensions must match (the contraction), got 64 and 32")

    def sbuf_dst():
        nisa.nc_matmul(nl.ndarray((8, 8), dtype=nl.float32), nl.zeros((64, 8), dtype=nl.float32),
                       nl.zeros((64, 8), dtype=nl.float32))

    _fails(sbuf_dst, "Expected operand 'dst' of 'nc_matmul' to be in address space 'psum', but got a tile in 'sbuf'")

    def wrong_shape():
        nisa.nc_matmul(nl.ndarray((8, 4), dtype=nl.float32, buffer=nl.psum), nl.zeros((64, 8), dtype=nl.float32),
                       nl.zeros((64, 8), dtype=nl.float32))

    _fails(wrong_shape, "nc_matmul dst shape (8, 4) does not match result shape (8, 8)")

    def bf16_dst():
        nisa.nc_matmul(nl.ndarray((8, 8), dtype=nl.bfloat16, buffer=nl.psum), nl.zeros((64, 8), dtype=nl.bfloat16),
                       nl.zeros((64, 8), dtype=nl.bfloat16))

    _fails(bf16_dst, "nc_matmul dst dtype bfloat16 is not supported on trn2; PSUM results must be float32")
    run(bf16_dst, target="trn3")  # NC-v4 can write bfloat16 matmul results

    def mixed():
        nisa.nc_matmul(nl.ndarray((8, 8), dtype=nl.float32, buffer=nl.psum), nl.zeros((64, 8), dtype=nl.float32),
                       nl.zeros((64, 8), dtype=nl.bfloat16))

    _fails(mixed, "nc_matmul stationary dtype float32 and moving dtype bfloat16 cannot be mixed")


def test_matmul_result_must_sit_in_one_psum_bank():
    def crossing():
        acc = nl.ndarray((128, 1024), dtype=nl.float32, buffer=nl.psum)
        nisa.nc_matmul(acc[:, 256:512], nl.zeros((128, 128), dtype=nl.bfloat16), nl.zeros((128, 256), dtype=nl.bfloat16))
        nisa.nc_matmul(acc[:, 384:640], nl.zeros((128, 128), dtype=nl.bfloat16), nl.zeros((128, 256), dtype=nl.bfloat16))

    _fails(crossing, "nc_matmul dst bytes [1536, 2560) per partition cross a 2048-byte PSUM bank boundary")


def test_psum_tile_larger_than_psum_is_rejected_at_allocation():
    def kernel():
        nl.ndarray((128, 8192), dtype=nl.float32, buffer=nl.psum)

    _fails(kernel, "psum tile 'psum0' (128, 8192) float32 needs 32768 bytes per partition, more than PSUM's 16384")


def test_sbuf_capacity_is_tracked_over_live_tiles_per_target():
    def kernel():
        first = nl.zeros((128, 24 * 1024), dtype=nl.float32)  # 96 KiB per partition
        second = nl.zeros((128, 24 * 1024), dtype=nl.float32)
        nisa.tensor_tensor(dst=first, data1=first, data2=second, op=nl.add)

    run(kernel, target="trn1")  # 192 KiB: both fit

    def bigger():
        first = nl.zeros((128, 28 * 1024), dtype=nl.float32)  # 112 KiB
        second = nl.zeros((128, 28 * 1024), dtype=nl.float32)
        nisa.tensor_tensor(dst=first, data1=first, data2=second, op=nl.add)

    run(bigger, target="trn2")  # 224 KiB: both fit exactly
    _warns(bigger, "SBUF capacity exceeded on trn1 at instruction 1 (memset): tile 'sbuf1' (128, 28672) float32 "
           "needs 114688 bytes per partition, but 114688 of 196608 bytes per partition are live", target="trn1")


def test_tiles_whose_live_ranges_do_not_overlap_share_memory():
    def kernel():
        for _ in range(10):  # 10 x 96 KiB in sequence, never two at once
            tile = nl.ndarray((128, 24 * 1024), dtype=nl.float32)
            nisa.memset(dst=tile, value=0.0)

    run(kernel, target="trn1")


def test_psum_capacity_counts_banks():
    def kernel():
        tiles = [nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum) for _ in range(9)]
        for tile in tiles:
            nisa.memset(dst=tile, value=0.0)
        for tile in tiles:
            nisa.tensor_copy(dst=nl.ndarray((128, 512), dtype=nl.float32), src=tile)

    _warns(kernel, "PSUM capacity exceeded on trn2 at instruction 8 (memset): tile 'psum8' (128, 512) float32 needs "
           "2048 bytes per partition, but 16384 of 16384 bytes per partition are live")


def test_reductions_never_run_on_the_partition_axis():
    def kernel():
        tile = nl.zeros((128, 8), dtype=nl.float32)
        nisa.tensor_reduce(dst=nl.ndarray((1, 8), dtype=nl.float32), op=nl.add, data=tile, axis=0)

    _fails(kernel, "tensor_reduce cannot reduce along the partition axis 0; reduce free axes only")

    def middle():
        tile = nl.zeros((128, 4, 8), dtype=nl.float32)
        nisa.tensor_reduce(dst=nl.ndarray((128, 8), dtype=nl.float32), op=nl.add, data=tile, axis=1)

    _fails(middle, "tensor_reduce axis (1,) must be the trailing free axes of the 3-D tile")

    def language_middle(x):  # nl.sum reduces any free axes (a permuted view; NKI's max-pool example: [2, 4])
        out = nl.ndarray((128, 8), dtype=nl.float32, buffer=nl.shared_hbm)
        nl.store(out, nl.sum(nl.load(x), axis=1))
        return out

    x = np.arange(128 * 4 * 8, dtype=np.float32).reshape(128, 4, 8)
    np.testing.assert_array_equal(run(language_middle, x), x.sum(axis=1))


def test_dst_shape_and_dma_element_count_must_match():
    def shape():
        a = nl.zeros((128, 512), dtype=nl.float32)
        nisa.tensor_tensor(dst=nl.ndarray((128, 256), dtype=nl.float32), data1=a, data2=a, op=nl.add)

    _fails(shape, "tensor_tensor dst shape (128, 256) does not match data1 shape (128, 512)")

    def count(x):  # DMA converts dtypes (NKI's dma_copy docs) but never changes the number of elements
        nisa.dma_copy(dst=nl.ndarray((4, 2), dtype=nl.bfloat16), src=x)

    _fails(count, "dma_copy dst shape (4, 2) does not match src shape (4, 4)", np.zeros((4, 4), np.float32))


def test_gpsimd_cannot_access_psum():
    def kernel():
        nisa.iota(dst=nl.ndarray((128, 8), dtype=nl.int32, buffer=nl.psum), pattern=[[1, 8]])

    _fails(kernel, "Expected operand 'dst' of 'iota' to be in address space 'sbuf', but got a tile in 'psum' "
           "instead. (GpSimd engine cannot access PSUM)")

    def engine():
        acc = nl.ndarray((128, 8), dtype=nl.float32, buffer=nl.psum)
        nisa.tensor_tensor(dst=nl.ndarray((128, 8), dtype=nl.float32), data1=acc, data2=acc, op=nl.add,
                           engine=nisa.engine.gpsimd)

    _fails(engine, "Expected operand 'data1' of 'tensor_tensor' to be in address space 'sbuf', but got a tile in "
           "'psum' instead. (GpSimd engine cannot access PSUM)")


def test_on_chip_tiles_have_at_least_two_dimensions():
    def alloc():
        nl.ndarray((128,), dtype=nl.float32, buffer=nl.sbuf)

    _fails(alloc, "ndarray sbuf tile must have at least 2 dimensions (partition, free), got shape (128,)")

    def picked_partition():  # an integer index on the partition dimension leaves no partition dimension
        tile = nl.zeros((128, 8), dtype=nl.float32)
        nisa.memset(dst=tile[3], value=1.0)

    _fails(picked_partition, "memset dst must have at least 2 dimensions (partition, free), got shape (8,)")

    def column(x):  # t[:, j] keeps the partitions: a (P, 1) operand, as NKI 0.1's tutorials use it
        tile = nl.zeros((128, 8), dtype=nl.float32)
        nisa.memset(dst=tile[:, 3], value=1.0)
        nl.store(x, tile)
        return x

    expected = np.zeros((128, 8), np.float32)
    expected[:, 3] = 1.0
    np.testing.assert_array_equal(run(column, np.zeros((128, 8), np.float32)), expected)


def test_partition_start_alignment():
    def kernel():
        tile = nl.zeros((128, 8), dtype=nl.float32)
        nisa.memset(dst=tile[1:2], value=1.0)

    _fails(kernel, "memset dst starts at partition 1; an access of 1 partitions must start at partition 0, 32, 64 or 96")

    def wide():
        tile = nl.zeros((128, 8), dtype=nl.float32)
        nisa.memset(dst=tile[32:96], value=1.0)

    _fails(wide, "memset dst starts at partition 32; an access of 64 partitions must start at partition 0 or 64")

    def dma_is_exempt(x):
        tile = nl.zeros((128, 8), dtype=nl.float32)
        nisa.dma_copy(dst=tile[1:2], src=x)

    run(dma_is_exempt, np.zeros((1, 8), np.float32))


def test_operators_must_fit_the_instruction():
    def alu():
        a = nl.zeros((4, 4), dtype=nl.float32)
        nisa.tensor_tensor(dst=a, data1=a, data2=a, op=nl.exp)

    _fails(alu, "tensor_tensor op 'exp' is not a supported ALU operator")

    def act():
        a = nl.zeros((4, 4), dtype=nl.float32)
        nisa.activation(dst=a, op=nl.add, data=a)

    _fails(act, "activation op 'add' is not a supported activation function")

    def reduce_op():
        a = nl.zeros((4, 4), dtype=nl.float32)
        nisa.activation(dst=a, op=nl.exp, data=a, reduce_op=nl.maximum, reduce_res=nl.ndarray((4, 1), dtype=nl.float32))

    _fails(reduce_op, "activation reduce_op must be add")


def test_scalar_operands_must_be_numbers_or_columns():
    def kernel():
        a = nl.zeros((128, 4), dtype=nl.float32)
        nisa.tensor_scalar(dst=a, data=a, op0=nl.add, operand0=nl.zeros((128, 2), dtype=nl.float32))

    _fails(kernel, "tensor_scalar operand0 must be a scalar or a tile of shape (128, 1), got shape (128, 2)")


def test_indexing_errors():
    def out_of_bounds(x):
        x[0:200]

    _fails(out_of_bounds, "slice [0:200] is out of bounds for dimension 0 of size 128 in tensor 'arg0'",
           np.zeros((128, 4), np.float32))

    def bad_index(x):
        x[0, 9]

    _fails(bad_index, "index 9 is out of bounds for dimension 1 of size 4 in tensor 'arg0'", np.zeros((128, 4), np.float32))


def test_grid_queries_are_checked():
    @nki.jit
    def kernel():
        nl.program_id(1)

    with pytest.raises(NKISimulationError, match="program_id axis 1 is out of range for a 1-D launch grid"):
        nki.simulate(kernel[2])()


def test_outputs_must_be_in_hbm_and_api_calls_need_a_launch():
    _fails(lambda: nl.zeros((4, 4), dtype=nl.float32), "kernel returned sbuf tile 'sbuf0'; kernel outputs must be HBM")
    with pytest.raises(NKISimulationError, match="must run inside a kernel launched with nki.simulate"):
        nl.zeros((4, 4), dtype=nl.float32)


def test_unknown_target_is_rejected(monkeypatch):
    with pytest.raises(NKISimulationError, match="unknown NKI target 'trn9' from target argument"):
        nki.simulate(lambda: None, target="trn9")
    monkeypatch.setenv("NEURON_PLATFORM_TARGET_OVERRIDE", "inf9")
    with pytest.raises(NKISimulationError, match="unknown NKI target 'inf9' from NEURON_PLATFORM_TARGET_OVERRIDE"):
        nki.simulate(lambda: None)
