"""rill: an eager-first deep-learning framework.

>>> import rill
>>> x = rill.tensor([1.0, 2.0], requires_grad=True)
>>> y = (x * x).sum()
>>> y.backward()
>>> x.grad
tensor([2., 4.])
"""
from .dtypes import (DType, bfloat16, bool_, float16, float32, float64, int8, int16, int32,
                     int64, uint8, uint16, uint32, uint64, complex64, complex128,
                     promote_types)
from .devices import Device, device, colocate_with
from .errors import (Error, ArgumentError, DeviceError, DTypeError, GradientError,
                     IndexingError, KernelError, OutOfMemoryError, ShapeError, CheckpointError,
                     DataError, CaptureError,
                     DistributedError, PlacementError,
                     install_traceback_filter)
from .tensor import Tensor
from .eager.bind import install_compiled as _install_compiled
from .kernels.native.build import load_quietly as _load_quietly
# bind's common case compiled (eager/bind.py), installed before any op module imports bind
_install_compiled(_load_quietly("dispatch"))
from .ops.sparse_rows import SparseRows
from .random import Generator, manual_seed, default_generator

from . import ops  # declares every primitive and installs Tensor methods
from . import kernels as _kernels  # noqa: F401
from .kernels import numpy as _numpy_kernels  # noqa: F401  (registers the CPU kernels)
from .ops import sparse_ops as _sparse_ops  # noqa: F401  (the sparse primitives)
from .layouts import Layout, strided, sparse_coo, sparse_csr
from .sparse import sparse_coo_tensor, sparse_csr_tensor

from .ops.creation import (tensor, as_tensor, zeros, ones, full, empty, zeros_like, ones_like,
                           full_like, empty_like, arange, linspace, eye, to_device)
from .ops.random import rand, randn, randint, normal, uniform, multinomial, bernoulli
from .ops.elementwise import (
    neg, abs, sign, exp, exp2, log, log2, log1p, expm1, sqrt, rsqrt, square, reciprocal, sin,
    cos, tan, tanh, sinh, cosh, arcsin, arccos, arctan, sigmoid, relu, leaky_relu, elu, gelu,
    silu, softplus, erf, floor, ceil, round, trunc, isnan, isinf, isfinite, logical_not,
    add, subtract, multiply, divide, floor_divide, remainder, power, maximum, minimum, arctan2,
    equal, not_equal, less, less_equal, greater, greater_equal, logical_and, logical_or,
    logical_xor, bitwise_and, bitwise_or, bitwise_xor, where, clip, cast, scaled_add,
    acos, asin, atan, acosh, asinh, atanh, arcsinh, arccosh, arctanh, log10, logaddexp, hypot,
    copysign, nextafter, signbit, positive, negative, bitwise_invert, bitwise_left_shift,
    bitwise_right_shift)
# max, min, var, std and sort come from ops.torch_functions below (PyTorch's meanings)
from .ops.reduce import (sum, mean, prod, argmax, argmin, logsumexp, all, any, cumsum, cumprod,
                         norm, cumulative_sum, cumulative_prod, cummax, cummin, logcumsumexp)
from .ops.shape import concat, stack, pad, flip, roll, tile, repeat, tril, triu
from .ops.indexing import (take, take_along_axis, scatter_add, index_add, index_set, one_hot,
                           gather, scatter, scatter_reduce, index_select, masked_fill,
                           masked_select)
from .ops.sorting import argsort, topk
from .ops.linalg import matmul, dot, outer, tensordot, einsum
from .linalg import vecdot
from .ops.data_types import astype, can_cast, isdtype, result_type, iinfo, finfo
from .ops.conversion import asarray, from_dlpack
from .ops.searching import nonzero, count_nonzero, searchsorted
from .ops.sets import unique_all, unique_counts, unique_inverse, unique_values, isin
from .ops.shape import broadcast_shapes, diff
# Every function that returns a view of its input, under one rule (docs/DESIGN.md):
from .ops.view_spellings import (
    reshape, squeeze, expand_dims, unsqueeze, flatten, ravel, unflatten, transpose, permute_dims,
    permute_dims as permute, swapaxes, swapdims, moveaxis, movedim, matrix_transpose, t,
    adjoint, conj, real, imag, narrow, select, split, chunk, unbind, unstack, diagonal,
    broadcast_to, broadcast_arrays, meshgrid)
from .namespace_info import __array_namespace_info__

from .ops.torch_functions import (  # noqa: A004 - PyTorch's meanings; see the module
    max, min, sort, std, var, cat, concatenate, clamp, numel, mm, spmm, bmm, mv, from_numpy,
    rand_like, randn_like, randint_like, allclose, isclose, unique)
from .ops.activation import softmax, log_softmax
from .ops.torch_constructors import (  # PyTorch's legacy constructors, with its meanings
    FloatTensor, DoubleTensor, HalfTensor, BFloat16Tensor, LongTensor, IntTensor, ShortTensor,
    CharTensor, ByteTensor, BoolTensor)
from .ops.shape import repeat as repeat_interleave
from .ops.elementwise import arctan2 as atan2, power as pow  # noqa: A004
from .errors import DifferenceWarning
from .dtypes import float32 as float, float64 as double, float16 as half  # noqa: A004
from .dtypes import int64 as long, int32 as int, int16 as short  # noqa: A004

from .eager.context import no_grad, enable_grad, is_grad_enabled
from .autodiff.grad import grad, value_and_grad
from .autodiff.custom_vjp import custom_vjp
from . import func
from .func import vmap, jvp, vjp, jacrev, jacfwd, hessian, functional_call, linearize

from . import nn, optim, data, train, distributions, utils, linalg, summary
from . import profiler  # noqa: F401 - rill.profiler.profile
from . import fft  # noqa: F401 - rill.fft, the Array API fft extension
from .ops import keywords as _keywords
_keywords.install(nn.functional)  # F.softmax(x, dim=1), F.normalize(input=x), ...
from . import gpu, cuda, accelerator
from .serialization import save, load
from . import torch_format as _torch_format  # noqa: F401 - rill.load reads PyTorch's files
from .capture.function import capture, CaptureWarning
from .capture.guards import guard as capture_guard
from .capture.serialize import load_graph
from .control import cond, switch, while_loop, fori_loop, scan
from . import amp  # noqa: F401 - rill.amp: autocast, GradScaler (installs bind's hook)
from .amp import autocast
from .dtypes import set_default_dtype, get_default_dtype
from .eager.context import inference_mode
from .compile import compile  # noqa: A004 - torch.compile's spelling of capture
from . import backends  # noqa: F401 - rill.backends.cudnn.benchmark, ... (ports set them)
from .nn import parallel as _nn_parallel  # noqa: F401 - rill.nn.parallel

bool = bool_  # noqa: A001 - rill.bool, as torch.bool and jnp.bool
__version__ = "0.1.0"
__array_api_version__ = "2024.12"
# The standard's constants (Python floats, as it asks) and newaxis.
from math import e, pi, inf, nan  # noqa: E402
newaxis = None

install_traceback_filter()


def __getattr__(name: str):
    """An unknown rill.X is a rill error that says what rill writes for PyTorch's X."""
    if name.startswith("__"):
        raise AttributeError(name)
    from .hints import NAMESPACE, missing
    raise missing("rill", name, NAMESPACE)
