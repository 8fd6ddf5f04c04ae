/* layer_norm and layer_norm_grad (kernels/numpy/normalization.py) over rows of d elements, one
 * pass over each row's data per sum, for float32 and float64.
 *
 * The NumPy kernel makes ~6 passes forward and ~12 backward, each a call over the whole array
 * (at the GPT bench's (512, 64): 72 and 142 us); a row of 64 floats stays in registers here.
 *
 *   forward(x, w, b, y, rows, d, eps, double)
 *     mean = sum(x) / d; var = sum((x - mean)^2) / d (two passes, as NumPy's); rstd =
 *     1 / sqrt(var + eps); y = ((x - mean) * rstd) * w + b
 *   backward(g, x, w, dx, dw, db, rows, d, eps, double)
 *     xhat, rstd recomputed as above; a = g * w
 *     dx = ((a - mean(a)) - xhat * mean(a * xhat)) * rstd
 *     dw = sum over rows of g * xhat; db = sum over rows of g   (accumulated in double)
 * Row sums are vectorized (lanes added at the end), so they round differently from NumPy's
 * pairwise sums and BLAS's, within float rounding.
 */
#include "common.h"

#define DEFINE_KERNELS(T, SUFFIX)                                                              \
static inline T row_stats_##SUFFIX(const T *restrict x, Py_ssize_t d, double eps,             \
                                   T *restrict rstd_out)                                      \
{                                                                                             \
    T total = 0;                                                                              \
    _Pragma("omp simd reduction(+:total)")                                                    \
    for (Py_ssize_t j = 0; j < d; j++) total += x[j];                                         \
    const T mean = total / (T)d;                                                              \
    T squares = 0;                                                                            \
    _Pragma("omp simd reduction(+:squares)")                                                  \
    for (Py_ssize_t j = 0; j < d; j++) { T u = x[j] - mean; squares += u * u; }               \
    *rstd_out = (T)1 / (T)sqrt((double)(squares / (T)d + (T)eps));                             \
    return mean;                                                                              \
}                                                                                             \
                                                                                              \
static void forward_##SUFFIX(const T *restrict x, const T *restrict w, const T *restrict b,   \
                             T *restrict y, Py_ssize_t rows, Py_ssize_t d, double eps)        \
{                                                                                             \
    for (Py_ssize_t r = 0; r < rows; r++) {                                                   \
        const T *xr = x + r * d;                                                              \
        T *yr = y + r * d;                                                                    \
        T rstd;                                                                               \
        const T mean = row_stats_##SUFFIX(xr, d, eps, &rstd);                                 \
        _Pragma("omp simd")                                                                   \
        for (Py_ssize_t j = 0; j < d; j++) yr[j] = ((xr[j] - mean) * rstd) * w[j] + b[j];     \
    }                                                                                         \
}                                                                                             \
                                                                                              \
static void backward_##SUFFIX(const T *restrict g, const T *restrict x, const T *restrict w,  \
                              T *restrict dx, double *restrict dw, double *restrict db,       \
                              Py_ssize_t rows, Py_ssize_t d, double eps)                      \
{                                                                                             \
    for (Py_ssize_t j = 0; j < d; j++) { dw[j] = 0; db[j] = 0; }                              \
    for (Py_ssize_t r = 0; r < rows; r++) {                                                   \
        const T *xr = x + r * d, *gr = g + r * d;                                             \
        T *dxr = dx + r * d;                                                                  \
        T rstd;                                                                               \
        const T mean = row_stats_##SUFFIX(xr, d, eps, &rstd);                                 \
        T sum_a = 0, sum_axhat = 0;                                                           \
        _Pragma("omp simd reduction(+:sum_a, sum_axhat)")                                     \
        for (Py_ssize_t j = 0; j < d; j++) {                                                  \
            T xhat = (xr[j] - mean) * rstd;                                                   \
            T a = gr[j] * w[j];                                                               \
            sum_a += a;                                                                       \
            sum_axhat += a * xhat;                                                            \
            dw[j] += (double)(gr[j] * xhat);                                                  \
            db[j] += (double)gr[j];                                                           \
        }                                                                                     \
        const T mean_a = sum_a / (T)d, mean_axhat = sum_axhat / (T)d;                         \
        _Pragma("omp simd")                                                                   \
        for (Py_ssize_t j = 0; j < d; j++) {                                                  \
            T xhat = (xr[j] - mean) * rstd;                                                   \
            dxr[j] = ((gr[j] * w[j] - mean_a) - xhat * mean_axhat) * rstd;                    \
        }                                                                                     \
    }                                                                                         \
}

DEFINE_KERNELS(float, f32)
DEFINE_KERNELS(double, f64)

static PyObject *forward(PyObject *self, PyObject *args)
{
    Py_buffer x, w, b, y;
    Py_ssize_t rows, d;
    double eps;
    int is_double;
    if (!PyArg_ParseTuple(args, "y*y*y*w*nndp", &x, &w, &b, &y, &rows, &d, &eps, &is_double))
        return NULL;
    PyObject *result = NULL;
    Py_ssize_t size = is_double ? sizeof(double) : sizeof(float);
    if (!check_size(&x, rows * d, size, "x") || !check_size(&w, d, size, "w")
        || !check_size(&b, d, size, "b") || !check_size(&y, rows * d, size, "y"))
        goto done;
    Py_BEGIN_ALLOW_THREADS
    if (is_double)
        forward_f64(x.buf, w.buf, b.buf, y.buf, rows, d, eps);
    else
        forward_f32(x.buf, w.buf, b.buf, y.buf, rows, d, eps);
    Py_END_ALLOW_THREADS
    result = none();
done:
    PyBuffer_Release(&x); PyBuffer_Release(&w); PyBuffer_Release(&b); PyBuffer_Release(&y);
    return result;
}

static PyObject *backward(PyObject *self, PyObject *args)
{
    Py_buffer g, x, w, dx, dw, db;
    Py_ssize_t rows, d;
    double eps;
    int is_double;
    if (!PyArg_ParseTuple(args, "y*y*y*w*w*w*nndp", &g, &x, &w, &dx, &dw, &db, &rows, &d, &eps,
                          &is_double))
        return NULL;
    PyObject *result = NULL;
    Py_ssize_t size = is_double ? sizeof(double) : sizeof(float);
    if (!check_size(&g, rows * d, size, "g") || !check_size(&x, rows * d, size, "x")
        || !check_size(&w, d, size, "w") || !check_size(&dx, rows * d, size, "dx")
        || !check_size(&dw, d, sizeof(double), "dw") || !check_size(&db, d, sizeof(double), "db"))
        goto done;
    Py_BEGIN_ALLOW_THREADS
    if (is_double)
        backward_f64(g.buf, x.buf, w.buf, dx.buf, dw.buf, db.buf, rows, d, eps);
    else
        backward_f32(g.buf, x.buf, w.buf, dx.buf, dw.buf, db.buf, rows, d, eps);
    Py_END_ALLOW_THREADS
    result = none();
done:
    PyBuffer_Release(&g); PyBuffer_Release(&x); PyBuffer_Release(&w);
    PyBuffer_Release(&dx); PyBuffer_Release(&dw); PyBuffer_Release(&db);
    return result;
}

RILL_MODULE(layer_norm,
    {"forward", forward, METH_VARARGS, "layer_norm over rows"},
    {"backward", backward, METH_VARARGS, "layer_norm_grad over rows (dw, db as float64)"})
