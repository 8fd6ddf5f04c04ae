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
 *     shift = the row's max; 0 for a row of -inf or with a NaN (its results are NaN), NaN
 *     where the max is +inf (every result NaN, as torch's: inf - inf);
 *     lse = log(sum exp(x - shift)); zsum = sum (x - shift)
 *   cross_entropy_grad(x, targets (int64), scale, out, n, c, smoothing, double)
 *     out = exp(z) / sum exp(z), z = x - shift; - smoothing / c (if smoothing);
 *     out[target] -= 1 - smoothing (where the target is >= 0); out *= scale (per row,
 *     float64, the product rounded once: as NumPy multiplies by a float64 scale in place)
 *   softmax(x, out, n, c, start, stop, double)
 *     rows [start, stop) of out = exp(z) / sum exp(z), z = x - shift (a thread's share)
 *   softmax_grad(g, y, out, n, c, start, stop, double)
 *     rows [start, stop) of out = g y - y sum(g y): softmax's gradient from its output y
 *
 * softmax and its gradient were NumPy passes: a max, a subtraction, exp, a row sum and a
 * division forward, two products, a row sum and a subtraction backward, over attention's
 * (16, 4, 64, 64) scores 0.59 and ~0.35 ms a call (the rows are short: NumPy's reductions
 * along them run an inner loop per row).
 */
#include "common.h"
#include <stdint.h>

#define STATS_CHUNK 256 /* row_stats' exp arguments, staged on the stack */

#define DEFINE_ROWS(T, EXP, LOG, FAST_LOW, ZERO_BELOW, SUFFIX)                                  \
/* the row's shift (below); *low = its smallest entry (NaN ignored), which says whether any  \
 * exp argument leaves the vector exp's fast path */                                        \
static inline T row_shift_##SUFFIX(const T *restrict row, Py_ssize_t c, T *restrict low)      \
{                                                                                             \
    T m = -INFINITY, l = INFINITY;                                                            \
    int has_nan = 0;                                                                          \
    _Pragma("omp simd reduction(max:m) reduction(min:l) reduction(|:has_nan)")                \
    for (Py_ssize_t j = 0; j < c; j++) {                                                      \
        m = row[j] > m ? row[j] : m;                                                          \
        l = row[j] < l ? row[j] : l;                                                          \
        has_nan |= row[j] != row[j];                                                          \
    }                                                                                         \
    *low = l;                                                                                 \
    return has_nan || m == -INFINITY ? (T)0 : m == INFINITY ? (T)NAN : m;                    \
}                                                                                             \
                                                                                              \
static void row_stats_##SUFFIX(const T *restrict x, T *restrict shift, T *restrict lse,       \
                               T *restrict zsum, Py_ssize_t n, Py_ssize_t c)                  \
{                                                                                             \
    for (Py_ssize_t i = 0; i < n; i++) {                                                      \
        const T *row = x + i * c;                                                             \
        T low;                                                                                \
        const T m = row_shift_##SUFFIX(row, c, &low);                                         \
        T total = 0, zs = 0, buf[STATS_CHUNK];                                                \
        if (!(low - m < FAST_LOW)) {  /* every argument on the fast path (or NaN) */          \
            _Pragma("omp simd reduction(+:total, zs)")                                        \
            for (Py_ssize_t j = 0; j < c; j++) {                                              \
                const T z = row[j] - m;                                                       \
                total += EXP(z);                                                              \
                zs += z;                                                                      \
            }                                                                                 \
        }                                                                                     \
        /* else exp through buf, as softmax_row's through o: masked (-inf) logits stay on    \
         * the vector exp's fast path. Lanes under FAST_LOW add nothing: the max's lane adds  \
         * 1, and each of them under exp(FAST_LOW) (1.7e-38 float, 9.9e-305 double), far     \
         * under half an ulp of 1 for any row length. */                                      \
        else for (Py_ssize_t j0 = 0; j0 < c; j0 += STATS_CHUNK) {                             \
            const Py_ssize_t len = c - j0 < STATS_CHUNK ? c - j0 : STATS_CHUNK;               \
            const T *r = row + j0;                                                            \
            _Pragma("omp simd reduction(+:zs)")                                               \
            for (Py_ssize_t j = 0; j < len; j++) {                                            \
                const T z = r[j] - m;                                                         \
                buf[j] = z < FAST_LOW ? FAST_LOW : z;                                         \
                zs += z;                                                                      \
            }                                                                                 \
            _Pragma("omp simd reduction(+:total)")                                            \
            for (Py_ssize_t j = 0; j < len; j++) {                                            \
                const T e = EXP(buf[j]);                                                      \
                total += r[j] - m < FAST_LOW ? (T)0 : e;                                      \
            }                                                                                 \
        }                                                                                     \
        shift[i] = m;                                                                         \
        lse[i] = LOG(total);                                                                  \
        zsum[i] = zs;                                                                         \
    }                                                                                         \
}                                                                                             \
                                                                                              \
/* o = softmax of one row: exp(row - shift) / its sum. The vector exp leaves its fast path  \
 * for each lane under FAST_LOW (a causal mask's -inf: 3x slower a row), so a row with such \
 * lanes gives exp max(z, FAST_LOW), through o (in one loop GCC saw that the clamp only      \
 * feeds lanes it zeroes, and dropped it), and puts those lanes right after: 0 under        \
 * ZERO_BELOW (exp rounds to 0 there), the scalar exp in the band between (rare). */        \
static inline void softmax_row_##SUFFIX(const T *restrict row, T *restrict o, Py_ssize_t c)   \
{                                                                                             \
    T low, total = 0;                                                                         \
    const T m = row_shift_##SUFFIX(row, c, &low);                                             \
    if (!(low - m < FAST_LOW)) {  /* every argument on the fast path (or NaN) */              \
        _Pragma("omp simd reduction(+:total)")                                                \
        for (Py_ssize_t j = 0; j < c; j++) { o[j] = EXP(row[j] - m); total += o[j]; }         \
    } else {                                                                                  \
        int band = 0;                                                                         \
        _Pragma("omp simd reduction(|:band)")                                                 \
        for (Py_ssize_t j = 0; j < c; j++) {                                                  \
            const T z = row[j] - m;                                                           \
            o[j] = z < FAST_LOW ? FAST_LOW : z;                                               \
            band |= (z < FAST_LOW) & (z >= ZERO_BELOW);                                       \
        }                                                                                     \
        _Pragma("omp simd reduction(+:total)")                                                \
        for (Py_ssize_t j = 0; j < c; j++) {                                                  \
            const T e = EXP(o[j]);                                                            \
            o[j] = row[j] - m < FAST_LOW ? (T)0 : e;                                          \
            total += o[j];                                                                    \
        }                                                                                     \
        if (band) {                                                                           \
            total = 0;                                                                        \
            for (Py_ssize_t j = 0; j < c; j++) {                                              \
                const T z = row[j] - m;                                                       \
                if (z < FAST_LOW && z >= ZERO_BELOW) o[j] = EXP(z);                           \
                total += o[j];                                                                \
            }                                                                                 \
        }                                                                                     \
    }                                                                                         \
    _Pragma("omp simd")                                                                       \
    for (Py_ssize_t j = 0; j < c; j++) o[j] = o[j] / total;                                   \
}                                                                                             \
                                                                                              \
static void cross_entropy_grad_##SUFFIX(const T *restrict x, const int64_t *restrict target,  \
                                        const double *restrict scale, T *restrict out,        \
                                        Py_ssize_t n, Py_ssize_t c, double smoothing)         \
{                                                                                             \
    const T off = (T)(smoothing / (double)c), hit = (T)(1.0 - smoothing);                     \
    for (Py_ssize_t i = 0; i < n; i++) {                                                      \
        T *o = out + i * c;                                                                   \
        softmax_row_##SUFFIX(x + i * c, o, c);                                                \
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

#define DEFINE_SOFTMAX(T, SUFFIX)                                                               \
static void softmax_##SUFFIX(const T *restrict x, T *restrict out, Py_ssize_t c,              \
                             Py_ssize_t start, Py_ssize_t stop)                               \
{                                                                                             \
    for (Py_ssize_t i = start; i < stop; i++) softmax_row_##SUFFIX(x + i * c, out + i * c, c); \
}                                                                                             \
                                                                                              \
static void softmax_grad_##SUFFIX(const T *restrict g, const T *restrict y, T *restrict out,  \
                                  Py_ssize_t c, Py_ssize_t start, Py_ssize_t stop)            \
{                                                                                             \
    for (Py_ssize_t i = start; i < stop; i++) {                                               \
        const T *gr = g + i * c, *yr = y + i * c;                                             \
        T *o = out + i * c;                                                                   \
        T total = 0;                                                                          \
        _Pragma("omp simd reduction(+:total)")                                                \
        for (Py_ssize_t j = 0; j < c; j++) { o[j] = gr[j] * yr[j]; total += o[j]; }           \
        _Pragma("omp simd")                                                                   \
        for (Py_ssize_t j = 0; j < c; j++) o[j] = o[j] - yr[j] * total;                       \
    }                                                                                         \
}

/* exp's vector fast path holds above ln(FLT_MIN) = -87.3 (float; measured) and, with a margin,
 * -700 (double); under ln of half the smallest subnormal (-103.97 / -745.13) exp rounds to 0. */
DEFINE_ROWS(float, expf, logf, -87.0f, -104.0f, f32)
DEFINE_ROWS(double, exp, log, -700.0, -746.0, f64)
DEFINE_SOFTMAX(float, f32)
DEFINE_SOFTMAX(double, f64)

/* (n, c) rows [start, stop) and the element size, checked; 0 with an exception set if not. */
static int check_rows(Py_ssize_t n, Py_ssize_t c, Py_ssize_t start, Py_ssize_t stop)
{
    if (n < 0 || c < 0)
        return PyErr_Format(PyExc_ValueError, "shape (%zd, %zd)", n, c), 0;
    return check_range(start, stop, n, "rows");
}

static PyObject *softmax(PyObject *self, PyObject *args)
{
    Py_buffer x, out;
    Py_ssize_t n, c, start, stop;
    int is_double;
    if (!PyArg_ParseTuple(args, "y*w*nnnnp", &x, &out, &n, &c, &start, &stop, &is_double))
        return NULL;
    PyObject *result = NULL;
    Py_ssize_t size = is_double ? sizeof(double) : sizeof(float);
    if (!check_rows(n, c, start, stop) || !check_size(&x, n * c, size, "x")
        || !check_size(&out, n * c, size, "out"))
        goto done;
    Py_BEGIN_ALLOW_THREADS
    if (is_double)
        softmax_f64(x.buf, out.buf, c, start, stop);
    else
        softmax_f32(x.buf, out.buf, c, start, stop);
    Py_END_ALLOW_THREADS
    result = none();
done:
    PyBuffer_Release(&x); PyBuffer_Release(&out);
    return result;
}

static PyObject *softmax_grad(PyObject *self, PyObject *args)
{
    Py_buffer g, y, out;
    Py_ssize_t n, c, start, stop;
    int is_double;
    if (!PyArg_ParseTuple(args, "y*y*w*nnnnp", &g, &y, &out, &n, &c, &start, &stop,
                          &is_double))
        return NULL;
    PyObject *result = NULL;
    Py_ssize_t size = is_double ? sizeof(double) : sizeof(float);
    if (!check_rows(n, c, start, stop) || !check_size(&g, n * c, size, "g")
        || !check_size(&y, n * c, size, "y") || !check_size(&out, n * c, size, "out"))
        goto done;
    Py_BEGIN_ALLOW_THREADS
    if (is_double)
        softmax_grad_f64(g.buf, y.buf, out.buf, c, start, stop);
    else
        softmax_grad_f32(g.buf, y.buf, out.buf, c, start, stop);
    Py_END_ALLOW_THREADS
    result = none();
done:
    PyBuffer_Release(&g); PyBuffer_Release(&y); PyBuffer_Release(&out);
    return result;
}

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
    {"cross_entropy_grad", cross_entropy_grad, METH_VARARGS, "softmax cross-entropy's gradient"},
    {"softmax", softmax, METH_VARARGS, "softmax of rows [start, stop)"},
    {"softmax_grad", softmax_grad, METH_VARARGS, "softmax's gradient of rows [start, stop)"})
