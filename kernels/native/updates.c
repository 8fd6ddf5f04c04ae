/* adam_update (kernels/numpy/updates.py) as one pass, for float32 and float64: each element's
 * p, g, m, v read once and p', m', v' written once. The NumPy kernel's operations in its
 * order, every one rounded to the parameter's dtype, no FMA contraction (build.py's flags):
 * the same bits.
 *
 *   adam(p, g, m, v, p_out, m_out, v_out, start, stop, step_size, bias_correction2_sqrt,
 *        beta1, keep, beta2, one_minus_beta2, eps, weight_decay, decay, double)
 *     over elements [start, stop) of the flat buffers (a thread's share):
 *     p = p * decay (when decay != 1); g = g + p * weight_decay (when weight_decay != 0)
 *     m' = m + (g - m) * keep  if keep = 1 - beta1 < 0.5, else  g - (g - m) * beta1
 *     v' = v * beta2 + (g * one_minus_beta2) * g
 *     p' = p - (m' / (sqrt(v') / bias_correction2_sqrt + eps)) * step_size
 */
#include "common.h"

#define DEFINE_ADAM(T, SQRT, SUFFIX)                                                           \
static void adam_##SUFFIX(const T *restrict p, const T *restrict g, const T *restrict m,      \
                          const T *restrict v, T *restrict p2, T *restrict m2,                \
                          T *restrict v2, Py_ssize_t start, Py_ssize_t stop, double step_d,   \
                          double bc2_d, double beta1_d, double keep_d, double beta2_d,        \
                          double omb2_d, double eps_d, double wd_d, double decay_d)           \
{                                                                                             \
    const T step = (T)step_d, bc2 = (T)bc2_d, beta1 = (T)beta1_d, keep = (T)keep_d,           \
            beta2 = (T)beta2_d, omb2 = (T)omb2_d, eps = (T)eps_d, wd = (T)wd_d,               \
            decay = (T)decay_d;                                                               \
    const int decays = decay_d != 1.0, decoupled = wd_d != 0.0, small_keep = keep_d < 0.5;    \
    _Pragma("omp simd")                                                                       \
    for (Py_ssize_t i = start; i < stop; i++) {                                               \
        const T pi = decays ? p[i] * decay : p[i];                                            \
        const T gi = decoupled ? g[i] + pi * wd : g[i];                                       \
        const T diff = gi - m[i];                                                             \
        const T mi = small_keep ? m[i] + diff * keep : gi - diff * beta1;                     \
        const T vi = v[i] * beta2 + (gi * omb2) * gi;                                         \
        const T denom = SQRT(vi) / bc2 + eps;                                                 \
        m2[i] = mi;                                                                           \
        v2[i] = vi;                                                                           \
        p2[i] = pi - (mi / denom) * step;                                                     \
    }                                                                                         \
}

DEFINE_ADAM(float, sqrtf, f32)
DEFINE_ADAM(double, sqrt, f64)

static PyObject *adam(PyObject *self, PyObject *args)
{
    Py_buffer p, g, m, v, p2, m2, v2;
    Py_ssize_t start, stop;
    double step, bc2, beta1, keep, beta2, omb2, eps, wd, decay;
    int is_double;
    if (!PyArg_ParseTuple(args, "y*y*y*y*w*w*w*nndddddddddp", &p, &g, &m, &v, &p2, &m2, &v2,
                          &start, &stop, &step, &bc2, &beta1, &keep, &beta2, &omb2, &eps, &wd,
                          &decay, &is_double))
        return NULL;
    PyObject *result = NULL;
    Py_ssize_t size = is_double ? sizeof(double) : sizeof(float), n = p.len / size;
    if (!check_range(start, stop, n, "elements") || !check_size(&g, n, size, "g")
        || !check_size(&m, n, size, "m") || !check_size(&v, n, size, "v")
        || !check_size(&p2, n, size, "p_out") || !check_size(&m2, n, size, "m_out")
        || !check_size(&v2, n, size, "v_out"))
        goto done;
    Py_BEGIN_ALLOW_THREADS
    if (is_double)
        adam_f64(p.buf, g.buf, m.buf, v.buf, p2.buf, m2.buf, v2.buf, start, stop, step, bc2,
                 beta1, keep, beta2, omb2, eps, wd, decay);
    else
        adam_f32(p.buf, g.buf, m.buf, v.buf, p2.buf, m2.buf, v2.buf, start, stop, step, bc2,
                 beta1, keep, beta2, omb2, eps, wd, decay);
    Py_END_ALLOW_THREADS
    result = none();
done:
    PyBuffer_Release(&p); PyBuffer_Release(&g); PyBuffer_Release(&m); PyBuffer_Release(&v);
    PyBuffer_Release(&p2); PyBuffer_Release(&m2); PyBuffer_Release(&v2);
    return result;
}

RILL_MODULE(updates,
    {"adam", adam, METH_VARARGS, "adam_update over a range of elements"})
