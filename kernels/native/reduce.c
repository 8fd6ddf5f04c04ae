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
 *
 * Row runs (kernels/numpy/indexing.py: an embedding's gradient, rows added into a table by
 * index): the rows of `values` taken in `order`, each run [starts[r], starts[r + 1]) summed
 * in the values' type as np.add.reduceat sums a segment (its first row plus NumPy's pairwise
 * sum of the rest), then added once to out's row rows[r]: reduceat over the ordered rows
 * followed by `out[rows] += sums`, the same operations in the same order (same bits),
 * without gathering the rows or reduceat's column-strided walk (1600 rows of 128 into 256:
 * 0.24 ms there).
 *
 *   row_runs(values, order, starts, rows, out, m, n_runs, n, K, double)
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

/* NumPy's pairwise sum (numpy/_core/src/umath/loops_utils.h.src), a column at a time over
 * rows idx[0..n) of `values`, into res: below 8 rows, from 0 one after another; up to 128,
 * eight accumulators then the rest; above, two halves (cut at a multiple of 8) added. The
 * same operations in the same order, so np.add.reduceat's bits. scratch: 8 * K + K per
 * level of halving. */
#define DEFINE_PAIRWISE(T, SUFFIX)                                                            \
static void add_rows_##SUFFIX(T *restrict res, const T *restrict values,                     \
                              const long long *restrict idx, Py_ssize_t i, Py_ssize_t n,      \
                              Py_ssize_t K)                                                   \
{                                                                                             \
    for (; i < n; i++) {  /* one after another: rows idx[i..n) into res */                    \
        const T *row = values + idx[i] * K;                                                   \
        _Pragma("omp simd")                                                                   \
        for (Py_ssize_t k = 0; k < K; k++) res[k] += row[k];                                  \
    }                                                                                         \
}                                                                                             \
                                                                                              \
static void pairwise_##SUFFIX(const T *restrict values, const long long *restrict idx,        \
                              Py_ssize_t n, Py_ssize_t K, T *restrict res, T *scratch)        \
{                                                                                             \
    if (n < 8) {                                                                              \
        for (Py_ssize_t k = 0; k < K; k++) res[k] = (T)0;                                     \
        add_rows_##SUFFIX(res, values, idx, 0, n, K);                                         \
        return;                                                                               \
    }                                                                                         \
    if (n <= 128) {                                                                           \
        T *r = scratch;                                                                       \
        for (int j = 0; j < 8; j++) memcpy(r + j * K, values + idx[j] * K, sizeof(T) * K);    \
        Py_ssize_t i = 8;                                                                     \
        for (; i < n - n % 8; i += 8)                                                         \
            for (int j = 0; j < 8; j++) {                                                     \
                const T *row = values + idx[i + j] * K;                                       \
                T *acc = r + j * K;                                                           \
                _Pragma("omp simd")                                                           \
                for (Py_ssize_t k = 0; k < K; k++) acc[k] += row[k];                          \
            }                                                                                 \
        for (Py_ssize_t k = 0; k < K; k++)                                                    \
            res[k] = ((r[k] + r[K + k]) + (r[2 * K + k] + r[3 * K + k])) +                    \
                     ((r[4 * K + k] + r[5 * K + k]) + (r[6 * K + k] + r[7 * K + k]));         \
        add_rows_##SUFFIX(res, values, idx, i, n, K);                                         \
        return;                                                                               \
    }                                                                                         \
    Py_ssize_t half = n / 2;                                                                  \
    half -= half % 8;                                                                         \
    T *left = scratch;                                                                        \
    pairwise_##SUFFIX(values, idx, half, K, left, scratch + K);                               \
    pairwise_##SUFFIX(values, idx + half, n - half, K, res, scratch + K);                     \
    for (Py_ssize_t k = 0; k < K; k++) res[k] = left[k] + res[k];                             \
}

/* Each run: its first row, plus the pairwise sum of the others (reduceat's order), then
 * added to its row of out. */
#define DEFINE_RUNS(T, SUFFIX)                                                                 \
DEFINE_PAIRWISE(T, SUFFIX)                                                                    \
static void runs_##SUFFIX(const T *restrict values, const long long *restrict order,          \
                          const long long *restrict starts, const long long *restrict rows,   \
                          T *restrict out, T *restrict run, Py_ssize_t m, Py_ssize_t n_runs,  \
                          Py_ssize_t K)                                                       \
{                                                                                             \
    T *rest = run + K, *scratch = run + 2 * K;                                                \
    for (Py_ssize_t r = 0; r < n_runs; r++) {                                                 \
        const Py_ssize_t end = r + 1 < n_runs ? (Py_ssize_t)starts[r + 1] : m;                \
        const T *first = values + order[starts[r]] * K;                                       \
        if (end - starts[r] > 1) {                                                            \
            pairwise_##SUFFIX(values, order + starts[r] + 1, end - starts[r] - 1, K, rest,    \
                              scratch);                                                       \
            for (Py_ssize_t k = 0; k < K; k++) run[k] = first[k] + rest[k];                   \
        }                                                                                     \
        else                                                                                  \
            memcpy(run, first, sizeof(T) * K);                                                \
        T *target = out + rows[r] * K;                                                        \
        _Pragma("omp simd")                                                                   \
        for (Py_ssize_t k = 0; k < K; k++) target[k] += run[k];                               \
    }                                                                                         \
}

DEFINE_RUNS(float, f32)
DEFINE_RUNS(double, f64)

static PyObject *row_runs(PyObject *self, PyObject *args)
{
    Py_buffer values, order, starts, rows, out;
    Py_ssize_t m, n_runs, n, K;
    int is_double;
    if (!PyArg_ParseTuple(args, "y*y*y*y*w*nnnnp", &values, &order, &starts, &rows, &out, &m,
                          &n_runs, &n, &K, &is_double))
        return NULL;
    PyObject *result = NULL;
    void *run = NULL;
    const Py_ssize_t size = is_double ? sizeof(double) : sizeof(float);
    if (m < 0 || n_runs < 0 || n < 0 || K < 0 || (n_runs == 0) != (m == 0)) {
        PyErr_SetString(PyExc_ValueError, "row_runs: bad sizes");
        goto done;
    }
    if (!check_size(&values, m * K, size, "values") ||
        !check_size(&order, m, sizeof(long long), "order") ||
        !check_size(&starts, n_runs, sizeof(long long), "starts") ||
        !check_size(&rows, n_runs, sizeof(long long), "rows") ||
        !check_size(&out, n * K, size, "out"))
        goto done;
    /* every index inside its array, runs nonempty and in order: no read or write outside */
    const long long *o = order.buf, *st = starts.buf, *rw = rows.buf;
    for (Py_ssize_t j = 0; j < m; j++)
        if (o[j] < 0 || o[j] >= m) {
            PyErr_SetString(PyExc_ValueError, "row_runs: order outside the values");
            goto done;
        }
    for (Py_ssize_t r = 0; r < n_runs; r++)
        if ((r == 0 ? st[0] != 0 : st[r] <= st[r - 1]) || st[r] >= m || rw[r] < 0 ||
                rw[r] >= n) {
            PyErr_SetString(PyExc_ValueError, "row_runs: runs or rows out of order or range");
            goto done;
        }
    /* run, rest, and the pairwise sum's scratch: 8 rows, and one per halving (64 levels
     * would take 2^70 rows) */
    run = PyMem_RawMalloc(K ? (2 + 8 + 64) * K * size : 1);
    if (!run) {
        PyErr_NoMemory();
        goto done;
    }
    Py_BEGIN_ALLOW_THREADS
    if (is_double)
        runs_f64(values.buf, o, st, rw, out.buf, run, m, n_runs, K);
    else
        runs_f32(values.buf, o, st, rw, out.buf, run, m, n_runs, K);
    Py_END_ALLOW_THREADS
    result = none();
done:
    PyMem_RawFree(run);
    PyBuffer_Release(&values); PyBuffer_Release(&order); PyBuffer_Release(&starts);
    PyBuffer_Release(&rows); PyBuffer_Release(&out);
    return result;
}

RILL_MODULE(reduce,
    {"column_sums", column_sums, METH_VARARGS, "sums of an (outer, K) matrix's columns"},
    {"row_runs", row_runs, METH_VARARGS, "runs of ordered rows summed into a table's rows"})
