/* Row softmax statistics and softmax cross-entropy's gradient (kernels/numpy/activation.py)
 * for float32 and float64 rows of a C-contiguous (n, c) array, a pass or two per row.
 *
 * The NumPy kernels make a pass per operation over the whole array, each a NumPy call of a
 * few microseconds: at a language model's (512, 65) logits, ~150 us forward and backward,
 * and at an MLP's (16, 10) ~50 us of mostly call overhead. Per row, with the NumPy kernel's
 * operations in its order; exp and log are glibc's (libmvec for exp), so the bits may differ
 * from NumPy's in the last place, and row sums go by vector lanes.
 *
 *   row_stats(x, shift, lse, zsum, n, c, double)
 *     shift = the row's max, or 0 where that is not finite (a row of -inf, or a NaN);
 *     lse = log(sum exp(x - shift)); zsum = sum (x - shift)
 *   cross_entropy_grad(x, targets (int64), scale, out, n, c, smoothing, double)
 *     out = exp(z) / sum exp(z), z = x - shift; - smoothing / c (if smoothing);
 *     out[target] -= 1 - smoothing (where the target is >= 0); out *= scale (per row,
 *     float64, the product rounded once: as NumPy multiplies by a float64 scale in place)
 */
#include "common.h"
#include <stdint.h>

#define DEFINE_ROWS(T, EXP, LOG, SUFFIX)                                                       \
static inline T row_shift_##SUFFIX(const T *restrict row, Py_ssize_t c)                       \
{                                                                                             \
    T m = -INFINITY;                                                                          \
    int has_nan = 0;                                                                          \
    _Pragma("omp simd reduction(max:m) reduction(|:has_nan)")                                 \
    for (Py_ssize_t j = 0; j < c; j++) {                                                      \
        m = row[j] > m ? row[j] : m;                                                          \
        has_nan |= row[j] != row[j];                                                          \
    }                                                                                         \
    return has_nan || !isfinite(m) ? (T)0 : m;                                                \
}                                                                                             \
                                                                                              \
static void row_stats_##SUFFIX(const T *restrict x, T *restrict shift, T *restrict lse,       \
                               T *restrict zsum, Py_ssize_t n, Py_ssize_t c)                  \
{                                                                                             \
    for (Py_ssize_t i = 0; i < n; i++) {                                                      \
        const T *row = x + i * c;                                                             \
        const T m = row_shift_##SUFFIX(row, c);                                               \
        T total = 0, zs = 0;                                                                  \
        _Pragma("omp simd reduction(+:total, zs)")                                            \
        for (Py_ssize_t j = 0; j < c; j++) {                                                  \
            const T z = row[j] - m;                                                           \
            total += EXP(z);                                                                  \
            zs += z;                                                                          \
        }                                                                                     \
        shift[i] = m;                                                                         \
        lse[i] = LOG(total);                                                                  \
        zsum[i] = zs;                                                                         \
    }                                                                                         \
}                                                                                             \
                                                                                              \
static void cross_entropy_grad_##SUFFIX(const T *restrict x, const int64_t *restrict target,  \
                                        const double *restrict scale, T *restrict out,        \
                                        Py_ssize_t n, Py_ssize_t c, double smoothing)         \
{                                                                                             \
    const T off = (T)(smoothing / (double)c), hit = (T)(1.0 - smoothing);                     \
    for (Py_ssize_t i = 0; i < n; i++) {                                                      \
        const T *row = x + i * c;                                                             \
        T *o = out + i * c;                                                                   \
        const T m = row_shift_##SUFFIX(row, c);                                               \
        T total = 0;                                                                          \
        _Pragma("omp simd reduction(+:total)")                                                \
        for (Py_ssize_t j = 0; j < c; j++) { o[j] = EXP(row[j] - m); total += o[j]; }         \
        _Pragma("omp simd")                                                                   \
        for (Py_ssize_t j = 0; j < c; j++) o[j] = o[j] / total;                               \
        if (smoothing != 0.0) {                                                               \
            _Pragma("omp simd")                                                               \
            for (Py_ssize_t j = 0; j < c; j++) o[j] = o[j] - off;                             \
        }                                                                                     \
        if (target[i] >= 0 && target[i] < c) o[target[i]] = o[target[i]] - hit;              \
        const double s = scale[i];                                                            \
        _Pragma("omp simd")                                                                   \
        for (Py_ssize_t j = 0; j < c; j++) o[j] = (T)((double)o[j] * s);                      \
    }                                                                                         \
}

DEFINE_ROWS(float, expf, logf, f32)
DEFINE_ROWS(double, exp, log, f64)

static PyObject *row_stats(PyObject *self, PyObject *args)
{
    Py_buffer x, shift, lse, zsum;
    Py_ssize_t n, c;
    int is_double;
    if (!PyArg_ParseTuple(args, "y*w*w*w*nnp", &x, &shift, &lse, &zsum, &n, &c, &is_double))
        return NULL;
    PyObject *result = NULL;
    Py_ssize_t size = is_double ? sizeof(double) : sizeof(float);
    if (!check_size(&x, n * c, size, "x") || !check_size(&shift, n, size, "shift")
        || !check_size(&lse, n, size, "lse") || !check_size(&zsum, n, size, "zsum"))
        goto done;
    Py_BEGIN_ALLOW_THREADS
    if (is_double)
        row_stats_f64(x.buf, shift.buf, lse.buf, zsum.buf, n, c);
    else
        row_stats_f32(x.buf, shift.buf, lse.buf, zsum.buf, n, c);
    Py_END_ALLOW_THREADS
    result = none();
done:
    PyBuffer_Release(&x); PyBuffer_Release(&shift); PyBuffer_Release(&lse);
    PyBuffer_Release(&zsum);
    return result;
}

static PyObject *cross_entropy_grad(PyObject *self, PyObject *args)
{
    Py_buffer x, target, scale, out;
    Py_ssize_t n, c;
    double smoothing;
    int is_double;
    if (!PyArg_ParseTuple(args, "y*y*y*w*nndp", &x, &target, &scale, &out, &n, &c, &smoothing,
                          &is_double))
        return NULL;
    PyObject *result = NULL;
    Py_ssize_t size = is_double ? sizeof(double) : sizeof(float);
    if (!check_size(&x, n * c, size, "x") || !check_size(&target, n, 8, "target")
        || !check_size(&scale, n, sizeof(double), "scale")
        || !check_size(&out, n * c, size, "out"))
        goto done;
    Py_BEGIN_ALLOW_THREADS
    if (is_double)
        cross_entropy_grad_f64(x.buf, target.buf, scale.buf, out.buf, n, c, smoothing);
    else
        cross_entropy_grad_f32(x.buf, target.buf, scale.buf, out.buf, n, c, smoothing);
    Py_END_ALLOW_THREADS
    result = none();
done:
    PyBuffer_Release(&x); PyBuffer_Release(&target); PyBuffer_Release(&scale);
    PyBuffer_Release(&out);
    return result;
}

RILL_MODULE(softmax,
    {"row_stats", row_stats, METH_VARARGS, "each row's shift, log-sum-exp and shifted sum"},
    {"cross_entropy_grad", cross_entropy_grad, METH_VARARGS, "softmax cross-entropy's gradient"})
