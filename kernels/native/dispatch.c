/* bind's common case, compiled: lib/eager/bind.py's `bind` for an eager op (the eager
 * interpreter, no autocast) with one result, on tensors of one device (or, for creation ops,
 * on the device its attr names). Every other call, and every call whose normalizing or
 * shape/dtype rule raises, is handed whole to the Python `bind` (the reference), which runs
 * it or raises the error the user sees; a kernel's failure is reported by the eager
 * interpreter's `kernel_failed`, as there, and never rerun. What this saves is CPython's
 * bytecode around the kernel: a taped 10-element add 1.69 -> 0.87 us (bench/dispatch.py).
 *
 * The slots of Tensor, Context, Device, Node, DType and Primitive are read and written at
 * their offsets, which `setup` and `register_primitive` take from the types' member
 * descriptors (checked to be plain object slots). Tensor and Node are also made here, every
 * slot set as tensor.new_tensor and tape.record set them: `setup` refuses a Tensor or Node
 * whose slots are not the ones listed below (a slot added in Python must be set here too).
 * The Tensor subclasses registered (nn.Parameter) add no slot and share the layout.
 *
 *   setup(python_bind, context_var, eager_interpreter, Tensor, Context, Device, helpers)
 *       helpers: a dict of the Python functions and objects used here
 *   register_primitive(Primitive), register_tensor_subclass(nn.Parameter)
 *   bind(prim, *args, **attrs)                as lib/eager/bind.py's
 *   operator(prim, function, reflected)       a Tensor operator binding prim (below)
 */
#include "common.h"
#include <structmember.h>

static PyObject *python_bind, *context_var, *eager, *tensor_type, *primitive_type, *context_type,
    *ndarray_type, *bfloat16, *check_kernels;
#define MAX_SUBCLASSES 4
static PyObject *subclasses[MAX_SUBCLASSES];
static int n_subclasses;
static int ready;  /* setup done: until then (and after a failed one) calls are handed over */
/* the Python helpers: the shape/dtype rule's cache, the attrs' check, the interpreter's wrap
 * (for buffers that are not plain NumPy arrays) and failure, the tape's record and mark */
static PyObject *inferred, *attrs_fit, *wrap, *kernel_failed, *record, *mark_no_gradient,
    *check_kernel_result, *dtypes_module;
static PyObject *default_float_key;  /* dtypes' name of the default float dtype */

/* slot offsets */
static Py_ssize_t T_data, T_shape, T_dtype, T_device, T_requires_grad, T_grad, T_node, T_index,
    T_version, T_retains_grad, T_origin, T_alias;
static Py_ssize_t P_normalize, P_infer, P_kernels, P_multiple_results, P_device_attr,
    P_required_attrs, P_attr_checks, P_rule_cache, P_dispatch_cache, P_vjp, P_save_output;
static Py_ssize_t N_prim, N_inputs, N_attrs, N_outputs, N_versions;
static Py_ssize_t K_kind;
static PyObject *node_type, *dtype_type, *differentiable_kinds, *device_key, *shape_key,
    *name_key;
static Py_ssize_t C_interpreter, C_grad_enabled, C_autocast;
static Py_ssize_t D_kind;
static PyObject *device_type;
static PyObject *zero;

#define SLOT(obj, off) (*(PyObject **)((char *)(obj) + (off)))

static int offset_of(PyObject *type, const char *name, Py_ssize_t *out)
{
    PyObject *d = PyObject_GetAttrString(type, name);
    if (d == NULL)
        return -1;
    if (!Py_IS_TYPE(d, &PyMemberDescr_Type) ||
        ((PyMemberDescrObject *)d)->d_member->type != T_OBJECT_EX) {
        PyErr_Format(PyExc_TypeError, "%R.%s is not a plain slot", type, name);
        Py_DECREF(d);
        return -1;
    }
    *out = ((PyMemberDescrObject *)d)->d_member->offset;
    Py_DECREF(d);
    return 0;
}

/* 0 if type's __slots__ (less __weakref__) are exactly `names` (NULL-ended); else -1 with a
 * TypeError: a slot this file does not set would be left unset on the tensors it makes. */
static int same_slots(PyObject *type, const char **names)
{
    PyObject *slots = PyObject_GetAttrString(type, "__slots__");
    if (slots == NULL)
        return -1;
    PyObject *expected = PySet_New(NULL), *found = PySet_New(NULL);
    int same = -1;
    if (expected == NULL || found == NULL)
        goto done;
    for (const char **name = names; *name; name++) {
        PyObject *s = PyUnicode_FromString(*name);
        if (s == NULL || PySet_Add(expected, s) < 0) {
            Py_XDECREF(s);
            goto done;
        }
        Py_DECREF(s);
    }
    PyObject *iterator = PyObject_GetIter(slots), *item;
    if (iterator == NULL)
        goto done;
    while ((item = PyIter_Next(iterator)) != NULL) {
        int weak = PyUnicode_Check(item) && PyUnicode_CompareWithASCIIString(item,
                                                                             "__weakref__") == 0;
        int added = weak ? 0 : PySet_Add(found, item);
        Py_DECREF(item);
        if (added < 0)
            break;
    }
    Py_DECREF(iterator);
    if (PyErr_Occurred())
        goto done;
    same = PyObject_RichCompareBool(expected, found, Py_EQ);
    if (same == 0)
        PyErr_Format(PyExc_TypeError, "dispatch.c sets the slots %R of %R, which now has %R: "
                     "set the new ones where dispatch.c makes it", expected, type, found);
done:
    Py_DECREF(slots);
    Py_XDECREF(expected);
    Py_XDECREF(found);
    return same == 1 ? 0 : -1;
}

/* Replace a global's reference (setup may run again: the tests swap the fallback). */
static void keep(PyObject **global, PyObject *value)
{
    Py_XINCREF(value);
    Py_XSETREF(*global, value);
}

static PyObject *setup(PyObject *self, PyObject *args)
{
    PyObject *fallback, *var, *interp, *tensor, *ctx, *device, *helpers;
    if (!PyArg_ParseTuple(args, "OOOO!O!O!O!", &fallback, &var, &interp, &PyType_Type, &tensor,
                          &PyType_Type, &ctx, &PyType_Type, &device, &PyDict_Type, &helpers))
        return NULL;
    ready = 0;
    keep(&python_bind, fallback); keep(&context_var, var); keep(&eager, interp);
    keep(&tensor_type, tensor); keep(&context_type, ctx); keep(&device_type, device);
    static const char *names[] = {"inferred", "attrs_fit", "wrap", "kernel_failed", "record",
                                  "mark_no_gradient", "ndarray", "bfloat16", "check_kernels",
                                  "check_kernel_result", "Node", "DType", "dtypes"};
    PyObject **globals[] = {&inferred, &attrs_fit, &wrap, &kernel_failed, &record,
                            &mark_no_gradient, &ndarray_type, &bfloat16, &check_kernels,
                            &check_kernel_result, &node_type, &dtype_type, &dtypes_module};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        PyObject *value = PyDict_GetItemString(helpers, names[i]);
        if (value == NULL) {
            PyErr_Format(PyExc_KeyError, "dispatch.setup: no helper %s", names[i]);
            return NULL;
        }
        keep(globals[i], value);
    }
    if (!PyType_Check(node_type) || !PyType_Check(dtype_type)) {
        PyErr_SetString(PyExc_TypeError, "dispatch.setup: Node and DType must be classes");
        return NULL;
    }
    if (offset_of(node_type, "prim", &N_prim) || offset_of(node_type, "inputs", &N_inputs) ||
        offset_of(node_type, "attrs", &N_attrs) || offset_of(node_type, "outputs", &N_outputs) ||
        offset_of(node_type, "versions", &N_versions) || offset_of(dtype_type, "kind", &K_kind))
        return NULL;
    if (differentiable_kinds == NULL &&
        (differentiable_kinds = PyUnicode_InternFromString("fc")) == NULL)
        return NULL;
    if ((device_key == NULL && (device_key = PyUnicode_InternFromString("device")) == NULL) ||
        (shape_key == NULL && (shape_key = PyUnicode_InternFromString("shape")) == NULL) ||
        (name_key == NULL && (name_key = PyUnicode_InternFromString("name")) == NULL) ||
        (default_float_key == NULL &&
         (default_float_key = PyUnicode_InternFromString("default_float")) == NULL))
        return NULL;
    static const char *tensor_slots[] = {"_data", "shape", "dtype", "device", "requires_grad",
                                         "grad", "_node", "_index", "_version", "_retains_grad",
                                         "_origin", "_alias", NULL};
    static const char *node_slots[] = {"prim", "inputs", "attrs", "outputs", "versions",
                                       "out_specs", NULL};
    if (same_slots(tensor_type, tensor_slots) < 0 || same_slots(node_type, node_slots) < 0)
        return NULL;
    PyObject *t = tensor_type, *c = context_type;
    if (offset_of(t, "_data", &T_data) || offset_of(t, "shape", &T_shape) ||
        offset_of(t, "dtype", &T_dtype) || offset_of(t, "device", &T_device) ||
        offset_of(t, "requires_grad", &T_requires_grad) || offset_of(t, "grad", &T_grad) ||
        offset_of(t, "_node", &T_node) || offset_of(t, "_index", &T_index) ||
        offset_of(t, "_version", &T_version) || offset_of(t, "_retains_grad", &T_retains_grad) ||
        offset_of(t, "_origin", &T_origin) || offset_of(t, "_alias", &T_alias) ||
        offset_of(c, "interpreter", &C_interpreter) ||
        offset_of(c, "grad_enabled", &C_grad_enabled) || offset_of(c, "autocast", &C_autocast) ||
        offset_of(device_type, "kind", &D_kind))
        return NULL;
    if (zero == NULL && (zero = PyLong_FromLong(0)) == NULL)
        return NULL;
    ready = 1;
    Py_RETURN_NONE;
}

/* register_primitive(Primitive): until it is called, every call is handed over. */
static PyObject *register_primitive(PyObject *self, PyObject *p)
{
    if (!PyType_Check(p)) {
        PyErr_SetString(PyExc_TypeError, "register_primitive: a class expected");
        return NULL;
    }
    if (offset_of(p, "normalize", &P_normalize) || offset_of(p, "infer", &P_infer) ||
        offset_of(p, "kernels", &P_kernels) ||
        offset_of(p, "multiple_results", &P_multiple_results) ||
        offset_of(p, "device_attr", &P_device_attr) ||
        offset_of(p, "required_attrs", &P_required_attrs) ||
        offset_of(p, "attr_checks", &P_attr_checks) || offset_of(p, "rule_cache", &P_rule_cache) ||
        offset_of(p, "dispatch_cache", &P_dispatch_cache) ||
        offset_of(p, "vjp", &P_vjp) || offset_of(p, "save_output", &P_save_output))
        return NULL;
    Py_INCREF(p);
    Py_XSETREF(primitive_type, p);
    Py_RETURN_NONE;
}

/* register_tensor_subclass(cls): a subclass of Tensor that adds no slot, taken as a Tensor
 * (its own attributes, if any, are not read here: nn.Parameter has none). */
static PyObject *register_tensor_subclass(PyObject *self, PyObject *cls)
{
    if (tensor_type == NULL || !PyType_Check(cls) ||
        !PyType_IsSubtype((PyTypeObject *)cls, (PyTypeObject *)tensor_type) ||
        ((PyTypeObject *)cls)->tp_basicsize != ((PyTypeObject *)tensor_type)->tp_basicsize ||
        ((PyTypeObject *)cls)->tp_dictoffset != 0) {
        PyErr_Format(PyExc_TypeError, "register_tensor_subclass: %R is not Tensor's layout", cls);
        return NULL;
    }
    if (n_subclasses == MAX_SUBCLASSES) {
        PyErr_SetString(PyExc_ValueError, "register_tensor_subclass: too many");
        return NULL;
    }
    Py_INCREF(cls);
    subclasses[n_subclasses++] = cls;
    Py_RETURN_NONE;
}

/* The whole call, to the Python bind. */
static PyObject *hand_over(PyObject *const *argv, size_t nargsf, PyObject *kwnames)
{
    return PyObject_Vectorcall(python_bind, argv, nargsf, kwnames);
}

static inline int is_tensor(PyObject *a)
{
    PyObject *type = (PyObject *)Py_TYPE(a);
    if (type == tensor_type)
        return 1;
    for (int i = 0; i < n_subclasses; i++)
        if (type == subclasses[i])
            return 1;
    return 0;
}

/* A kernel's NumPy result as a Tensor of dtype `dtype` (eager/interpreter.py's wrap). */
static PyObject *new_tensor(PyObject *out, PyObject *dtype, PyObject *device)
{
    PyObject *shape = PyObject_GetAttr(out, shape_key);
    if (shape == NULL)
        return NULL;
    PyTypeObject *type = (PyTypeObject *)tensor_type;
    PyObject *t = type->tp_alloc(type, 0);
    if (t == NULL) {
        Py_DECREF(shape);
        return NULL;
    }
    Py_INCREF(out); SLOT(t, T_data) = out;
    SLOT(t, T_shape) = shape;
    Py_INCREF(dtype); SLOT(t, T_dtype) = dtype;
    Py_INCREF(device); SLOT(t, T_device) = device;
    Py_INCREF(Py_False); SLOT(t, T_requires_grad) = Py_False;
    Py_INCREF(Py_None); SLOT(t, T_grad) = Py_None;
    Py_INCREF(Py_None); SLOT(t, T_node) = Py_None;
    Py_INCREF(zero); SLOT(t, T_index) = zero;
    Py_INCREF(zero); SLOT(t, T_version) = zero;
    Py_INCREF(Py_False); SLOT(t, T_retains_grad) = Py_False;
    Py_INCREF(Py_None); SLOT(t, T_origin) = Py_None;
    Py_INCREF(Py_None); SLOT(t, T_alias) = Py_None;
    return t;
}

/* True when an Exception (not a KeyboardInterrupt or SystemExit) is set: the Python bind,
 * run again, then raises it as the user should see it. */
static int ordinary_error(void)
{
    return PyErr_ExceptionMatches(PyExc_Exception);
}

/* eager/tape.py's record for one result whose primitive has a gradient rule: a Node holding
 * the primitive, inputs, attrs and the inputs' versions, attached to a float result (an int
 * one only remembers the op, for the error if someone differentiates it). 0, or -1 raised. */
static int record_one(PyObject *prim, PyObject *inputs, PyObject *attrs, PyObject *result)
{
    Py_ssize_t count = PyTuple_GET_SIZE(inputs);
    PyObject *versions = PyTuple_New(count);
    if (versions == NULL)
        return -1;
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *v = SLOT(PyTuple_GET_ITEM(inputs, i), T_version);
        if (v == NULL) {
            Py_DECREF(versions);
            PyErr_SetString(PyExc_AttributeError, "_version");
            return -1;
        }
        Py_INCREF(v);
        PyTuple_SET_ITEM(versions, i, v);
    }
    PyObject *outputs = Py_None;
    Py_INCREF(outputs);
    if (PyObject_IsTrue(SLOT(prim, P_save_output)) == 1) {
        PyObject *weak = PyWeakref_NewRef(result, NULL);
        Py_DECREF(outputs);
        outputs = weak == NULL ? NULL : PyTuple_Pack(1, weak);
        Py_XDECREF(weak);
        if (outputs == NULL) {
            Py_DECREF(versions);
            return -1;
        }
    }
    PyTypeObject *type = (PyTypeObject *)node_type;
    PyObject *node = type->tp_alloc(type, 0);
    if (node == NULL) {
        Py_DECREF(versions);
        Py_DECREF(outputs);
        return -1;
    }
    Py_INCREF(prim); SLOT(node, N_prim) = prim;
    Py_INCREF(inputs); SLOT(node, N_inputs) = inputs;
    Py_INCREF(attrs); SLOT(node, N_attrs) = attrs;
    SLOT(node, N_versions) = versions;
    SLOT(node, N_outputs) = outputs;
    PyObject *dtype = SLOT(result, T_dtype);
    PyObject *kind = Py_TYPE(dtype) == (PyTypeObject *)dtype_type ? SLOT(dtype, K_kind) : NULL;
    int differentiable = kind == NULL ? -1 : PySequence_Contains(differentiable_kinds, kind);
    if (differentiable < 0) {
        Py_DECREF(node);
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_TypeError, "a result's dtype is not a rill DType");
        return -1;
    }
    if (differentiable) {
        Py_INCREF(Py_True);
        Py_XSETREF(SLOT(result, T_requires_grad), Py_True);
        Py_XSETREF(SLOT(result, T_node), node);  /* the node's reference, given to the result */
    }
    else {
        PyObject *name = PyObject_GetAttr(prim, name_key);
        Py_DECREF(node);
        if (name == NULL)
            return -1;
        Py_XSETREF(SLOT(result, T_origin), name);
    }
    return 0;
}

/* 1 if tuple `v` holds, to `depth` levels, only exact ints, strs, Nones and such tuples:
 * values no other type's value equals (a bool or float among them could equal an int). */
static int keyable_tuple(PyObject *v, int depth)
{
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(v); i++) {
        PyObject *item = PyTuple_GET_ITEM(v, i);
        if (item == Py_None || PyLong_CheckExact(item) || PyUnicode_CheckExact(item))
            continue;
        if (!PyTuple_CheckExact(item) || depth <= 1 || !keyable_tuple(item, depth - 1))
            return 0;
    }
    return 1;
}

/* 1 if equal values of v's type are one value to a shape/dtype rule and the key holds all
 * that tells them apart (its type beside it): None, a bool, an exact int, float or str, an
 * object compared by identity (a DType, a Device, a Generator: object's own == and hash), or
 * a tuple as keyable_tuple says (a shape, axes, an index key's tagged entries). Only the
 * primitives whose declared attr types all key a cache have a dispatch_cache, and an entry
 * is stored after the attrs' check passed, so an odd value here is checked (and refused)
 * every time. */
static int keyable_attr(PyObject *v)
{
    PyTypeObject *t = Py_TYPE(v);
    if (v == Py_None || PyBool_Check(v) || PyLong_CheckExact(v) || PyFloat_CheckExact(v) ||
        PyUnicode_CheckExact(v) || (t->tp_richcompare == PyBaseObject_Type.tp_richcompare &&
                                    t->tp_hash == PyBaseObject_Type.tp_hash))
        return 1;
    return PyTuple_CheckExact(v) && keyable_tuple(v, 4);
}

/* This call's key in the primitive's dispatch_cache (which it has where its attrs' types are
 * declared fit to key a cache and its rule is worth a lookup: ops/primitive.py, cache_rule):
 * the default float dtype, each input's shape, dtype and device, each attr's name, type and
 * value. An entry is stored only after the attrs' check and the rule passed for it, so a
 * call that finds one needs neither. NULL without an error where an attr is not keyable or
 * a shape is not a tuple (that call runs both in Python). */
static PyObject *rule_key(PyObject *normalized, PyObject *kwnames, PyObject *const *values,
                          Py_ssize_t nkw)
{
    for (Py_ssize_t i = 0; i < nkw; i++)
        if (!keyable_attr(values[i]))
            return NULL;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(normalized); i++)
        if (!PyTuple_CheckExact(SLOT(PyTuple_GET_ITEM(normalized, i), T_shape)))
            return NULL;
    PyObject *default_float = PyObject_GetAttr(dtypes_module, default_float_key);
    if (default_float == NULL)
        return NULL;
    Py_ssize_t count = PyTuple_GET_SIZE(normalized);
    PyObject *key = PyTuple_New(1 + 3 * count + 3 * nkw);
    if (key == NULL) {
        Py_DECREF(default_float);
        return NULL;
    }
    PyTuple_SET_ITEM(key, 0, default_float);
    Py_ssize_t k = 1;
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *a = PyTuple_GET_ITEM(normalized, i);
        PyObject *parts[3] = {SLOT(a, T_shape), SLOT(a, T_dtype), SLOT(a, T_device)};
        for (int j = 0; j < 3; j++) {
            Py_INCREF(parts[j]);
            PyTuple_SET_ITEM(key, k++, parts[j]);
        }
    }
    for (Py_ssize_t i = 0; i < nkw; i++) {
        PyObject *parts[3] = {PyTuple_GET_ITEM(kwnames, i), (PyObject *)Py_TYPE(values[i]),
                              values[i]};
        for (int j = 0; j < 3; j++) {
            Py_INCREF(parts[j]);
            PyTuple_SET_ITEM(key, k++, parts[j]);
        }
    }
    return key;
}

#define DISPATCH_CACHE_MAX 256  /* entries per primitive: a program making new shapes
                                  * all the time starts over (as eager/rule_cache.py's) */

static PyObject *bind(PyObject *self, PyObject *const *argv, Py_ssize_t nargsf,
                      PyObject *kwnames)
{
    Py_ssize_t n = PyVectorcall_NARGS(nargsf), nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    if (!ready || n < 1 || (PyObject *)Py_TYPE(argv[0]) != primitive_type)
        return hand_over(argv, nargsf, kwnames);
    PyObject *prim = argv[0];
    int placed = PyObject_IsTrue(SLOT(prim, P_device_attr));
    if (placed < 0)
        return NULL;
    if (SLOT(prim, P_multiple_results) != Py_False)
        return hand_over(argv, nargsf, kwnames);
    PyObject *ctx;
    if (PyContextVar_Get(context_var, NULL, &ctx) < 0)
        return NULL;
    if ((PyObject *)Py_TYPE(ctx) != context_type || SLOT(ctx, C_autocast) != Py_None ||
        SLOT(ctx, C_interpreter) != eager) {
        Py_DECREF(ctx);
        return hand_over(argv, nargsf, kwnames);
    }
    int grad = PyObject_IsTrue(SLOT(ctx, C_grad_enabled));
    Py_DECREF(ctx);
    if (grad < 0)
        return NULL;

    PyObject *attrs = NULL, *args = NULL, *normalized = NULL, *avals = NULL, *out = NULL,
             *result = NULL, *key = NULL, *kernel_args[16];
    attrs = PyDict_New();
    if (attrs == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < nkw; i++)
        if (PyDict_SetItem(attrs, PyTuple_GET_ITEM(kwnames, i), argv[n + i]) < 0)
            goto fail;
    for (Py_ssize_t i = 1; i < n; i++)  /* an unregistered Tensor subclass: before normalizing */
        if (PyObject_TypeCheck(argv[i], (PyTypeObject *)tensor_type) && !is_tensor(argv[i]))
            goto hand_over;
    args = PyTuple_New(n - 1);
    if (args == NULL)
        goto fail;
    for (Py_ssize_t i = 1; i < n; i++) {
        Py_INCREF(argv[i]);
        PyTuple_SET_ITEM(args, i - 1, argv[i]);
    }
    normalized = PyObject_CallOneArg(SLOT(prim, P_normalize), args);
    if (normalized == NULL)
        goto failed_before_kernel;
    if (!PyTuple_CheckExact(normalized))
        goto hand_over;
    Py_ssize_t count = PyTuple_GET_SIZE(normalized);
    if (count + nkw > 16)
        goto hand_over;
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *a = PyTuple_GET_ITEM(normalized, i);
        if (!is_tensor(a) || SLOT(a, T_data) == NULL || SLOT(a, T_device) == NULL ||
            SLOT(a, T_requires_grad) == NULL || SLOT(a, T_origin) == NULL ||
            SLOT(a, T_version) == NULL)
            goto hand_over;  /* a tensor not fully made: the Python bind says what is wrong */
        kernel_args[i] = SLOT(a, T_data);
    }
    PyObject *device;
    if (placed) {  /* creation and moves: the device is an attr; a move between devices (the
                    * Python bind refuses one from another task) is handed over */
        device = PyDict_GetItemWithError(attrs, device_key);
        if (device == NULL) {
            if (PyErr_Occurred())
                goto fail;
            goto hand_over;
        }
        if (count && SLOT(PyTuple_GET_ITEM(normalized, 0), T_device) != device)
            goto hand_over;
    }
    else {  /* every input on the first one's device (else the Python bind moves or refuses) */
        if (count == 0)
            goto hand_over;
        device = SLOT(PyTuple_GET_ITEM(normalized, 0), T_device);
        for (Py_ssize_t i = 1; i < count; i++)
            if (SLOT(PyTuple_GET_ITEM(normalized, i), T_device) != device)
                goto hand_over;
    }
    /* The shape/dtype rule's answer: remembered under this call's key, or the attrs checked
     * (a misfit: the Python bind names it) and the rule asked. The test suite's
     * check_kernels asks every time and compares with what is remembered. */
    PyObject *cache = SLOT(prim, P_dispatch_cache);
    if (PyDict_CheckExact(cache)) {
        key = rule_key(normalized, kwnames, argv + n, nkw);
        if (key == NULL && PyErr_Occurred())
            goto fail;
        if (key != NULL && check_kernels == Py_False) {
            avals = PyDict_GetItemWithError(cache, key);
            if (avals == NULL && PyErr_Occurred())
                goto fail;
            Py_XINCREF(avals);
        }
    }
    if (avals == NULL) {
        PyObject *required = SLOT(prim, P_required_attrs);
        if (nkw || (required != NULL && PySet_GET_SIZE(required))) {
            PyObject *fit = PyObject_CallFunctionObjArgs(attrs_fit, SLOT(prim, P_attr_checks),
                                                         attrs, NULL);
            if (fit == NULL)
                goto fail;
            int ok = fit == Py_True;
            Py_DECREF(fit);
            if (!ok)
                goto hand_over;
        }
        if (SLOT(prim, P_rule_cache) == Py_None)
            avals = PyObject_Call(SLOT(prim, P_infer), normalized, attrs);
        else
            avals = PyObject_CallFunctionObjArgs(inferred, prim, normalized, attrs, NULL);
        if (avals == NULL)
            goto failed_before_kernel;
        if (key != NULL) {
            PyObject *known = PyDict_GetItemWithError(cache, key);
            if (known == NULL && PyErr_Occurred())
                goto fail;
            if (known != NULL) {  /* only under check_kernels: the remembered answer, again */
                int same = PyObject_RichCompareBool(known, avals, Py_EQ);
                if (same < 0)
                    goto fail;
                if (!same) {
                    PyErr_Format(PyExc_AssertionError, "%R: its shape/dtype rule gave %R, but "
                                 "%R was remembered (dispatch.c's key) for the same inputs, "
                                 "attrs and default dtype", prim, avals, known);
                    goto fail;
                }
            }
            else {
                if (PyDict_GET_SIZE(cache) >= DISPATCH_CACHE_MAX)
                    PyDict_Clear(cache);
                if (PyDict_SetItem(cache, key, avals) < 0)
                    goto fail;
            }
        }
    }
    if (!PyTuple_Check(avals) || PyTuple_GET_SIZE(avals) != 2 ||
        Py_TYPE(device) != (PyTypeObject *)device_type)
        goto hand_over;
    /* bfloat16 lives in float32 buffers; off the CPU the Python bind tells the kernels that
     * ask which operands are bfloat16 (eager/interpreter.py: `reads_dtypes`) */
    if (PyTuple_GET_ITEM(avals, 1) == bfloat16 && (!PyUnicode_Check(SLOT(device, D_kind)) ||
            PyUnicode_CompareWithASCIIString(SLOT(device, D_kind), "cpu") != 0))
        goto hand_over;
    PyObject *kernels = SLOT(prim, P_kernels);
    PyObject *kernel = PyDict_Check(kernels) ? PyDict_GetItemWithError(kernels,
                                                                      SLOT(device, D_kind)) : NULL;
    if (kernel == NULL) {  /* no kernel for this device: the Python bind says so */
        if (PyErr_Occurred())
            goto fail;
        goto hand_over;
    }
    Py_INCREF(kernel);
    for (Py_ssize_t i = 0; i < nkw; i++)
        kernel_args[count + i] = argv[n + i];
    out = PyObject_Vectorcall(kernel, kernel_args, count, kwnames);
    Py_DECREF(kernel);
    if (out == NULL) {
        if (!ordinary_error())
            goto fail;
        PyObject *type, *value, *traceback;
        PyErr_Fetch(&type, &value, &traceback);
        PyErr_NormalizeException(&type, &value, &traceback);
        if (traceback != NULL)
            PyException_SetTraceback(value, traceback);
        PyObject *raised = PyObject_CallFunctionObjArgs(kernel_failed, prim, normalized, value,
                                                        SLOT(device, D_kind), NULL);
        Py_XDECREF(type); Py_XDECREF(value); Py_XDECREF(traceback);
        Py_XDECREF(raised);  /* kernel_failed raises; returning is a bug reported as such */
        if (raised != NULL)
            PyErr_SetString(PyExc_SystemError, "rill: kernel_failed returned");
        goto fail;
    }
    PyObject *dtype = PyTuple_GET_ITEM(avals, 1);
    if ((PyObject *)Py_TYPE(out) == ndarray_type && dtype != bfloat16) {
        if (check_kernels != Py_False) {  /* the test suite: the result against the rule */
            PyObject *r = PyObject_CallFunctionObjArgs(check_kernel_result, prim, out, avals,
                                                       NULL);
            if (r == NULL)
                goto fail;
            Py_DECREF(r);
        }
        result = new_tensor(out, dtype, device);
    }
    else
        result = PyObject_CallFunctionObjArgs(wrap, prim, out, avals, device, NULL);
    if (result == NULL)
        goto fail;
    if (grad) {  /* the tape: as bind.py's loop */
        PyObject *origin = NULL;
        int recorded = 0;
        for (Py_ssize_t i = 0; i < count; i++) {
            PyObject *a = PyTuple_GET_ITEM(normalized, i);
            int requires = PyObject_IsTrue(SLOT(a, T_requires_grad));
            if (requires < 0)
                goto fail;
            if (requires) {
                if (SLOT(prim, P_vjp) != Py_None &&
                    Py_TYPE(result) == (PyTypeObject *)tensor_type) {
                    if (record_one(prim, normalized, attrs, result) < 0)
                        goto fail;
                }
                else {  /* no gradient rule (the tape marks the result), or a wrapped result */
                    PyObject *r = PyObject_CallFunctionObjArgs(record, prim, normalized, attrs,
                                                               result, NULL);
                    if (r == NULL)
                        goto fail;
                    Py_DECREF(r);
                }
                recorded = 1;
                break;
            }
            if (SLOT(a, T_origin) != Py_None)
                origin = SLOT(a, T_origin);
        }
        if (!recorded && origin != NULL) {
            PyObject *r = PyObject_CallFunctionObjArgs(mark_no_gradient, prim, result, origin,
                                                       NULL);
            if (r == NULL)
                goto fail;
            Py_DECREF(r);
        }
    }
    Py_DECREF(attrs); Py_DECREF(args); Py_DECREF(normalized); Py_DECREF(avals); Py_DECREF(out);
    Py_XDECREF(key);
    return result;

failed_before_kernel:
    if (!ordinary_error())
        goto fail;
    PyErr_Clear();
hand_over:
    Py_XDECREF(attrs); Py_XDECREF(args); Py_XDECREF(normalized); Py_XDECREF(avals);
    Py_XDECREF(key);
    return hand_over(argv, nargsf, kwnames);
fail:
    Py_XDECREF(attrs); Py_XDECREF(args); Py_XDECREF(normalized); Py_XDECREF(avals);
    Py_XDECREF(out); Py_XDECREF(result); Py_XDECREF(key);
    return NULL;
}

/* ---- operators ------------------------------------------------------------------------------
 * Tensor's binary operators whose op function is `bind(prim, x, y)` (ops/methods.py): an
 * object Python calls as it calls a function in a class (Py_TPFLAGS_METHOD_DESCRIPTOR: `x + y`
 * passes (x, y) with no bound method made), which binds `prim` without the op function's
 * frame (~0.1 us). `reflected` swaps the operands (__radd__). The op function itself stays
 * the public one (`function`: its name and docstring are the operator's). */
typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *prim, *function;
    int reflected;
} Operator;

static PyObject *operator_call(PyObject *self, PyObject *const *argv, size_t nargsf,
                               PyObject *kwnames)
{
    Operator *op = (Operator *)self;
    if (PyVectorcall_NARGS(nargsf) != 2 || kwnames != NULL)
        return PyObject_Vectorcall(op->function, argv, nargsf, kwnames);  /* its TypeError */
    PyObject *args[3] = {op->prim, argv[op->reflected ? 1 : 0], argv[op->reflected ? 0 : 1]};
    return bind(NULL, args, 3, NULL);
}

static PyObject *operator_get(PyObject *self, PyObject *obj, PyObject *type)
{
    if (obj == NULL || obj == Py_None) {
        Py_INCREF(self);
        return self;
    }
    return PyMethod_New(self, obj);
}

static int operator_traverse(PyObject *self, visitproc visit, void *arg)
{
    Py_VISIT(((Operator *)self)->prim);
    Py_VISIT(((Operator *)self)->function);
    return 0;
}

static void operator_dealloc(PyObject *self)
{
    PyObject_GC_UnTrack(self);
    Py_CLEAR(((Operator *)self)->prim);
    Py_CLEAR(((Operator *)self)->function);
    PyObject_GC_Del(self);
}

static PyObject *operator_repr(PyObject *self)
{
    return PyUnicode_FromFormat("<rill operator %R%s>", ((Operator *)self)->function,
                                ((Operator *)self)->reflected ? ", reflected" : "");
}

/* __doc__, __name__, __qualname__, __module__: the op function's */
static PyObject *operator_forward(PyObject *self, void *name)
{
    return PyObject_GetAttrString(((Operator *)self)->function, (const char *)name);
}

static PyGetSetDef operator_getset[] = {
    {"__doc__", operator_forward, NULL, NULL, "__doc__"},
    {"__name__", operator_forward, NULL, NULL, "__name__"},
    {"__qualname__", operator_forward, NULL, NULL, "__qualname__"},
    {"__module__", operator_forward, NULL, NULL, "__module__"},
    {NULL, NULL, NULL, NULL, NULL}};

static PyMemberDef operator_members[] = {
    {"__wrapped__", T_OBJECT, offsetof(Operator, function), READONLY, "the op function"},
    {NULL, 0, 0, 0, NULL}};

static PyTypeObject OperatorType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "rill.Operator",
    .tp_basicsize = sizeof(Operator),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL |
                Py_TPFLAGS_METHOD_DESCRIPTOR,
    .tp_vectorcall_offset = offsetof(Operator, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_descr_get = operator_get,
    .tp_repr = operator_repr,
    .tp_traverse = operator_traverse,
    .tp_dealloc = operator_dealloc,
    .tp_members = operator_members,
    .tp_getset = operator_getset,
};

/* operator(prim, function, reflected): the operator object. */
static PyObject *make_operator(PyObject *self, PyObject *args)
{
    PyObject *prim, *function;
    int reflected;
    if (!PyArg_ParseTuple(args, "OOp", &prim, &function, &reflected))
        return NULL;
    static int operator_type_ready;
    if (!operator_type_ready) {
        if (PyType_Ready(&OperatorType) < 0)
            return NULL;
        operator_type_ready = 1;
    }
    Operator *op = PyObject_GC_New(Operator, &OperatorType);
    if (op == NULL)
        return NULL;
    op->vectorcall = operator_call;
    Py_INCREF(prim);
    op->prim = prim;
    Py_INCREF(function);
    op->function = function;
    op->reflected = reflected;
    PyObject_GC_Track(op);
    return (PyObject *)op;
}

RILL_MODULE(dispatch,
            {"setup", (PyCFunction)setup, METH_VARARGS, "setup(...): the Python side's objects"},
            {"register_primitive", (PyCFunction)register_primitive, METH_O,
             "register_primitive(Primitive): its slots' offsets"},
            {"register_tensor_subclass", (PyCFunction)register_tensor_subclass, METH_O,
             "register_tensor_subclass(cls): a subclass of Tensor taken as one"},
            {"operator", (PyCFunction)make_operator, METH_VARARGS,
             "operator(prim, function, reflected): a Tensor operator binding prim"},
            {"bind", (PyCFunction)(void (*)(void))bind, METH_FASTCALL | METH_KEYWORDS,
             "bind(prim, *args, **attrs): lib/eager/bind.py's bind, its common case compiled"})
