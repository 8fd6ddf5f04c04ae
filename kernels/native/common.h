/* What every module in kernels/native shares: buffer size checks and the vector math
 * functions of glibc's libmvec, declared so that loops marked `omp simd` call them. */
#ifndef RILL_NATIVE_COMMON_H
#define RILL_NATIVE_COMMON_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>

#pragma omp declare simd notinbranch
float tanhf(float);
#pragma omp declare simd notinbranch
double tanh(double);
#pragma omp declare simd notinbranch
float expf(float);
#pragma omp declare simd notinbranch
double exp(double);

/* 1 if the buffer holds `elements` items of `itemsize` bytes; else a ValueError naming it. */
static int check_size(Py_buffer *view, Py_ssize_t elements, Py_ssize_t itemsize,
                      const char *what)
{
    if (view->len != elements * itemsize) {
        PyErr_Format(PyExc_ValueError, "%s: %zd bytes, expected %zd", what, view->len,
                     elements * itemsize);
        return 0;
    }
    return 1;
}

/* 1 if [start, stop) is a range of 0..n; else a ValueError naming it. */
static int check_range(Py_ssize_t start, Py_ssize_t stop, Py_ssize_t n, const char *what)
{
    if (start < 0 || stop < start || stop > n) {
        PyErr_Format(PyExc_ValueError, "%s [%zd, %zd) of %zd", what, start, stop, n);
        return 0;
    }
    return 1;
}

/* `for (Py_ssize_t I = START; I < STOP; I++) BODY` vectorized, on `threads` (a local int) of
 * GNU OpenMP's team when it is more than 1 (kernels/numpy/parallel.py:team_threads), else on
 * this thread alone: a separate loop, as a parallel loop whose `if` clause is false ran
 * unvectorized (20x slower). */
#define TEAM_FOR(I, START, STOP, BODY)                                                         \
    if (threads > 1) {                                                                         \
        _Pragma("omp parallel for simd num_threads(threads) schedule(simd:static)")            \
        for (Py_ssize_t I = (START); I < (STOP); I++) { BODY; }                                \
    } else {                                                                                   \
        _Pragma("omp simd")                                                                    \
        for (Py_ssize_t I = (START); I < (STOP); I++) { BODY; }                                \
    }

/* The module's table of functions and its init: RILL_MODULE(name, {"f", f, METH_VARARGS,
 * "doc"}, ...) for a module built from name.c. build.py compiles with -DRILL_BUILD=h<hash of
 * the build> and loads the module as name_h<hash>: the init function of another build's file
 * (renamed or linked to this name) is not found, and that file is refused. */
#ifndef RILL_BUILD
#error "compile through rill.kernels.native.build, which defines RILL_BUILD"
#endif
#define RILL_JOIN_(a, b) a##_##b
#define RILL_JOIN(a, b) RILL_JOIN_(a, b)
#define RILL_STRING_(a) #a
#define RILL_STRING(a) RILL_STRING_(a)
#define RILL_MODULE(NAME, ...)                                                                 \
    static PyMethodDef methods[] = {__VA_ARGS__, {NULL, NULL, 0, NULL}};                      \
    static struct PyModuleDef module = {PyModuleDef_HEAD_INIT,                                 \
                                        RILL_STRING(RILL_JOIN(NAME, RILL_BUILD)), NULL, -1,    \
                                        methods};                                              \
    PyMODINIT_FUNC RILL_JOIN(PyInit, RILL_JOIN(NAME, RILL_BUILD))(void)                        \
    {                                                                                          \
        return PyModule_Create(&module);                                                       \
    }

/* The end of a wrapper whose kernel ran: None to return. */
static inline PyObject *none(void)
{
    Py_INCREF(Py_None);
    return Py_None;
}

#endif
