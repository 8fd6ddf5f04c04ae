/* The error function and exact GELU (kernels/numpy/special.py), one pass each, for float32 and
 * float64, over elements [start, stop) of C-contiguous buffers (a thread's share):
 *
 *   erf(x, out, start, stop, double)
 *   gelu(x, out, start, stop, double)          0.5 x erfc(-x / sqrt 2)
 *   gelu_grad(g, x, out, start, stop, double)
 *     g (0.5 erfc(-x / sqrt 2) + x exp(-x^2 / 2) / sqrt(2 pi)): g gelu'(x)
 *
 * float64 (and float32 erf) are computed in double through libmvec's vector erf, erfc and exp
 * (<= 3 double ulps measured against scipy). float32 GELU and its gradient, the GPT's MLP,
 * are computed in double too, but only as precisely as a float32 result needs (below), at
 * 1.9x (gelu' 2.5x) libmvec's speed. Either way float32 is rounded once at the end: a result
 * within 1 ulp of the true value, and the NumPy kernels' but where a double within those
 * errors rounds the other way. erfc, not 1 + erf: gelu's left tail (x < -5) keeps its value
 * instead of cancelling to 0. NaN stays NaN; gelu(+inf) = inf, and gelu(-inf) and the
 * gradient at both infinities are NaN (inf * 0), as the composite in rill ops gives them.
 *
 * A module of its own: glibc has libmvec's erf and erfc from 2.35; where they are missing
 * this module fails to load (build.load gives None, and NumPy runs them) and no other does.
 */
#include "common.h"

#include <stdint.h>
#include <string.h>

#pragma omp declare simd notinbranch
double erf(double);
#pragma omp declare simd notinbranch
double erfc(double);

/* Doubles per block of a float32 erf pass: converted into a stack buffer, so that the double
 * loop runs at libmvec's 8-lane width (a float loop converting in place picked 4-lane calls, 1.7
 * against 1.5 ns an element). */
#define BLOCK 512

static const double SQRT_HALF = 0.70710678118654752440, INV_SQRT_2PI = 0.39894228040143267794;

static inline double gelu_d(double x) { return 0.5 * x * erfc(x * -SQRT_HALF); }

static inline double gelu_grad_d(double g, double x)
{
    return g * (0.5 * erfc(x * -SQRT_HALF) + x * exp(-0.5 * x * x) * INV_SQRT_2PI);
}

/* ---- float32 GELU: Phi(x) to 2^-34, in double, without libmvec ----------------------------
 *
 * A float32 result within 1 ulp of x Phi(x) needs Phi to about 2^-30 relative (an error of
 * 2^-30 moves the rounded result by at most 2^-6 ulp beyond the last rounding's half ulp);
 * libmvec's erfc gives 2^-51 at ~4 ns an element. This gives 2^-34 at ~1.4:
 *
 *   Phi(x) = 0.5 E for x < 0, 1 - 0.5 E for x >= 0, E = erfc(|x| / sqrt 2) = e t P(t),
 *   e = exp(-x^2 / 2), t = 1 / (1 + |x| / (3 sqrt 2))
 *
 * erfc(a) = exp(-a^2) erfcx(a), and erfcx(a) / t is smooth in t on all of a >= 0 (it tends to
 * 1 / (3 sqrt pi) as a grows): P, of degree 11, fits it over a in [0, 10.5] (|x| <= 14.8, past
 * which a float32 gelu is x or -0) to 2^-34.4 relative, by iteratively reweighted least
 * squares against scipy's erfcx. x^2 of a float32 x is exact in double, so e's argument is,
 * and e is a degree-10 Taylor polynomial after range reduction by ln 2 (2^-42). Each term is a
 * correctly rounded IEEE operation or fma, so a vector lane gives a scalar's bits. Over every
 * float32 of magnitude in [2^-24, 16] (bench/gelu_ulps.py; outside it gelu is 0.5 x, x or -0
 * to the last bit): gelu within 0.5007 ulp, its gradient within 0.5007 ulp of the size of its
 * two terms (the suite checks every 997th of them). The gradient reuses e for the density
 * term. */
static const double ERFCX_OVER_T[12] = {
    0x1.81294aeac941dp-3, 0x1.80efed32e0d9ep-3, 0x1.6e69c5874b372p-3, 0x1.2da452fd2fb67p-3,
    0x1.60c5413d02bb4p-3, -0x1.d3a793cfee769p-5, 0x1.9fe3acda2a5d4p-2, -0x1.1974460aebce3p-1,
    0x1.50cf3d3985ed9p-1, -0x1.f18e1e87abf78p-2, 0x1.7334d2da14a52p-3, -0x1.ba73c91a09dc7p-6};

static inline double bits_as_double(uint64_t bits) { double d; memcpy(&d, &bits, 8); return d; }
static inline uint64_t double_bits(double d) { uint64_t bits; memcpy(&bits, &d, 8); return bits; }

/* exp(z) for z <= 0 to 2^-42, and 0 below -200 (where every use here underflows float32). */
static inline double exp_nonpositive(double z)
{
    /* z log2(e) + 1.5 * 2^52 rounds it to the integer n in the low bits, without a float to
     * int conversion (whose NaN case C leaves undefined) */
    const double LOG2E = 0x1.71547652b82fep0, SHIFT = 0x1.8p52;
    const double LN2_HI = 0x1.62e42fefa39efp-1, LN2_LO = 0x1.abc9e3b39803fp-56;
    double shifted = fma(z, LOG2E, SHIFT), n = shifted - SHIFT;
    double r = fma(n, -LN2_LO, fma(n, -LN2_HI, z));  /* |r| <= ln(2) / 2 */
    double p = 1.0 / 3628800;
    p = fma(p, r, 1.0 / 362880); p = fma(p, r, 1.0 / 40320); p = fma(p, r, 1.0 / 5040);
    p = fma(p, r, 1.0 / 720); p = fma(p, r, 1.0 / 120); p = fma(p, r, 1.0 / 24);
    p = fma(p, r, 1.0 / 6); p = fma(p, r, 0.5); p = fma(p, r, 1.0); p = fma(p, r, 1.0);
    double two_to_n = bits_as_double((double_bits(shifted) + 1023) << 52);
    return z < -200.0 ? 0.0 : p * two_to_n;
}

/* Phi(x) of a float32 x (above), and e = exp(-x^2 / 2) through *density_exp. */
static inline double phi_f32(double x, double *density_exp)
{
    const double *c = ERFCX_OVER_T;
    double e = exp_nonpositive(-0.5 * (x * x));
    double t = 1.0 / fma(fabs(x), SQRT_HALF / 3.0, 1.0);
    double p = c[11];  /* Horner, written out: a loop here kept the pass from vectorizing */
    p = fma(p, t, c[10]); p = fma(p, t, c[9]); p = fma(p, t, c[8]); p = fma(p, t, c[7]);
    p = fma(p, t, c[6]); p = fma(p, t, c[5]); p = fma(p, t, c[4]); p = fma(p, t, c[3]);
    p = fma(p, t, c[2]); p = fma(p, t, c[1]); p = fma(p, t, c[0]);
    double half_erfc = 0.5 * (e * (t * p));
    *density_exp = e;
    return x < 0 ? half_erfc : 1.0 - half_erfc;
}

static void erf_f64(const double *restrict x, double *restrict out, Py_ssize_t start,
                    Py_ssize_t stop)
{
    _Pragma("omp simd")
    for (Py_ssize_t i = start; i < stop; i++) out[i] = erf(x[i]);
}

static void erf_f32(const float *restrict x, float *restrict out, Py_ssize_t start,
                    Py_ssize_t stop)
{
    double buf[BLOCK];
    for (Py_ssize_t lo = start; lo < stop; lo += BLOCK) {
        Py_ssize_t n = stop - lo < BLOCK ? stop - lo : BLOCK;
        _Pragma("omp simd")
        for (Py_ssize_t i = 0; i < n; i++) buf[i] = erf((double)x[lo + i]);
        _Pragma("omp simd")
        for (Py_ssize_t i = 0; i < n; i++) out[lo + i] = (float)buf[i];
    }
}

static void gelu_f64(const double *restrict x, double *restrict out, Py_ssize_t start,
                     Py_ssize_t stop)
{
    _Pragma("omp simd")
    for (Py_ssize_t i = start; i < stop; i++) out[i] = gelu_d(x[i]);
}

static void gelu_f32(const float *restrict x, float *restrict out, Py_ssize_t start,
                     Py_ssize_t stop)
{
    _Pragma("omp simd")
    for (Py_ssize_t i = start; i < stop; i++) {
        double xd = x[i], e;
        out[i] = (float)(xd * phi_f32(xd, &e));
    }
}

static void gelu_grad_f64(const double *restrict g, const double *restrict x,
                          double *restrict out, Py_ssize_t start, Py_ssize_t stop)
{
    _Pragma("omp simd")
    for (Py_ssize_t i = start; i < stop; i++) out[i] = gelu_grad_d(g[i], x[i]);
}

static void gelu_grad_f32(const float *restrict g, const float *restrict x,
                          float *restrict out, Py_ssize_t start, Py_ssize_t stop)
{
    _Pragma("omp simd")
    for (Py_ssize_t i = start; i < stop; i++) {
        double xd = x[i], e;
        double phi = phi_f32(xd, &e);
        out[i] = (float)((double)g[i] * (phi + xd * e * INV_SQRT_2PI));
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
