/* Column sums (kernels/numpy/reduce.py) for float32 and float64: a C-contiguous (outer, K)
 * matrix summed over its rows to (K,), as a sum over every axis but the last (a linear
 * layer's bias gradient).
 *
 * NumPy runs this as one short inner loop per row ((512, 64): 12 us), and BLAS's
 * matrix-vector product needs its threads held around it (4.5 us of threadpoolctl per call);
 * here, rows are added in vector registers, BLOCK_ROWS at a time in the input's type, and the
 * blocks' sums in double: the error of a BLOCK_ROWS-term sum at most, against NumPy's
 * row-by-row sum of all the rows (not the same bits).
 *
 *   column_sums(x, out, outer, K, double)     out (K,) float64
 */
#include "common.h"
#include <string.h>

#define BLOCK_ROWS 32  /* rows added in the input's type before the block goes into double */

#define DEFINE_SUM(T, SUFFIX)                                                                  \
static void sum_##SUFFIX(const T *restrict x, double *restrict out, T *restrict partial,     \
                         Py_ssize_t outer, Py_ssize_t K)                                      \
{                                                                                             \
    memset(out, 0, sizeof(double) * K);                                                       \
    for (Py_ssize_t o0 = 0; o0 < outer; o0 += BLOCK_ROWS) {                                   \
        const Py_ssize_t o1 = o0 + BLOCK_ROWS < outer ? o0 + BLOCK_ROWS : outer;              \
        memcpy(partial, x + o0 * K, sizeof(T) * K);                                           \
        for (Py_ssize_t o = o0 + 1; o < o1; o++) {                                            \
            const T *row = x + o * K;                                                         \
            _Pragma("omp simd")                                                               \
            for (Py_ssize_t k = 0; k < K; k++) partial[k] += row[k];                          \
        }                                                                                     \
        _Pragma("omp simd")                                                                   \
        for (Py_ssize_t k = 0; k < K; k++) out[k] += (double)partial[k];                      \
    }                                                                                         \
}

DEFINE_SUM(float, f32)
DEFINE_SUM(double, f64)

static PyObject *column_sums(PyObject *self, PyObject *args)
{
    Py_buffer x, out;
    Py_ssize_t outer, K;
    int is_double;
    if (!PyArg_ParseTuple(args, "y*w*nnp", &x, &out, &outer, &K, &is_double))
        return NULL;
    PyObject *result = NULL;
    Py_ssize_t size = is_double ? sizeof(double) : sizeof(float);
    void *partial = NULL;
    if (outer < 0 || K < 0) {
        PyErr_SetString(PyExc_ValueError, "negative size");
        goto done;
    }
    if (!check_size(&x, outer * K, size, "x") || !check_size(&out, K, sizeof(double), "out"))
        goto done;
    partial = PyMem_RawMalloc(K ? K * size : 1);
    if (!partial) {
        PyErr_NoMemory();
        goto done;
    }
    Py_BEGIN_ALLOW_THREADS
    if (is_double)
        sum_f64(x.buf, out.buf, partial, outer, K);
    else
        sum_f32(x.buf, out.buf, partial, outer, K);
    Py_END_ALLOW_THREADS
    result = none();
done:
    PyMem_RawFree(partial);
    PyBuffer_Release(&x); PyBuffer_Release(&out);
    return result;
}

RILL_MODULE(reduce,
    {"column_sums", column_sums, METH_VARARGS, "sums of an (outer, K) matrix's columns"})
