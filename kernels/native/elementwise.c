/* Elementwise kernels (kernels/numpy/elementwise.py) that NumPy runs as several passes, as one
 * pass each, for float32 and float64, over elements [start, stop) of C-contiguous buffers (a
 * thread's share). Each is the NumPy kernel's operations in its order, without FMA
 * contraction: the same bits.
 *
 * Each takes a last, optional argument `threads` (default 1): the threads of GNU OpenMP's team
 * that share [start, stop) (common.h's TEAM_FOR).
 *
 *   scaled_add(x, y, out, start, stop, alpha, beta, double)
 *     out = x * alpha + y * beta, the product by a factor 1 left out (SGD's p - lr * g: NumPy,
 *     a product into a new buffer and an add into it, two passes)
 *   relu_grad(g, x, out, start, stop, double)
 *     out = g where x > 0, else 0 (NaN in x gives 0, as where(x > 0, g, 0)): ReLU's gradient,
 *     which NumPy ran as a comparison and a bitwise select, four passes
 *   add(x, y, out, start, stop, double)
 *     out = x + y, on OpenMP's team (np.add runs on one core)
 *   relu(x, out, start, stop, double)
 *     out = max(x, 0) as np.maximum(x, 0) gives it (NaN kept, -0 -> +0), on a thread's share
 *     (NumPy's maximum runs on one core)
 */
#include "common.h"

#define DEFINE_SCALED_ADD(T, SUFFIX)                                                           \
static void scaled_add_##SUFFIX(const T *restrict x, const T *restrict y, T *restrict out,    \
                                Py_ssize_t start, Py_ssize_t stop, double alpha_d,            \
                                double beta_d, int threads)                                   \
{                                                                                             \
    const T alpha = (T)alpha_d, beta = (T)beta_d;                                             \
    if (alpha_d == 1.0) {                                                                     \
        TEAM_FOR(i, start, stop, out[i] = y[i] * beta + x[i])                                 \
    } else {                                                                                  \
        TEAM_FOR(i, start, stop, out[i] = x[i] * alpha + y[i] * beta)                         \
    }                                                                                         \
}

DEFINE_SCALED_ADD(float, f32)
DEFINE_SCALED_ADD(double, f64)

static PyObject *scaled_add(PyObject *self, PyObject *args)
{
    Py_buffer x, y, out;
    Py_ssize_t start, stop;
    double alpha, beta;
    int is_double, threads = 1;
    if (!PyArg_ParseTuple(args, "y*y*w*nnddp|i", &x, &y, &out, &start, &stop, &alpha, &beta,
                          &is_double, &threads))
        return NULL;
    PyObject *result = NULL;
    Py_ssize_t size = is_double ? sizeof(double) : sizeof(float), n = x.len / size;
    if (!check_range(start, stop, n, "elements") || !check_size(&y, n, size, "y")
        || !check_size(&out, n, size, "out"))
        goto done;
    Py_BEGIN_ALLOW_THREADS
    if (is_double)
        scaled_add_f64(x.buf, y.buf, out.buf, start, stop, alpha, beta, threads);
    else
        scaled_add_f32(x.buf, y.buf, out.buf, start, stop, alpha, beta, threads);
    Py_END_ALLOW_THREADS
    result = none();
done:
    PyBuffer_Release(&x); PyBuffer_Release(&y); PyBuffer_Release(&out);
    return result;
}

#define DEFINE_RELU_GRAD(T, SUFFIX)                                                            \
static void relu_grad_##SUFFIX(const T *restrict g, const T *restrict x, T *restrict out,     \
                               Py_ssize_t start, Py_ssize_t stop, int threads)                \
{                                                                                             \
    TEAM_FOR(i, start, stop, out[i] = x[i] > 0 ? g[i] : (T)0)                                 \
}

DEFINE_RELU_GRAD(float, f32)
DEFINE_RELU_GRAD(double, f64)

/* The wrapper of a pass over two operands: NAME(a, b, out, start, stop, double[, threads])
 * runs NAME_f32 or NAME_f64 on elements [start, stop) of three buffers of one size. */
#define DEFINE_BINARY_WRAPPER(NAME)                                                            \
static PyObject *NAME(PyObject *self, PyObject *args)                                         \
{                                                                                             \
    Py_buffer a, b, out;                                                                      \
    Py_ssize_t start, stop;                                                                   \
    int is_double, threads = 1;                                                               \
    if (!PyArg_ParseTuple(args, "y*y*w*nnp|i", &a, &b, &out, &start, &stop, &is_double,      \
                          &threads))                                                          \
        return NULL;                                                                          \
    PyObject *result = NULL;                                                                  \
    Py_ssize_t size = is_double ? sizeof(double) : sizeof(float), n = b.len / size;           \
    if (!check_range(start, stop, n, "elements") || !check_size(&a, n, size, "operand")      \
        || !check_size(&out, n, size, "out"))                                                 \
        goto done;                                                                            \
    Py_BEGIN_ALLOW_THREADS                                                                    \
    if (is_double)                                                                            \
        NAME##_f64(a.buf, b.buf, out.buf, start, stop, threads);                              \
    else                                                                                      \
        NAME##_f32(a.buf, b.buf, out.buf, start, stop, threads);                              \
    Py_END_ALLOW_THREADS                                                                      \
    result = none();                                                                          \
done:                                                                                         \
    PyBuffer_Release(&a); PyBuffer_Release(&b); PyBuffer_Release(&out);                       \
    return result;                                                                            \
}

DEFINE_BINARY_WRAPPER(relu_grad)

#define DEFINE_RELU(T, SUFFIX)                                                                 \
static void relu_##SUFFIX(const T *x, T *out, Py_ssize_t start, Py_ssize_t stop, int threads) \
{   /* not restrict: out may be x (relu_), each element read before it is written */          \
    TEAM_FOR(i, start, stop, out[i] = x[i] > 0 || x[i] != x[i] ? x[i] : (T)0)                 \
}

DEFINE_RELU(float, f32)
DEFINE_RELU(double, f64)

static PyObject *relu(PyObject *self, PyObject *args)
{
    Py_buffer x, out;
    Py_ssize_t start, stop;
    int is_double, threads = 1;
    if (!PyArg_ParseTuple(args, "y*w*nnp|i", &x, &out, &start, &stop, &is_double, &threads))
        return NULL;
    PyObject *result = NULL;
    Py_ssize_t size = is_double ? sizeof(double) : sizeof(float), n = x.len / size;
    if (!check_range(start, stop, n, "elements") || !check_size(&out, n, size, "out"))
        goto done;
    Py_BEGIN_ALLOW_THREADS
    if (is_double)
        relu_f64(x.buf, out.buf, start, stop, threads);
    else
        relu_f32(x.buf, out.buf, start, stop, threads);
    Py_END_ALLOW_THREADS
    result = none();
done:
    PyBuffer_Release(&x); PyBuffer_Release(&out);
    return result;
}

#define DEFINE_ADD(T, SUFFIX)                                                                  \
static void add_##SUFFIX(const T *x, const T *y, T *out, Py_ssize_t start, Py_ssize_t stop,   \
                         int threads)                                                         \
{   /* not restrict: out may be x or y (an in-place +=) */                                    \
    TEAM_FOR(i, start, stop, out[i] = x[i] + y[i])                                            \
}

DEFINE_ADD(float, f32)
DEFINE_ADD(double, f64)

DEFINE_BINARY_WRAPPER(add)

RILL_MODULE(elementwise,
    {"scaled_add", scaled_add, METH_VARARGS, "x * alpha + y * beta over a range of elements"},
    {"relu_grad", relu_grad, METH_VARARGS, "g where x > 0, else 0, over a range of elements"},
    {"relu", relu, METH_VARARGS, "max(x, 0) over a range of elements"},
    {"add", add, METH_VARARGS, "x + y over a range of elements"})
