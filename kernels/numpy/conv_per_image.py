"""Ungrouped convolution CPU kernels that work through the batch a few images at a time, each
core on its own share of the images, with BLAS at one thread.

conv.py's whole-batch scheme builds the im2col columns of every image at once (9.4 MB for 32
images of 32 channels at 16x16, 3x3) and leaves the GEMMs' threading to BLAS. Measured on a
2-core machine, that loses twice: the columns go out to memory and back for each GEMM, and
BLAS's worker thread keeps spinning after each GEMM (OpenBLAS: tens of milliseconds), taking
a core from the split copies, col2im adds and pooling passes that run between GEMMs. Here
each thread takes consecutive images (parallel.split), and for each run of images small
enough to stay in its core's cache it builds their columns and runs the products on them:
    forward:      y_i = w[O, C*KK] @ cols_i[C*KK, P]                  (P output pixels);
                  for stride 1, columns over whole padded rows (_conv_unit_stride)
    input grad:   cols_i = w^T @ g_i, then col2im: one add per kernel tap, clipped to the
                  image; for stride 1, over whole padded rows (_conv_transpose_unit_stride)
    weight grad:  gw += g[O, n*P] @ cols^T[n*P, C*KK] (cols^T read in place by BLAS), summed
                  over the chunk's runs of images, then over the chunks in order
Images come out (N, O, *spatial) contiguous, the layout the next layer's passes read best.
The columns are cheap to rebuild in cache, so the weight gradient recomputes them rather
than keeping the forward's. Tried and dropped (1 thread, no faster): Winograd F(2x2, 3x3)
for the 3x3 stride-1 products (its transforms, as NumPy passes, cost more than the GEMM flops
it saves at 16x16, and all but ~10% of them at 32x32), and the weight gradient's columns over whole
padded rows, or as one GEMM per tap read in place from the padded image.
"""
from __future__ import annotations

import itertools

import numpy as np
from numpy.lib.stride_tricks import as_strided

from rill.kernels.numpy import parallel

# Images per GEMM: about this many bytes of columns. Fewer, larger steps win on two cores,
# although the columns then leave L2: the copies and col2im adds between the GEMMs are
# NumPy calls of ~10^4 elements, and two threads issuing such calls contend for the GIL
# (measured: two threads doing 14k-element adds took 1.7x as long as one doing both
# threads' work). 512 KiB -> 2 MiB, batch 32, 3x3, ms at 2 threads: input gradient 3->16 at
# 32x32 1.95 -> 1.27, 16->32 at 16x16 2.86 -> 1.92, 32->64 at 16x16 6.99 -> 4.29; forward
# 3->16 1.03 -> 0.72, the others within noise.
_COLS_BYTES = 1 << 21
# The weight gradient's GEMM sums over its columns (images x pixels): short sums run slowly,
# so it takes images until it has about this many (OpenBLAS measured: one image of 16x16 or
# larger per GEMM is as fast as several), or about _WEIGHT_GRAD_BYTES of columns where
# images are small (3->16 at 32x32: 1.95 -> 1.52 ms; 16->32 at 16x16: 1.59 -> 1.20).
_WEIGHT_GRAD_COLUMNS = 512
_WEIGHT_GRAD_BYTES = 1 << 20
# With fewer rows (C*KK) than this, the weight gradient's GEMM is one product per image
# (rows x pixels @ pixels x O, batched): OpenBLAS runs a product with a tiny output and a
# long inner sum (27 x 16384 @ 16384 x 16) at ~30 GFLOP/s, per image at ~80 (batch 32, 2
# threads: 3->16 at 32x32 1.50 -> 0.62 ms, 3->32 1.49 -> 0.97; no gain from 144 rows on).
_WEIGHT_GRAD_BY_IMAGE_ROWS = 64
# The stride-1 forward copies columns in runs of whole padded rows from this many rows of
# the GEMMs (C*KK) on (measured, 1 thread, CPU time, 60 interleaved calls, 3x3: 9% faster
# with 32 channels at 16x16, 15% at 32x32, 34% with 8 channels; not faster with 3).
_ROWS_RUNS = 64


def _compute_dtype(a):
    return np.float32 if a.dtype == np.float16 else a.dtype


def _out_size(spatial, kernel, stride, padding, dilation):
    return tuple((s + lo + hi - d * (k - 1) - 1) // st + 1 for s, k, st, (lo, hi), d in
                 zip(spatial, kernel, stride, padding, dilation))


def _cropped(x, padding):
    """A negative pad crops (a transposed convolution's output_padding, in its gradients): x
    cropped, and the pads left, all >= 0."""
    if min(min(p) for p in padding) >= 0:
        return x, padding
    x = x[(slice(None), slice(None)) + tuple(slice(max(-lo, 0), s - max(-hi, 0)) for
                                             (lo, hi), s in zip(padding, x.shape[2:]))]
    return x, tuple((max(lo, 0), max(hi, 0)) for lo, hi in padding)


def _images_per_step(pixels_per_image: int, itemsize: int) -> int:
    return max(1, _COLS_BYTES // max(1, pixels_per_image * itemsize))


class _Geometry:
    """Where each kernel tap reads in the padded image, for the columns of a run of images."""

    def __init__(self, x_shape, kernel, stride, padding, dilation, dtype):
        self.kernel, self.stride, self.padding, self.dilation = kernel, stride, padding, dilation
        self.spatial = tuple(x_shape[2:])
        self.channels = x_shape[1]
        self.out = _out_size(self.spatial, kernel, stride, padding, dilation)
        self.pixels = int(np.prod(self.out))
        self.rows = self.channels * int(np.prod(kernel))  # C*KK, the GEMMs' inner size
        self.dtype = dtype
        self.padded = tuple(s + lo + hi for s, (lo, hi) in zip(self.spatial, padding))
        self.inner = tuple(slice(lo, lo + s) for s, (lo, _) in zip(self.spatial, padding))
        self.pads = any(lo or hi for lo, hi in padding)

    def padded_images(self, x, buffer):
        """x (a few images) zero-padded, in `buffer` (whose border is already zero)."""
        if not self.pads:
            if x.dtype == self.dtype and x.flags.c_contiguous:
                return x
            np.copyto(buffer[:len(x)], x, casting="unsafe")
            return buffer[:len(x)]
        np.copyto(buffer[(slice(0, len(x)), slice(None)) + self.inner], x, casting="unsafe")
        return buffer[:len(x)]

    def pad_buffer(self, images):
        if not self.pads:
            return np.empty((images, self.channels) + self.spatial, dtype=self.dtype)
        return np.zeros((images, self.channels) + self.padded, dtype=self.dtype)

    def taps_view(self, xp, image_major: bool):
        """xp's patches as (n, C, *KK, *out) (image_major) or (C, *KK, n, *out), no copy."""
        sn, sc, *sp = xp.strides
        tap = tuple(s * d for s, d in zip(sp, self.dilation))
        pixel = tuple(s * st for s, st in zip(sp, self.stride))
        n = xp.shape[0]
        if image_major:
            return as_strided(xp, shape=(n, self.channels) + self.kernel + self.out,
                              strides=(sn, sc) + tap + pixel, writeable=False)
        return as_strided(xp, shape=(self.channels,) + self.kernel + (n,) + self.out,
                          strides=(sc,) + tap + (sn,) + pixel, writeable=False)


def _steps(lo, hi, per):
    for a in range(lo, hi, per):
        yield a, min(hi, a + per)


def _view(a, shape):
    """a reshaped without a copy (the columns are written through it); only axes split here,
    which a strided slice always allows."""
    v = a.reshape(shape)
    if not np.may_share_memory(v, a):
        raise AssertionError(f"a {a.shape} view with strides {a.strides} cannot take {shape}")
    return v


def _with_bias_column(wm, bias, dtype):
    """(weights, rows): w as (O, C*KK), with the bias as one more column when there is one.
    The columns then get a row of ones, and the GEMM adds the bias as it writes each output
    (the epilogue) instead of a pass over the output after it."""
    if bias is None:
        return wm, wm.shape[1]
    return np.concatenate([wm, bias.astype(dtype, copy=False)[:, None]], axis=1), wm.shape[1] + 1


def conv(x, w, bias, stride, padding, dilation):
    out_dtype = x.dtype
    x, padding = _cropped(x, padding)
    n, o = x.shape[0], w.shape[0]
    kernel = tuple(w.shape[2:])
    dtype = _compute_dtype(x)
    geo = _Geometry(x.shape, kernel, stride, padding, dilation, dtype)
    y = np.empty((n, o, geo.pixels), dtype=dtype)
    wm, rows = _with_bias_column(w.reshape(o, -1).astype(dtype, copy=False), bias, dtype)
    if all(st == 1 for st in stride) and geo.rows >= _ROWS_RUNS:
        _conv_unit_stride(x, wm, rows, y.reshape((n, o) + geo.out), geo)
        return y.reshape((n, o) + geo.out).astype(out_dtype, copy=False)
    per = _images_per_step(rows * geo.pixels, np.dtype(dtype).itemsize)

    def run(lo, hi):
        buffer = geo.pad_buffer(min(per, hi - lo))
        cols = np.empty((min(per, hi - lo), rows, geo.pixels), dtype=dtype)
        cols[:, geo.rows:] = 1  # the bias's row, if any: never overwritten below
        for a, z in _steps(lo, hi, per):
            c = cols[:z - a]
            np.copyto(_view(c[:, :geo.rows], (z - a, geo.channels) + kernel + geo.out),
                      geo.taps_view(geo.padded_images(x[a:z], buffer), True))
            np.matmul(wm, c, out=y[a:z])
    parallel.split(run, n, n * geo.rows * geo.pixels, serial_blas=True)
    return y.reshape((n, o) + geo.out).astype(out_dtype, copy=False)


def _conv_unit_stride(x, wm, rows, y, geo):
    """The stride-1 forward into y, with columns copied in runs of whole padded rows.

    In the padded image, laid out flat, a tap's inputs for all output pixels are one run
    starting at the tap's offset, if the output is taken in the padded image's rows: (out[0],
    *padded[1:]), the pixels past each row's end computed and dropped. The copy is then C*KK
    runs per image instead of C*KK*out[0] runs one output row long, for a few percent more
    GEMM work (the dropped pixels).
    """
    n, o = y.shape[:2]
    c, kernel, dtype = geo.channels, geo.kernel, geo.dtype
    strides = [int(np.prod(geo.padded[i + 1:])) for i in range(len(geo.padded))]
    span = geo.out[0] * strides[0]
    size = int(np.prod(geo.padded))
    plane = max(size, sum((k - 1) * d * st for k, d, st in zip(kernel, geo.dilation, strides))
                + span)  # the last tap's run may pass the image's end: zeros (slack)
    item = np.dtype(dtype).itemsize
    per = max(1, _COLS_BYTES * 2 // (rows * span * item))
    keep = tuple(slice(0, s) for s in geo.out[1:])

    def run(lo, hi):
        m0 = min(per, hi - lo)
        image = np.zeros((m0, c, plane), dtype=dtype)
        cols = np.empty((m0, rows, span), dtype=dtype)
        cols[:, geo.rows:] = 1  # the bias's row, if any (see _with_bias_column)
        out = np.empty((m0, o, span), dtype=dtype)
        for a, z in _steps(lo, hi, per):
            m = z - a
            padded = image[:m, :, :size].reshape((m, c) + geo.padded)
            np.copyto(padded[(slice(None), slice(None)) + geo.inner], x[a:z], casting="unsafe")
            taps = as_strided(image, shape=(m, c) + kernel + (span,),
                              strides=(c * plane * item, plane * item) +
                              tuple(d * st * item for d, st in zip(geo.dilation, strides)) +
                              (item,), writeable=False)
            np.copyto(_view(cols[:m, :geo.rows], (m, c) + kernel + (span,)), taps)
            np.matmul(wm, cols[:m], out=out[:m])
            in_rows = out[:m].reshape((m, o, geo.out[0]) + geo.padded[1:])
            np.copyto(y[a:z], in_rows[(slice(None), slice(None), slice(None)) + keep])
    parallel.split(run, n, n * geo.rows * span, serial_blas=True)


def conv_transpose(g, w, input_size, stride, padding, dilation):
    n, o = g.shape[:2]
    c, kernel = w.shape[1], tuple(w.shape[2:])
    out = tuple(g.shape[2:])
    dtype = _compute_dtype(g)
    pixels = int(np.prod(out))
    rows = c * int(np.prod(kernel))
    wt = np.ascontiguousarray(w.reshape(o, rows).T, dtype=dtype)
    gm = g.reshape(n, o, pixels)
    gx = np.empty((n, c) + tuple(input_size), dtype=dtype)
    if all(st == 1 for st in stride) and min(min(p) for p in padding) >= 0:
        _conv_transpose_unit_stride(g, wt, gx, kernel, padding, dilation)
        return gx.astype(g.dtype, copy=False)
    # For each tap: the output pixels that land inside the image, and where they land.
    taps = []
    for tap in itertools.product(*(range(k) for k in kernel)):
        src, dst = [], []
        for t, d, m, st, (lo, _), s in zip(tap, dilation, out, stride, padding, input_size):
            first = max(0, -(-(lo - t * d) // st))          # the first o with o*st+t*d-lo >= 0
            last = min(m, (s - 1 + lo - t * d) // st + 1)   # one past the last inside
            if last <= first:
                break
            src.append(slice(first, last))
            start = first * st + t * d - lo
            dst.append(slice(start, start + (last - first - 1) * st + 1, st))
        else:
            taps.append((tap, tuple(src), tuple(dst)))
    per = _images_per_step(rows * pixels, np.dtype(dtype).itemsize)

    def run(lo, hi):
        cols = np.empty((min(per, hi - lo), rows, pixels), dtype=dtype)
        for a, z in _steps(lo, hi, per):
            c6 = cols[:z - a]
            np.matmul(wt, gm[a:z], out=c6)
            c6 = c6.reshape((z - a, c) + kernel + out)
            image = gx[a:z]
            image.fill(0)
            for tap, src, dst in taps:
                image[(slice(None), slice(None)) + dst] += c6[(slice(None), slice(None)) +
                                                              tap + src]
    parallel.split(run, n, n * rows * pixels, serial_blas=True)
    return gx.astype(g.dtype, copy=False)


def _conv_transpose_unit_stride(g, wt, gx, kernel, padding, dilation):
    """conv_transpose into gx for stride 1 and pads >= 0, with a col2im of long runs.

    g is first laid out in the rows of the padded image (zeros past each row's end). Then
    each tap's columns, w^T @ g, are the padded image's pixels shifted by one flat offset.
    The GEMM writes them tap-major, each channel's run in a `plane`-long row whose tail stays
    zero, so a tap's columns for all channels of an image are one run of C * plane, and
    col2im is KK adds of a run that long (channel-major, it was KK adds of C runs of one
    channel each: 2.5x as long at 16 channels of 16x16). A run lands at most `span` + the
    largest offset <= `plane` into its channel's plane, so what crosses into the next plane
    is the zero tail (+0.0); the zeros of g's padding land on padding (or slack).
    """
    n, o = g.shape[:2]
    c = gx.shape[1]
    out = tuple(g.shape[2:])
    padded = tuple(s + lo + hi for s, (lo, hi) in zip(gx.shape[2:], padding))
    strides = [int(np.prod(padded[i + 1:])) for i in range(len(padded))]  # in pixels
    span = out[0] * strides[0]                     # g in padded rows: (out[0],) + padded[1:]
    offsets = [sum(t * d * st for t, d, st in zip(tap, dilation, strides))
               for tap in itertools.product(*(range(k) for k in kernel))]
    plane = max(int(np.prod(padded)), max(offsets) + span)
    taps = len(offsets)
    # w^T's rows (channel, tap) reordered (tap, channel)
    wt = np.ascontiguousarray(wt.reshape(c, taps, o).transpose(1, 0, 2)).reshape(taps * c, o)
    dtype = gx.dtype
    per = _images_per_step(taps * c * plane, np.dtype(dtype).itemsize)
    into_g = tuple(slice(0, s) for s in out)
    crop = tuple(slice(lo, lo + s) for (lo, _), s in zip(padding, gx.shape[2:]))

    def run(lo, hi):
        m0 = min(per, hi - lo)
        gp = np.zeros((m0, o, out[0]) + padded[1:], dtype=dtype)
        cols = np.zeros((m0, taps, c, plane), dtype=dtype)  # past `span`: zeros, never written
        image = np.empty((m0, c * plane + max(offsets)), dtype=dtype)
        for a, z in _steps(lo, hi, per):
            m = z - a
            np.copyto(gp[(slice(0, m), slice(None)) + into_g], g[a:z], casting="unsafe")
            np.matmul(wt, gp[:m].reshape(m, o, span),
                      out=cols[:m].reshape(m, taps * c, plane)[:, :, :span])
            im = image[:m]
            im.fill(0)
            for j, off in enumerate(offsets):
                im[:, off:off + c * plane] += cols[:m, j].reshape(m, c * plane)
            planes = im[:, :c * plane].reshape(m, c, plane)[:, :, :int(np.prod(padded))]
            np.copyto(gx[a:z], planes.reshape((m, c) + padded)[
                (slice(None), slice(None)) + crop])
    parallel.split(run, n, n * taps * c * span, serial_blas=True)


def conv_weight_grad(x, g, kernel_size, stride, padding, dilation):
    x, padding = _cropped(x, padding)
    n, o = g.shape[:2]
    kernel = tuple(kernel_size)
    dtype = _compute_dtype(x)
    geo = _Geometry(x.shape, kernel, stride, padding, dilation, dtype)
    gm = g.reshape(n, o, geo.pixels)
    per = max(1, _WEIGHT_GRAD_COLUMNS // geo.pixels,
              _WEIGHT_GRAD_BYTES // (geo.rows * geo.pixels * np.dtype(dtype).itemsize))
    by_image = geo.rows < _WEIGHT_GRAD_BY_IMAGE_ROWS
    partials = {}  # by first image: summed in that order, so the result is deterministic

    def run(lo, hi):
        m = min(per, hi - lo)
        buffer = geo.pad_buffer(m)
        acc = np.zeros((o, geo.rows), dtype=dtype)
        if by_image:
            cols = np.empty((m, geo.rows, geo.pixels), dtype=dtype)
            products = np.empty((m, o, geo.rows), dtype=dtype)
        else:
            cols = np.empty((geo.rows, m * geo.pixels), dtype=dtype)
            gs = np.empty((o, m, geo.pixels), dtype=dtype)  # g of the run, channel-major
        for a, z in _steps(lo, hi, per):
            xp = geo.padded_images(x[a:z], buffer)
            if by_image:  # one product per image, the columns' transpose read in place
                c = cols[:z - a]
                np.copyto(c.reshape((z - a, geo.channels) + kernel + geo.out),
                          geo.taps_view(xp, True))
                gz = gm[a:z] if gm.dtype == dtype else gm[a:z].astype(dtype)
                np.matmul(gz, c.transpose(0, 2, 1), out=products[:z - a])
                acc += products[:z - a].sum(axis=0)
                continue
            k = (z - a) * geo.pixels
            np.copyto(cols[:, :k].reshape((geo.channels,) + kernel + (z - a,) + geo.out),
                      geo.taps_view(xp, False))
            if z - a == 1 and gm.dtype == dtype:
                gz = gm[a]  # one image's g is already (O, P)
            else:  # runs of P contiguous pixels: a cheap copy (unlike g^T itself)
                gz = gs[:, :z - a]
                np.copyto(gz, gm[a:z].transpose(1, 0, 2), casting="unsafe")
                gz = gz.reshape(o, k)
            acc += gz @ cols[:, :k].T  # BLAS reads cols^T in place
        partials[lo] = acc
    parallel.split(run, n, n * geo.rows * geo.pixels, serial_blas=True)
    gw = None
    for lo in sorted(partials):
        gw = partials[lo] if gw is None else gw + partials[lo]
    return gw.reshape((o, geo.channels) + kernel).astype(x.dtype, copy=False)
