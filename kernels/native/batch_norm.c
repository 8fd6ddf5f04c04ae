/* batch_norm_train and batch_norm_grad (kernels/numpy/batch_norm.py) for float32 and float64:
 * x (N, C, P) C-contiguous, statistics per channel over N and P; each call does a range of
 * channels [c0, c1) (a thread's share), shared out on `threads` of GNU OpenMP's team where a
 * last argument asks for more than 1 (kernels/numpy/parallel.py:team_threads).
 *
 * The NumPy kernel makes ~4 passes forward and ~6 backward, in blocks of images, each a
 * NumPy or BLAS call; here each (image, channel) run of P values is read once per pass:
 * forward, one pass for the sums and one for y; backward, one for the sums and one for dx.
 * Sums go by vector lanes within a run and in double across runs, so they round differently
 * from the NumPy kernel's (BLAS, in the input's type), within float rounding.
 *
 *   forward(x, w, b, y, mean, var, N, C, P, c0, c1, eps, double)
 *     per channel, k = its first value: mean = k + sum(x - k) / count;
 *     var = max(sum((x - k)^2) / count - (mean - k)^2, 0)    (count = N * P; biased)
 *     scale = w / sqrt(var + eps); y = x * scale + (b - mean * scale)
 *   backward(g, x, w, mean, var, dx, dw, db, N, C, P, c0, c1, eps, double)
 *     db = sum g; dw = sum(g * (x - mean)) * rstd, rstd = 1 / sqrt(var + eps)
 *     dx = g * a + x * s + t: a = w rstd, s = -a rstd dw / count, t = -a db / count - mean s
 */
#include "common.h"

#define DEFINE_KERNELS(T, SQRT, SUFFIX)                                                        \
static void forward_##SUFFIX(const T *restrict x, const T *restrict w, const T *restrict b,   \
                             T *restrict y, T *restrict mean_out, T *restrict var_out,        \
                             Py_ssize_t N, Py_ssize_t C, Py_ssize_t P, Py_ssize_t c0,         \
                             Py_ssize_t c1, double eps, int threads)                          \
{                                                                                             \
    const double count = (double)N * (double)P;                                               \
    _Pragma("omp parallel for num_threads(threads) if(threads > 1) schedule(static)")         \
    for (Py_ssize_t c = c0; c < c1; c++) {                                                    \
        const T k = x[c * P];                                                                 \
        double sum = 0, squares = 0;                                                          \
        for (Py_ssize_t n = 0; n < N; n++) {                                                  \
            const T *run = x + (n * C + c) * P;                                               \
            T s = 0, q = 0;                                                                   \
            _Pragma("omp simd reduction(+:s, q)")                                             \
            for (Py_ssize_t i = 0; i < P; i++) { T u = run[i] - k; s += u; q += u * u; }      \
            sum += s;                                                                         \
            squares += q;                                                                     \
        }                                                                                     \
        const double shift_mean = sum / count;                                                \
        double var = squares / count - shift_mean * shift_mean;                               \
        var = var > 0 ? var : 0;                                                              \
        const T mean = (T)(shift_mean + (double)k);                                           \
        const T scale = w[c] / (T)SQRT((T)var + (T)eps), offset = b[c] - mean * scale;        \
        mean_out[c] = mean;                                                                   \
        var_out[c] = (T)var;                                                                  \
        for (Py_ssize_t n = 0; n < N; n++) {                                                  \
            const T *run = x + (n * C + c) * P;                                               \
            T *out = y + (n * C + c) * P;                                                     \
            _Pragma("omp simd")                                                               \
            for (Py_ssize_t i = 0; i < P; i++) out[i] = run[i] * scale + offset;              \
        }                                                                                     \
    }                                                                                         \
}                                                                                             \
                                                                                              \
static void backward_##SUFFIX(const T *restrict g, const T *restrict x, const T *restrict w,  \
                              const T *restrict mean, const T *restrict var,                  \
                              T *restrict dx, T *restrict dw_out, T *restrict db_out,         \
                              Py_ssize_t N, Py_ssize_t C, Py_ssize_t P, Py_ssize_t c0,        \
                              Py_ssize_t c1, double eps, int threads)                         \
{                                                                                             \
    const T count = (T)((double)N * (double)P);                                               \
    _Pragma("omp parallel for num_threads(threads) if(threads > 1) schedule(static)")         \
    for (Py_ssize_t c = c0; c < c1; c++) {                                                    \
        const T m = mean[c];                                                                  \
        double g_sum = 0, gx_sum = 0;                                                         \
        for (Py_ssize_t n = 0; n < N; n++) {                                                  \
            const T *gr = g + (n * C + c) * P, *xr = x + (n * C + c) * P;                     \
            T s = 0, q = 0;                                                                   \
            _Pragma("omp simd reduction(+:s, q)")                                             \
            for (Py_ssize_t i = 0; i < P; i++) { s += gr[i]; q += gr[i] * (xr[i] - m); }      \
            g_sum += s;                                                                       \
            gx_sum += q;                                                                      \
        }                                                                                     \
        const T rstd = (T)1 / (T)SQRT(var[c] + (T)eps);                                       \
        const T db = (T)g_sum, dw = (T)gx_sum * rstd;                                         \
        const T a = w[c] * rstd, s = -a * rstd * dw / count, t = -a * db / count - m * s;     \
        dw_out[c] = dw;                                                                       \
        db_out[c] = db;                                                                       \
        for (Py_ssize_t n = 0; n < N; n++) {                                                  \
            const T *gr = g + (n * C + c) * P, *xr = x + (n * C + c) * P;                     \
            T *out = dx + (n * C + c) * P;                                                    \
            _Pragma("omp simd")                                                               \
            for (Py_ssize_t i = 0; i < P; i++) out[i] = gr[i] * a + (xr[i] * s + t);          \
        }                                                                                     \
    }                                                                                         \
}

DEFINE_KERNELS(float, sqrtf, f32)
DEFINE_KERNELS(double, sqrt, f64)

static PyObject *forward(PyObject *self, PyObject *args)
{
    Py_buffer x, w, b, y, mean, var;
    Py_ssize_t N, C, P, c0, c1;
    double eps;
    int is_double, threads = 1;
    if (!PyArg_ParseTuple(args, "y*y*y*w*w*w*nnnnndp|i", &x, &w, &b, &y, &mean, &var, &N, &C,
                          &P, &c0, &c1, &eps, &is_double, &threads))
        return NULL;
    PyObject *result = NULL;
    Py_ssize_t size = is_double ? sizeof(double) : sizeof(float);
    if (!check_range(c0, c1, C, "channels") || !check_size(&x, N * C * P, size, "x")
        || !check_size(&w, C, size, "w") || !check_size(&b, C, size, "b")
        || !check_size(&y, N * C * P, size, "y") || !check_size(&mean, C, size, "mean")
        || !check_size(&var, C, size, "var"))
        goto done;
    Py_BEGIN_ALLOW_THREADS
    if (is_double)
        forward_f64(x.buf, w.buf, b.buf, y.buf, mean.buf, var.buf, N, C, P, c0, c1, eps, threads);
    else
        forward_f32(x.buf, w.buf, b.buf, y.buf, mean.buf, var.buf, N, C, P, c0, c1, eps, threads);
    Py_END_ALLOW_THREADS
    result = none();
done:
    PyBuffer_Release(&x); PyBuffer_Release(&w); PyBuffer_Release(&b);
    PyBuffer_Release(&y); PyBuffer_Release(&mean); PyBuffer_Release(&var);
    return result;
}

static PyObject *backward(PyObject *self, PyObject *args)
{
    Py_buffer g, x, w, mean, var, dx, dw, db;
    Py_ssize_t N, C, P, c0, c1;
    double eps;
    int is_double, threads = 1;
    if (!PyArg_ParseTuple(args, "y*y*y*y*y*w*w*w*nnnnndp|i", &g, &x, &w, &mean, &var, &dx, &dw,
                          &db, &N, &C, &P, &c0, &c1, &eps, &is_double, &threads))
        return NULL;
    PyObject *result = NULL;
    Py_ssize_t size = is_double ? sizeof(double) : sizeof(float);
    if (!check_range(c0, c1, C, "channels") || !check_size(&g, N * C * P, size, "g")
        || !check_size(&x, N * C * P, size, "x") || !check_size(&w, C, size, "w")
        || !check_size(&mean, C, size, "mean") || !check_size(&var, C, size, "var")
        || !check_size(&dx, N * C * P, size, "dx") || !check_size(&dw, C, size, "dw")
        || !check_size(&db, C, size, "db"))
        goto done;
    Py_BEGIN_ALLOW_THREADS
    if (is_double)
        backward_f64(g.buf, x.buf, w.buf, mean.buf, var.buf, dx.buf, dw.buf, db.buf, N, C, P,
                     c0, c1, eps, threads);
    else
        backward_f32(g.buf, x.buf, w.buf, mean.buf, var.buf, dx.buf, dw.buf, db.buf, N, C, P,
                     c0, c1, eps, threads);
    Py_END_ALLOW_THREADS
    result = none();
done:
    PyBuffer_Release(&g); PyBuffer_Release(&x); PyBuffer_Release(&w); PyBuffer_Release(&mean);
    PyBuffer_Release(&var); PyBuffer_Release(&dx); PyBuffer_Release(&dw); PyBuffer_Release(&db);
    return result;
}

RILL_MODULE(batch_norm,
    {"forward", forward, METH_VARARGS, "batch_norm_train over a range of channels"},
    {"backward", backward, METH_VARARGS, "batch_norm_grad over a range of channels"})
