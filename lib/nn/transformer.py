"""TransformerEncoderLayer: self-attention and a feed-forward block, each with a residual
connection and layer norm, as `torch.nn.TransformerEncoderLayer` (same submodule names)."""
from __future__ import annotations

from ..errors import ArgumentError
from ..ops import elementwise as E
from .attention import MultiheadAttention
from .dropout import Dropout
from .linear import Linear
from .module import Module
from .normalization import LayerNorm

_ACTIVATIONS = {"relu": E.relu, "gelu": E.gelu}


class TransformerEncoderLayer(Module):
    """x + attention(x), then x + feed_forward(x), each followed by layer norm; with
    `norm_first`, each is x + block(norm(x)) instead (pre-norm, steadier for deep stacks).

    `activation` is 'relu', 'gelu', or a function. Input layout as MultiheadAttention's
    ((S, N, E), or (N, S, E) with `batch_first`); masks are passed to its attention.

    >>> import rill
    >>> layer = rill.nn.TransformerEncoderLayer(16, nhead=4, dim_feedforward=32,
    ...                                         batch_first=True)
    >>> layer(rill.randn(2, 7, 16)).shape
    (2, 7, 16)
    """

    def __init__(self, d_model: int, nhead: int, dim_feedforward: int = 2048,
                 dropout: float = 0.1, activation="relu", layer_norm_eps: float = 1e-5,
                 batch_first: bool = False, norm_first: bool = False, bias: bool = True,
                 dtype=None, device=None):
        super().__init__()
        factory = dict(dtype=dtype, device=device)
        if isinstance(activation, str):
            if activation not in _ACTIVATIONS:
                raise ArgumentError(f"activation must be 'relu', 'gelu' or a function, got "
                                    f"{activation!r}", op="TransformerEncoderLayer")
            activation = _ACTIVATIONS[activation]
        self.activation = activation
        self.norm_first = norm_first
        self.self_attn = MultiheadAttention(d_model, nhead, dropout=dropout, bias=bias,
                                            batch_first=batch_first, **factory)
        self.linear1 = Linear(d_model, dim_feedforward, bias=bias, **factory)
        self.dropout = Dropout(dropout)
        self.linear2 = Linear(dim_feedforward, d_model, bias=bias, **factory)
        self.norm1 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **factory)
        self.norm2 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **factory)
        self.dropout1 = Dropout(dropout)
        self.dropout2 = Dropout(dropout)

    def _attention_block(self, x, attn_mask, key_padding_mask, is_causal):
        x, _ = self.self_attn(x, x, x, attn_mask=attn_mask, key_padding_mask=key_padding_mask,
                              need_weights=False, is_causal=is_causal)
        return self.dropout1(x)

    def _feed_forward_block(self, x):
        return self.dropout2(self.linear2(self.dropout(self.activation(self.linear1(x)))))

    def forward(self, src, src_mask=None, src_key_padding_mask=None, is_causal: bool = False):
        x = src
        if self.norm_first:
            x = x + self._attention_block(self.norm1(x), src_mask, src_key_padding_mask,
                                          is_causal)
            x = x + self._feed_forward_block(self.norm2(x))
        else:
            x = self.norm1(x + self._attention_block(x, src_mask, src_key_padding_mask,
                                                     is_causal))
            x = self.norm2(x + self._feed_forward_block(x))
        return x

    def extra_repr(self) -> str:
        name = getattr(self.activation, "__name__", repr(self.activation))
        return f"activation={name}, norm_first={self.norm_first}"
