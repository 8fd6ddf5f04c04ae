"""Linear maps and lookups: Linear, Identity, Flatten, Embedding."""
from __future__ import annotations

from ..errors import ArgumentError
from ..ops.creation import empty
from ..ops.shape import flatten
from . import functional as F
from . import init
from .module import Module
from .parameter import Parameter


class Identity(Module):
    """Returns its input (a placeholder where a layer is optional).

    >>> import rill
    >>> rill.nn.Identity()(rill.tensor([1.0, 2.0]))
    tensor([1., 2.])
    """

    def __init__(self, *args, **kwargs):
        # Accepts and ignores arguments, so it can stand in for any layer's constructor.
        super().__init__()

    def forward(self, x):
        return x


class Linear(Module):
    """y = x @ weight.T + bias, with weight of shape (out_features, in_features).

    Initialized as PyTorch does: weight ~ kaiming_uniform(a=sqrt(5)), i.e.
    U(-1/sqrt(in), 1/sqrt(in)), and bias ~ U(-1/sqrt(in), 1/sqrt(in)).

    >>> import rill
    >>> layer = rill.nn.Linear(3, 2)
    >>> layer.weight.shape, layer.bias.shape, layer(rill.ones(5, 3)).shape
    ((2, 3), (2,), (5, 2))
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True, dtype=None,
                 device=None):
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.weight = Parameter(empty(out_features, in_features, dtype=dtype, device=device))
        if bias:
            self.bias = Parameter(empty(out_features, dtype=dtype, device=device))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        init.default_layer_init_(self.weight, self.bias)

    def forward(self, x):
        return F.linear(x, self.weight, self.bias)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"bias={self.bias is not None}")


class Flatten(Module):
    """Flattens axes start_axis..end_axis into one (by default all but the batch axis).

    >>> import rill
    >>> rill.nn.Flatten()(rill.zeros(2, 3, 4)).shape
    (2, 12)
    """

    def __init__(self, start_axis: int = 1, end_axis: int = -1):
        super().__init__()
        self.start_axis, self.end_axis = start_axis, end_axis

    def forward(self, x):
        return flatten(x, self.start_axis, self.end_axis)

    def extra_repr(self) -> str:
        return f"start_axis={self.start_axis}, end_axis={self.end_axis}"


class Embedding(Module):
    """A lookup table: integer indices of any shape -> rows of `weight` (num, dim).

    Initialized from N(0, 1); the row at `padding_idx` starts at zero and gets no gradient.
    The gradient of `weight` is sparse (a `rill.SparseRows` of the rows looked up).

    >>> import rill
    >>> emb = rill.nn.Embedding(10, 4, padding_idx=0)
    >>> out = emb(rill.tensor([[0, 3], [3, 9]]))
    >>> out.shape, out[0, 0].tolist()
    ((2, 2, 4), [0.0, 0.0, 0.0, 0.0])
    """

    def __init__(self, num_embeddings: int, embedding_dim: int, padding_idx: int | None = None,
                 dtype=None, device=None):
        super().__init__()
        if padding_idx is not None:
            if not -num_embeddings <= padding_idx < num_embeddings:
                raise ArgumentError(f"padding_idx {padding_idx} is outside the table of "
                                    f"{num_embeddings} rows", op="Embedding")
            padding_idx %= num_embeddings
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        self.padding_idx = padding_idx
        self.weight = Parameter(empty(num_embeddings, embedding_dim, dtype=dtype, device=device))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        init.normal_(self.weight)
        if self.padding_idx is not None:
            from ..eager.context import no_grad
            with no_grad():
                self.weight[self.padding_idx] = 0.0

    def forward(self, indices):
        return F.embedding(indices, self.weight, self.padding_idx)

    def extra_repr(self) -> str:
        padding = f", padding_idx={self.padding_idx}" if self.padding_idx is not None else ""
        return f"{self.num_embeddings}, {self.embedding_dim}{padding}"
