/* max_pool2d (kernels/numpy/pooling.py) for float32 and float64 images (N, C, H, W), each
 * plane (H, W) contiguous and the planes in order (n, c), or channel-major (c, n) as
 * convolutions hand them over; each call does images [n0, n1) (a thread's share). Taps are
 * numbered row-major over the window, as the NumPy kernel numbers them. The kernels are in
 * pooling_typed.h, one plane at a time:
 *
 * - forward: 2x2 windows at stride 2 take all four taps in one vector loop; windows with
 *   equal strides over short rows read several output rows as one flat run per tap; others
 *   keep each output row's maxima and winners in cache while the taps pass over it. A padded
 *   window reads its plane from a copy with a -inf border (one plane, in cache), which never
 *   wins a window that holds a real pixel.
 * - backward: the gradient of 2x2 windows at stride 2 that tile the image writes each input
 *   row in one contiguous vector loop; any other window (overlapping, padded, dilated) adds
 *   each window's gradient into its winner's pixel. (A gather at stride 1, each pixel summing
 *   its windows tap by tap over the plane read flat, ran slower: 2.2 against 1.5 ns a window.)
 *
 *   forward(x, y, winners, N, C, H, W, OH, OW, kh, kw, sh, sw, dh, dw, ph, pw, n0, n1,
 *           winner_bytes, double, channel_major)   (H, W: x's, without the padding)
 *     y = the window's maximum (NaN if it holds one); winners = its first maximum's tap (as
 *     PyTorch: NaN beats any number and a later NaN an earlier one); winner_bytes 1 (int8)
 *     or 4 (int32); y and winners C-contiguous; channel_major: x's planes in order (c, n)
 *   backward(g, winners, dx, <the sizes above>)          (channel_major: g's planes)
 *     dx = the sum of the gradients of the windows a pixel wins, 0 where it wins none: no
 *     inf * 0 = NaN at the losers. A winner in the padding (a window of -inf only) is lost.
 */
#pragma GCC optimize("O2")
#include "common.h"
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    Py_ssize_t N, C, H, W, OH, OW, kh, kw, sh, sw, dh, dw, ph, pw, n0, n1;
    int winner_bytes, is_double, channel_major, threads;
} Geometry;

#define ROW_CHUNK 256  /* output pixels of a row done at once (maxima, winners on the stack) */
#define FLAT_CHUNK 1024  /* outputs of a flat run (forward_flat): whole rows of the input's width */
#define FLAT_ROW 64  /* strided windows go flat below this output width (half the run dropped) */

/* Where plane (n, c) of x (forward) or g (backward) lies, in planes. */
static inline Py_ssize_t plane_index(const Geometry *z, Py_ssize_t n, Py_ssize_t c)
{
    return z->channel_major ? c * z->N + n : n * z->C + c;
}

/* Each tap's offsets in the window, for the backward kernel of any window (backward_any). */
typedef struct {
    Py_ssize_t *rows, *cols;
} Taps;

#define T float
#define W_T int8_t
#define SUFFIX f32_i8
#include "pooling_typed.h"
#undef W_T
#undef SUFFIX
#define W_T int32_t
#define SUFFIX f32_i32
#include "pooling_typed.h"
#undef T
#undef W_T
#undef SUFFIX
#define T double
#define W_T int8_t
#define SUFFIX f64_i8
#include "pooling_typed.h"
#undef W_T
#undef SUFFIX
#define W_T int32_t
#define SUFFIX f64_i32
#include "pooling_typed.h"
#undef T
#undef W_T
#undef SUFFIX

static int geometry_ok(const Geometry *z)
{
    if (z->N < 0 || z->C < 0 || z->OH < 0 || z->OW < 0 || z->kh < 1 || z->kw < 1 || z->sh < 1 ||
        z->sw < 1 || z->dh < 1 || z->dw < 1 || z->ph < 0 || z->pw < 0 || z->n0 < 0 ||
        z->n1 < z->n0 || z->n1 > z->N ||
        (z->OH > 0 && (z->OH - 1) * z->sh + (z->kh - 1) * z->dh >= z->H + 2 * z->ph) ||
        (z->OW > 0 && (z->OW - 1) * z->sw + (z->kw - 1) * z->dw >= z->W + 2 * z->pw) ||
        (z->winner_bytes != 1 && z->winner_bytes != 4) ||
        (z->winner_bytes == 1 && z->kh * z->kw > 127)) {
        PyErr_SetString(PyExc_ValueError, "max_pool2d: inconsistent geometry");
        return 0;
    }
    return 1;
}

static int parse(PyObject *args, const char *format, Py_buffer *a, Py_buffer *b, Py_buffer *c,
                 Geometry *z)
{
    z->threads = 1;
    return PyArg_ParseTuple(args, format, a, b, c, &z->N, &z->C, &z->H, &z->W, &z->OH, &z->OW,
                            &z->kh, &z->kw, &z->sh, &z->sw, &z->dh, &z->dw, &z->ph, &z->pw,
                            &z->n0, &z->n1, &z->winner_bytes, &z->is_double,
                            &z->channel_major, &z->threads);
}

static PyObject *forward(PyObject *self, PyObject *args)
{
    Py_buffer x, y, winners;
    Geometry z;
    if (!parse(args, "y*w*w*nnnnnnnnnnnnnnnnipp|i", &x, &y, &winners, &z))
        return NULL;
    PyObject *result = NULL;
    Py_ssize_t size = z.is_double ? sizeof(double) : sizeof(float);
    if (!geometry_ok(&z) || !check_size(&x, z.N * z.C * z.H * z.W, size, "x")
        || !check_size(&y, z.N * z.C * z.OH * z.OW, size, "y")
        || !check_size(&winners, z.N * z.C * z.OH * z.OW, z.winner_bytes, "winners"))
        goto done;
    int ok;
    Py_BEGIN_ALLOW_THREADS
    if (z.is_double)
        ok = z.winner_bytes == 1 ? forward_f64_i8(x.buf, y.buf, winners.buf, &z, z.threads)
                                 : forward_f64_i32(x.buf, y.buf, winners.buf, &z, z.threads);
    else
        ok = z.winner_bytes == 1 ? forward_f32_i8(x.buf, y.buf, winners.buf, &z, z.threads)
                                 : forward_f32_i32(x.buf, y.buf, winners.buf, &z, z.threads);
    Py_END_ALLOW_THREADS
    result = ok ? none() : PyErr_NoMemory();
done:
    PyBuffer_Release(&x); PyBuffer_Release(&y); PyBuffer_Release(&winners);
    return result;
}

/* The backward kernel's table of tap offsets (ANY): 1, or 0 with MemoryError. */
static int make_taps(const Geometry *z, Taps *s)
{
    const Py_ssize_t taps = z->kh * z->kw;
    if (!(s->rows = malloc(2 * (size_t)taps * sizeof(Py_ssize_t)))) {
        PyErr_NoMemory();
        return 0;
    }
    s->cols = s->rows + taps;
    for (Py_ssize_t t = 0; t < taps; t++) {
        s->rows[t] = (t / z->kw) * z->dh;
        s->cols[t] = (t % z->kw) * z->dw;
    }
    return 1;
}

static PyObject *backward(PyObject *self, PyObject *args)
{
    Py_buffer g, winners, dx;
    Geometry z;
    Taps table = {0}, *taps = NULL;  /* NULL: 2x2 windows tiling the image */
    if (!parse(args, "y*y*w*nnnnnnnnnnnnnnnnipp|i", &g, &winners, &dx, &z))
        return NULL;
    PyObject *result = NULL;
    Py_ssize_t size = z.is_double ? sizeof(double) : sizeof(float);
    if (!geometry_ok(&z) || !check_size(&g, z.N * z.C * z.OH * z.OW, size, "g")
        || !check_size(&winners, z.N * z.C * z.OH * z.OW, z.winner_bytes, "winners")
        || !check_size(&dx, z.N * z.C * z.H * z.W, size, "dx"))
        goto done;
    const int tiles = z.kh == 2 && z.kw == 2 && z.sh == 2 && z.sw == 2 && z.dh == 1 &&
        z.dw == 1 && z.ph == 0 && z.pw == 0 && z.H == 2 * z.OH && z.W == 2 * z.OW &&
        z.winner_bytes == 1;
    if (!tiles) {
        /* a winner out of its window is refused before any write (ANY writes where it says):
         * unsigned, a negative one is as large as any (one vector pass, no branch) */
        const Py_ssize_t per_image = z.C * z.OH * z.OW;
        const uint32_t window = (uint32_t)(z.kh * z.kw);  /* its taps */
        int bad = 0;
        if (z.winner_bytes == 1) {
            const uint8_t *w = winners.buf;
#pragma omp simd reduction(|:bad)
            for (Py_ssize_t i = z.n0 * per_image; i < z.n1 * per_image; i++) bad |= w[i] >= window;
        } else {
            const uint32_t *w = winners.buf;
#pragma omp simd reduction(|:bad)
            for (Py_ssize_t i = z.n0 * per_image; i < z.n1 * per_image; i++) bad |= w[i] >= window;
        }
        if (bad) {
            PyErr_SetString(PyExc_ValueError, "max_pool2d backward: a winner out of its window");
            goto done;
        }
        if (!make_taps(&z, &table))
            goto done;
        taps = &table;
    }
    Py_BEGIN_ALLOW_THREADS
    if (z.is_double) {
        if (z.winner_bytes == 1) backward_f64_i8(g.buf, winners.buf, dx.buf, &z, taps, z.threads);
        else backward_f64_i32(g.buf, winners.buf, dx.buf, &z, taps, z.threads);
    } else {
        if (z.winner_bytes == 1) backward_f32_i8(g.buf, winners.buf, dx.buf, &z, taps, z.threads);
        else backward_f32_i32(g.buf, winners.buf, dx.buf, &z, taps, z.threads);
    }
    Py_END_ALLOW_THREADS
    result = none();
done:
    free(table.rows);
    PyBuffer_Release(&g); PyBuffer_Release(&winners); PyBuffer_Release(&dx);
    return result;
}

RILL_MODULE(pooling,
    {"forward", forward, METH_VARARGS, "max_pool2d over a range of images"},
    {"backward", backward, METH_VARARGS, "max_pool2d_grad over a range of images"})
