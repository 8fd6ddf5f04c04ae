"""rill.backends: the settings a PyTorch port writes (`torch.backends.cudnn.benchmark =
True`, `torch.backends.mps.is_available()`), kept, and changing nothing rill computes.

rill has no cuDNN and no Metal backend: its convolutions are its own kernels (NumPy on the
CPU, Triton on a GPU) and their GPU tile sizes are autotuned and cached whatever
`cudnn.benchmark` says; TF32 is never used, whatever `allow_tf32` says. The flags are kept
(a port may read back what it set) and checked: an unknown name or a non-bool value is a
rill error, not a silently created attribute.

>>> import rill
>>> rill.backends.cudnn.benchmark = True
>>> rill.backends.mps.is_available()
False
"""
from __future__ import annotations

from .errors import ArgumentError


class _Flags:
    """A namespace of bool settings; setting an unknown one is an error."""

    def __init__(self, name: str, **flags):
        object.__setattr__(self, "_name", name)
        object.__setattr__(self, "_flags", dict(flags))

    def __getattr__(self, key):
        flags = object.__getattribute__(self, "_flags")
        if key in flags:
            return flags[key]
        raise ArgumentError(f"rill.backends.{self._name} has no setting {key!r}; it has "
                            f"{', '.join(sorted(flags))}", op=f"backends.{self._name}")

    def __setattr__(self, key, value):
        if key not in self._flags:
            raise ArgumentError(f"rill.backends.{self._name} has no setting {key!r}; it has "
                                f"{', '.join(sorted(self._flags))}", op=f"backends.{self._name}")
        if not isinstance(value, bool):
            raise ArgumentError(f"rill.backends.{self._name}.{key} is a bool, got {value!r}",
                                op=f"backends.{self._name}")
        self._flags[key] = value

    def __repr__(self) -> str:
        return f"rill.backends.{self._name}({self._flags})"


class _Cudnn(_Flags):
    def is_available(self) -> bool:
        """False: rill does not use cuDNN."""
        return False

    def version(self):
        return None


class _Mps:
    @staticmethod
    def is_available() -> bool:
        """False: rill has no Metal (Apple GPU) backend."""
        return False

    @staticmethod
    def is_built() -> bool:
        return False


class _Cuda:
    def __init__(self):
        self.matmul = _Flags("cuda.matmul", allow_tf32=False,
                             allow_fp16_reduced_precision_reduction=False,
                             allow_bf16_reduced_precision_reduction=False)

    @staticmethod
    def is_built() -> bool:
        """Whether rill can use an NVIDIA GPU here (as rill.cuda.is_available())."""
        from . import cuda
        return cuda.is_available()


cudnn = _Cudnn("cudnn", benchmark=False, deterministic=False, enabled=True, allow_tf32=False)
mps = _Mps()
cuda = _Cuda()
