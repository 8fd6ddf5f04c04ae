/* Direct 2-d convolution (kernels/numpy/conv_direct.py) for float32 images (N, C, H, W),
 * C-contiguous, stride 1, dilation 1, zero padding >= 0; each call does images [n0, n1) (a
 * thread's share). The input gradient is the same forward pass over g with the weights
 * flipped and transposed (the caller packs them), so two loops serve three kernels.
 *
 * Why not im2col + GEMM (kernels/numpy/conv_per_image.py): at these sizes (16-64 channels,
 * 16x16-32x32 images) OpenBLAS's GEMMs of 16-64 rows run at ~65 GFLOP/s a core and the
 * column copies around them cost as much again; the loops below are register-blocked (24
 * vector accumulators) so that every input vector loaded feeds 8 multiply-adds and every
 * weight 3 (forward), and every g vector 3 (weight gradient), from the cache, with no
 * columns at all: 80-95 GFLOP/s a core, what OpenBLAS reaches on a large GEMM here.
 *
 * Each image is first copied into a zeroed, padded buffer whose rows are padded up to a whole
 * number of vectors (+ the kernel's width - 1), so every vector load is in bounds and the
 * lanes past a row's end are computed and never stored (forward), or masked to 0 * 0 (weight
 * gradient). Lanes are VL floats wide, written with GCC's vector extension,
 * which becomes one AVX-512 register (or two AVX2 ones) under -march=native; the multiply-
 * adds are contracted into FMAs here (the one module built so: an FMA rounds once, and
 * these sums are tested against float64 within a bound, not against NumPy's bits).
 *
 *   forward(x, wp, bias, y, N, C, H, W, O, KH, KW, OH, OW, pad_top, pad_left, n0, n1)
 *     y[n, o, p, q] = bias[o] + sum_{c,i,j} w[o, c, i, j] * x[n, c, p + i - top, q + j - left]
 *     wp: the weights as (C, KH, KW, O8) with O8 = O rounded up to 8, zeros past O;
 *     bias: O8 floats
 *   weight_grad(x, g, dw, <the sizes above>)
 *     dw[o, c, i, j] += sum_{n in [n0, n1), p, q} g[n, o, p, q] * x[n, c, p + i - top, ...]
 */
#pragma GCC optimize("fp-contract=fast")
#include "common.h"
#include <stdlib.h>
#include <string.h>

#define VL 16      /* floats a vector */
#define OB 8       /* output channels a forward block */
#define PR 3       /* output rows a forward block: OB * PR = 24 accumulators */
#define GB 8       /* output channels a weight-gradient block */
#define JB 3       /* kernel columns a weight-gradient block: GB * JB = 24 accumulators */

typedef float vf __attribute__((vector_size(VL * sizeof(float))));
typedef int vi __attribute__((vector_size(VL * sizeof(int))));
static const vi LANES = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};

static inline vf load(const float *p) { vf v; memcpy(&v, p, sizeof v); return v; }
static inline void store(float *p, vf v, Py_ssize_t count)
{
    if (count == VL)
        memcpy(p, &v, sizeof v);  /* one vector store; a copy of runtime length is a call */
    else
        memcpy(p, &v, (size_t)count * sizeof(float));
}
static inline float total(vf v)
{
    float s = 0.0f;
    for (int l = 0; l < VL; l++) s += v[l];
    return s;
}

typedef struct {
    Py_ssize_t N, C, H, W, O, KH, KW, OH, OW, top, left, n0, n1;
    Py_ssize_t PH, PW, OW16;  /* the padded buffer's rows and row length; OW in whole vectors */
} Conv;

static Py_ssize_t round_up(Py_ssize_t a, Py_ssize_t b) { return (a + b - 1) / b * b; }

static int geometry_ok(Conv *z)
{
    if (z->N < 0 || z->C < 1 || z->H < 1 || z->W < 1 || z->O < 1 || z->KH < 1 || z->KW < 1 ||
        z->OH < 1 || z->OW < 1 || z->top < 0 || z->left < 0 ||
        z->OH + z->KH - 1 < z->H + z->top || z->OW + z->KW - 1 < z->W + z->left) {
        PyErr_SetString(PyExc_ValueError, "conv: sizes out of range (padding must be >= 0)");
        return 0;
    }
    if (!check_range(z->n0, z->n1, z->N, "images"))
        return 0;
    z->OW16 = round_up(z->OW, VL);
    z->PH = round_up(z->OH, PR) + z->KH - 1;  /* the forward's last block of rows may pass OH */
    z->PW = z->OW16 + round_up(z->KW, JB);  /* the gradient's last block may read JB-1 past */
    return 1;
}

/* Image n's channels into the interior of `pad` (its border was zeroed once). */
static void copy_padded(const float *x, float *pad, Py_ssize_t n, const Conv *z)
{
    for (Py_ssize_t c = 0; c < z->C; c++)
        for (Py_ssize_t h = 0; h < z->H; h++)
            memcpy(pad + (c * z->PH + h + z->top) * z->PW + z->left,
                   x + ((n * z->C + c) * z->H + h) * z->W, (size_t)z->W * sizeof(float));
}

static float *padded_buffer(const Conv *z)
{
    return calloc((size_t)(z->C * z->PH * z->PW + VL), sizeof(float));
}

static int forward_f32(const float *x, const float *wp, const float *bias, float *y,
                       const Conv *z)
{
    float *pad = padded_buffer(z);
    const Py_ssize_t taps = z->C * z->KH * z->KW, OP = round_up(z->O, OB);
    /* where each tap (c, i, j) reads in the padded image, from the block's first pixel */
    Py_ssize_t *offset = malloc((size_t)taps * sizeof(Py_ssize_t));
    if (pad == NULL || offset == NULL) {
        free(pad); free(offset);
        return 0;
    }
    for (Py_ssize_t c = 0, t = 0; c < z->C; c++)
        for (Py_ssize_t i = 0; i < z->KH; i++)
            for (Py_ssize_t j = 0; j < z->KW; j++, t++)
                offset[t] = (c * z->PH + i) * z->PW + j;
    const Py_ssize_t PW = z->PW;
    for (Py_ssize_t n = z->n0; n < z->n1; n++) {
        copy_padded(x, pad, n, z);
        for (Py_ssize_t o0 = 0; o0 < z->O; o0 += OB) {
            const Py_ssize_t outs = z->O - o0 < OB ? z->O - o0 : OB;
            for (Py_ssize_t p = 0; p < z->OH; p += PR)
            for (Py_ssize_t q0 = 0; q0 < z->OW; q0 += VL) {
                /* PR rows of VL pixels by OB channels: each weight loaded feeds PR
                 * multiply-adds, each input vector OB */
                vf acc[PR][OB];
                for (int k = 0; k < OB; k++)
                    for (int r = 0; r < PR; r++) acc[r][k] = (vf){} + bias[o0 + k];
                const float *base = pad + p * PW + q0;
                const float *wr = wp + o0;
                for (Py_ssize_t t = 0; t < taps; t++, wr += OP) {
                    const float *at = base + offset[t];
                    vf in[PR];
                    for (int r = 0; r < PR; r++) in[r] = load(at + r * PW);
                    #pragma GCC unroll 8
                    for (int k = 0; k < OB; k++) {
                        const float w = wr[k];
                        for (int r = 0; r < PR; r++) acc[r][k] += w * in[r];
                    }
                }
                const Py_ssize_t count = z->OW - q0 < VL ? z->OW - q0 : VL;
                for (int r = 0; r < PR && p + r < z->OH; r++) {
                    float *out = y + ((n * z->O + o0) * z->OH + p + r) * z->OW + q0;
                    for (Py_ssize_t k = 0; k < outs; k++)
                        store(out + k * z->OH * z->OW, acc[r][k], count);
                }
            }
        }
    }
    free(pad); free(offset);
    return 1;
}

static int weight_grad_f32(const float *x, const float *g, float *dw, const Conv *z)
{
    float *pad = padded_buffer(z);
    /* g of one image with rows of whole vectors (zeros past OW) and channels up to GB */
    const Py_ssize_t OG = round_up(z->O, GB), KWB = round_up(z->KW, JB);
    float *gp = calloc((size_t)(OG * z->OH * z->OW16), sizeof(float));
    /* the sums as vectors, (OG, C, KH, KWB) of them, added across lanes once at the end: per
     * image that would cost as much as the products at 16x16 */
    vf *sums = aligned_alloc(sizeof(vf), (size_t)(OG * z->C * z->KH * KWB) * sizeof(vf));
    if (pad == NULL || gp == NULL || sums == NULL) {
        free(pad); free(gp); free(sums);
        return 0;
    }
    memset(sums, 0, (size_t)(OG * z->C * z->KH * KWB) * sizeof(vf));
    const Py_ssize_t plane = z->OH * z->OW16;
    for (Py_ssize_t n = z->n0; n < z->n1; n++) {
        copy_padded(x, pad, n, z);
        for (Py_ssize_t o = 0; o < z->O; o++)
            for (Py_ssize_t p = 0; p < z->OH; p++)
                memcpy(gp + o * plane + p * z->OW16, g + ((n * z->O + o) * z->OH + p) * z->OW,
                       (size_t)z->OW * sizeof(float));
        for (Py_ssize_t o0 = 0; o0 < z->O; o0 += GB)
        for (Py_ssize_t c = 0; c < z->C; c++)
        for (Py_ssize_t i = 0; i < z->KH; i++)
        for (Py_ssize_t j0 = 0; j0 < z->KW; j0 += JB) {
            vf acc[GB][JB];
            for (int k = 0; k < GB; k++)
                for (int b = 0; b < JB; b++) acc[k][b] = (vf){};
            /* rows innermost: a 16x16 image is one vector a row, 16 rows a loop */
            for (Py_ssize_t q0 = 0; q0 < z->OW16; q0 += VL) {
                /* lanes past OW read pixels that g's zeros must not meet: an inf * 0
                 * there would be a NaN the product of the image with g does not have */
                const vi inside = LANES < (int)(z->OW - q0);
                const float *row = pad + (c * z->PH + i) * z->PW + j0 + q0;
                const float *grow = gp + o0 * plane + q0;
                for (Py_ssize_t p = 0; p < z->OH; p++, row += z->PW, grow += z->OW16) {
                    vf in[JB];
                    for (int b = 0; b < JB; b++) in[b] = (vf)((vi)load(row + b) & inside);
                    #pragma GCC unroll 8
                    for (int k = 0; k < GB; k++) {
                        const vf gv = load(grow + k * plane);
                        for (int b = 0; b < JB; b++) acc[k][b] += gv * in[b];
                    }
                }
            }
            for (int k = 0; k < GB; k++) {
                vf *to = sums + ((o0 + k) * z->C + c) * z->KH * KWB + i * KWB + j0;
                for (int b = 0; b < JB; b++) to[b] += acc[k][b];
            }
        }
    }
    for (Py_ssize_t o = 0; o < z->O; o++)
        for (Py_ssize_t c = 0; c < z->C; c++)
            for (Py_ssize_t i = 0; i < z->KH; i++)
                for (Py_ssize_t j = 0; j < z->KW; j++)
                    dw[((o * z->C + c) * z->KH + i) * z->KW + j] +=
                        total(sums[((o * z->C + c) * z->KH + i) * KWB + j]);
    free(pad); free(gp); free(sums);
    return 1;
}

static int parse(PyObject *args, const char *format, Py_buffer *a, Py_buffer *b, Py_buffer *c,
                 Py_buffer *d, Conv *z)
{
    if (d != NULL)
        return PyArg_ParseTuple(args, format, a, b, c, d, &z->N, &z->C, &z->H, &z->W, &z->O,
                                &z->KH, &z->KW, &z->OH, &z->OW, &z->top, &z->left, &z->n0,
                                &z->n1);
    return PyArg_ParseTuple(args, format, a, b, c, &z->N, &z->C, &z->H, &z->W, &z->O, &z->KH,
                            &z->KW, &z->OH, &z->OW, &z->top, &z->left, &z->n0, &z->n1);
}

static PyObject *forward(PyObject *self, PyObject *args)
{
    Py_buffer x, wp, bias, y;
    Conv z;
    if (!parse(args, "y*y*y*w*nnnnnnnnnnnnn", &x, &wp, &bias, &y, &z))
        return NULL;
    PyObject *result = NULL;
    int ok = 0;
    const Py_ssize_t f = sizeof(float);
    if (!geometry_ok(&z) || !check_size(&x, z.N * z.C * z.H * z.W, f, "x")
        || !check_size(&wp, z.C * z.KH * z.KW * round_up(z.O, OB), f, "packed weights")
        || !check_size(&bias, round_up(z.O, OB), f, "bias")
        || !check_size(&y, z.N * z.O * z.OH * z.OW, f, "y"))
        goto done;
    Py_BEGIN_ALLOW_THREADS
    ok = forward_f32(x.buf, wp.buf, bias.buf, y.buf, &z);
    Py_END_ALLOW_THREADS
    result = ok ? none() : PyErr_NoMemory();
done:
    PyBuffer_Release(&x); PyBuffer_Release(&wp); PyBuffer_Release(&bias); PyBuffer_Release(&y);
    return result;
}

static PyObject *weight_grad(PyObject *self, PyObject *args)
{
    Py_buffer x, g, dw;
    Conv z;
    if (!parse(args, "y*y*w*nnnnnnnnnnnnn", &x, &g, &dw, NULL, &z))
        return NULL;
    PyObject *result = NULL;
    int ok = 0;
    const Py_ssize_t f = sizeof(float);
    if (!geometry_ok(&z) || !check_size(&x, z.N * z.C * z.H * z.W, f, "x")
        || !check_size(&g, z.N * z.O * z.OH * z.OW, f, "g")
        || !check_size(&dw, z.O * z.C * z.KH * z.KW, f, "dw"))
        goto done;
    Py_BEGIN_ALLOW_THREADS
    ok = weight_grad_f32(x.buf, g.buf, dw.buf, &z);
    Py_END_ALLOW_THREADS
    result = ok ? none() : PyErr_NoMemory();
done:
    PyBuffer_Release(&x); PyBuffer_Release(&g); PyBuffer_Release(&dw);
    return result;
}

RILL_MODULE(conv,
    {"forward", forward, METH_VARARGS, "2-d convolution, stride 1, over a range of images"},
    {"weight_grad", weight_grad, METH_VARARGS, "its weight gradient, summed over the images"})
