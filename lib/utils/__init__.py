"""rill.utils: PyTorch-familiar utilities (`rill.utils.data`), and `rill.utils.safetensors`
(which imports the safetensors package only when it reads or writes)."""
from . import data, safetensors

__all__ = ["data", "safetensors"]
