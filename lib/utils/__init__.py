"""rill.utils: PyTorch-familiar utilities (`rill.utils.data`)."""
from . import data
