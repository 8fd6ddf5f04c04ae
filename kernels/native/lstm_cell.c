/* The elementwise parts of lstm_cell and lstm_cell_grad (kernels/numpy/lstm_cell.py) as one
 * pass each, for float32 and float64. The recurrent GEMM stays with NumPy's BLAS.
 *
 * The NumPy kernel makes ~10 passes over (N, 4H) and (N, H) arrays per time step, each a
 * ufunc call of a few microseconds at N 32, H 256; here each row is read once and its gates'
 * math done in registers. Operations are the NumPy kernel's, in its order, with no
 * contraction into FMAs (build.py's flags), so results agree bit for bit except for tanh:
 * glibc's vector tanh (libmvec) against NumPy's, each within a few ulps.
 *
 *   forward(prod_t, x_proj, bias|None, c, h_new, c_new, acts, tanh_c, n, hidden, double)
 *     gates = prod_t.T + x_proj (+ bias), prod_t = w_hh @ h.T, shape (4H, N)
 *     acts = [sig(i), sig(f), tanh(g), sig(o)], sig(a) = 0.5 tanh(0.5 a) + 0.5
 *     c_new = f * c + i * g; tanh_c = tanh(c_new); h_new = o * tanh_c
 *   backward(acts, tanh_c, c, g_h, g_c, d_gates, d_c_out, n, hidden, double)
 *     d_c = (1 - tanh_c^2) * o * g_h + g_c
 *     d_gates = [d_c g (1 - i) i, d_c c (1 - f) f, d_c i (1 - g^2), g_h tanh_c (1 - o) o]
 *     d_c_out = d_c * f
 * Every buffer C-contiguous, of the size stated (checked: ValueError otherwise).
 */
#include "common.h"

#define TILE_ROWS 16
#define TILE_COLS 64

#define DEFINE_KERNELS(T, TANH, SUFFIX)                                                        \
static void forward_##SUFFIX(Py_ssize_t n, Py_ssize_t hd, const T *restrict prod_t,           \
                             const T *restrict x_proj, const T *restrict bias,               \
                             const T *restrict c, T *restrict h_new, T *restrict c_new,      \
                             T *restrict acts, T *restrict tanh_c)                           \
{                                                                                             \
    const Py_ssize_t g4 = 4 * hd;                                                             \
    /* acts = prod_t.T + x_proj, transposed in tiles that stay in L1 */                      \
    for (Py_ssize_t r0 = 0; r0 < n; r0 += TILE_ROWS) {                                        \
        Py_ssize_t r1 = r0 + TILE_ROWS < n ? r0 + TILE_ROWS : n;                              \
        for (Py_ssize_t j0 = 0; j0 < g4; j0 += TILE_COLS) {                                   \
            Py_ssize_t j1 = j0 + TILE_COLS < g4 ? j0 + TILE_COLS : g4;                        \
            for (Py_ssize_t r = r0; r < r1; r++)                                              \
                for (Py_ssize_t j = j0; j < j1; j++)                                          \
                    acts[r * g4 + j] = prod_t[j * n + r] + x_proj[r * g4 + j];                \
        }                                                                                     \
    }                                                                                         \
    for (Py_ssize_t r = 0; r < n; r++) {                                                      \
        T *a = acts + r * g4;                                                                 \
        if (bias) {                                                                           \
            _Pragma("omp simd")                                                               \
            for (Py_ssize_t j = 0; j < g4; j++) a[j] += bias[j];                              \
        }                                                                                     \
        _Pragma("omp simd")                                                                   \
        for (Py_ssize_t j = 0; j < 2 * hd; j++)                                               \
            a[j] = (T)0.5 * TANH(a[j] * (T)0.5) + (T)0.5;                                     \
        _Pragma("omp simd")                                                                   \
        for (Py_ssize_t j = 2 * hd; j < 3 * hd; j++)                                          \
            a[j] = TANH(a[j]) + (T)0;  /* + 0: NumPy's shift, -0 -> +0 */                   \
        _Pragma("omp simd")                                                                   \
        for (Py_ssize_t j = 3 * hd; j < g4; j++)                                              \
            a[j] = (T)0.5 * TANH(a[j] * (T)0.5) + (T)0.5;                                     \
        const T *i = a, *f = a + hd, *g = a + 2 * hd, *o = a + 3 * hd;                        \
        const T *c_row = c + r * hd;                                                          \
        T *cn = c_new + r * hd, *tc = tanh_c + r * hd, *hn = h_new + r * hd;                  \
        _Pragma("omp simd")                                                                   \
        for (Py_ssize_t k = 0; k < hd; k++) {                                                 \
            T value = f[k] * c_row[k] + i[k] * g[k];                                          \
            T t = TANH(value);                                                                \
            cn[k] = value;                                                                    \
            tc[k] = t;                                                                        \
            hn[k] = o[k] * t;                                                                 \
        }                                                                                     \
    }                                                                                         \
}                                                                                             \
                                                                                              \
static void backward_##SUFFIX(Py_ssize_t n, Py_ssize_t hd, const T *restrict acts,            \
                              const T *restrict tanh_c, const T *restrict c,                  \
                              const T *restrict g_h, const T *restrict g_c,                   \
                              T *restrict d_gates, T *restrict d_c_out)                       \
{                                                                                             \
    const Py_ssize_t g4 = 4 * hd;                                                             \
    for (Py_ssize_t r = 0; r < n; r++) {                                                      \
        const T *i = acts + r * g4, *f = i + hd, *g = i + 2 * hd, *o = i + 3 * hd;            \
        const Py_ssize_t s = r * hd;                                                          \
        T *di = d_gates + r * g4, *df = di + hd, *dg = di + 2 * hd, *dout = di + 3 * hd;      \
        _Pragma("omp simd")                                                                   \
        for (Py_ssize_t k = 0; k < hd; k++) {                                                 \
            T t = tanh_c[s + k];                                                              \
            T dc = (((T)1 - t * t) * o[k]) * g_h[s + k] + g_c[s + k];                         \
            di[k] = (dc * g[k]) * (((T)1 - i[k]) * i[k]);                                     \
            df[k] = (dc * c[s + k]) * (((T)1 - f[k]) * f[k]);                                 \
            dg[k] = (dc * i[k]) * ((-g[k]) * g[k] + (T)1);                                    \
            dout[k] = (g_h[s + k] * t) * (((T)1 - o[k]) * o[k]);                              \
            d_c_out[s + k] = dc * f[k];                                                       \
        }                                                                                     \
    }                                                                                         \
}

DEFINE_KERNELS(float, tanhf, f32)
DEFINE_KERNELS(double, tanh, f64)

static PyObject *forward(PyObject *self, PyObject *args)
{
    Py_buffer prod_t, x_proj, c, h_new, c_new, acts, tanh_c, bias = {0};
    PyObject *bias_object;
    Py_ssize_t n, hd;
    int is_double;
    if (!PyArg_ParseTuple(args, "y*y*Oy*w*w*w*w*nnp", &prod_t, &x_proj, &bias_object, &c,
                          &h_new, &c_new, &acts, &tanh_c, &n, &hd, &is_double))
        return NULL;
    PyObject *result = NULL;
    int has_bias = bias_object != Py_None;
    if (has_bias && PyObject_GetBuffer(bias_object, &bias, PyBUF_C_CONTIGUOUS) < 0)
        goto done;
    Py_ssize_t size = is_double ? sizeof(double) : sizeof(float);
    const Py_ssize_t gates = 4 * hd * n, states = hd * n;
    if (!check_size(&prod_t, gates, size, "prod_t") || !check_size(&x_proj, gates, size, "x_proj")
        || (has_bias && !check_size(&bias, 4 * hd, size, "bias"))
        || !check_size(&c, states, size, "c") || !check_size(&h_new, states, size, "h_new")
        || !check_size(&c_new, states, size, "c_new") || !check_size(&acts, gates, size, "acts")
        || !check_size(&tanh_c, states, size, "tanh_c"))
        goto done;
    Py_BEGIN_ALLOW_THREADS
    if (is_double)
        forward_f64(n, hd, prod_t.buf, x_proj.buf, has_bias ? bias.buf : NULL, c.buf,
                    h_new.buf, c_new.buf, acts.buf, tanh_c.buf);
    else
        forward_f32(n, hd, prod_t.buf, x_proj.buf, has_bias ? bias.buf : NULL, c.buf,
                    h_new.buf, c_new.buf, acts.buf, tanh_c.buf);
    Py_END_ALLOW_THREADS
    result = none();
done:
    if (has_bias && bias.obj)
        PyBuffer_Release(&bias);
    PyBuffer_Release(&prod_t); PyBuffer_Release(&x_proj); PyBuffer_Release(&c);
    PyBuffer_Release(&h_new); PyBuffer_Release(&c_new); PyBuffer_Release(&acts);
    PyBuffer_Release(&tanh_c);
    return result;
}

static PyObject *backward(PyObject *self, PyObject *args)
{
    Py_buffer acts, tanh_c, c, g_h, g_c, d_gates, d_c;
    Py_ssize_t n, hd;
    int is_double;
    if (!PyArg_ParseTuple(args, "y*y*y*y*y*w*w*nnp", &acts, &tanh_c, &c, &g_h, &g_c, &d_gates,
                          &d_c, &n, &hd, &is_double))
        return NULL;
    PyObject *result = NULL;
    Py_ssize_t size = is_double ? sizeof(double) : sizeof(float);
    const Py_ssize_t gates = 4 * hd * n, states = hd * n;
    if (!check_size(&acts, gates, size, "acts") || !check_size(&tanh_c, states, size, "tanh_c")
        || !check_size(&c, states, size, "c") || !check_size(&g_h, states, size, "g_h")
        || !check_size(&g_c, states, size, "g_c") || !check_size(&d_gates, gates, size, "d_gates")
        || !check_size(&d_c, states, size, "d_c"))
        goto done;
    Py_BEGIN_ALLOW_THREADS
    if (is_double)
        backward_f64(n, hd, acts.buf, tanh_c.buf, c.buf, g_h.buf, g_c.buf, d_gates.buf, d_c.buf);
    else
        backward_f32(n, hd, acts.buf, tanh_c.buf, c.buf, g_h.buf, g_c.buf, d_gates.buf, d_c.buf);
    Py_END_ALLOW_THREADS
    result = none();
done:
    PyBuffer_Release(&acts); PyBuffer_Release(&tanh_c); PyBuffer_Release(&c);
    PyBuffer_Release(&g_h); PyBuffer_Release(&g_c); PyBuffer_Release(&d_gates);
    PyBuffer_Release(&d_c);
    return result;
}

RILL_MODULE(lstm_cell,
    {"forward", forward, METH_VARARGS, "lstm_cell's elementwise forward, after the GEMM"},
    {"backward", backward, METH_VARARGS, "lstm_cell_grad"})
