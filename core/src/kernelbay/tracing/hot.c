/* The tracer's launch wrapper in C (kernelbay.tracing.hot builds it at the first trace with
 * kernelbay.native.load_extension; without a compiler the Python wrapper in hot.py runs).
 *
 * Launch(inner, buf, limit, fold, on_error, mode, mark, kind, fields) is called as the backend's
 * launch function is, (kernel, grid, block, args, shared_mem, stream), and does what hot.py's
 * launch wrappers do: reads the clock, calls the timer's mark (mode 2), calls inner, reads the
 * clock again and appends one record to the flat list buf, with no Python code run in between
 * (so records of several threads never interleave), then calls fold() once buf holds more than
 * limit items.
 *
 * The record's layout is not known here: fields is the tuple of field names in record order
 * (kernelbay.tracing.records.NAMES, from its Field enum). This file fills the fields it has by
 * name -- KIND (kind), T0, T1, THREAD, KEY (the kernel), A (grid), B (block), C (shared_mem),
 * D (the stream), M0, M1 -- and leaves every other field None.
 *
 * mode 0: host spans only, M0 and M1 None; mode 1: a synchronous backend, the device span is
 * the call itself (t0, t1); mode 2: mark(kernel.device, stream) before and after the call, the
 * marks in M0 and M1 (a mark that raises gives None: tracing never fails the launch it watches).
 *
 * When inner raises, on_error(t0, kernel, grid, block, shared_mem, stream, m0, exc) records it
 * (and gives the start mark back); the launch's own exception is then raised unchanged.
 *
 * The clock is time.perf_counter_ns()'s: PyTime_PerfCounterRaw from Python 3.13, and before
 * that CLOCK_MONOTONIC, which is what perf_counter uses on Linux (elsewhere this file does
 * not build, and the Python wrapper runs). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stddef.h>
#include <string.h>
#include "pythread.h"
#if PY_VERSION_HEX < 0x030D0000
#if !defined(__linux__)
#error "the C trace wrapper needs Python 3.13's PyTime_PerfCounterRaw, or Linux's CLOCK_MONOTONIC"
#endif
#include <time.h>
#endif

/* The fields this wrapper fills, by name; where each goes comes from the fields tuple. */
enum { F_KIND, F_T0, F_T1, F_THREAD, F_KEY, F_A, F_B, F_C, F_D, F_M0, F_M1, N_FILLED };
static const char *const filled_names[N_FILLED] = {"KIND", "T0", "T1", "THREAD", "KEY", "A",
                                                   "B", "C", "D", "M0", "M1"};
#define MAX_FIELDS 64 /* a record's items are gathered on the stack */

static PyObject *s_device;

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *inner, *buf, *fold, *on_error, *mark, *kind;
    Py_ssize_t limit;
    int mode;
    Py_ssize_t size;               /* items per record */
    unsigned char src[MAX_FIELDS]; /* per item of a record: the F_* value that goes there, N_FILLED: None */
    unsigned long tid;  /* the thread of the last call, and */
    PyObject *tid_obj;  /* its id as an int (one object for all of that thread's records) */
} Launch;

static inline long long now_ns(void) {
#if PY_VERSION_HEX >= 0x030D0000
    PyTime_t t;
    if (PyTime_PerfCounterRaw(&t) < 0) return 0;
    return (long long)t;
#else
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
#endif
}

/* mark(device, stream), or None where it raises or there is no device. New reference. */
static PyObject *call_mark(Launch *self, PyObject *dev, PyObject *stream) {
    PyObject *m = NULL;
    if (dev != NULL) {
        PyObject *call[2] = {dev, stream};
        m = PyObject_Vectorcall(self->mark, call, 2, NULL);
    }
    if (m == NULL) {
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    return m;
}

static PyObject *launch_call(Launch *self, PyObject *const *a, size_t nargsf, PyObject *kwnames) {
    if (PyVectorcall_NARGS(nargsf) != 6 || (kwnames != NULL && PyTuple_GET_SIZE(kwnames))) {
        PyErr_SetString(PyExc_TypeError, "a traced launch takes (kernel, grid, block, args, shared_mem, stream)");
        return NULL;
    }
    PyObject *dev = NULL, *m0 = NULL, *m1 = NULL;
    long long t0 = now_ns();
    if (self->mode == 2) {
        dev = PyObject_GetAttr(a[0], s_device);
        if (dev == NULL) PyErr_Clear();
        m0 = call_mark(self, dev, a[5]);
    }
    PyObject *r = PyObject_Vectorcall(self->inner, a, 6, NULL);
    if (r == NULL) {
        PyObject *type, *value, *tb;
        PyErr_Fetch(&type, &value, &tb);
        PyErr_NormalizeException(&type, &value, &tb);
        if (tb != NULL && value != NULL) PyException_SetTraceback(value, tb);
        PyObject *t0o = PyLong_FromLongLong(t0);
        if (t0o != NULL) {
            PyObject *call[8] = {t0o, a[0], a[1], a[2], a[4], a[5], m0 ? m0 : Py_None, value ? value : Py_None};
            PyObject *x = PyObject_Vectorcall(self->on_error, call, 8, NULL);
            Py_XDECREF(x);
            Py_DECREF(t0o);
        }
        PyErr_Clear(); /* recording never replaces the launch's own error */
        PyErr_Restore(type, value, tb);
        Py_XDECREF(dev);
        Py_XDECREF(m0);
        return NULL;
    }
    if (self->mode == 2) m1 = call_mark(self, dev, a[5]);
    Py_XDECREF(dev);
    long long t1 = now_ns();
    PyObject *t0o = PyLong_FromLongLong(t0), *t1o = PyLong_FromLongLong(t1), *tid = NULL;
    unsigned long ident = PyThread_get_thread_ident();
    if (self->tid_obj == NULL || self->tid != ident) {
        PyObject *t = PyLong_FromUnsignedLong(ident);
        if (t == NULL) goto fail;
        Py_XSETREF(self->tid_obj, t);
        self->tid = ident;
    }
    tid = self->tid_obj;
    Py_INCREF(tid);
    if (t0o == NULL || t1o == NULL) goto fail;
    if (self->mode == 1) {
        m0 = (Py_INCREF(t0o), t0o);
        m1 = (Py_INCREF(t1o), t1o);
    }
    PyObject *val[N_FILLED + 1] = {
        [F_KIND] = self->kind, [F_T0] = t0o, [F_T1] = t1o, [F_THREAD] = tid,
        [F_KEY] = a[0], [F_A] = a[1], [F_B] = a[2], [F_C] = a[4], [F_D] = a[5],
        [F_M0] = m0 ? m0 : Py_None, [F_M1] = m1 ? m1 : Py_None, [N_FILLED] = Py_None,
    };
    PyObject *buf = self->buf;
    const unsigned char *src = self->src;
    for (Py_ssize_t i = 0, size = self->size; i < size; i++) {
        if (PyList_Append(buf, val[src[i]]) < 0) { /* only out of memory; drop the partial record */
            Py_ssize_t n = PyList_GET_SIZE(buf);
            PyList_SetSlice(buf, n - i, n, NULL);
            goto fail;
        }
    }
    Py_DECREF(t0o);
    Py_DECREF(t1o);
    Py_DECREF(tid);
    Py_XDECREF(m0);
    Py_XDECREF(m1);
    if (PyList_GET_SIZE(buf) > self->limit) {
        PyObject *x = PyObject_CallNoArgs(self->fold);
        if (x == NULL) {
            Py_DECREF(r);
            return NULL;
        }
        Py_DECREF(x);
    }
    return r;
fail:
    Py_XDECREF(t0o);
    Py_XDECREF(t1o);
    Py_XDECREF(tid);
    Py_XDECREF(m0);
    Py_XDECREF(m1);
    Py_DECREF(r);
    return NULL;
}

/* What goes where in a record, from fields (the names in record order); -1 on a bad tuple. */
static int read_layout(Launch *self, PyObject *fields) {
    Py_ssize_t size = PyTuple_GET_SIZE(fields);
    unsigned char src[MAX_FIELDS];
    if (size < N_FILLED || size > MAX_FIELDS) {
        PyErr_Format(PyExc_ValueError, "Launch: a record of %zd fields (from %d to %d)", size, N_FILLED, MAX_FIELDS);
        return -1;
    }
    for (Py_ssize_t i = 0; i < size; i++) {
        PyObject *name = PyTuple_GET_ITEM(fields, i);
        if (!PyUnicode_Check(name)) {
            PyErr_SetString(PyExc_TypeError, "Launch: fields holds the field names (str)");
            return -1;
        }
        src[i] = N_FILLED;
        for (int f = 0; f < N_FILLED; f++) {
            if (PyUnicode_CompareWithASCIIString(name, filled_names[f]) == 0) {
                src[i] = (unsigned char)f;
                break;
            }
        }
    }
    for (int f = 0; f < N_FILLED; f++) {
        int seen = 0;
        for (Py_ssize_t i = 0; i < size; i++) seen += src[i] == f;
        if (seen != 1) {
            PyErr_Format(PyExc_ValueError, seen ? "Launch: field %s is named twice" : "Launch: fields has no %s",
                         filled_names[f]);
            return -1;
        }
    }
    memcpy(self->src, src, (size_t)size);
    self->size = size;
    return 0;
}

static int Launch_init(Launch *self, PyObject *args, PyObject *kw) {
    PyObject *inner, *buf, *fold, *on_error, *mark, *kind, *fields;
    Py_ssize_t limit;
    int mode;
    static char *names[] = {"inner", "buf", "limit", "fold", "on_error", "mode", "mark", "kind", "fields", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OO!nOOiOUO!", names, &inner, &PyList_Type, &buf, &limit, &fold,
                                     &on_error, &mode, &mark, &kind, &PyTuple_Type, &fields))
        return -1;
    if (mode < 0 || mode > 2 || (mode == 2 && !PyCallable_Check(mark))) {
        PyErr_SetString(PyExc_ValueError, "Launch: mode is 0, 1 or 2 (2 with a callable mark)");
        return -1;
    }
    if (read_layout(self, fields) < 0) return -1;
    Py_INCREF(inner);
    Py_INCREF(buf);
    Py_INCREF(fold);
    Py_INCREF(on_error);
    Py_INCREF(mark);
    Py_INCREF(kind);
    Py_XSETREF(self->inner, inner);
    Py_XSETREF(self->buf, buf);
    Py_XSETREF(self->fold, fold);
    Py_XSETREF(self->on_error, on_error);
    Py_XSETREF(self->mark, mark);
    Py_XSETREF(self->kind, kind);
    self->limit = limit;
    self->mode = mode;
    self->vectorcall = (vectorcallfunc)launch_call;
    return 0;
}

static int Launch_traverse(Launch *self, visitproc visit, void *arg) {
    Py_VISIT(self->inner);
    Py_VISIT(self->buf);
    Py_VISIT(self->fold);
    Py_VISIT(self->on_error);
    Py_VISIT(self->mark);
    Py_VISIT(self->kind);
    return 0;
}

static int Launch_clear(Launch *self) {
    Py_CLEAR(self->inner);
    Py_CLEAR(self->buf);
    Py_CLEAR(self->fold);
    Py_CLEAR(self->on_error);
    Py_CLEAR(self->mark);
    Py_CLEAR(self->kind);
    Py_CLEAR(self->tid_obj);
    return 0;
}

static void Launch_dealloc(Launch *self) {
    PyObject_GC_UnTrack(self);
    Launch_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *Launch_vcall(PyObject *self, PyObject *args, PyObject *kw) {
    if (((Launch *)self)->vectorcall == NULL) {
        PyErr_SetString(PyExc_TypeError, "Launch was not initialised");
        return NULL;
    }
    return PyVectorcall_Call(self, args, kw);
}

static PyTypeObject LaunchType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "_kb_tracehot.Launch",
    .tp_basicsize = sizeof(Launch),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "The tracer's launch wrapper (see kernelbay.tracing.hot).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Launch_init,
    .tp_dealloc = (destructor)Launch_dealloc,
    .tp_traverse = (traverseproc)Launch_traverse,
    .tp_clear = (inquiry)Launch_clear,
    .tp_call = Launch_vcall,
    .tp_vectorcall_offset = offsetof(Launch, vectorcall),
};

static PyObject *clock_ns(PyObject *mod, PyObject *unused) {
    (void)mod, (void)unused;
    return PyLong_FromLongLong(now_ns());
}

static PyMethodDef methods[] = {
    {"clock_ns", clock_ns, METH_NOARGS, "the wrapper's clock (time.perf_counter_ns's)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "_kb_tracehot", "kernelbay's C trace wrapper", -1, methods,
};

PyMODINIT_FUNC PyInit__kb_tracehot(void) {
    if (PyType_Ready(&LaunchType) < 0) return NULL;
    s_device = PyUnicode_InternFromString("device");
    if (s_device == NULL) return NULL;
    PyObject *m = PyModule_Create(&module_def);
    if (m == NULL) return NULL;
    Py_INCREF(&LaunchType);
    if (PyModule_AddObject(m, "Launch", (PyObject *)&LaunchType) < 0) {
        Py_DECREF(&LaunchType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
