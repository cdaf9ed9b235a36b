"""Autocast's cast policy per aten op on the ``neuron`` device: PyTorch's AutocastCPU lists, declared once.

The device's kernels are the ``cpu`` target's, and a script that changes ``"cpu"`` to ``"neuron"`` should see the
same dtypes come out of every op, so the device autocasts exactly as CPU does: the ops below are those PyTorch
(2.13) registers for the AutocastCPU key (``aten/src/ATen/autocast_mode.cpp``, ``TORCH_LIBRARY_IMPL(aten,
AutocastCPU, m)``), each with CPU's policy; every other op falls through untouched.
``tests/device/test_autocast.py`` checks the op set against the running torch's AutocastCPU registrations.

CUDA's lists differ: CUDA also runs ``softmax``, ``log_softmax``, ``layer_norm``, ``exp``, ``log``, ``sum``, ...
in float32 and promotes ``addcdiv``, ``index_put``, ``dot``, ...; CPU (and so the device) leaves those to the
dtypes they are given. Overloads are named as the dispatcher names them (``"conv1d.padding"``; no suffix: the
default overload). CPU-only ops (``mkldnn_rnn_layer``, ``_grid_sampler_2d_cpu_fallback``) are kept so the set
stays CPU's; neuron tensors never reach them.
"""

from __future__ import annotations

import enum


class CastPolicy(enum.Enum):
    """What an op's autocast kernel does to its floating-point device arguments before running it."""

    LOWER_PRECISION = "lower_precision_fp"  # cast to the autocast dtype (bfloat16 or float16)
    FLOAT32 = "fp32"  # cast to float32
    PROMOTE = "promote"  # cast to the widest floating dtype among them (float32 if any is, else the autocast dtype)


#: Matrix products, convolutions and attention: where lower precision pays.
LOWER_PRECISION_OPS = (
    "conv1d", "conv1d.padding", "conv2d", "conv2d.padding", "conv3d", "conv3d.padding", "bmm", "mm",
    "linalg_vecdot", "baddbmm", "addmm", "_addmm_activation", "addbmm", "linear", "_convolution.deprecated",
    "matmul", "conv_tbc", "mkldnn_rnn_layer", "conv_transpose1d", "conv_transpose2d.input", "conv_transpose3d.input",
    "prelu", "scaled_dot_product_attention", "_native_multi_head_attention",
)

#: Losses, linear algebra, FFTs, some pools and pads: where lower precision loses too much.
FLOAT32_OPS = (
    "avg_pool3d", "binary_cross_entropy", "grid_sampler", "polar", "prod", "prod.dim_int", "quantile",
    "quantile.scalar", "nanquantile", "nanquantile.scalar", "stft", "stft.center", "cdist", "grid_sampler_2d",
    "_grid_sampler_2d_cpu_fallback", "grid_sampler_3d", "trace", "view_as_complex", "cholesky", "cholesky_inverse",
    "cholesky_solve", "inverse", "lu_solve", "orgqr", "ormqr", "pinverse", "max_pool3d", "max_unpool2d",
    "max_unpool3d", "adaptive_avg_pool3d", "reflection_pad1d", "reflection_pad2d", "replication_pad1d",
    "replication_pad2d", "replication_pad3d", "mse_loss", "cosine_embedding_loss", "nll_loss", "nll_loss2d",
    "hinge_embedding_loss", "poisson_nll_loss", "smooth_l1_loss", "cross_entropy_loss", "l1_loss", "huber_loss",
    "margin_ranking_loss", "soft_margin_loss", "triplet_margin_loss", "multi_margin_loss", "ctc_loss.IntList",
    "ctc_loss.Tensor", "kl_div", "multilabel_margin_loss", "binary_cross_entropy_with_logits", "fft_fft", "fft_ifft",
    "fft_fft2", "fft_ifft2", "fft_fftn", "fft_ifftn", "fft_rfft", "fft_irfft", "fft_rfft2", "fft_irfft2",
    "fft_rfftn", "fft_irfftn", "fft_hfft", "fft_ihfft", "linalg_cond", "linalg_cond.p_str", "linalg_matrix_rank",
    "linalg_matrix_rank.tol_tensor", "linalg_matrix_rank.atol_rtol_tensor", "linalg_matrix_rank.atol_rtol_float",
    "linalg_solve", "linalg_cholesky", "linalg_svdvals", "linalg_eigvals", "linalg_eigvalsh", "linalg_inv",
    "linalg_householder_product", "linalg_tensorinv", "linalg_tensorsolve", "fake_quantize_per_tensor_affine",
    "geqrf", "_lu_with_info", "qr", "svd", "triangular_solve", "fractional_max_pool2d", "fractional_max_pool3d",
    "adaptive_max_pool3d", "multilabel_margin_loss_forward", "linalg_qr", "linalg_cholesky_ex", "linalg_svd",
    "linalg_eig", "linalg_eigh", "linalg_lstsq", "linalg_inv_ex",
)

#: Ops over several tensors that CPU autocast runs in the widest of their dtypes.
PROMOTE_OPS = ("stack", "cat", "index_copy")

#: aten overload (``name`` or ``name.overload``) -> its autocast policy on the device.
AUTOCAST_POLICY: dict[str, CastPolicy] = {
    **{name: CastPolicy.LOWER_PRECISION for name in LOWER_PRECISION_OPS},
    **{name: CastPolicy.FLOAT32 for name in FLOAT32_OPS},
    **{name: CastPolicy.PROMOTE for name in PROMOTE_OPS},
}
