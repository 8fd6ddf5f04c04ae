"""Which dtype each primitive runs in under `rill.autocast`: the one table.

Three rules, with the meanings of PyTorch's autocast op lists:
- LOWER: run in the autocast dtype (bfloat16 or float16). The ops whose cost is
  multiply-accumulate over many terms, which low-precision inputs make cheaper and whose
  kernels accumulate in float32 anyway: matmul, linear, convolutions, attention, einsum,
  the LSTM cell.
- FLOAT32: lower-precision inputs are widened to float32. Ops whose result loses too much
  in 8 bits of mantissa: sums over many terms (reductions, cumulative sums, norms), the
  exponential family (exp, log, pow: large dynamic range), softmax and its log, the
  normalizations (their mean and variance are reductions), the losses, and linear algebra.
- WIDEST (every op not listed): floating inputs of different types are cast to the widest
  of them, so `bf16 + f32` runs in float32 as the promotion table would give.

float64 inputs are never cast (as in PyTorch: autocast is about float32 and below), and
integer and bool inputs never are. PyTorch keeps separate lists per device; this table
follows its CUDA lists, which put softmax, log_softmax, layer_norm, exp and log in float32
where its CPU list leaves them in the input's type (tests/amp/test_amp.py compares the two).
"""
from __future__ import annotations

LOWER = "lower"
FLOAT32 = "float32"
WIDEST = "widest"

_LOWER_OPS = (
    "matmul", "linear", "einsum", "attention",
    "conv2d", "conv3d", "conv_transpose2d", "conv_transpose3d",
    "lstm_cell",
)

_FLOAT32_OPS = (
    # reductions and scans: many terms summed
    "sum", "mean", "prod", "var", "norm", "logsumexp", "cumsum", "cumprod",
    # softmax, normalizations, losses
    "softmax", "log_softmax", "layer_norm", "batch_norm_train", "softmax_cross_entropy",
    # the exponential family and other functions of wide range or poor conditioning
    "exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "power", "reciprocal", "rsqrt",
    "softplus", "arccos", "arcsin", "cosh", "sinh", "tan",
    # linear algebra and transforms (LAPACK / pocketfft run in float32 or float64 only)
    "cholesky", "det", "eigh", "inv", "qr", "slogdet", "solve", "svd", "fft", "rfft",
    "irfft",
)

RULES: dict[str, str] = {**{name: LOWER for name in _LOWER_OPS},
                         **{name: FLOAT32 for name in _FLOAT32_OPS}}


def rule(name: str) -> str:
    """LOWER, FLOAT32 or WIDEST for the primitive called `name`."""
    return RULES.get(name, WIDEST)
