/* max_pool2d (kernels/numpy/pooling.py) for float32 and float64 input (N, C, H, W)
 * C-contiguous, without padding; each call does images [n0, n1) (a thread's share). Taps are
 * numbered row-major over the window, as the NumPy kernel numbers them.
 *
 * The NumPy kernel makes four passes over the whole batch per tap; here each output row's
 * maxima and winners are kept in cache while the taps pass over it (a tap is a strided read
 * of one input row), and 2x2 windows at stride 2 take all four taps in one vector loop.
 * The gradient of 2x2 windows at stride 2 that tile the image writes each input row in one
 * contiguous vector loop; any other window (overlapping, padded, dilated) adds each window's
 * gradient into its winner's pixel, one pass over the gradient per plane.
 *
 *   forward(x, y, winners, N, C, H, W, OH, OW, kh, kw, sh, sw, dh, dw, ph, pw, n0, n1,
 *           winner_bytes, double)                        (ph = pw = 0: the caller pads x)
 *     y = the window's maximum (NaN if it holds one); winners = its first maximum's tap (as
 *     PyTorch: NaN beats any number and a later NaN an earlier one); winner_bytes 1 (int8)
 *     or 4 (int32)
 *   backward(g, winners, dx, <the sizes above>)          (H, W: dx's, without the padding)
 *     dx = the sum of the gradients of the windows a pixel wins, 0 where it wins none: no
 *     inf * 0 = NaN at the losers. A winner in the padding (a window of -inf only) is lost.
 */
#pragma GCC optimize("O2")
#include "common.h"
#include <stdint.h>
#include <string.h>

typedef struct {
    Py_ssize_t N, C, H, W, OH, OW, kh, kw, sh, sw, dh, dw, ph, pw, n0, n1;
    int winner_bytes, is_double;
} Geometry;

#define ROW_CHUNK 256  /* output pixels of a row done at once (maxima, winners on the stack) */

/* One tap over a chunk of an output row: where x wins (greater, or NaN), it becomes the
 * maximum and `tap` the winner. Winners are int32 here (one element width with the floats,
 * so the loop vectorizes) and narrowed when stored. The read is strided by `step`: constant
 * 1 and 2 get their own loops (contiguous, or pairs de-interleaved), others a gather. */
#define DEFINE_POOL(T, W_T, SUFFIX)                                                            \
static inline void tap_##SUFFIX(const T *restrict start, Py_ssize_t step, Py_ssize_t count,  \
                                int32_t tap, T *restrict best, int32_t *restrict won)        \
{                                                                                             \
    if (step == 2) {                                                                          \
        _Pragma("omp simd")                                                                   \
        for (Py_ssize_t o = 0; o < count; o++) {                                              \
            const T v = start[2 * o];                                                         \
            const int wins = (v > best[o]) | (v != v);                                        \
            best[o] = wins ? v : best[o];                                                     \
            won[o] = wins ? tap : won[o];                                                     \
        }                                                                                     \
    } else if (step == 1) {                                                                   \
        _Pragma("omp simd")                                                                   \
        for (Py_ssize_t o = 0; o < count; o++) {                                              \
            const T v = start[o];                                                             \
            const int wins = (v > best[o]) | (v != v);                                        \
            best[o] = wins ? v : best[o];                                                     \
            won[o] = wins ? tap : won[o];                                                     \
        }                                                                                     \
    } else {                                                                                  \
        _Pragma("omp simd")                                                                   \
        for (Py_ssize_t o = 0; o < count; o++) {                                              \
            const T v = start[o * step];                                                      \
            const int wins = (v > best[o]) | (v != v);                                        \
            best[o] = wins ? v : best[o];                                                     \
            won[o] = wins ? tap : won[o];                                                     \
        }                                                                                     \
    }                                                                                         \
}                                                                                             \
                                                                                              \
/* 2x2 windows at stride 2 (the usual pooling), all four taps in one vectorized loop. Winners
 * are made as int32 (the floats' element width) in a row buffer and narrowed after: a loop
 * that stores int8 directly vectorizes 64 outputs at a time, and rows are often 16 long. */ \
static void forward_2x2_##SUFFIX(const T *restrict x, T *restrict y, W_T *restrict winners,  \
                                 const Geometry *z)                                           \
{                                                                                             \
    const Py_ssize_t H = z->H, W = z->W, OH = z->OH, OW = z->OW;  /* no reloads in the loop */\
    int32_t won[ROW_CHUNK];                                                                   \
    for (Py_ssize_t plane = z->n0 * z->C; plane < z->n1 * z->C; plane++)                      \
    for (Py_ssize_t oh = 0; oh < OH; oh++)                                                    \
    for (Py_ssize_t o0 = 0; o0 < OW; o0 += ROW_CHUNK) {                                       \
        const Py_ssize_t count = OW - o0 < ROW_CHUNK ? OW - o0 : ROW_CHUNK;                   \
        const T *restrict r0 = x + (plane * H + 2 * oh) * W + 2 * o0, *restrict r1 = r0 + W;  \
        T *restrict out = y + (plane * OH + oh) * OW + o0;                                    \
        _Pragma("omp simd")                                                                   \
        for (Py_ssize_t o = 0; o < count; o++) {                                              \
            const T v0 = r0[2 * o], v1 = r0[2 * o + 1], v2 = r1[2 * o], v3 = r1[2 * o + 1];  \
            T best = v0;                                                                      \
            int32_t w = 0;                                                                    \
            int wins = (v1 > best) | (v1 != v1);                                              \
            best = wins ? v1 : best; w = wins ? 1 : w;                                        \
            wins = (v2 > best) | (v2 != v2);                                                  \
            best = wins ? v2 : best; w = wins ? 2 : w;                                        \
            wins = (v3 > best) | (v3 != v3);                                                  \
            best = wins ? v3 : best; w = wins ? 3 : w;                                        \
            out[o] = best;                                                                    \
            won[o] = w;                                                                       \
        }                                                                                     \
        W_T *restrict out_won = winners + (plane * OH + oh) * OW + o0;                        \
        for (Py_ssize_t o = 0; o < count; o++) out_won[o] = (W_T)won[o];                      \
    }                                                                                         \
}                                                                                             \
                                                                                              \
static void forward_##SUFFIX(const T *restrict x, T *restrict y, W_T *restrict winners,      \
                             const Geometry *z)                                               \
{                                                                                             \
    if (z->kh == 2 && z->kw == 2 && z->sh == 2 && z->sw == 2 && z->dh == 1 && z->dw == 1) {   \
        forward_2x2_##SUFFIX(x, y, winners, z);                                               \
        return;                                                                               \
    }                                                                                         \
    T best[ROW_CHUNK];                                                                        \
    int32_t won[ROW_CHUNK];                                                                   \
    for (Py_ssize_t plane = z->n0 * z->C; plane < z->n1 * z->C; plane++) {                    \
        const T *xp = x + plane * z->H * z->W;                                                \
        for (Py_ssize_t oh = 0; oh < z->OH; oh++)                                             \
        for (Py_ssize_t o0 = 0; o0 < z->OW; o0 += ROW_CHUNK) {                                \
            const Py_ssize_t count = z->OW - o0 < ROW_CHUNK ? z->OW - o0 : ROW_CHUNK;         \
            int32_t tap = 0;                                                                  \
            for (Py_ssize_t a = 0; a < z->kh; a++) {                                          \
                const T *row = xp + (oh * z->sh + a * z->dh) * z->W + o0 * z->sw;             \
                for (Py_ssize_t b = 0; b < z->kw; b++, tap++) {                               \
                    const T *start = row + b * z->dw;                                         \
                    if (tap == 0) {                                                           \
                        for (Py_ssize_t o = 0; o < count; o++) {                              \
                            best[o] = start[o * z->sw];                                       \
                            won[o] = 0;                                                       \
                        }                                                                     \
                    } else {                                                                  \
                        tap_##SUFFIX(start, z->sw, count, tap, best, won);                    \
                    }                                                                         \
                }                                                                             \
            }                                                                                 \
            T *out = y + (plane * z->OH + oh) * z->OW + o0;                                   \
            W_T *out_won = winners + (plane * z->OH + oh) * z->OW + o0;                       \
            for (Py_ssize_t o = 0; o < count; o++) {                                          \
                out[o] = best[o];                                                             \
                out_won[o] = (W_T)won[o];                                                     \
            }                                                                                 \
        }                                                                                     \
    }                                                                                         \
} \
                                                                                              \
/* The gradient of 2x2 windows at stride 2 that tile the image: each input row's pixel j gets \
 * its window's gradient where its window's winner is its tap, else 0. The window's gradient \
 * and winner are first spread over the two pixels of each (a short scalar loop), so that the \
 * writes are one contiguous vector loop per input row (written as stride-2 stores, they did \
 * not vectorize). */                                                                         \
static void backward_2x2_##SUFFIX(const T *restrict g, const W_T *restrict winners,           \
                                  T *restrict dx, const Geometry *z)                          \
{                                                                                             \
    const Py_ssize_t W = z->W, OH = z->OH, OW = z->OW;                                        \
    T spread[2 * ROW_CHUNK];                                                                  \
    int32_t won[2 * ROW_CHUNK];                                                               \
    for (Py_ssize_t plane = z->n0 * z->C; plane < z->n1 * z->C; plane++)                      \
    for (Py_ssize_t oh = 0; oh < OH; oh++)                                                    \
    for (Py_ssize_t o0 = 0; o0 < OW; o0 += ROW_CHUNK) {                                       \
        const Py_ssize_t count = OW - o0 < ROW_CHUNK ? OW - o0 : ROW_CHUNK;                   \
        const T *restrict gr = g + (plane * OH + oh) * OW + o0;                               \
        const W_T *restrict wr = winners + (plane * OH + oh) * OW + o0;                       \
        for (Py_ssize_t o = 0; o < count; o++) {                                              \
            spread[2 * o] = spread[2 * o + 1] = gr[o];                                        \
            won[2 * o] = won[2 * o + 1] = wr[o];                                              \
        }                                                                                     \
        T *restrict r0 = dx + (plane * 2 * OH + 2 * oh) * W + 2 * o0, *restrict r1 = r0 + W;  \
        _Pragma("omp simd")                                                                   \
        for (Py_ssize_t j = 0; j < 2 * count; j++) {                                          \
            const int32_t tap = (int32_t)(j & 1);                                             \
            r0[j] = won[j] == tap ? spread[j] : (T)0;                                         \
            r1[j] = won[j] == tap + 2 ? spread[j] : (T)0;                                     \
        }                                                                                     \
    }                                                                                         \
}                                                                                             \
                                                                                              \
/* Any other windows: each plane zeroed, then each window's gradient added into the pixel its \
 * winner names (the tap's offsets from a table: no division per pixel). Windows are taken    \
 * last to first, so a pixel that several windows pick sums their gradients in the order of   \
 * its tap in each (a later window holds it at an earlier tap): the NumPy kernel's order, and \
 * the GPU's, to the bit. */                                                                  \
static void backward_any_##SUFFIX(const T *restrict g, const W_T *restrict winners,           \
                                  T *restrict dx, const Geometry *z, const Py_ssize_t *rows,  \
                                  const Py_ssize_t *cols)                                     \
{                                                                                             \
    const Py_ssize_t H = z->H, W = z->W, OH = z->OH, OW = z->OW;                              \
    for (Py_ssize_t plane = z->n0 * z->C; plane < z->n1 * z->C; plane++) {                    \
        T *restrict d = dx + plane * H * W;                                                   \
        const T *restrict gp = g + plane * OH * OW;                                           \
        const W_T *restrict wp = winners + plane * OH * OW;                                   \
        memset(d, 0, (size_t)(H * W) * sizeof(T));                                            \
        for (Py_ssize_t oh = OH - 1; oh >= 0; oh--) {                                         \
            const Py_ssize_t top = oh * z->sh - z->ph;                                        \
            for (Py_ssize_t ow = OW - 1; ow >= 0; ow--) {                                     \
                const Py_ssize_t t = (Py_ssize_t)wp[oh * OW + ow];                            \
                const Py_ssize_t ih = top + rows[t], iw = ow * z->sw - z->pw + cols[t];       \
                if (ih >= 0 && ih < H && iw >= 0 && iw < W)                                   \
                    d[ih * W + iw] += gp[oh * OW + ow];                                       \
            }                                                                                 \
        }                                                                                     \
    }                                                                                         \
}

DEFINE_POOL(float, int8_t, f32_i8)
DEFINE_POOL(float, int32_t, f32_i32)
DEFINE_POOL(double, int8_t, f64_i8)
DEFINE_POOL(double, int32_t, f64_i32)

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
    return PyArg_ParseTuple(args, format, a, b, c, &z->N, &z->C, &z->H, &z->W, &z->OH, &z->OW,
                            &z->kh, &z->kw, &z->sh, &z->sw, &z->dh, &z->dw, &z->ph, &z->pw,
                            &z->n0, &z->n1,
                            &z->winner_bytes, &z->is_double);
}

static PyObject *forward(PyObject *self, PyObject *args)
{
    Py_buffer x, y, winners;
    Geometry z;
    if (!parse(args, "y*w*w*nnnnnnnnnnnnnnnnip", &x, &y, &winners, &z))
        return NULL;
    PyObject *result = NULL;
    Py_ssize_t size = z.is_double ? sizeof(double) : sizeof(float);
    if (z.ph || z.pw) {
        PyErr_SetString(PyExc_ValueError, "max_pool2d forward: pad the image first");
        goto done;
    }
    if (!geometry_ok(&z) || !check_size(&x, z.N * z.C * z.H * z.W, size, "x")
        || !check_size(&y, z.N * z.C * z.OH * z.OW, size, "y")
        || !check_size(&winners, z.N * z.C * z.OH * z.OW, z.winner_bytes, "winners"))
        goto done;
    Py_BEGIN_ALLOW_THREADS
    if (z.is_double) {
        if (z.winner_bytes == 1) forward_f64_i8(x.buf, y.buf, winners.buf, &z);
        else forward_f64_i32(x.buf, y.buf, winners.buf, &z);
    } else {
        if (z.winner_bytes == 1) forward_f32_i8(x.buf, y.buf, winners.buf, &z);
        else forward_f32_i32(x.buf, y.buf, winners.buf, &z);
    }
    Py_END_ALLOW_THREADS
    result = none();
done:
    PyBuffer_Release(&x); PyBuffer_Release(&y); PyBuffer_Release(&winners);
    return result;
}

static PyObject *backward(PyObject *self, PyObject *args)
{
    Py_buffer g, winners, dx;
    Geometry z;
    if (!parse(args, "y*y*w*nnnnnnnnnnnnnnnnip", &g, &winners, &dx, &z))
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
    /* each tap's offsets in the window; a winner out of the table is refused before any write */
    Py_ssize_t taps = z.kh * z.kw, *rows = NULL, *cols = NULL;
    if (!tiles) {
        rows = PyMem_Malloc(2 * (size_t)taps * sizeof(Py_ssize_t));
        if (rows == NULL) { PyErr_NoMemory(); goto done; }
        cols = rows + taps;
        for (Py_ssize_t t = 0; t < taps; t++) {
            rows[t] = (t / z.kw) * z.dh;
            cols[t] = (t % z.kw) * z.dw;
        }
        const Py_ssize_t per_image = z.C * z.OH * z.OW;
        for (Py_ssize_t i = z.n0 * per_image; i < z.n1 * per_image; i++) {
            Py_ssize_t t = z.winner_bytes == 1 ? ((const int8_t *)winners.buf)[i]
                                               : ((const int32_t *)winners.buf)[i];
            if (t < 0 || t >= taps) {
                PyErr_SetString(PyExc_ValueError, "max_pool2d backward: a winner out of its window");
                PyMem_Free(rows);
                goto done;
            }
        }
    }
    Py_BEGIN_ALLOW_THREADS
    if (tiles) {
        if (z.is_double) backward_2x2_f64_i8(g.buf, winners.buf, dx.buf, &z);
        else backward_2x2_f32_i8(g.buf, winners.buf, dx.buf, &z);
    } else if (z.is_double) {
        if (z.winner_bytes == 1) backward_any_f64_i8(g.buf, winners.buf, dx.buf, &z, rows, cols);
        else backward_any_f64_i32(g.buf, winners.buf, dx.buf, &z, rows, cols);
    } else {
        if (z.winner_bytes == 1) backward_any_f32_i8(g.buf, winners.buf, dx.buf, &z, rows, cols);
        else backward_any_f32_i32(g.buf, winners.buf, dx.buf, &z, rows, cols);
    }
    Py_END_ALLOW_THREADS
    PyMem_Free(rows);
    result = none();
done:
    PyBuffer_Release(&g); PyBuffer_Release(&winners); PyBuffer_Release(&dx);
    return result;
}

RILL_MODULE(pooling,
    {"forward", forward, METH_VARARGS, "max_pool2d over a range of images"},
    {"backward", backward, METH_VARARGS, "max_pool2d_grad over a range of images"})
