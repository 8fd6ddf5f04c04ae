"""Convolutions through oneDNN: forward, input gradient, weight gradient, for float32 arrays
of 1-3 spatial axes with any stride, dilation, groups and non-negative padding.

Each function returns None where oneDNN is not there or cannot run the case (another dtype,
negative padding, a shape no implementation takes); kernels/numpy/conv.py then runs its own
kernels. The prepared primitives are kept per shape (primitive.Cache): a layer's first call
creates and JIT-compiles them (milliseconds), later calls only reorder and run.
"""
from __future__ import annotations

import ctypes

import numpy as np

from rill.kernels.onednn import library as dnnl
from rill.kernels.onednn.primitive import Cache, Prepared, contiguous_strides, user_md

_cache = Cache()


def _usable(*arrays) -> bool:
    return all(type(a) is np.ndarray and a.dtype == np.float32 and
               all(s > 0 or n == 1 for s, n in zip(a.strides, a.shape)) for a in arrays)


def _weights_view(w, groups):
    """The weights as oneDNN reads them: (O, C/G, *K), or (G, O/G, C/G, *K) when grouped."""
    if groups == 1:
        return w.shape, w.strides
    o = w.shape[0]
    return (groups, o // groups) + w.shape[1:], (w.strides[0] * (o // groups),) + w.strides


def _geometry(input_size, out_size, kernel, stride, padding, dilation):
    """(strides, dilates, padding_l, padding_r) as oneDNN takes them: dilation counts the
    gaps (d - 1); the right pads are what the output size needs, which may be less than
    rill's (a stride that does not divide the span drops the last pixels), never more."""
    right = [(o - 1) * s + (k - 1) * d + 1 - i - lo for i, o, k, s, d, (lo, _) in
             zip(input_size, out_size, kernel, stride, dilation, padding)]
    return tuple(ctypes.byref(dnnl.dims(v)) for v in (
        stride, [d - 1 for d in dilation], [lo for lo, _ in padding], right))


def _key(role, *parts):
    return (role,) + tuple(tuple(p) if isinstance(p, (list, tuple)) else p for p in parts)


def _forward_pd(lib, x_shape, w_shape, b_shape, y_shape, geometry):
    """A forward primitive desc with every layout left to oneDNN (the backward primitives'
    hint too)."""
    mds = [lib.any_md(s) if s is not None else None
           for s in (x_shape, w_shape, b_shape, y_shape)]
    try:
        return lib.make("dnnl_convolution_forward_primitive_desc_create", lib.engine,
                        dnnl.FORWARD_TRAINING, dnnl.CONVOLUTION_DIRECT, *mds, *geometry,
                        lib.attr)
    finally:
        for md in mds:
            lib.destroy("memory_desc", md)


def _applies(padding) -> bool:
    return all(lo >= 0 and hi >= 0 for lo, hi in padding)


def conv(x, w, bias, stride, padding, dilation, groups):
    lib = dnnl.library()
    if lib is None or not _applies(padding) or \
            not _usable(x, w, *([] if bias is None else [bias])):
        return None
    kernel = w.shape[2:]
    out = tuple((s + lo + hi - d * (k - 1) - 1) // st + 1 for s, (lo, hi), d, k, st in
                zip(x.shape[2:], padding, dilation, kernel, stride))
    if min(out) < 1:
        return None
    y_shape = (x.shape[0], w.shape[0]) + out
    w_shape, w_strides = _weights_view(w, groups)
    key = _key("fwd", x.shape, x.strides, w.shape, w.strides, bias is not None, stride,
               padding, dilation, groups)

    def make():
        geometry = _geometry(x.shape[2:], out, kernel, stride, padding, dilation)
        pd = _forward_pd(lib, x.shape, w_shape, None if bias is None else (w.shape[0],),
                         y_shape, geometry)  # first: a declined case makes nothing else
        x_md = user_md(lib, x.shape, x.strides)
        w_md = user_md(lib, w_shape, w_strides)
        y_md = lib.plain_md(y_shape, contiguous_strides(y_shape))
        b_md = lib.plain_md((w.shape[0],), (bias.strides[0] // 4,)) if bias is not None \
            else None
        arguments = {dnnl.ARG_SRC: (x_md, False), dnnl.ARG_WEIGHTS: (w_md, False),
                     dnnl.ARG_DST: (y_md, True)}
        if b_md is not None:
            arguments[dnnl.ARG_BIAS] = (b_md, False)
        return Prepared(lib, pd, arguments)
    prepared = _cache.get(lib, key, make)
    if prepared is None:
        return None
    y = np.empty(y_shape, np.float32)
    arrays = {dnnl.ARG_SRC: x, dnnl.ARG_WEIGHTS: w, dnnl.ARG_DST: y}
    if bias is not None:
        arrays[dnnl.ARG_BIAS] = bias
    prepared(arrays)
    return y


def conv_transpose(g, w, input_size, stride, padding, dilation, groups):
    """The input gradient: dx (N, C, *input_size) from g (N, O, *out)."""
    lib = dnnl.library()
    if lib is None or not _applies(padding) or not _usable(g, w):
        return None
    n, c = g.shape[0], w.shape[1] * groups
    x_shape = (n, c) + tuple(input_size)
    w_shape, w_strides = _weights_view(w, groups)
    key = _key("bwd_data", g.shape, g.strides, w.shape, w.strides, input_size, stride,
               padding, dilation, groups)

    def make():
        geometry = _geometry(input_size, g.shape[2:], w.shape[2:], stride, padding, dilation)
        hint = _forward_pd(lib, x_shape, w_shape, None, g.shape, geometry)
        mds = [lib.any_md(s) for s in (x_shape, w_shape, g.shape)]
        try:
            pd = lib.make("dnnl_convolution_backward_data_primitive_desc_create", lib.engine,
                          dnnl.CONVOLUTION_DIRECT, *mds, *geometry, hint, lib.attr)
        finally:
            for md in mds:
                lib.destroy("memory_desc", md)
            lib.destroy("primitive_desc", hint)
        return Prepared(lib, pd, {
            dnnl.ARG_DIFF_DST: (user_md(lib, g.shape, g.strides), False),
            dnnl.ARG_WEIGHTS: (user_md(lib, w_shape, w_strides), False),
            dnnl.ARG_DIFF_SRC: (lib.plain_md(x_shape, contiguous_strides(x_shape)), True)})
    prepared = _cache.get(lib, key, make)
    if prepared is None:
        return None
    dx = np.empty(x_shape, np.float32)
    prepared({dnnl.ARG_DIFF_DST: g, dnnl.ARG_WEIGHTS: w, dnnl.ARG_DIFF_SRC: dx})
    return dx


def conv_weight_grad(x, g, kernel_size, stride, padding, dilation, groups):
    """dw (O, C/G, *kernel_size) from the image x and the output's gradient g."""
    lib = dnnl.library()
    if lib is None or not _applies(padding) or not _usable(x, g):
        return None
    o = g.shape[1]
    dw = np.empty((o, x.shape[1] // groups) + tuple(kernel_size), np.float32)
    w_shape, w_strides = _weights_view(dw, groups)
    key = _key("bwd_weights", x.shape, x.strides, g.shape, g.strides, kernel_size, stride,
               padding, dilation, groups)

    def make():
        geometry = _geometry(x.shape[2:], g.shape[2:], kernel_size, stride, padding, dilation)
        hint = _forward_pd(lib, x.shape, w_shape, None, g.shape, geometry)
        mds = [lib.any_md(s) for s in (x.shape, w_shape)] + [None, lib.any_md(g.shape)]
        try:
            pd = lib.make("dnnl_convolution_backward_weights_primitive_desc_create",
                          lib.engine, dnnl.CONVOLUTION_DIRECT, *mds, *geometry, hint, lib.attr)
        finally:
            for md in mds:
                lib.destroy("memory_desc", md)
            lib.destroy("primitive_desc", hint)
        return Prepared(lib, pd, {
            dnnl.ARG_SRC: (user_md(lib, x.shape, x.strides), False),
            dnnl.ARG_DIFF_DST: (user_md(lib, g.shape, g.strides), False),
            dnnl.ARG_DIFF_WEIGHTS: (user_md(lib, w_shape, w_strides), True)})
    prepared = _cache.get(lib, key, make)
    if prepared is None:
        return None
    prepared({dnnl.ARG_SRC: x, dnnl.ARG_DIFF_DST: g, dnnl.ARG_DIFF_WEIGHTS: dw})
    return dw

