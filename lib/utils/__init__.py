"""rill.utils: PyTorch-familiar utilities (`rill.utils.data`)."""
from . import data

__all__ = ["data"]
