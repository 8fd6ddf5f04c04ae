"""rill.utils: PyTorch-familiar utilities (`rill.utils.data`; `rill.utils.checkpoint`,
activation checkpointing as `torch.utils.checkpoint`), and `rill.utils.safetensors` (which
imports the safetensors package only when it reads or writes)."""
from . import checkpoint, data, safetensors

__all__ = ["checkpoint", "data", "safetensors"]
