"""GPU kernels in Triton, one file per family, registered for device kind 'gpu'.

Imported by the gpu backend the first time a gpu device is made (rill.gpu), never at
`import rill`: Triton and CuPy load only when asked for. Under RILL_TRITON_INTERPRET=1 the
same kernels run through Triton's interpreter on host buffers.
"""
from . import creation, elementwise  # noqa: F401
