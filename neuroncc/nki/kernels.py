"""Reference kernels in the public NKI 0.2+ style, used by the tests, the calibration and the docs.

They import the public facades exactly as a kernel written for AWS's NKI would import ``nki``; only the
import lines differ. Each is a plain ``@nki.jit`` function of HBM tensors returning HBM tensors.
"""

from __future__ import annotations

import neuroncc.nki as nki
import neuroncc.nki.isa as nisa
import neuroncc.nki.language as nl

P = nl.tile_size.pmax  # 128 partitions


@nki.jit
def tensor_add(a, b, tile_rows=128, tile_cols=512):
    """``a + b`` with a 2-D launch grid: program (i, j) adds tile (i, j) of ``[tile_rows, tile_cols]``."""
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    i, j = nl.program_id(0), nl.program_id(1)
    rows = nl.ds(i * tile_rows, tile_rows)
    cols = nl.ds(j * tile_cols, tile_cols)
    a_tile = nl.load(a[rows, cols])
    b_tile = nl.load(b[rows, cols])
    c_tile = nl.ndarray((tile_rows, tile_cols), dtype=a.dtype, buffer=nl.sbuf)
    nisa.tensor_tensor(dst=c_tile, data1=a_tile, data2=b_tile, op=nl.add)
    nl.store(out[rows, cols], value=c_tile)
    return out


@nki.jit
def transpose_2d(x):
    """``x.T`` for a 2-D ``x``, in 128 x 128 tiles through TensorE (SBUF -> PSUM -> SBUF)."""
    rows, cols = x.shape
    out = nl.ndarray((cols, rows), dtype=x.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range((rows + P - 1) // P):
        for j in nl.affine_range((cols + P - 1) // P):
            m, n = min(P, rows - i * P), min(P, cols - j * P)
            tile = nl.ndarray((P, P), dtype=x.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=tile[0:m, 0:n], src=x[nl.ds(i * P, m), nl.ds(j * P, n)])
            flipped = nl.ndarray((P, P), dtype=x.dtype, buffer=nl.psum)
            nisa.nc_transpose(dst=flipped[0:n, 0:m], data=tile[0:m, 0:n])
            result = nl.ndarray((P, P), dtype=x.dtype, buffer=nl.sbuf)
            nisa.tensor_copy(dst=result[0:n, 0:m], src=flipped[0:n, 0:m])
            nisa.dma_copy(dst=out[nl.ds(j * P, n), nl.ds(i * P, m)], src=result[0:n, 0:m])
    return out


@nki.jit
def matmul_tiled(lhsT, rhs):
    """``lhsT.T @ rhs`` (``lhsT`` is ``[K, M]``, ``rhs`` is ``[K, N]``): one PSUM tile per output tile,
    accumulating the K tiles in PSUM (the first matmul into it overwrites, the rest add)."""
    k_total, m_total = lhsT.shape
    _, n_total = rhs.shape
    tile_k, tile_m = P, nl.tile_size.gemm_stationary_fmax
    tile_n = min(n_total, nl.tile_size.gemm_moving_fmax)
    assert k_total % tile_k == 0 and m_total % tile_m == 0 and n_total % tile_n == 0
    out = nl.ndarray((m_total, n_total), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    for m in nl.affine_range(m_total // tile_m):
        for n in nl.affine_range(n_total // tile_n):
            acc = nl.ndarray((tile_m, tile_n), dtype=nl.float32, buffer=nl.psum)
            for k in nl.affine_range(k_total // tile_k):
                a = nl.load(lhsT[nl.ds(k * tile_k, tile_k), nl.ds(m * tile_m, tile_m)])
                b = nl.load(rhs[nl.ds(k * tile_k, tile_k), nl.ds(n * tile_n, tile_n)])
                nisa.nc_matmul(dst=acc, stationary=a, moving=b)
            result = nl.ndarray((tile_m, tile_n), dtype=out.dtype, buffer=nl.sbuf)
            nisa.tensor_copy(dst=result, src=acc)
            nl.store(out[nl.ds(m * tile_m, tile_m), nl.ds(n * tile_n, tile_n)], value=result)
    return out


@nki.jit
def matmul_blocked(lhsT, rhs, tiles_m=16, tiles_n=2, tiles_k=8):
    """``lhsT.T @ rhs`` blocked for SBUF reuse, after AWS's matmul tutorial ("fully optimized" kernel).

    The output is computed in blocks of ``[tiles_m * 128, tiles_n * 512]`` accumulated in an fp32 SBUF
    buffer. For each block of ``tiles_k * 128`` rows of K, one DMA per K tile brings the lhsT and rhs
    blocks into SBUF, and every (m, n) tile pair of the block is multiplied from there: each loaded byte
    feeds ``tiles_n`` (lhsT) or ``tiles_m`` (rhs) matmuls. The K-block loop allocates fresh blocks each
    iteration, so the next block loads while TensorE works on the current one.
    """
    k_total, m_total = lhsT.shape
    _, n_total = rhs.shape
    tile_k, tile_m, tile_n = P, nl.tile_size.gemm_stationary_fmax, nl.tile_size.gemm_moving_fmax
    block_m, block_n, block_k = tile_m * tiles_m, tile_n * tiles_n, tile_k * tiles_k
    assert m_total % block_m == 0 and n_total % block_n == 0 and k_total % block_k == 0
    out = nl.ndarray((m_total, n_total), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    for n2 in nl.affine_range(n_total // block_n):
        for m2 in nl.affine_range(m_total // block_m):
            acc = nl.zeros((tile_m, tiles_m, block_n), dtype=nl.float32, buffer=nl.sbuf)
            for k2 in nl.affine_range(k_total // block_k):
                lhs_block = nl.ndarray((tile_k, tiles_k, block_m), dtype=lhsT.dtype, buffer=nl.sbuf)
                rhs_block = nl.ndarray((tile_k, tiles_k, block_n), dtype=rhs.dtype, buffer=nl.sbuf)
                for bk in nl.affine_range(tiles_k):
                    k_rows = nl.ds(k2 * block_k + bk * tile_k, tile_k)
                    nisa.dma_copy(dst=lhs_block[:, bk, :], src=lhsT[k_rows, nl.ds(m2 * block_m, block_m)])
                    nisa.dma_copy(dst=rhs_block[:, bk, :], src=rhs[k_rows, nl.ds(n2 * block_n, block_n)])
                for bn in nl.affine_range(tiles_n):
                    for bm in nl.affine_range(tiles_m):
                        partial = nl.ndarray((tile_m, tile_n), dtype=nl.float32, buffer=nl.psum)
                        for bk in nl.affine_range(tiles_k):
                            nisa.nc_matmul(dst=partial,
                                           stationary=lhs_block[:, bk, nl.ds(bm * tile_m, tile_m)],
                                           moving=rhs_block[:, bk, nl.ds(bn * tile_n, tile_n)])
                        acc_tile = acc[:, bm, nl.ds(bn * tile_n, tile_n)]
                        nisa.tensor_tensor(dst=acc_tile, data1=acc_tile, data2=partial, op=nl.add)
            for bm in nl.affine_range(tiles_m):
                result = nl.ndarray((tile_m, block_n), dtype=out.dtype, buffer=nl.sbuf)
                nisa.tensor_copy(dst=result, src=acc[:, bm, :])
                rows = nl.ds(m2 * block_m + bm * tile_m, tile_m)
                nisa.dma_copy(dst=out[rows, nl.ds(n2 * block_n, block_n)], src=result)
            # Drop this block's accumulator before the next one is allocated, so only one is ever live.
            del acc
    return out


@nki.jit
def softmax(x, rows_per_partition=1):
    """Softmax over the last axis of a 2-D ``x``, computed 128 x ``rows_per_partition`` rows at a time.

    Per row: VectorE finds -max, ScalarE computes exp(x - max) and its row sum (fp32) in one activation,
    VectorE scales by the reciprocal. Full-size intermediates use the input dtype, so bfloat16 kernels
    stream at VectorE's 16-bit rate. Fresh tiles per iteration let loads run ahead of compute.

    ``rows_per_partition > 1`` gives each partition several consecutive rows, so each DMA moves longer
    contiguous runs per partition (DMA reaches full bandwidth from 4 KiB per partition; a 1024-wide
    bfloat16 row is only 2 KiB). ``rows`` must be a multiple of ``rows_per_partition``.
    """
    rows, cols = x.shape
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    per = rows_per_partition
    assert rows % per == 0, "rows must be a multiple of rows_per_partition"
    groups = rows // per  # one group of `per` consecutive rows per partition
    x_groups, out_groups = x.reshape((groups, per, cols)), out.reshape((groups, per, cols))
    for t in nl.affine_range((groups + P - 1) // P):
        n = min(P, groups - t * P)
        tile = nl.ndarray((P, per, cols), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=tile[0:n], src=x_groups[nl.ds(t * P, n)])
        neg_max = nl.ndarray((P, per), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_reduce(dst=neg_max[0:n], op=nl.maximum, data=tile[0:n], axis=2, negate=True)
        exps = nl.ndarray((P, per, cols), dtype=x.dtype, buffer=nl.sbuf)
        sums = nl.ndarray((P, per), dtype=nl.float32, buffer=nl.sbuf)
        for r in nl.affine_range(per):
            nisa.activation(dst=exps[0:n, r, :], op=nl.exp, data=tile[0:n, r, :], bias=neg_max[0:n, r:r + 1],
                            reduce_op=nl.add, reduce_res=sums[0:n, r:r + 1])
        inverse = nl.ndarray((P, per), dtype=nl.float32, buffer=nl.sbuf)
        nisa.reciprocal(dst=inverse[0:n], data=sums[0:n])
        result = nl.ndarray((P, per, cols), dtype=x.dtype, buffer=nl.sbuf)
        for r in nl.affine_range(per):
            nisa.tensor_scalar(dst=result[0:n, r, :], data=exps[0:n, r, :], op0=nl.multiply,
                               operand0=inverse[0:n, r:r + 1])
        nisa.dma_copy(dst=out_groups[nl.ds(t * P, n)], src=result[0:n])
    return out


def _broadcast_row(vector, cols):
    """A ``[cols]`` HBM vector as a ``[128, cols]`` SBUF tile (loaded once, copied to every partition)."""
    row = nl.load(vector.reshape((1, cols)))
    return nl.broadcast_to(row, (P, cols))


@nki.jit
def rmsnorm(x, gamma, eps=1e-6):
    """``x / sqrt(mean(x^2) + eps) * gamma`` over the last axis of a 2-D ``x``."""
    rows, cols = x.shape
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    gamma_tile = _broadcast_row(gamma, cols)
    for t in nl.affine_range((rows + P - 1) // P):
        n = min(P, rows - t * P)
        tile = nl.ndarray((P, cols), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=tile[0:n], src=x[nl.ds(t * P, n)])
        squares = nl.ndarray((P, cols), dtype=x.dtype, buffer=nl.sbuf)  # only the fused row sums are kept
        sum_sq = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.activation(dst=squares[0:n], op=nl.square, data=tile[0:n], reduce_op=nl.add, reduce_res=sum_sq[0:n])
        rstd = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.activation(dst=rstd[0:n], op=nl.rsqrt, data=sum_sq[0:n], scale=1.0 / cols, bias=eps)
        result = nl.ndarray((P, cols), dtype=x.dtype, buffer=nl.sbuf)
        nisa.scalar_tensor_tensor(dst=result[0:n], data=tile[0:n], op0=nl.multiply, operand0=rstd[0:n],
                                  op1=nl.multiply, operand1=gamma_tile[0:n])
        nisa.dma_copy(dst=out[nl.ds(t * P, n)], src=result[0:n])
    return out


@nki.jit
def layernorm(x, gamma, beta, eps=1e-5):
    """``(x - mean) / sqrt(var + eps) * gamma + beta`` over the last axis of a 2-D ``x``.

    Work is split so no engine outruns the DMA: ScalarE sums x and x^2 (activations with a fused
    reduction), VectorE does the per-row statistics and two fused scalar_tensor_tensor passes.
    """
    rows, cols = x.shape
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    gamma_tile = _broadcast_row(gamma, cols)
    beta_tile = _broadcast_row(beta, cols)
    for t in nl.affine_range((rows + P - 1) // P):
        n = min(P, rows - t * P)
        tile = nl.ndarray((P, cols), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=tile[0:n], src=x[nl.ds(t * P, n)])
        scratch = nl.ndarray((P, cols), dtype=x.dtype, buffer=nl.sbuf)  # only the fused row sums are kept
        total = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        sum_sq = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.activation(dst=scratch[0:n], op=nl.copy, data=tile[0:n], reduce_op=nl.add, reduce_res=total[0:n])
        nisa.activation(dst=scratch[0:n], op=nl.square, data=tile[0:n], reduce_op=nl.add, reduce_res=sum_sq[0:n])
        mean = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=mean[0:n], data=total[0:n], op0=nl.multiply, operand0=1.0 / cols)
        mean_sq = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=mean_sq[0:n], data1=mean[0:n], data2=mean[0:n], op=nl.multiply)
        var = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.scalar_tensor_tensor(dst=var[0:n], data=sum_sq[0:n], op0=nl.multiply, operand0=1.0 / cols,
                                  op1=nl.subtract, operand1=mean_sq[0:n])
        rstd = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=rstd[0:n], data=var[0:n], op0=nl.add, operand0=eps, op1=nl.power, operand1=-0.5)
        scaled = nl.ndarray((P, cols), dtype=x.dtype, buffer=nl.sbuf)
        nisa.scalar_tensor_tensor(dst=scaled[0:n], data=tile[0:n], op0=nl.subtract, operand0=mean[0:n],
                                  op1=nl.multiply, operand1=gamma_tile[0:n])
        result = nl.ndarray((P, cols), dtype=x.dtype, buffer=nl.sbuf)
        nisa.scalar_tensor_tensor(dst=result[0:n], data=scaled[0:n], op0=nl.multiply, operand0=rstd[0:n],
                                  op1=nl.add, operand1=beta_tile[0:n])
        nisa.dma_copy(dst=out[nl.ds(t * P, n)], src=result[0:n])
    return out
