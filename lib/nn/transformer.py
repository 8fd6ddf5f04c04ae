"""The Transformer family, as torch.nn's (same submodule names, so state dicts carry over):
TransformerEncoderLayer and TransformerDecoderLayer (attention and a feed-forward block,
each with a residual connection and layer norm), TransformerEncoder and TransformerDecoder
(stacks of copies of one layer, with an optional final norm), and Transformer (both)."""
from __future__ import annotations

import copy

from .. import dtypes as dt
from ..errors import ArgumentError, ShapeError
from ..ops import elementwise as E
from ..ops.creation import full
from ..ops.shape import triu
from . import init
from .attention import MultiheadAttention
from .containers import ModuleList
from .dropout import Dropout
from .linear import Linear
from .module import Module
from .normalization import LayerNorm

_ACTIVATIONS = {"relu": E.relu, "gelu": E.gelu}


def _activation(activation, op: str):
    if isinstance(activation, str):
        if activation not in _ACTIVATIONS:
            raise ArgumentError(f"activation must be 'relu', 'gelu' or a function, got "
                                f"{activation!r}", op=op)
        return _ACTIVATIONS[activation]
    if not callable(activation):
        raise ArgumentError(f"activation must be 'relu', 'gelu' or a function, got "
                            f"{activation!r}", op=op)
    return activation


def _causal(mask, is_causal) -> bool:
    """The is_causal flag given to attention: a mask, when given, is applied as it is (the
    flag is then only PyTorch's hint that it is causal); without one, is_causal=True masks
    the later positions."""
    return bool(is_causal) and mask is None


class _Layer(Module):
    """What the encoder and decoder layers share: the feed-forward block and settings."""

    def _common(self, d_model, dim_feedforward, dropout, activation, layer_norm_eps, bias,
                norm_first, factory, norms: int):
        self.activation = _activation(activation, type(self).__name__)
        self.norm_first = norm_first
        self.linear1 = Linear(d_model, dim_feedforward, bias=bias, **factory)
        self.dropout = Dropout(dropout)
        self.linear2 = Linear(dim_feedforward, d_model, bias=bias, **factory)
        for i in range(1, norms + 1):
            setattr(self, f"norm{i}", LayerNorm(d_model, eps=layer_norm_eps, bias=bias,
                                                **factory))
        for i in range(1, norms + 1):
            setattr(self, f"dropout{i}", Dropout(dropout))

    def _feed_forward_block(self, x, out_dropout):
        return out_dropout(self.linear2(self.dropout(self.activation(self.linear1(x)))))

    def extra_repr(self) -> str:
        name = getattr(self.activation, "__name__", repr(self.activation))
        return f"activation={name}, norm_first={self.norm_first}"


class TransformerEncoderLayer(_Layer):
    """x + attention(x), then x + feed_forward(x), each followed by layer norm; with
    `norm_first`, each is x + block(norm(x)) instead (pre-norm, steadier for deep stacks).

    `activation` is 'relu', 'gelu', or a function. Input layout as MultiheadAttention's
    ((S, N, E), or (N, S, E) with `batch_first`, or unbatched (S, E)). `src_mask` (S, S) or
    (N * nhead, S, S) and `src_key_padding_mask` (N, S) are bool (True = do not attend) or
    float (added to the scores); `is_causal=True` without a mask masks later positions.

    >>> import rill
    >>> layer = rill.nn.TransformerEncoderLayer(16, nhead=4, dim_feedforward=32,
    ...                                         batch_first=True)
    >>> layer(rill.randn(2, 7, 16)).shape
    (2, 7, 16)
    """

    def __init__(self, d_model: int, nhead: int, dim_feedforward: int = 2048,
                 dropout: float = 0.1, activation="relu", layer_norm_eps: float = 1e-5,
                 batch_first: bool = False, norm_first: bool = False, bias: bool = True,
                 device=None, dtype=None):
        super().__init__()
        factory = dict(dtype=dtype, device=device)
        self.self_attn = MultiheadAttention(d_model, nhead, dropout=dropout, bias=bias,
                                            batch_first=batch_first, **factory)
        self._common(d_model, dim_feedforward, dropout, activation, layer_norm_eps, bias,
                     norm_first, factory, norms=2)

    def _attention_block(self, x, attn_mask, key_padding_mask, is_causal):
        x, _ = self.self_attn(x, x, x, attn_mask=attn_mask, key_padding_mask=key_padding_mask,
                              need_weights=False, is_causal=_causal(attn_mask, is_causal))
        return self.dropout1(x)

    def forward(self, src, src_mask=None, src_key_padding_mask=None, is_causal: bool = False):
        x = src
        if self.norm_first:
            x = x + self._attention_block(self.norm1(x), src_mask, src_key_padding_mask,
                                          is_causal)
            x = x + self._feed_forward_block(self.norm2(x), self.dropout2)
        else:
            x = self.norm1(x + self._attention_block(x, src_mask, src_key_padding_mask,
                                                     is_causal))
            x = self.norm2(x + self._feed_forward_block(x, self.dropout2))
        return x


class TransformerDecoderLayer(_Layer):
    """Self-attention over the target, attention to the encoder's output (`memory`), and a
    feed-forward block, each with a residual connection and layer norm (after, or before
    with `norm_first`). Masks as TransformerEncoderLayer's: tgt_mask (T, T), memory_mask
    (T, S), key padding masks (N, T) and (N, S).

    >>> import rill
    >>> layer = rill.nn.TransformerDecoderLayer(16, nhead=4, dim_feedforward=32,
    ...                                         batch_first=True)
    >>> layer(rill.randn(2, 5, 16), rill.randn(2, 7, 16), tgt_is_causal=True).shape
    (2, 5, 16)
    """

    def __init__(self, d_model: int, nhead: int, dim_feedforward: int = 2048,
                 dropout: float = 0.1, activation="relu", layer_norm_eps: float = 1e-5,
                 batch_first: bool = False, norm_first: bool = False, bias: bool = True,
                 device=None, dtype=None):
        super().__init__()
        factory = dict(dtype=dtype, device=device)
        self.self_attn = MultiheadAttention(d_model, nhead, dropout=dropout, bias=bias,
                                            batch_first=batch_first, **factory)
        self.multihead_attn = MultiheadAttention(d_model, nhead, dropout=dropout, bias=bias,
                                                 batch_first=batch_first, **factory)
        self._common(d_model, dim_feedforward, dropout, activation, layer_norm_eps, bias,
                     norm_first, factory, norms=3)

    def _self_attention_block(self, x, mask, padding, is_causal):
        x, _ = self.self_attn(x, x, x, attn_mask=mask, key_padding_mask=padding,
                              need_weights=False, is_causal=_causal(mask, is_causal))
        return self.dropout1(x)

    def _memory_block(self, x, memory, mask, padding, is_causal):
        x, _ = self.multihead_attn(x, memory, memory, attn_mask=mask, key_padding_mask=padding,
                                   need_weights=False, is_causal=_causal(mask, is_causal))
        return self.dropout2(x)

    def forward(self, tgt, memory, tgt_mask=None, memory_mask=None, tgt_key_padding_mask=None,
                memory_key_padding_mask=None, tgt_is_causal: bool = False,
                memory_is_causal: bool = False):
        x = tgt
        if self.norm_first:
            x = x + self._self_attention_block(self.norm1(x), tgt_mask, tgt_key_padding_mask,
                                               tgt_is_causal)
            x = x + self._memory_block(self.norm2(x), memory, memory_mask,
                                       memory_key_padding_mask, memory_is_causal)
            x = x + self._feed_forward_block(self.norm3(x), self.dropout3)
        else:
            x = self.norm1(x + self._self_attention_block(x, tgt_mask, tgt_key_padding_mask,
                                                          tgt_is_causal))
            x = self.norm2(x + self._memory_block(x, memory, memory_mask,
                                                  memory_key_padding_mask, memory_is_causal))
            x = self.norm3(x + self._feed_forward_block(x, self.dropout3))
        return x


def _clones(layer, num_layers: int, op: str, kind) -> ModuleList:
    if not isinstance(layer, kind):
        raise ArgumentError(f"expects a {kind.__name__} to copy, got {type(layer).__name__}",
                            op=op)
    if isinstance(num_layers, bool) or not isinstance(num_layers, int) or num_layers < 1:
        raise ArgumentError(f"num_layers must be a positive int, got {num_layers!r}", op=op)
    # Independent copies (as PyTorch): each layer starts from the given one's weights.
    return ModuleList([copy.deepcopy(layer) for _ in range(num_layers)])


class TransformerEncoder(Module):
    """`num_layers` copies of `encoder_layer` applied in turn (each with its own weights,
    all starting from the given layer's), then `norm` if given.

    >>> import rill
    >>> layer = rill.nn.TransformerEncoderLayer(8, 2, dim_feedforward=16)
    >>> encoder = rill.nn.TransformerEncoder(layer, num_layers=3)
    >>> encoder(rill.randn(5, 2, 8)).shape, len(encoder.layers)
    ((5, 2, 8), 3)
    """

    def __init__(self, encoder_layer, num_layers: int, norm=None,
                 enable_nested_tensor: bool = True, mask_check: bool = True):
        super().__init__()
        # enable_nested_tensor and mask_check choose PyTorch's fast paths; rill has one path.
        self.layers = _clones(encoder_layer, num_layers, "TransformerEncoder",
                              TransformerEncoderLayer)
        self.num_layers = num_layers
        self.norm = norm

    def forward(self, src, mask=None, src_key_padding_mask=None, is_causal: bool | None = None):
        x = src
        for layer in self.layers:
            x = layer(x, src_mask=mask, src_key_padding_mask=src_key_padding_mask,
                      is_causal=bool(is_causal))
        return x if self.norm is None else self.norm(x)


class TransformerDecoder(Module):
    """`num_layers` copies of `decoder_layer` applied in turn, each attending to `memory`,
    then `norm` if given."""

    def __init__(self, decoder_layer, num_layers: int, norm=None):
        super().__init__()
        self.layers = _clones(decoder_layer, num_layers, "TransformerDecoder",
                              TransformerDecoderLayer)
        self.num_layers = num_layers
        self.norm = norm

    def forward(self, tgt, memory, tgt_mask=None, memory_mask=None, tgt_key_padding_mask=None,
                memory_key_padding_mask=None, tgt_is_causal: bool | None = None,
                memory_is_causal: bool = False):
        x = tgt
        for layer in self.layers:
            x = layer(x, memory, tgt_mask=tgt_mask, memory_mask=memory_mask,
                      tgt_key_padding_mask=tgt_key_padding_mask,
                      memory_key_padding_mask=memory_key_padding_mask,
                      tgt_is_causal=bool(tgt_is_causal), memory_is_causal=memory_is_causal)
        return x if self.norm is None else self.norm(x)


class Transformer(Module):
    """An encoder-decoder Transformer (Vaswani et al. 2017), as `torch.nn.Transformer`:
    `encoder` is a TransformerEncoder and `decoder` a TransformerDecoder, each ending in a
    LayerNorm (or the `custom_encoder` / `custom_decoder` given). Weight matrices start
    Xavier-uniform. forward(src, tgt) returns the decoder's output, shaped like tgt.

    >>> import rill
    >>> model = rill.nn.Transformer(d_model=16, nhead=2, num_encoder_layers=1,
    ...                             num_decoder_layers=1, dim_feedforward=32)
    >>> src, tgt = rill.randn(7, 3, 16), rill.randn(5, 3, 16)
    >>> mask = rill.nn.Transformer.generate_square_subsequent_mask(5)
    >>> model(src, tgt, tgt_mask=mask).shape
    (5, 3, 16)
    """

    def __init__(self, d_model: int = 512, nhead: int = 8, num_encoder_layers: int = 6,
                 num_decoder_layers: int = 6, dim_feedforward: int = 2048,
                 dropout: float = 0.1, activation="relu", custom_encoder=None,
                 custom_decoder=None, layer_norm_eps: float = 1e-5, batch_first: bool = False,
                 norm_first: bool = False, bias: bool = True, device=None, dtype=None):
        super().__init__()
        factory = dict(device=device, dtype=dtype)
        settings = dict(dim_feedforward=dim_feedforward, dropout=dropout,
                        activation=activation, layer_norm_eps=layer_norm_eps,
                        batch_first=batch_first, norm_first=norm_first, bias=bias, **factory)
        if custom_encoder is not None:
            self.encoder = custom_encoder
        else:
            self.encoder = TransformerEncoder(
                TransformerEncoderLayer(d_model, nhead, **settings), num_encoder_layers,
                LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **factory))
        if custom_decoder is not None:
            self.decoder = custom_decoder
        else:
            self.decoder = TransformerDecoder(
                TransformerDecoderLayer(d_model, nhead, **settings), num_decoder_layers,
                LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **factory))
        self.d_model, self.nhead, self.batch_first = d_model, nhead, batch_first
        self._reset_parameters()

    def _reset_parameters(self) -> None:
        for p in self.parameters():
            if p.ndim > 1:
                init.xavier_uniform_(p)

    def forward(self, src, tgt, src_mask=None, tgt_mask=None, memory_mask=None,
                src_key_padding_mask=None, tgt_key_padding_mask=None,
                memory_key_padding_mask=None, src_is_causal: bool | None = None,
                tgt_is_causal: bool | None = None, memory_is_causal: bool = False):
        batch_axis = 0 if self.batch_first else 1
        if src.ndim == 3 and tgt.ndim == 3 and src.shape[batch_axis] != tgt.shape[batch_axis]:
            raise ShapeError(f"src {src.shape} and tgt {tgt.shape} must have one batch size "
                             f"(axis {batch_axis})", op="Transformer")
        if src.shape[-1] != self.d_model or tgt.shape[-1] != self.d_model:
            raise ShapeError(f"src {src.shape} and tgt {tgt.shape} must both end with "
                             f"d_model={self.d_model} features", op="Transformer")
        memory = self.encoder(src, mask=src_mask, src_key_padding_mask=src_key_padding_mask,
                              is_causal=src_is_causal)
        return self.decoder(tgt, memory, tgt_mask=tgt_mask, memory_mask=memory_mask,
                            tgt_key_padding_mask=tgt_key_padding_mask,
                            memory_key_padding_mask=memory_key_padding_mask,
                            tgt_is_causal=tgt_is_causal, memory_is_causal=memory_is_causal)

    @staticmethod
    def generate_square_subsequent_mask(sz: int, device=None, dtype=None):
        """A (sz, sz) float mask: 0 on and below the diagonal, -inf above (position i may
        attend to positions up to i).

        >>> import rill
        >>> rill.nn.Transformer.generate_square_subsequent_mask(3)
        tensor([[  0., -inf, -inf],
                [  0.,   0., -inf],
                [  0.,   0.,   0.]])
        """
        if isinstance(sz, bool) or not isinstance(sz, int) or sz < 0:
            raise ArgumentError(f"sz must be a non-negative int, got {sz!r}",
                                op="generate_square_subsequent_mask")
        return triu(full((sz, sz), float("-inf"), dtype=dtype or dt.float32, device=device),
                    k=1)
