"""Kernels in the style of AWS's NKI 0.2+ tutorials (``import nki``), written for these tests.

The matmul series follows the shape of the public matmul tutorial: a single tile, K-tiled accumulation in
PSUM, loads hoisted out of the N loop, free-dimension blocking, and the fully blocked kernel that accumulates
K blocks in SBUF and packs output rows for the store. Like the tutorial, the output is created with the
inputs' dtype and results are copied to it from fp32 tiles, so bf16 inputs exercise DMA's dtype conversion.
"""

import nki
import nki.isa as nisa
import nki.language as nl


@nki.jit
def add_tiles(a_input, b_input):
    """Element-wise sum, one [128, 512] tile per program of a 2-D launch grid."""
    out = nl.ndarray(a_input.shape, dtype=a_input.dtype, buffer=nl.shared_hbm)
    row, col = nl.program_id(0), nl.program_id(1)
    a_tile = nl.ndarray((128, 512), dtype=a_input.dtype, buffer=nl.sbuf)
    b_tile = nl.ndarray((128, 512), dtype=b_input.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=a_tile, src=a_input[row * 128:(row + 1) * 128, col * 512:(col + 1) * 512])
    nisa.dma_copy(dst=b_tile, src=b_input[row * 128:(row + 1) * 128, col * 512:(col + 1) * 512])
    total = nl.ndarray((128, 512), dtype=a_input.dtype, buffer=nl.sbuf)
    nisa.tensor_tensor(dst=total, data1=a_tile, data2=b_tile, op=nl.add)
    nisa.dma_copy(dst=out[row * 128:(row + 1) * 128, col * 512:(col + 1) * 512], src=total)
    return out


@nki.jit
def mm_single_tile(lhsT, rhs):
    """[K=128, M] x [K=128, N<=512] in one nc_matmul."""
    K, M = lhsT.shape
    _, N = rhs.shape
    result = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    lhs_sb = nl.ndarray(lhsT.shape, dtype=lhsT.dtype, buffer=nl.sbuf)
    rhs_sb = nl.ndarray(rhs.shape, dtype=rhs.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=lhs_sb, src=lhsT)
    nisa.dma_copy(dst=rhs_sb, src=rhs)
    acc = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_matmul(acc, lhs_sb, rhs_sb)
    out_sb = nl.ndarray((M, N), dtype=result.dtype, buffer=nl.sbuf)
    nisa.tensor_copy(dst=out_sb, src=acc, dtype=result.dtype)
    nisa.dma_copy(dst=result, src=out_sb)
    return result


@nki.jit
def mm_tiled(lhsT, rhs):
    """K tiles accumulate in one PSUM tile per output tile."""
    K, M = lhsT.shape
    _, N = rhs.shape
    TM, TK, TN = nl.tile_size.gemm_stationary_fmax, nl.tile_size.pmax, nl.tile_size.gemm_moving_fmax
    result = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    for m in nl.affine_range(M // TM):
        for n in nl.affine_range(N // TN):
            acc = nl.ndarray((TM, TN), nl.float32, buffer=nl.psum)
            for k in nl.affine_range(K // TK):
                a = nl.ndarray((TK, TM), dtype=lhsT.dtype, buffer=nl.sbuf)
                b = nl.ndarray((TK, TN), dtype=rhs.dtype, buffer=nl.sbuf)
                nisa.dma_copy(dst=a, src=lhsT[k * TK:(k + 1) * TK, m * TM:(m + 1) * TM])
                nisa.dma_copy(dst=b, src=rhs[k * TK:(k + 1) * TK, n * TN:(n + 1) * TN])
                nisa.nc_matmul(dst=acc, stationary=a, moving=b)
            out_sb = nl.ndarray(acc.shape, dtype=result.dtype, buffer=nl.sbuf)
            nisa.tensor_copy(dst=out_sb, src=acc, dtype=result.dtype)
            nisa.dma_copy(dst=result[m * TM:(m + 1) * TM, n * TN:(n + 1) * TN], src=out_sb)
    return result


@nki.jit
def mm_hoisted(lhsT, rhs):
    """The lhsT column of tiles is loaded once per M tile; the PSUM result is copied to an fp32 tile and
    DMA'd into the (possibly bf16) output, which converts."""
    K, M = lhsT.shape
    _, N = rhs.shape
    TM, TK, TN = nl.tile_size.gemm_stationary_fmax, nl.tile_size.pmax, nl.tile_size.gemm_moving_fmax
    result = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    for m in nl.affine_range(M // TM):
        lhs_tiles = []
        for k in nl.affine_range(K // TK):
            tile = nl.ndarray(shape=(TK, TM), dtype=lhsT.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=tile, src=lhsT[k * TK:(k + 1) * TK, m * TM:(m + 1) * TM])
            lhs_tiles.append(tile)
        for n in nl.affine_range(N // TN):
            rhs_tiles = []
            for k in nl.affine_range(K // TK):
                tile = nl.ndarray(shape=(TK, TN), dtype=rhs.dtype, buffer=nl.sbuf)
                nisa.dma_copy(dst=tile, src=rhs[k * TK:(k + 1) * TK, n * TN:(n + 1) * TN])
                rhs_tiles.append(tile)
            acc = nl.ndarray(shape=(TM, TN), dtype=nl.float32, buffer=nl.psum)
            for k in nl.affine_range(K // TK):
                nisa.nc_matmul(dst=acc, stationary=lhs_tiles[k], moving=rhs_tiles[k])
            staged = nl.ndarray(shape=(TM, TN), dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_copy(dst=staged, src=acc)
            nisa.dma_copy(dst=result[m * TM:(m + 1) * TM, n * TN:(n + 1) * TN], src=staged)
    return result


@nki.jit
def mm_blocked_free(lhsT, rhs, blocks_m=2, blocks_n=2):
    """Blocks of ``blocks_m`` x ``blocks_n`` output tiles share their loaded lhsT / rhs tiles."""
    K, M = lhsT.shape
    _, N = rhs.shape
    TM, TK, TN = nl.tile_size.gemm_stationary_fmax, nl.tile_size.pmax, nl.tile_size.gemm_moving_fmax
    BM, BN = TM * blocks_m, TN * blocks_n
    result = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    for m in nl.affine_range(M // BM):
        lhs_tiles = []
        for bm in nl.affine_range(blocks_m):
            column = []
            for k in nl.affine_range(K // TK):
                tile = nl.ndarray(shape=(TK, TM), dtype=lhsT.dtype, buffer=nl.sbuf)
                rows = (m * blocks_m + bm) * TM
                nisa.dma_copy(dst=tile, src=lhsT[k * TK:(k + 1) * TK, rows:rows + TM])
                column.append(tile)
            lhs_tiles.append(column)
        for n in nl.affine_range(N // BN):
            rhs_tiles = []
            for bn in nl.affine_range(blocks_n):
                column = []
                for k in nl.affine_range(K // TK):
                    tile = nl.ndarray(shape=(TK, TN), dtype=rhs.dtype, buffer=nl.sbuf)
                    cols = (n * blocks_n + bn) * TN
                    nisa.dma_copy(dst=tile, src=rhs[k * TK:(k + 1) * TK, cols:cols + TN])
                    column.append(tile)
                rhs_tiles.append(column)
            for bm in nl.affine_range(blocks_m):
                for bn in nl.affine_range(blocks_n):
                    acc = nl.ndarray(shape=(TM, TN), dtype=nl.float32, buffer=nl.psum)
                    for k in nl.affine_range(K // TK):
                        nisa.nc_matmul(dst=acc, stationary=lhs_tiles[bm][k], moving=rhs_tiles[bn][k])
                    out_sb = nl.ndarray(shape=acc.shape, dtype=result.dtype, buffer=nl.sbuf)
                    nisa.tensor_copy(dst=out_sb, src=acc)
                    rows, cols = (m * blocks_m + bm) * TM, (n * blocks_n + bn) * TN
                    nisa.dma_copy(dst=result[rows:rows + TM, cols:cols + TN], src=out_sb)
    return result


@nki.jit
def mm_blocked_all(lhsT, rhs, blocks_m=4, blocks_n=2, blocks_k=4):
    """Every dimension blocked: fp32 SBUF accumulators per output tile across K blocks, rhs loaded in
    ``[TK, BN]`` rows, lhsT in ``[TK, BM]`` rows, output rows packed to ``[TM, BN]`` fp32 before the store."""
    K, M = lhsT.shape
    _, N = rhs.shape
    TM, TK, TN = nl.tile_size.gemm_stationary_fmax, nl.tile_size.pmax, nl.tile_size.gemm_moving_fmax
    BM, BN, BK = TM * blocks_m, TN * blocks_n, TK * blocks_k
    result = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    for n in nl.affine_range(N // BN):
        partial = []
        for m in range(M // BM):
            per_m = []
            for bm in range(blocks_m):
                per_n = []
                for bn in range(blocks_n):
                    tile = nl.ndarray(shape=(TM, TN), dtype=nl.float32, buffer=nl.sbuf)
                    nisa.memset(dst=tile, value=0.0)
                    per_n.append(tile)
                per_m.append(per_n)
            partial.append(per_m)
        for k in nl.sequential_range(K // BK):
            rhs_rows = []
            for bk in range(blocks_k):
                row = nl.ndarray(shape=(TK, BN), dtype=rhs.dtype, buffer=nl.sbuf)
                first = (blocks_k * k + bk) * TK
                nisa.dma_copy(dst=row[0:TK, 0:BN], src=rhs[first:first + TK, BN * n:BN * (n + 1)])
                rhs_rows.append(row)
            for m in nl.affine_range(M // BM):
                lhs_rows = []
                for bk in nl.affine_range(blocks_k):
                    row = nl.ndarray(shape=(TK, BM), dtype=lhsT.dtype, buffer=nl.sbuf)
                    first = (blocks_k * k + bk) * TK
                    nisa.dma_copy(dst=row[0:TK, 0:BM], src=lhsT[first:first + TK, BM * m:BM * (m + 1)])
                    lhs_rows.append(row)
                for bn in nl.affine_range(blocks_n):
                    for bm in nl.affine_range(blocks_m):
                        acc = nl.ndarray(shape=(TM, TN), dtype=nl.float32, buffer=nl.psum)
                        for bk in nl.affine_range(blocks_k):
                            nisa.nc_matmul(dst=acc, stationary=lhs_rows[bk][0:TK, bm * TM:(bm + 1) * TM],
                                           moving=rhs_rows[bk][0:TK, bn * TN:(bn + 1) * TN])
                        nisa.tensor_tensor(dst=partial[m][bm][bn], data1=partial[m][bm][bn], data2=acc, op=nl.add)
        for m in nl.affine_range(M // BM):
            for bm in nl.affine_range(blocks_m):
                packed = nl.ndarray(shape=(TM, BN), dtype=nl.float32, buffer=nl.sbuf)
                for bn in nl.affine_range(blocks_n):
                    nisa.tensor_copy(dst=packed[0:TM, bn * TN:(bn + 1) * TN], src=partial[m][bm][bn][0:TM, 0:TN])
                rows = (blocks_m * m + bm) * TM
                nisa.dma_copy(dst=result[rows:rows + TM, BN * n:BN * (n + 1)], src=packed[0:TM, 0:BN])
    return result


@nki.jit
def transpose_free_axes(x, f1, f2):
    """[P, f1 * f2] -> [P, f2 * f1]: a free-axis transpose as one strided tensor_copy (an access pattern)."""
    P = x.shape[0]
    out = nl.ndarray((P, f2 * f1), dtype=x.dtype, buffer=nl.shared_hbm)
    src = nl.ndarray((P, f1, f2), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=src, src=x.reshape((P, f1, f2)))
    dst = nl.ndarray((P, f2, f1), dtype=x.dtype, buffer=nl.sbuf)
    # Walk the source as [P][f2][f1]: partition step f1*f2, then step 1 over f2, then step f2 over f1.
    nisa.tensor_copy(dst=dst, src=src.ap(pattern=[[f1 * f2, P], [1, f2], [f2, f1]], offset=0))
    nisa.dma_copy(dst=out.reshape((P, f2, f1)), src=dst)
    return out


@nki.jit(platform_target="trn3")
def mx_matmul_quantized_moving(stationary_data, stationary_scale, moving_bf16, mx_dtype):
    """MX matmul of an offline-quantized stationary tile (uint32 words viewed as x4 data, contiguous scales
    spread over partition quadrants) with a moving tile quantized on device."""
    K, M = stationary_data.shape
    _, N4 = moving_bf16.shape
    st_hbm = stationary_data.ap(dtype=mx_dtype, pattern=[[M, K], [1, M]], offset=0)
    st_sb = nl.ndarray(st_hbm.shape, dtype=mx_dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=st_sb, src=st_hbm)
    scale_rows, scale_cols = stationary_scale.shape
    st_scale = nl.ndarray((K, scale_cols), dtype=nl.uint8, buffer=nl.sbuf)
    nisa.memset(dst=st_scale, value=0)
    for q in range(scale_rows // 4):
        nisa.dma_copy(dst=st_scale.ap(pattern=[[scale_cols, 4], [1, scale_cols]], offset=32 * q * scale_cols),
                      src=stationary_scale.ap(pattern=[[scale_cols, 4], [1, scale_cols]], offset=4 * q * scale_cols))
    mv_sb = nl.ndarray(moving_bf16.shape, dtype=moving_bf16.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=mv_sb, src=moving_bf16)
    mv_mx = nl.ndarray((K, N4 // 4), dtype=mx_dtype, buffer=nl.sbuf)
    mv_scale = nl.ndarray((K, N4 // 4), dtype=nl.uint8, buffer=nl.sbuf)
    nisa.quantize_mx(dst=mv_mx, src=mv_sb, dst_scale=mv_scale)
    acc = nl.ndarray((M, N4 // 4), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_matmul_mx(dst=acc, stationary=st_sb, moving=mv_mx, stationary_scale=st_scale, moving_scale=mv_scale)
    out_sb = nl.ndarray(acc.shape, dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=out_sb, src=acc)
    out = nl.ndarray(acc.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=out_sb)
    return out
