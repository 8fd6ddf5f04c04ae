"""Layouts: how a tensor's values are stored, PyTorch's `x.layout`.

A Tensor is `strided` (every element held). A sparse tensor (lib/sparse/tensors.py) holds only
its stored entries, as dense component tensors: `sparse_coo` (indices and values) or
`sparse_csr` (compressed row pointers, column indices and values).
"""
from __future__ import annotations


class Layout:
    """One of rill.strided, rill.sparse_coo, rill.sparse_csr (compared by identity)."""

    __slots__ = ("name",)

    def __init__(self, name: str):
        self.name = name

    @property
    def __name__(self) -> str:  # what layout= arguments are checked by (ops/torch_methods.py)
        return self.name

    def __repr__(self) -> str:
        return f"rill.{self.name}"

    def __reduce__(self):  # one object per layout, also after a copy or pickle
        return (_by_name, (self.name,))


strided = Layout("strided")
sparse_coo = Layout("sparse_coo")
sparse_csr = Layout("sparse_csr")


def _by_name(name: str) -> Layout:
    return {"strided": strided, "sparse_coo": sparse_coo, "sparse_csr": sparse_csr}[name]
