"""GPU kernels in Triton, one file per family, registered for device kind 'gpu'.

Imported by the gpu backend the first time a gpu device is made (rill.gpu), never at
`import rill`: Triton and CuPy load only when asked for. Under RILL_TRITON_INTERPRET=1 the
same kernels run through Triton's interpreter on host buffers.

A gpu kernel takes the same arguments as the primitive's CPU kernel (buffers, then attrs)
and returns new buffers of exactly the inferred shape and storage dtype. Launchers use the
array module only for views and allocation; values are computed by Triton kernels.
"""
import importlib

FAMILIES = ("elementwise", "creation", "reduce", "sorting", "activation", "linalg", "conv",
            "pooling", "shape", "indexing", "random", "checks", "normalization",
            "updates", "attention", "batch_norm")

for _family in FAMILIES:
    importlib.import_module(f".{_family}", __name__)
