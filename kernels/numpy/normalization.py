"""layer_norm CPU kernels: rows of the trailing `axes` axes, float16 computed in float32."""
from __future__ import annotations

import numpy as np

from rill.ops.primitive import register_kernels


def _rows(x, axes):
    d = int(np.prod(x.shape[x.ndim - axes:]))
    compute = np.float32 if x.dtype == np.float16 else x.dtype
    return x.reshape(-1, d).astype(compute, copy=False), d


def _stats(xr, eps):
    mu = xr.mean(axis=1, keepdims=True)
    centered = xr - mu
    rstd = 1 / np.sqrt((centered * centered).mean(axis=1, keepdims=True) + eps)
    return centered * rstd, rstd


def _layer_norm(x, w, b, eps, axes):
    xr, d = _rows(x, axes)
    xhat, _ = _stats(xr, eps)
    y = xhat * w.reshape(d).astype(xr.dtype) + b.reshape(d).astype(xr.dtype)
    return y.astype(x.dtype, copy=False).reshape(x.shape)


def _layer_norm_grad(g, x, w, eps, axes):
    xr, d = _rows(x, axes)
    gr = g.reshape(-1, d).astype(xr.dtype, copy=False)
    xhat, rstd = _stats(xr, eps)
    a = gr * w.reshape(d).astype(xr.dtype)
    dx = rstd * (a - a.mean(axis=1, keepdims=True)
                 - xhat * (a * xhat).mean(axis=1, keepdims=True))
    dw = (gr * xhat).sum(axis=0)
    db = gr.sum(axis=0)
    return (dx.astype(x.dtype, copy=False).reshape(x.shape),
            dw.astype(w.dtype, copy=False).reshape(w.shape),
            db.astype(w.dtype, copy=False).reshape(w.shape))


register_kernels("cpu", {"layer_norm": _layer_norm, "layer_norm_grad": _layer_norm_grad})
