"""Kernels from oneDNN, an optional library (`pip install rill[onednn]`), through its C API:
library.py loads it, primitive.py runs one of its primitives on NumPy arrays, conv.py the
convolutions. Every kernel here returns None where oneDNN is absent or declines the case,
and the NumPy kernel that called it runs its own code."""
