"""Library kernels: each Category.EXTERN op of the IR as one ATen call (LAPACK, sort and scans, flash attention,
FFTs: pocketfft through ``aten._fft_*``, on the interleaved complex64 buffers as they are).

:data:`LIBRARY_CALLS` maps an op name to ``call(torch, operands, attrs) -> tuple of tensors``, the results in
the op's result order. :func:`run_library` wraps the operand views (zero-copy), calls ATen and writes the
results into the launcher's buffers. torch is imported lazily, inside the function that calls it (the only
place below the front end allowed to). Operands of bf16 ops are float32 arrays holding bf16 values; the
results are rounded back to bf16 (exact for sorting, which only moves values). Ops whose bf16 numerics are
ATen's bf16 kernel's (attention) get their bf16 operands as bfloat16 tensors (:data:`BF16_OPERANDS`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from neuroncc.ir.dtypes import DType, round_to_bf16

Call = Callable[[Any, list[Any], Mapping[str, Any]], tuple[Any, ...]]

#: The IR's FFT ``norm`` -> ATen's normalization code (fft_norm_mode: none, by_root_n, by_n).
FFT_NORMS = {"none": 0, "by_root_n": 1, "by_n": 2}


def _aten(torch: Any) -> Any:
    return torch.ops.aten


#: op name -> ATen call; one entry per EXTERN op (``test_every_extern_op_has_a_library_call`` checks).
LIBRARY_CALLS: dict[str, Call] = {
    # ---- linear algebra: LAPACK through ATen -----------------------------------------------------------
    "linalg_inv_ex": lambda t, x, a: tuple(_aten(t).linalg_inv_ex(x[0])),
    "linalg_det": lambda t, x, a: tuple(_aten(t)._linalg_det(x[0])),
    "linalg_slogdet": lambda t, x, a: tuple(_aten(t)._linalg_slogdet(x[0])),
    "linalg_solve_ex": lambda t, x, a: tuple(_aten(t)._linalg_solve_ex(x[0], x[1], left=a["left"])),
    "linalg_solve_triangular": lambda t, x, a: (_aten(t).linalg_solve_triangular(
        x[0], x[1], upper=a["upper"], left=a["left"], unitriangular=a["unitriangular"]),),
    "linalg_cholesky_ex": lambda t, x, a: tuple(_aten(t).linalg_cholesky_ex(x[0], upper=a["upper"])),
    "cholesky_inverse": lambda t, x, a: (_aten(t).cholesky_inverse(x[0], a["upper"]),),
    "cholesky_solve": lambda t, x, a: (_aten(t).cholesky_solve(x[0], x[1], a["upper"]),),
    "linalg_lu": lambda t, x, a: tuple(_aten(t).linalg_lu(x[0], pivot=a["pivot"])),
    "linalg_lu_factor_ex": lambda t, x, a: tuple(_aten(t).linalg_lu_factor_ex(x[0], pivot=a["pivot"])),
    "linalg_lu_solve": lambda t, x, a: (_aten(t).linalg_lu_solve(x[0], x[1], x[2], left=a["left"],
                                                                 adjoint=a["adjoint"]),),
    "lu_unpack": lambda t, x, a: tuple(_aten(t).lu_unpack(x[0], x[1], a["unpack_data"], a["unpack_pivots"])),
    "linalg_qr": lambda t, x, a: tuple(_aten(t).linalg_qr(x[0], a["mode"])),
    "linalg_householder_product": lambda t, x, a: (_aten(t).linalg_householder_product(x[0], x[1]),),
    "geqrf": lambda t, x, a: tuple(_aten(t).geqrf(x[0])),
    "ormqr": lambda t, x, a: (_aten(t).ormqr(x[0], x[1], x[2], a["left"], a["transpose"]),),
    "linalg_eigh": lambda t, x, a: tuple(_aten(t)._linalg_eigh(x[0], a["UPLO"], a["compute_v"])),
    "linalg_svd": lambda t, x, a: tuple(_aten(t)._linalg_svd(x[0], a["full_matrices"], a["compute_uv"])),
    "linalg_matrix_exp": lambda t, x, a: (_aten(t).linalg_matrix_exp(x[0]),),
    "triangular_solve": lambda t, x, a: tuple(_aten(t).triangular_solve(x[0], x[1], a["upper"], a["transpose"],
                                                                        a["unitriangular"])),
    "linalg_ldl_factor_ex": lambda t, x, a: tuple(_aten(t).linalg_ldl_factor_ex(x[0], hermitian=a["hermitian"])),
    "linalg_ldl_solve": lambda t, x, a: (_aten(t).linalg_ldl_solve(x[0], x[1], x[2], hermitian=a["hermitian"]),),
    # returns an empty tensor (the effect token); raises torch.linalg.LinAlgError as eager does
    "linalg_check_errors": lambda t, x, a: (_aten(t)._linalg_check_errors(x[0], a["api_name"],
                                                                          is_matrix=a["is_matrix"]), t.empty(0))[1:],
    # ---- sorting, selection, scans ---------------------------------------------------------------------
    "sort": lambda t, x, a: tuple(_aten(t).sort.stable(x[0], stable=a["stable"], dim=a["dim"],
                                                       descending=a["descending"])),
    "topk": lambda t, x, a: tuple(_aten(t).topk(x[0], a["k"], a["dim"], a["largest"], a["sorted"])),
    "kthvalue": lambda t, x, a: tuple(_aten(t).kthvalue(x[0], a["k"], a["dim"], a["keepdim"])),
    "median": lambda t, x, a: tuple((_aten(t).nanmedian if a["ignore_nan"] else _aten(t).median).dim(
        x[0], a["dim"], a["keepdim"])),
    "mode": lambda t, x, a: tuple(_aten(t).mode(x[0], a["dim"], a["keepdim"])),
    "cummax": lambda t, x, a: tuple(_aten(t).cummax(x[0], a["dim"])),
    "cummin": lambda t, x, a: tuple(_aten(t).cummin(x[0], a["dim"])),
    "logcumsumexp": lambda t, x, a: (_aten(t).logcumsumexp(x[0], a["dim"]),),
    "searchsorted": lambda t, x, a: (_aten(t).searchsorted.Tensor(
        x[0], x[1], out_int32=a["out_int32"], right=a["right"], sorter=x[2] if len(x) > 2 else None),),
    "histc": lambda t, x, a: (_aten(t).histc(x[0], a["bins"], a["min"], a["max"]),),
    "histogram": lambda t, x, a: tuple(_aten(t).histogram.bin_ct(
        x[0], a["bins"], range=list(a["range"]) or None, weight=x[1] if len(x) > 1 else None, density=a["density"])),
    "histogram_edges": lambda t, x, a: (_aten(t).histogram.bins_tensor(
        x[0], x[1], weight=x[2] if len(x) > 2 else None, density=a["density"])[0],),
    # ---- attention: ATen's CPU flash kernel (the mask is additive: bool masks became float in the graph) ----
    "flash_attention": lambda t, x, a: tuple(_aten(t)._scaled_dot_product_flash_attention_for_cpu(
        x[0], x[1], x[2], 0.0, a["is_causal"], attn_mask=x[3] if len(x) > 3 else None, scale=a["scale"])),
    "flash_attention_backward": lambda t, x, a: tuple(_aten(t)._scaled_dot_product_flash_attention_for_cpu_backward(
        *x[:6], 0.0, a["is_causal"], attn_mask=x[6] if len(x) > 6 else None, scale=a["scale"])),
    # ---- FFTs: ATen's pocketfft; complex operands and results are the launcher's complex64 buffers ----------
    "fft_r2c": lambda t, x, a: (_aten(t)._fft_r2c(x[0], list(a["dims"]), FFT_NORMS[a["norm"]], a["onesided"]),),
    "fft_c2r": lambda t, x, a: (_aten(t)._fft_c2r(x[0], list(a["dims"]), FFT_NORMS[a["norm"]],
                                                  a["last_dim_size"]),),
    "fft_c2c": lambda t, x, a: (_aten(t)._fft_c2c(x[0], list(a["dims"]), FFT_NORMS[a["norm"]], a["forward"]),),
}

#: Ops whose bf16 kernels ATen runs in bf16 (not on the float32 arrays that hold bf16 values): op -> the operand
#: positions to hand over as bfloat16 when the op's result is bf16. A mask stays float32 (its values are
#: bf16-representable, and the kernel adds it in float32 either way); the logsumexp is float32 by definition.
BF16_OPERANDS: dict[str, tuple[int, ...]] = {
    "flash_attention": (0, 1, 2),
    "flash_attention_backward": (0, 1, 2, 3, 4),
}


def _tensor(torch: Any, array: np.ndarray) -> Any:
    if not array.flags.writeable:  # torch.from_numpy warns on read-only arrays; ATen never writes operands
        array = np.array(array)
    return torch.from_numpy(array)


def run_library(name: str, attrs: Mapping[str, Any], operands: Sequence[np.ndarray],
                results: Sequence[np.ndarray], result_dtypes: Sequence[DType]) -> None:
    """Run EXTERN op ``name`` through ATen on numpy operand views, writing into ``results``."""
    for result, out, dtype in zip(results, library_results(name, attrs, operands, result_dtypes), result_dtypes):
        write_result(result, out, dtype)


def library_results(name: str, attrs: Mapping[str, Any], operands: Sequence[np.ndarray],
                    result_dtypes: Sequence[DType]) -> tuple[Any, ...]:
    """EXTERN op ``name``'s results as the tensors ATen returns (fresh memory, in ATen's layouts)."""
    import torch

    call = LIBRARY_CALLS.get(name)
    if call is None:
        raise ValueError(f"'{name}' has no library kernel")
    tensors = [_tensor(torch, a) for a in operands]
    if result_dtypes and result_dtypes[0] is DType.bf16:
        for position in BF16_OPERANDS.get(name, ()):
            tensors[position] = tensors[position].to(torch.bfloat16)
    return call(torch, tensors, attrs)


def write_result(result: np.ndarray, out: Any, dtype: DType) -> None:
    """Copy ATen's result tensor ``out`` into the launcher's buffer view ``result`` (rounding bf16)."""
    import torch

    value = (out.float() if out.dtype == torch.bfloat16 else out).detach().numpy()
    if dtype is DType.bf16:
        value = round_to_bf16(value.astype(np.float32))
    result[...] = value.reshape(result.shape) if value.size == result.size else value


