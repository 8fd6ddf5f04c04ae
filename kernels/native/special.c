/* The error function and exact GELU (kernels/numpy/special.py), one pass each, for float32 and
 * float64, over elements [start, stop) of C-contiguous buffers (a thread's share):
 *
 *   erf(x, out, start, stop, double)
 *   gelu(x, out, start, stop, double)          0.5 x erfc(-x / sqrt 2)
 *   gelu_grad(g, x, out, start, stop, double)
 *     g (0.5 erfc(-x / sqrt 2) + x exp(-x^2 / 2) / sqrt(2 pi)): g gelu'(x)
 *
 * Computed in double through libmvec's vector erf, erfc and exp (<= 3 double ulps measured
 * against scipy), float32 rounded once at the end, as the NumPy kernels of special.py compute
 * them: float32 results are the NumPy kernels' but where a double within those ulps rounds
 * the other way. erfc, not 1 + erf: gelu's left tail (x < -5) keeps its value instead of
 * cancelling to 0. NaN stays NaN; gelu(+inf) = inf, and gelu(-inf) and the gradient at both
 * infinities are NaN (inf * 0), as the composite in rill ops gives them.
 *
 * A module of its own: glibc has libmvec's erf and erfc from 2.35; where they are missing
 * this module fails to load (build.load gives None, and NumPy runs them) and no other does.
 */
#include "common.h"

#pragma omp declare simd notinbranch
double erf(double);
#pragma omp declare simd notinbranch
double erfc(double);

/* Doubles per block of a float32 pass: converted into a stack buffer, so that the double loop
 * runs at libmvec's 8-lane width (a float loop converting in place picked 4-lane calls, 1.7
 * against 1.5 ns an element). */
#define BLOCK 512

static const double SQRT_HALF = 0.70710678118654752440, INV_SQRT_2PI = 0.39894228040143267794;

/* One pass of a unary function F over [start, stop): doubles directly, floats in blocks. */
#define DEFINE_UNARY(NAME, F)                                                                     \
static void NAME##_f64(const double *restrict x, double *restrict out, Py_ssize_t start,          \
                       Py_ssize_t stop)                                                           \
{                                                                                                 \
    _Pragma("omp simd")                                                                           \
    for (Py_ssize_t i = start; i < stop; i++) out[i] = F(x[i]);                                   \
}                                                                                                 \
static void NAME##_f32(const float *restrict x, float *restrict out, Py_ssize_t start,            \
                       Py_ssize_t stop)                                                           \
{                                                                                                 \
    double buf[BLOCK];                                                                            \
    for (Py_ssize_t lo = start; lo < stop; lo += BLOCK) {                                         \
        Py_ssize_t n = stop - lo < BLOCK ? stop - lo : BLOCK;                                     \
        _Pragma("omp simd")                                                                       \
        for (Py_ssize_t i = 0; i < n; i++) buf[i] = F((double)x[lo + i]);                         \
        _Pragma("omp simd")                                                                       \
        for (Py_ssize_t i = 0; i < n; i++) out[lo + i] = (float)buf[i];                           \
    }                                                                                             \
}

static inline double gelu_d(double x) { return 0.5 * x * erfc(x * -SQRT_HALF); }

static inline double gelu_grad_d(double g, double x)
{
    return g * (0.5 * erfc(x * -SQRT_HALF) + x * exp(-0.5 * x * x) * INV_SQRT_2PI);
}

DEFINE_UNARY(erf, erf)
DEFINE_UNARY(gelu, gelu_d)

static void gelu_grad_f64(const double *restrict g, const double *restrict x,
                          double *restrict out, Py_ssize_t start, Py_ssize_t stop)
{
    _Pragma("omp simd")
    for (Py_ssize_t i = start; i < stop; i++) out[i] = gelu_grad_d(g[i], x[i]);
}

static void gelu_grad_f32(const float *restrict g, const float *restrict x,
                          float *restrict out, Py_ssize_t start, Py_ssize_t stop)
{
    double buf[BLOCK];
    for (Py_ssize_t lo = start; lo < stop; lo += BLOCK) {
        Py_ssize_t n = stop - lo < BLOCK ? stop - lo : BLOCK;
        _Pragma("omp simd")
        for (Py_ssize_t i = 0; i < n; i++) buf[i] = gelu_grad_d((double)g[lo + i],
                                                                (double)x[lo + i]);
        _Pragma("omp simd")
        for (Py_ssize_t i = 0; i < n; i++) out[lo + i] = (float)buf[i];
    }
}

/* The wrapper py_NAME of a unary pass: (x, out, start, stop, double). */
#define DEFINE_UNARY_WRAPPER(NAME)                                                                \
static PyObject *py_##NAME(PyObject *self, PyObject *args)                                        \
{                                                                                                 \
    Py_buffer x, out;                                                                             \
    Py_ssize_t start, stop;                                                                       \
    int is_double;                                                                                \
    if (!PyArg_ParseTuple(args, "y*w*nnp", &x, &out, &start, &stop, &is_double))                  \
        return NULL;                                                                              \
    PyObject *result = NULL;                                                                      \
    Py_ssize_t size = is_double ? sizeof(double) : sizeof(float), n = x.len / size;               \
    if (!check_range(start, stop, n, "elements") || !check_size(&out, n, size, "out"))            \
        goto done;                                                                                \
    Py_BEGIN_ALLOW_THREADS                                                                        \
    if (is_double)                                                                                \
        NAME##_f64(x.buf, out.buf, start, stop);                                                  \
    else                                                                                          \
        NAME##_f32(x.buf, out.buf, start, stop);                                                  \
    Py_END_ALLOW_THREADS                                                                          \
    result = none();                                                                              \
done:                                                                                             \
    PyBuffer_Release(&x); PyBuffer_Release(&out);                                                 \
    return result;                                                                                \
}

DEFINE_UNARY_WRAPPER(erf)
DEFINE_UNARY_WRAPPER(gelu)

static PyObject *py_gelu_grad(PyObject *self, PyObject *args)
{
    Py_buffer g, x, out;
    Py_ssize_t start, stop;
    int is_double;
    if (!PyArg_ParseTuple(args, "y*y*w*nnp", &g, &x, &out, &start, &stop, &is_double))
        return NULL;
    PyObject *result = NULL;
    Py_ssize_t size = is_double ? sizeof(double) : sizeof(float), n = x.len / size;
    if (!check_range(start, stop, n, "elements") || !check_size(&g, n, size, "g")
        || !check_size(&out, n, size, "out"))
        goto done;
    Py_BEGIN_ALLOW_THREADS
    if (is_double)
        gelu_grad_f64(g.buf, x.buf, out.buf, start, stop);
    else
        gelu_grad_f32(g.buf, x.buf, out.buf, start, stop);
    Py_END_ALLOW_THREADS
    result = none();
done:
    PyBuffer_Release(&g); PyBuffer_Release(&x); PyBuffer_Release(&out);
    return result;
}

RILL_MODULE(special,
    {"erf", py_erf, METH_VARARGS, "erf(x) over a range of elements"},
    {"gelu", py_gelu, METH_VARARGS, "exact gelu(x) over a range of elements"},
    {"gelu_grad", py_gelu_grad, METH_VARARGS, "g * gelu'(x) over a range of elements"})
