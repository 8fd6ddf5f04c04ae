"""An LSTM layer through oneDNN's RNN primitive: the forward (training: it fills a workspace
with every step's gates and states) and the backward (reads that workspace), for float32.

The layer includes its input projection (x_t @ W_ih.T): oneDNN runs it as one GEMM over all
steps before the recurrence and its gradients as one GEMM each after, and takes no
precomputed projection. Gates come in PyTorch's order (i, f, g, o = oneDNN's i, f, c~, o);
the weights are described in rill's (4H, C) layout by strides (oneDNN's dims l, d, C, 4, H:
C stride 1, gate stride H*C, row stride C) and reordered by primitive.Prepared into the
layout the primitive chose; oneDNN takes one bias per gate, so b_ih + b_hh is passed.

Each function returns None where oneDNN is not there or refuses the case; the caller
(lib/ops/lstm_layer.py) only binds the op after `workspace_bytes` said oneDNN runs it.
"""
from __future__ import annotations

import functools

import numpy as np

from rill.kernels.onednn import library as dnnl
from rill.kernels.onednn.primitive import Cache, Prepared, aligned_buffer, user_md
from rill.ops.lstm_layer import register_workspace_rule
from rill.ops.primitive import register_kernels

_cache = Cache()
_ARG = {"src": 1, "src_iter": dnnl.ARG_SRC_ITER, "src_iter_c": dnnl.ARG_SRC_ITER_C,
        "w_layer": dnnl.ARG_WEIGHTS, "w_iter": dnnl.ARG_WEIGHTS_ITER, "bias": dnnl.ARG_BIAS,
        "dst": dnnl.ARG_DST, "dst_iter": dnnl.ARG_DST_ITER, "dst_iter_c": dnnl.ARG_DST_ITER_C}


def _shapes(steps, n, c, h):
    """oneDNN's logical dims per argument (one layer, one direction)."""
    state = (1, 1, n, h)
    return {"src": (steps, n, c), "src_iter": state, "src_iter_c": state,
            "w_layer": (1, 1, c, 4, h), "w_iter": (1, 1, h, 4, h), "bias": (1, 1, 4, h),
            "dst": (steps, n, h), "dst_iter": state, "dst_iter_c": state}


def _forward_pd(lib, shapes, reverse):
    names = ("src", "src_iter", "src_iter_c", "w_layer", "w_iter", None, None, "bias", "dst",
             "dst_iter", "dst_iter_c")
    mds = [lib.any_md(shapes[k]) if k else None for k in names]
    try:
        return lib.make("dnnl_lstm_forward_primitive_desc_create", lib.engine,
                        dnnl.FORWARD_TRAINING, _direction(reverse), *mds, 0, lib.attr)
    finally:
        for md in mds:
            lib.destroy("memory_desc", md)


def _direction(reverse):
    return dnnl.RIGHT2LEFT if reverse else dnnl.LEFT2RIGHT


def _usable(*arrays) -> bool:
    return all(type(a) is np.ndarray and a.dtype == np.float32 and
               all(s >= 0 and s % 4 == 0 for s in a.strides) for a in arrays)


@functools.lru_cache(maxsize=256)
def _workspace_bytes(steps, n, c, h, reverse):
    lib = dnnl.library()
    try:
        pd = _forward_pd(lib, _shapes(steps, n, c, h), reverse)
    except dnnl.OneDNNError:
        return None
    try:
        return lib.md_size(lib.query_md(pd, dnnl.ARG_WORKSPACE))
    finally:
        lib.destroy("primitive_desc", pd)


def workspace_bytes(steps, n, c, h, reverse) -> tuple:
    """(bytes of the forward's workspace, "") or (None, why oneDNN cannot run this layer:
    not installed, turned off, or the case refused): lstm_layer's shape rule asks it."""
    if dnnl.library() is None:
        return None, dnnl.why_not()
    nbytes = _workspace_bytes(int(steps), int(n), int(c), int(h), bool(reverse))
    return nbytes, "" if nbytes is not None else "it refused these shapes"


def _state_md(lib, a):
    """An (N, H) array as oneDNN's (layers 1, directions 1, N, H) state."""
    return user_md(lib, (1, 1) + a.shape, (a.strides[0] * a.shape[0],) * 2 + a.strides)


def _weights_md(lib, w):
    """A (4H, K) weight as oneDNN's (1, 1, K, 4, H): rows are gate-major (g * H + o)."""
    h = w.shape[0] // 4
    rows, cols = w.strides
    return user_md(lib, (1, 1, w.shape[1], 4, h), (rows * w.shape[0],) * 2 +
                   (cols, rows * h, rows))


def _bias_md(lib, b):
    h = b.shape[0] // 4
    return user_md(lib, (1, 1, 4, h), (b.strides[0] * b.shape[0],) * 2 +
                   (b.strides[0] * h, b.strides[0]))


def _user_mds(lib, arrays):
    """{arg name: user md} of the named arrays (a gradient's named diff_<its value>), each
    described by its own strides."""
    out = {}
    for name, a in arrays.items():
        base = name[5:] if name.startswith("diff_") else name
        if base in ("w_layer", "w_iter"):
            out[name] = _weights_md(lib, a)
        elif base == "bias":
            out[name] = _bias_md(lib, a)
        elif base in ("src", "dst"):
            out[name] = user_md(lib, a.shape, a.strides)
        else:
            out[name] = _state_md(lib, a)
    return out


def _arg(name):
    return dnnl.ARG_DIFF + _ARG[name[5:]] if name.startswith("diff_") else _ARG[name]


def _key(role, arrays, reverse):
    return (role, reverse) + tuple((a.shape, a.strides) for a in arrays)


def _summed_bias(biases, four_h):
    if not biases:
        return np.zeros(four_h, np.float32)
    return np.add(biases[0], biases[1]) if len(biases) == 2 else np.ascontiguousarray(
        biases[0])


def forward(x, h0, c0, w_ih, w_hh, biases, reverse):
    """(hs (T, N, H), h_T, c_T, workspace) of one LSTM layer; None where oneDNN cannot."""
    lib = dnnl.library()
    if lib is None or not _usable(x, h0, c0, w_ih, w_hh, *biases):
        return None
    steps, n, c = x.shape
    h = w_hh.shape[1]
    bias = _summed_bias(biases, 4 * h)
    hs = np.empty((steps, n, h), np.float32)
    h_t, c_t = np.empty((n, h), np.float32), np.empty((n, h), np.float32)
    arrays = {"src": x, "src_iter": h0, "src_iter_c": c0, "w_layer": w_ih, "w_iter": w_hh,
              "bias": bias, "dst": hs, "dst_iter": h_t, "dst_iter_c": c_t}
    outputs = ("dst", "dst_iter", "dst_iter_c")

    def make():
        try:
            pd = _forward_pd(lib, _shapes(steps, n, c, h), reverse)
        except dnnl.OneDNNError:
            return None
        mds = _user_mds(lib, arrays)
        arguments = {_arg(k): (md, k in outputs) for k, md in mds.items()}
        arguments[dnnl.ARG_WORKSPACE] = (_clone(lib, lib.query_md(pd, dnnl.ARG_WORKSPACE)),
                                         True)
        return Prepared(lib, pd, arguments)
    prepared = _cache.get(lib, _key("fwd", arrays.values(), reverse), make)
    if prepared is None:
        return None
    workspace = aligned_buffer(prepared.arguments[dnnl.ARG_WORKSPACE][2])
    prepared({**{_arg(k): a for k, a in arrays.items()}, dnnl.ARG_WORKSPACE: workspace})
    return hs, h_t, c_t, workspace


def backward(g_hs, g_ht, g_ct, x, h0, c0, w_ih, w_hh, biases, workspace, dst, reverse):
    """(dx, dh0, dc0, dW_ih, dW_hh, db) from the forward's workspace and outputs `dst`
    (hs, h_T, c_T: oneDNN 3.2's backward reads hs and c_T besides the workspace); db is the
    gradient of each of b_ih and b_hh."""
    lib = dnnl.library()
    if lib is None or not _usable(g_hs, g_ht, g_ct, x, h0, c0, w_ih, w_hh, *biases, *dst):
        return None
    steps, n, c = x.shape
    h = w_hh.shape[1]
    if workspace.ctypes.data % 64:  # a copy (a loaded graph's) may have lost the alignment
        aligned = aligned_buffer(workspace.nbytes)
        aligned[:] = workspace
        workspace = aligned
    bias = _summed_bias(biases, 4 * h)
    grads = (np.empty((steps, n, c), np.float32), np.empty((n, h), np.float32),
             np.empty((n, h), np.float32), np.empty(w_ih.shape, np.float32),
             np.empty(w_hh.shape, np.float32), np.empty(4 * h, np.float32))
    arrays = {"src": x, "src_iter": h0, "src_iter_c": c0, "w_layer": w_ih, "w_iter": w_hh,
              "bias": bias, "dst": dst[0], "dst_iter": dst[1], "dst_iter_c": dst[2],
              "diff_dst": g_hs, "diff_dst_iter": g_ht, "diff_dst_iter_c": g_ct}
    outputs = ("diff_src", "diff_src_iter", "diff_src_iter_c", "diff_w_layer", "diff_w_iter",
               "diff_bias")
    arrays.update(zip(outputs, grads))

    def make():
        shapes = _shapes(steps, n, c, h)
        try:
            hint = _forward_pd(lib, shapes, reverse)
        except dnnl.OneDNNError:
            return None
        names = ("src", "src_iter", "src_iter_c", "w_layer", "w_iter", None, None, "bias",
                 "dst", "dst_iter", "dst_iter_c")
        mds = [lib.any_md(shapes[k]) if k else None for k in names]
        mds += [lib.any_md(shapes[k]) if k else None for k in names[:8]]
        mds += [lib.any_md(shapes[k]) for k in names[8:]]
        try:
            pd = lib.make("dnnl_lstm_backward_primitive_desc_create", lib.engine,
                          dnnl.BACKWARD, _direction(reverse), *mds,
                          dnnl.RNN_DIFF_WEIGHTS_OVERWRITE, hint, lib.attr)
        except dnnl.OneDNNError:
            return None
        finally:
            for md in mds:
                lib.destroy("memory_desc", md)
            lib.destroy("primitive_desc", hint)
        mds = _user_mds(lib, arrays)
        arguments = {_arg(k): (md, k in outputs) for k, md in mds.items()}
        arguments[dnnl.ARG_WORKSPACE] = (_clone(lib, lib.query_md(pd, dnnl.ARG_WORKSPACE)),
                                         False)
        return Prepared(lib, pd, arguments)
    prepared = _cache.get(lib, _key("bwd", arrays.values(), reverse), make)
    if prepared is None or prepared.arguments[dnnl.ARG_WORKSPACE][2] != workspace.nbytes:
        return None
    prepared({**{_arg(k): a for k, a in arrays.items()}, dnnl.ARG_WORKSPACE: workspace})
    return grads


def _clone(lib, md):
    return lib.make("dnnl_memory_desc_clone", md)


def _unavailable(op):
    from rill.errors import KernelError
    return KernelError(f"oneDNN's LSTM did not run ({dnnl.why_not() or 'the case refused'}); "
                       f"the layer's forward chose it when it could, so it was turned off or "
                       f"unloaded since (library.ENABLED / RILL_ONEDNN): keep it on, or "
                       f"capture the layer again without it", op=op)


def lstm_layer_kernel(x, h0, c0, w_ih, w_hh, *biases, reverse):
    out = forward(x, h0, c0, w_ih, w_hh, biases, reverse)
    if out is None:
        raise _unavailable("lstm_layer")
    hs, h_t, c_t, workspace = out
    # the residuals: the outputs copied, as the backward reads them and the caller may not
    # keep them (or may hand their buffers on)
    return hs, h_t, c_t, workspace, hs.copy(), h_t.copy(), c_t.copy()


def lstm_layer_grad_kernel(g_hs, g_ht, g_ct, x, h0, c0, w_ih, w_hh, *rest, reverse):
    biases, workspace, dst = rest[:-4], rest[-4], rest[-3:]
    out = backward(g_hs, g_ht, g_ct, x, h0, c0, w_ih, w_hh, biases, workspace, dst, reverse)
    if out is None:
        raise _unavailable("lstm_layer_grad")
    # one gradient for both biases, as two arrays: the two parameters' .grad must not share
    return out[:5] + ((out[5], out[5].copy()) if biases else ())


register_kernels("cpu", {"lstm_layer": lstm_layer_kernel,
                         "lstm_layer_grad": lstm_layer_grad_kernel})
register_workspace_rule(workspace_bytes)
