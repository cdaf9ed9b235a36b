"""Extern kernels: matmul, bmm, addmm, convolution and its backward through ATen, zero-copy.

Operands and results are numpy views of the launcher's buffers; ``torch.from_numpy`` wraps them without
copying and ``out=`` writes results in place. torch is imported here lazily, inside the functions that call
it (the only place below the front end allowed to). bf16 values are float32 arrays (see
:mod:`neuroncc.ir.dtypes`), or int16 arrays of their words for an op with ``words`` (bf16-product-words). bf16
products and convolutions are ATen's bf16 kernels where the host multiplies bf16 natively
(:func:`aten_multiplies_bf16_natively`), elsewhere float32 ones of the same values rounded once.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from neuroncc.codegen.llvm.extern_layouts import onednn_shapes_eligible
from neuroncc.ir import REGISTRY, Trait
from neuroncc.ir.dtypes import DType, bf16_words, round_to_bf16


def _spatial(values: Sequence[int], n: int, fill: int) -> list[int]:
    values = list(values) or [fill]
    return values * n if len(values) == 1 else values


def _tensor(array: np.ndarray, narrow: bool = False) -> Any:
    """A torch tensor over ``array`` (float16 widened; ``narrow``: bf16 values as a bfloat16 tensor, for ATen's
    bf16 kernels). An int16 array is bf16 words (a product's or convolution's ``words`` operands:
    bf16-product-words), read in place as a bfloat16 tensor, widened unless ``narrow``; a float32 array holding
    bf16 values is narrowed."""
    import torch

    if array.dtype == np.int16:
        words = torch.from_numpy(array).view(torch.bfloat16)
        return words if narrow else words.float()
    if narrow:
        return torch.from_numpy(array).to(torch.bfloat16)
    if array.dtype == np.float16:
        return torch.from_numpy(array).float()
    return torch.from_numpy(array)


def _store(torch: Any, result: np.ndarray, value: Any) -> None:
    """Write ATen's result tensor into the launcher's result array; a bf16 result is widened exactly (by ATen's
    copy where the array is writable: one pass)."""
    if value.dtype != torch.bfloat16:
        result[...] = value.numpy()
    elif result.flags.writeable:
        torch.from_numpy(result).copy_(value)
    else:
        result[...] = value.float().numpy()


def run_extern(name: str, attrs: Mapping[str, Any], operands: Sequence[np.ndarray], results: Sequence[np.ndarray],
               dtype: DType) -> None:
    """Compute op ``name`` on numpy operand views, writing into the (contiguous) result arrays."""
    import torch

    if attrs.get("words"):  # bf16-product-words: a bf16 product or convolution whose operands and results are int16
        if name in _CONVOLUTIONS:
            _convolution_of_words(torch, name, attrs, operands, results)
        else:
            _product_of_words(torch, name, attrs, operands, results[0])
        return
    if not dtype.is_float:
        _run_numpy(name, attrs, operands, results)
        return
    direct = dtype is not DType.f16 and all(r.flags.writeable and r.flags.c_contiguous for r in results)
    native_bf16 = dtype is DType.bf16 and aten_multiplies_bf16_natively()
    if native_bf16 and REGISTRY.get(name).has(Trait.MATRIX_PRODUCT):
        _bf16_product(torch, name, attrs, operands, results[0])
        return
    if REGISTRY.get(name).has(Trait.MATRIX_PRODUCT):
        args = [_tensor(a) for a in operands]
        if direct:
            out = torch.from_numpy(results[0])
            _matmul(torch, name, attrs, args, out)
        else:
            results[0][...] = _matmul(torch, name, attrs, args, None).numpy()
    elif name in _CONVOLUTIONS:
        args = [_tensor(a, native_bf16) for a in operands]
        for result, value in zip(results, _CONVOLUTIONS[name](torch, attrs, args)):
            _store(torch, result, value)
        if native_bf16:  # ATen's bf16 convolution: its results are bf16 values already
            return
    else:
        raise ValueError(f"'{name}' is not an extern kernel")
    if dtype is DType.bf16:
        for result in results:
            _round_in_place(torch, result)


def aten_multiplies_bf16_natively() -> bool:
    """Whether ATen's bf16 matrix products run on this host's bf16 dot-product instructions (AVX512-BF16 or AMX:
    oneDNN's bf16 GEMM), where they take 0.36-0.42x the time of the float32 product of the same bf16 values
    (products exact in float32 either way, summed in float32, rounded once; AMD Zen 4, 2 threads, session 46).
    There a bf16 product is ATen's own bf16 call: CPU eager's bits and speed. Hosts without those instructions
    (AVX2) keep the float32 product, which ATen's bf16 path would only emulate. The host that runs the product
    decides (ATen's choice is made at run time too), not the CPU the code was compiled for."""
    global _NATIVE_BF16
    if _NATIVE_BF16 is None:
        import torch

        try:
            _NATIVE_BF16 = bool(torch.backends.mkldnn.is_available() and torch.ops.mkldnn._is_mkldnn_bf16_supported()
                                and (torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported()))
        except (AttributeError, RuntimeError):
            _NATIVE_BF16 = False
    return _NATIVE_BF16


_NATIVE_BF16: bool | None = None


def _bf16_product(torch: Any, name: str, attrs: Mapping[str, Any], operands: Sequence[np.ndarray],
                  result: np.ndarray) -> None:
    """A bf16 matrix product as ATen's bf16 kernel computes it (:func:`aten_multiplies_bf16_natively`): the
    float32 arrays holding bf16 values narrowed to bfloat16 (exact), the product, widened into ``result`` (exact)."""
    args = _logical(name, attrs, [_tensor(a, narrow=True) for a in operands])
    _store(torch, result, _ATEN_PRODUCTS[name](torch, attrs, args, {}))


def _product_of_words(torch: Any, name: str, attrs: Mapping[str, Any], operands: Sequence[np.ndarray],
                      result: np.ndarray) -> None:
    """A bf16 product whose operands and result are bf16 words (int16 arrays, read and written in place as
    bfloat16 tensors): ATen's bf16 kernel straight into the result where the host multiplies bf16 natively;
    elsewhere the float32 product of the widened values, rounded once into the result's words."""
    if aten_multiplies_bf16_natively():
        args = _logical(name, attrs, [_tensor(a, narrow=True) for a in operands])
        if result.flags.writeable and result.flags.c_contiguous:
            _ATEN_PRODUCTS[name](torch, attrs, args, {"out": torch.from_numpy(result).view(torch.bfloat16)})
            return
        product = _ATEN_PRODUCTS[name](torch, attrs, args, {})
    else:
        product = _matmul(torch, name, attrs, [_tensor(a) for a in operands], None)
    _store_words(torch, result, product)


def _convolution_of_words(torch: Any, name: str, attrs: Mapping[str, Any], operands: Sequence[np.ndarray],
                          results: Sequence[np.ndarray]) -> None:
    """A bf16 convolution (or its backward) whose operands and results are bf16 words (int16 arrays): ATen's bf16
    kernel reading the words in place where the host multiplies bf16 natively, each result copied into its words
    (ATen's convolutions make their outputs: ``convolution.out`` and ``convolution_backward.out`` exist but are
    generated wrappers that compute the functional result and copy it, the same one copy of 2-byte words);
    elsewhere the float32 convolution of the widened values, each result rounded once into its words. (A
    top-level one's results are not copied: the launcher adopts them, :func:`convolution_words`.)"""
    for result, words in zip(results, convolution_words(name, attrs, operands)):
        if result.flags.writeable:
            torch.from_numpy(result).copy_(words)
        else:
            result[...] = words.numpy()


def convolution_words(name: str, attrs: Mapping[str, Any], operands: Sequence[np.ndarray]) -> list[Any]:
    """The results of a ``words`` convolution (or its backward) as fresh int16 tensors of their words, for the
    launcher to adopt as the results' buffers (executors/cpu/adopt.py: no copy; contiguous, as ``_dense``'s
    operands make ATen's results, codegen/llvm/extern_layouts.supplied_strides): ATen's bf16 results viewed as
    their words where the host multiplies bf16 natively, elsewhere the float32 results rounded once."""
    import torch

    native = aten_multiplies_bf16_natively()
    words = []
    for value in _CONVOLUTIONS[name](torch, attrs, [_tensor(a, native) for a in operands]):
        if value.dtype == torch.bfloat16:
            words.append(value.view(torch.int16))
        elif bool(value.sum().isnan()):  # (round_to_bf16 keeps NaN payloads, as _store_words)
            words.append(torch.from_numpy(bf16_words(round_to_bf16(value.numpy()))))
        else:
            words.append(value.to(torch.bfloat16).view(torch.int16))
    return words


def _store_words(torch: Any, result: np.ndarray, value: Any) -> None:
    """Write ATen's result tensor (bfloat16, or float32 to be rounded once) into ``result``, an int16 array of
    bf16 words: by ATen's copy, which rounds to nearest even, where the array is writable."""
    if value.dtype != torch.bfloat16 and bool(value.sum().isnan()):
        # ATen's rounding makes every NaN one pattern; round_to_bf16 keeps their signs and payloads
        result[...] = bf16_words(round_to_bf16(value.numpy()))
    elif result.flags.writeable:
        torch.from_numpy(result).view(torch.bfloat16).copy_(value)
    else:
        result[...] = value.to(torch.bfloat16).view(torch.int16).numpy()


def _round_in_place(torch: Any, result: np.ndarray) -> None:
    """Round a float32 result to bfloat16 where it is, as :func:`round_to_bf16` does: ATen's conversion
    (vectorized, on the process's threads: 2.3x faster than the numpy bit arithmetic on a [512, 2048]
    product) rounds to nearest even as it does, NaN aside (ATen makes every NaN one pattern; round_to_bf16
    keeps the sign and payload), so a result holding a NaN takes round_to_bf16 (the sum finds one ~15x faster
    than ``isnan().any()``)."""
    try:
        tensor = torch.from_numpy(result) if result.flags.writeable and result.size else None
    except ValueError:  # a layout torch cannot wrap (negative strides)
        tensor = None
    if tensor is None or bool(tensor.sum().isnan()):  # a NaN, or infinities of both signs (then exact anyway)
        result[...] = round_to_bf16(result)
    else:
        tensor.copy_(tensor.to(torch.bfloat16))


def _dense(tensor: Any) -> Any:
    """A convolution's operand in the results' (contiguous) layout. ATen's convolutions compute in the
    memory format of their operands: channels_last as soon as one of them is (a channels_last model's weights,
    its input), which made every convolution of a compiled channels_last graph, whose activations are
    contiguous, convert its contiguous operands to channels_last and its channels_last result back into the
    contiguous result buffer (a channels_last training step 1.3x its contiguous one). A contiguous operand is
    taken as it is."""
    return tensor if tensor.is_contiguous() else tensor.contiguous()


def _convolution(torch: Any, attrs: Mapping[str, Any], args: Sequence[Any]) -> list[Any]:
    x, w = _dense(args[0]), _dense(args[1])
    bias = args[2] if len(args) > 2 else None
    n = x.dim() - 2
    return [torch.convolution(x, w, bias, _spatial(attrs["stride"], n, 1), _spatial(attrs["padding"], n, 0),
                              _spatial(attrs["dilation"], n, 1), attrs["transposed"],
                              _spatial(attrs["output_padding"], n, 0), attrs["groups"])]


def _convolution_backward(torch: Any, attrs: Mapping[str, Any], args: Sequence[Any]) -> list[Any]:
    grad, x, w = (_dense(a) for a in args)
    n = x.dim() - 2
    mask = [bool(m) for m in attrs["output_mask"]]
    grads = torch.ops.aten.convolution_backward(
        grad, x, w, [w.shape[0]] if mask[2] else None, _spatial(attrs["stride"], n, 1),
        _spatial(attrs["padding"], n, 0), _spatial(attrs["dilation"], n, 1), attrs["transposed"],
        _spatial(attrs["output_padding"], n, 0), attrs["groups"], mask)
    return [g for g, wanted in zip(grads, mask) if wanted]


#: Convolution op -> its ATen call on the operands as tensors (one entry per op), giving the results the op's
#: output_mask selects.
_CONVOLUTIONS: dict[str, Callable[[Any, Mapping[str, Any], Sequence[Any]], list[Any]]] = {
    "convolution": _convolution,
    "convolution_backward": _convolution_backward,
}


def _logical(name: str, attrs: Mapping[str, Any], args: list[Any]) -> list[Any]:
    """The operands as the product reads them: transpose_a/transpose_b (set by the layout pass) mean the
    operand is stored transposed; a transposed view is free, and BLAS reads it transposed without a copy."""
    first = len(args) - 2  # the factors are the last two operands (addmm's first is its bias)
    if attrs.get("transpose_a"):
        args[first] = args[first].transpose(-1, -2)
    if attrs.get("transpose_b"):
        args[first + 1] = args[first + 1].transpose(-1, -2)
    return args


def onednn_product(name: str, attrs: Mapping[str, Any], operands: Sequence[np.ndarray], dtype: DType) -> Any:
    """The product of a float32 mm/addmm that goes to oneDNN, as oneDNN's fresh tensor (its linear has no
    ``out=``: the launcher adopts the tensor as the result's storage instead of copying it), or None where
    the op takes another path (then :func:`run_extern` computes it into the result). bf16 products are
    rounded after the product (:func:`run_extern`), so they never come from here."""
    import torch

    if dtype is not DType.f32 or not REGISTRY.get(name).has(Trait.MATRIX_PRODUCT) or operands[-1].ndim != 2 \
            or any(a.dtype != np.float32 for a in operands):  # mm, addmm
        return None
    args = _logical(name, attrs, [torch.from_numpy(a) for a in operands])
    if not _onednn_eligible(torch, name, attrs, args):
        return None
    return _onednn_matmul(torch, name, args, None)


def _matmul(torch: Any, name: str, attrs: Mapping[str, Any], args: list[Any], out: Any) -> Any:
    kwargs = {} if out is None else {"out": out}
    args = _logical(name, attrs, args)
    if _onednn_eligible(torch, name, attrs, args):
        return _onednn_matmul(torch, name, args, out)
    return _ATEN_PRODUCTS[name](torch, attrs, args, kwargs)


#: Matrix product op -> its ATen call on the logical operands (one entry per op).
_ATEN_PRODUCTS: dict[str, Callable[[Any, Mapping[str, Any], list[Any], dict[str, Any]], Any]] = {
    "mm": lambda torch, attrs, args, kwargs: torch.mm(args[0], args[1], **kwargs),
    "bmm": lambda torch, attrs, args, kwargs: torch.bmm(args[0], args[1], **kwargs),
    "addmm": lambda torch, attrs, args, kwargs: torch.addmm(args[0], args[1], args[2], beta=attrs["beta"],
                                                            alpha=attrs["alpha"], **kwargs),
}


def _onednn_eligible(torch: Any, name: str, attrs: Mapping[str, Any], args: list[Any]) -> bool:
    """Whether a float32 mm/addmm (2-d operands, a 1-d or [1, N] bias, alpha = beta = 1) goes to oneDNN.

    ATen's float32 mm/addmm call MKL's sgemm, which on this AMD Zen 4 host runs well below what the AVX-512
    kernels of oneDNN (also bundled with torch) reach: measured (2 threads, CPU time) 45 -> 25 ms on
    [256, 1024] x [1024, 4096], 42 -> 24-30 ms on [4096, 256] x [256, 1024] with every operand layout, 63 -> 51
    ms on [2048, 512] x [512, 2048]. Both compute in float32 (oneDNN under the default "highest" float32
    matmul precision; any other setting keeps ATen so its precision rules apply).

    On a quiet machine the margin is smaller, and a transposed first operand (the weight gradients of a
    backward graph) is faster with MKL, so it stays with ATen (2 threads, oneDNN including the copy into the
    launcher's buffer, 2026-11-30): [2048, 2048]^T x [2048, 512] 23.7 ms MKL vs 27.1 ms oneDNN, [2048, 1536]^T
    x [2048, 512] 16.6 vs 19.3; untransposed first operands 1.02x-1.20x faster with oneDNN.
    """
    if not onednn_shapes_eligible(name, attrs, [tuple(a.shape) for a in args]) or not _onednn_available(torch):
        return False
    if any(a.dtype != torch.float32 for a in args):
        return False
    return torch.get_float32_matmul_precision() == "highest"


def _onednn_available(torch: Any) -> bool:
    global _ONEDNN
    if _ONEDNN is None:
        try:
            _ONEDNN = bool(torch.backends.mkldnn.is_available()) and hasattr(torch.ops.mkldnn, "_linear_pointwise")
        except (AttributeError, RuntimeError):
            _ONEDNN = False
    return _ONEDNN


_ONEDNN: bool | None = None


def _onednn_matmul(torch: Any, name: str, args: list[Any], out: Any) -> Any:
    """a @ b (+ bias) as oneDNN's linear: y = a @ w^T + bias with w = b^T ([N, K], a free view)."""
    a, b = args[-2], args[-1]
    bias = args[0].reshape(-1) if len(args) == 3 else None  # addmm
    product = torch.ops.mkldnn._linear_pointwise(a, b.t(), bias, "none", [], "")
    if out is None:
        return product
    return out.copy_(product)


def _run_numpy(name: str, attrs: Mapping[str, Any], operands: Sequence[np.ndarray],
               results: Sequence[np.ndarray]) -> None:
    """Integer contractions (rare; ATen has no integer BLAS either): the op's numpy reference."""

    out = REGISTRY.get(name).reference(*operands, **dict(attrs))
    outs = out if isinstance(out, tuple) else (out,)
    for result, value in zip(results, outs):
        result[...] = np.asarray(value).astype(result.dtype)
