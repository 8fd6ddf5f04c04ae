"""MultiheadAttention, with PyTorch's parameter names (in_proj_weight, in_proj_bias,
out_proj.weight, out_proj.bias), masks and layouts."""
from __future__ import annotations

import math

from .. import dtypes as dt
from ..errors import ArgumentError, DTypeError, ShapeError
from ..ops.creation import empty, full
from ..ops.elementwise import cast, where
from ..ops.linalg import matmul
from ..ops.shape import expand_dims, reshape, split, squeeze, swapaxes, triu
from ..tensor import Tensor
from . import functional as F
from . import init
from .linear import Linear
from .module import Module
from .parameter import Parameter


def additive_mask(mask, dtype, what: str):
    """A float mask to add to attention scores: a bool mask's True entries (positions not
    to attend) become -inf; a float mask is used as it is."""
    if mask is None:
        return None
    if mask.dtype is dt.bool_:
        return where(mask, float("-inf"), full((), 0.0, dtype=dtype, device=mask.device))
    if not mask.dtype.is_floating:
        raise DTypeError(f"{what} must be bool or floating, got {mask.dtype}",
                         op="MultiheadAttention")
    return cast(mask, dtype) if mask.dtype is not dtype else mask


class MultiheadAttention(Module):
    """Attention over num_heads heads of size embed_dim // num_heads, as
    `torch.nn.MultiheadAttention`.

    Inputs are (L, N, E) for the query and (S, N, E) for key and value, or (N, L, E) with
    `batch_first`, or unbatched (L, E). `key_padding_mask` (N, S) and `attn_mask` (L, S) or
    (N * num_heads, L, S) are bool (True = do not attend) or float (added to the scores).
    Returns (output, weights): weights are (N, L, S) averaged over heads, (N, heads, L, S)
    with `average_attn_weights=False`, or None with `need_weights=False`.

    >>> import rill
    >>> mha = rill.nn.MultiheadAttention(8, num_heads=2, batch_first=True)
    >>> x = rill.randn(3, 5, 8)
    >>> out, w = mha(x, x, x)
    >>> out.shape, w.shape, sorted(mha.state_dict())
    ((3, 5, 8), (3, 5, 5), ['in_proj_bias', 'in_proj_weight', 'out_proj.bias', 'out_proj.weight'])
    """

    def __init__(self, embed_dim: int, num_heads: int, dropout: float = 0.0, bias: bool = True,
                 add_bias_kv: bool = False, add_zero_attn: bool = False,
                 kdim: int | None = None, vdim: int | None = None, batch_first: bool = False,
                 device=None, dtype=None):
        super().__init__()
        for flag, what in ((add_bias_kv, "add_bias_kv"), (add_zero_attn, "add_zero_attn")):
            if flag:  # kept in the signature so that PyTorch's argument positions hold
                raise ArgumentError(f"{what}=True is not supported; append the extra key and "
                                    "value positions to key and value yourself",
                                    op="MultiheadAttention")
        if num_heads <= 0 or embed_dim % num_heads:
            raise ArgumentError(f"embed_dim ({embed_dim}) must be divisible by num_heads "
                                f"({num_heads})", op="MultiheadAttention")
        self.embed_dim, self.num_heads = embed_dim, num_heads
        self.head_dim = embed_dim // num_heads
        self.kdim, self.vdim = kdim or embed_dim, vdim or embed_dim
        self.dropout, self.batch_first = dropout, batch_first
        self.same_dims = self.kdim == embed_dim and self.vdim == embed_dim
        factory = dict(dtype=dtype, device=device)
        if self.same_dims:
            self.in_proj_weight = Parameter(empty(3 * embed_dim, embed_dim, **factory))
        else:
            self.register_parameter("in_proj_weight", None)
            self.q_proj_weight = Parameter(empty(embed_dim, embed_dim, **factory))
            self.k_proj_weight = Parameter(empty(embed_dim, self.kdim, **factory))
            self.v_proj_weight = Parameter(empty(embed_dim, self.vdim, **factory))
        self.register_parameter("in_proj_bias", Parameter(empty(3 * embed_dim, **factory))
                                if bias else None)
        self.out_proj = Linear(embed_dim, embed_dim, bias=bias, **factory)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        if self.same_dims:
            init.xavier_uniform_(self.in_proj_weight)
        else:
            for w in (self.q_proj_weight, self.k_proj_weight, self.v_proj_weight):
                init.xavier_uniform_(w)
        if self.in_proj_bias is not None:
            init.zeros_(self.in_proj_bias)
            init.zeros_(self.out_proj.bias)

    def _project(self, query, key, value):
        biases = (None,) * 3 if self.in_proj_bias is None else split(self.in_proj_bias, self.embed_dim)
        if not self.same_dims:
            weights = (self.q_proj_weight, self.k_proj_weight, self.v_proj_weight)
        elif query is key and key is value:
            # Self-attention: one matmul for all three projections.
            return split(F.linear(query, self.in_proj_weight, self.in_proj_bias), self.embed_dim,
                         axis=-1)
        else:
            weights = split(self.in_proj_weight, self.embed_dim)
        return [F.linear(x, w, b) for x, w, b in zip((query, key, value), weights, biases)]

    def _heads(self, x):
        """(N, L, E) -> (N, heads, L, head_dim)."""
        n, length = x.shape[0], x.shape[1]
        return swapaxes(reshape(x, (n, length, self.num_heads, self.head_dim)), 1, 2)

    def _mask(self, attn_mask, key_padding_mask, is_causal, n, length, source, dtype, device):
        """One additive mask broadcastable to (N, heads, L, S), or None."""
        mask = additive_mask(attn_mask, dtype, "attn_mask")
        if mask is not None:
            if mask.ndim == 2 and mask.shape == (length, source):
                pass
            elif mask.ndim == 3 and mask.shape == (n * self.num_heads, length, source):
                mask = reshape(mask, (n, self.num_heads, length, source))
            else:
                raise ShapeError(f"attn_mask must be ({length}, {source}) or "
                                 f"({n * self.num_heads}, {length}, {source}), got "
                                 f"{mask.shape}", op="MultiheadAttention")
        if is_causal:
            causal = triu(full((length, source), float("-inf"), dtype=dtype, device=device), k=1)
            mask = causal if mask is None else mask + causal
        padding = additive_mask(key_padding_mask, dtype, "key_padding_mask")
        if padding is not None:
            if padding.shape != (n, source):
                raise ShapeError(f"key_padding_mask must be ({n}, {source}), got "
                                 f"{padding.shape}", op="MultiheadAttention")
            padding = reshape(padding, (n, 1, 1, source))
            mask = padding if mask is None else mask + padding
        return mask

    def forward(self, query, key, value, key_padding_mask=None, need_weights: bool = True,
                attn_mask=None, average_attn_weights: bool = True, is_causal: bool = False):
        for t, what in ((query, "query"), (key, "key"), (value, "value")):
            if not isinstance(t, Tensor):
                raise ArgumentError(f"{what} must be a tensor, got {type(t).__name__} (for "
                                    f"self-attention pass the same tensor three times)",
                                    op="MultiheadAttention")
        batched = query.ndim == 3
        if query.ndim not in (2, 3) or key.ndim != query.ndim or value.ndim != query.ndim:
            raise ShapeError(f"MultiheadAttention expects query, key and value with 3 axes "
                             f"(or 2, unbatched), got {query.shape}, {key.shape}, {value.shape}",
                             op="MultiheadAttention")
        same = (query is key, key is value)
        if not batched:
            query, key, value = (expand_dims(t, 0) for t in (query, key, value))
            if key_padding_mask is not None:
                key_padding_mask = expand_dims(key_padding_mask, 0)
        elif not self.batch_first:
            query, key, value = (swapaxes(t, 0, 1) for t in (query, key, value))
        if same[0]:
            key = query
        if same[1]:
            value = key
        if query.shape[-1] != self.embed_dim or key.shape[-1] != self.kdim or \
                value.shape[-1] != self.vdim:
            raise ShapeError(f"MultiheadAttention expects feature sizes (query {self.embed_dim}, "
                             f"key {self.kdim}, value {self.vdim}), got {query.shape[-1]}, "
                             f"{key.shape[-1]}, {value.shape[-1]}", op="MultiheadAttention")
        n, length, source = query.shape[0], query.shape[1], key.shape[1]
        q, k, v = (self._heads(t) for t in self._project(query, key, value))
        # Causal masking alone reaches the fused attention kernel as its flag: no (L, S) mask.
        causal_flag = bool(is_causal) and not need_weights and attn_mask is None and \
            key_padding_mask is None
        mask = None if causal_flag else self._mask(attn_mask, key_padding_mask, is_causal, n,
                                                   length, source, q.dtype, q.device)
        dropout_p = self.dropout if self.training else 0.0
        if need_weights:
            scores = matmul(q * (1.0 / math.sqrt(self.head_dim)), swapaxes(k, -1, -2))
            if mask is not None:
                scores = scores + mask
            weights = F.softmax(scores, axis=-1)
            if dropout_p:
                weights = F.dropout(weights, dropout_p, training=True)
            out = matmul(weights, v)
        else:
            weights = None
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p,
                                                 is_causal=causal_flag)
        out = self.out_proj(reshape(swapaxes(out, 1, 2), (n, length, self.embed_dim)))
        if weights is not None and average_attn_weights:
            weights = weights.mean(axis=1)
        if not batched:
            out = squeeze(out, 0)
            weights = None if weights is None else squeeze(weights, 0)
        elif not self.batch_first:
            out = swapaxes(out, 0, 1)
        return out, weights

    def extra_repr(self) -> str:
        text = f"embed_dim={self.embed_dim}, num_heads={self.num_heads}"
        if self.dropout:
            text += f", dropout={self.dropout}"
        if self.batch_first:
            text += ", batch_first=True"
        return text
