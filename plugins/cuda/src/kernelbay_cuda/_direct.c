/* kernelbay-cuda's native helpers, part two (continued): Direct, the hot-path front: allocate,
 * free, launch and graph replay as C callables in front of their Python hooks.
 *
 * Joined after _pool.c (Pool, PoolType, Pool_malloc, Pool_malloc_on, Pool_free) and
 * _graphentry.c (GraphEntryType, graph_entry_replay), in the one translation unit native.py and
 * _native.c make of the sources. pool_add_type() at the end of this file readies and adds the
 * types of all three files; _launch.c's module init calls it. Runs with the GIL held.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stddef.h>
#include <stdint.h>
#include "pythread.h"

/* ---- Direct: the allocate, free and launch hooks as C callables (hookspecs: kernelbay_direct) ----
 *
 * Direct(kind, pools, fallback, flags): kind 0 is allocate(device, nbytes), 1 free(device, handle),
 * 2 launch(kernel, grid, block, args, shared_mem, stream), 3 graph_replay(device, graph, stream)
 * (graph.entry, a GraphEntry, when armed and stream is None). `pools` maps a device index to its
 * Pool; `flags` is the core's kernelbay.streams module dict, whose "intercept" says that some
 * thread has a current stream or records a graph. Whatever the C path does not cover (a cache
 * miss, a current stream, a block other streams used, a foreign handle) calls `fallback`, the
 * Python hook with the same parameters (for free: fallback(device, handle, r) after the pool's
 * free returned r != 0), so both give the same results. */
typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    int kind;
    PyObject *pools;
    PyObject *fallback;
    PyObject *flags;
    /* allocate: the last current-stream lookup (direct_home), valid while kernelbay.streams.epoch,
     * the thread and the device object are the same: the stream (or Py_None: no current stream) */
    PyObject *c_device, *c_stream;
    unsigned long c_tid;
    long long c_epoch;
} Direct;

static PyObject *d_intercept, *d_index, *d_handle, *d_entry, *d_local, *d_s, *d_current, *d_epoch;

static const Py_ssize_t direct_nargs[4] = {2, 2, 6, 3};

static int long_is_zero(PyObject *v) { /* v: an exact int from the pool */
    long long x = PyLong_AsLongLong(v);
    if (x == -1 && PyErr_Occurred()) PyErr_Clear();
    return x == 0;
}

static PyObject *Direct_call(Direct *self, PyObject *const *args, size_t nargsf, PyObject *kwnames);
static PyObject *Direct_vcall_entry(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames);

static int Direct_init(Direct *self, PyObject *args, PyObject *kw) {
    int kind;
    PyObject *pools, *fallback, *flags;
    if (!PyArg_ParseTuple(args, "iO!OO!", &kind, &PyDict_Type, &pools, &fallback, &PyDict_Type, &flags)) return -1;
    if (kind < 0 || kind > 3) {
        PyErr_SetString(PyExc_ValueError, "Direct kind is 0 (allocate), 1 (free), 2 (launch) or 3 (graph replay)");
        return -1;
    }
    if (!d_intercept) {
        d_intercept = PyUnicode_InternFromString("intercept");
        d_index = PyUnicode_InternFromString("index");
        d_handle = PyUnicode_InternFromString("handle");
        d_entry = PyUnicode_InternFromString("entry");
        d_local = PyUnicode_InternFromString("_local");
        d_s = PyUnicode_InternFromString("s");
        d_current = PyUnicode_InternFromString("current");
        d_epoch = PyUnicode_InternFromString("epoch");
        if (!d_intercept || !d_index || !d_handle || !d_entry || !d_local || !d_s || !d_current || !d_epoch) return -1;
    }
    self->kind = kind;
    Py_INCREF(pools);
    Py_XSETREF(self->pools, pools);
    Py_INCREF(fallback);
    Py_XSETREF(self->fallback, fallback);
    Py_INCREF(flags);
    Py_XSETREF(self->flags, flags);
    Py_CLEAR(self->c_device);
    Py_CLEAR(self->c_stream);
    self->c_epoch = -1;
    return 0;
}

static void Direct_dealloc(Direct *self) {
    Py_XDECREF(self->pools);
    Py_XDECREF(self->fallback);
    Py_XDECREF(self->flags);
    Py_XDECREF(self->c_device);
    Py_XDECREF(self->c_stream);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* Whether some thread has a current stream or records a graph (kernelbay.streams.intercept). */
static int direct_intercept(Direct *self) {
    PyObject *v = PyDict_GetItemWithError(self->flags, d_intercept); /* borrowed */
    if (v == NULL) {
        PyErr_Clear();
        return 0;
    }
    if (v == Py_False || v == Py_None) return 0;
    int t = PyObject_IsTrue(v);
    if (t < 0) PyErr_Clear();
    return t != 0;
}

/* kernelbay.streams.epoch as a C integer, or -1 (no cache) where it is not a small exact int. */
static long long direct_epoch(Direct *self) {
    PyObject *v = PyDict_GetItemWithError(self->flags, d_epoch); /* borrowed */
    if (v == NULL || !PyLong_CheckExact(v)) {
        PyErr_Clear();
        return -1;
    }
    int overflow;
    long long e = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (overflow || e < 0) {
        PyErr_Clear();
        return -1;
    }
    return e;
}

/* The stream made current for `device` in this thread by `with stream:` (kernelbay.streams:
 * _local.s.current[device][-1]; a new reference), Py_None where there is none, or NULL (no
 * exception) where anything is not as expected. The answer is kept while streams.epoch (bumped
 * by every `with stream:` entry and exit and every capture, in any thread), the thread and the
 * device object stay the same: a lookup hashes the device (Python code), the cache compares. */
static PyObject *direct_current(Direct *self, PyObject *device) {
    long long ep = direct_epoch(self);
    unsigned long tid = PyThread_get_thread_ident();
    if (ep >= 0 && ep == self->c_epoch && tid == self->c_tid && device == self->c_device && self->c_stream) {
        Py_INCREF(self->c_stream);
        return self->c_stream;
    }
    PyObject *local = PyDict_GetItemWithError(self->flags, d_local); /* borrowed */
    if (local == NULL) {
        PyErr_Clear();
        return NULL;
    }
    PyObject *stream;
    PyObject *st = PyObject_GetAttr(local, d_s);
    if (st == NULL) { /* this thread never entered a stream */
        PyErr_Clear();
        stream = Py_None;
        Py_INCREF(stream);
    } else {
        PyObject *cur = PyObject_GetAttr(st, d_current);
        Py_DECREF(st);
        if (cur == NULL || !PyDict_Check(cur)) {
            Py_XDECREF(cur);
            PyErr_Clear();
            return NULL;
        }
        PyObject *stack = PyDict_GetItemWithError(cur, device); /* borrowed from cur */
        if (stack == NULL || !PyList_Check(stack) || PyList_GET_SIZE(stack) == 0) {
            Py_DECREF(cur);
            if (PyErr_Occurred()) {
                PyErr_Clear();
                return NULL;
            }
            stream = Py_None;
            Py_INCREF(stream);
        } else {
            stream = PyList_GET_ITEM(stack, PyList_GET_SIZE(stack) - 1);
            Py_INCREF(stream);
            Py_DECREF(cur);
        }
    }
    /* the epoch read before the lookup: a change meanwhile (another thread) only costs a miss */
    if (ep >= 0) {
        Py_INCREF(device);
        Py_XSETREF(self->c_device, device);
        Py_INCREF(stream);
        Py_XSETREF(self->c_stream, stream);
        self->c_tid = tid;
        self->c_epoch = ep;
    }
    return stream;
}

/* The allocate hook's home for `device` in this thread: the CUstream (a new reference to a
 * non-zero int) of the stream made current by `with stream:` (its .handle.handle, read at each
 * call: a closed stream's is 0), Py_None where there is none, or NULL (no exception) where
 * anything is not as expected: the caller then runs the Python hook. */
static PyObject *direct_home(Direct *self, PyObject *device) {
    PyObject *stream = direct_current(self, device);
    if (stream == NULL || stream == Py_None) return stream;
    PyObject *h = PyObject_GetAttr(stream, d_handle);
    Py_DECREF(stream);
    if (h == NULL) {
        PyErr_Clear();
        return NULL;
    }
    PyObject *cu = h == Py_None ? NULL : PyObject_GetAttr(h, d_handle);
    Py_DECREF(h);
    if (cu == NULL) {
        if (!PyErr_Occurred()) Py_RETURN_NONE; /* a stream of no handle: the device's one stream */
        PyErr_Clear();
        return NULL;
    }
    if (!PyLong_CheckExact(cu)) {
        Py_DECREF(cu);
        return NULL;
    }
    if (long_is_zero(cu)) {
        Py_DECREF(cu);
        Py_RETURN_NONE;
    }
    return cu;
}

/* The device's Pool (borrowed), or NULL (no exception) where the fallback must run. */
static Pool *direct_pool(Direct *self, PyObject *device) {
    PyObject *idx = PyObject_GetAttr(device, d_index);
    if (idx == NULL) {
        PyErr_Clear();
        return NULL;
    }
    PyObject *pool = PyDict_GetItemWithError(self->pools, idx); /* borrowed */
    Py_DECREF(idx);
    if (pool == NULL || Py_TYPE(pool) != &PoolType) {
        PyErr_Clear();
        return NULL;
    }
    return (Pool *)pool;
}

static PyObject *Direct_call(Direct *self, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (kwnames != NULL || nargs != direct_nargs[self->kind])
        return PyObject_Vectorcall(self->fallback, args, nargsf, kwnames);
    if (self->kind == 3) { /* graph.entry, armed for this stream (None or a kb.Stream); else the hook */
        PyObject *e = PyObject_GetAttr(args[1], d_entry);
        if (e == NULL) {
            PyErr_Clear();
        } else {
            int done = Py_TYPE(e) == &GraphEntryType ? graph_entry_replay((GraphEntry *)e, args[2]) : 0;
            Py_DECREF(e);
            if (done < 0) return NULL;
            if (done) Py_RETURN_NONE;
        }
        return PyObject_Vectorcall(self->fallback, args, 3, NULL);
    }
    if (self->kind == 2) { /* kernel.handle.entry(grid, block, args, shared_mem, stream) */
        PyObject *h = PyObject_GetAttr(args[0], d_handle);
        if (h == NULL) return NULL;
        PyObject *entry = PyObject_GetAttr(h, d_entry);
        Py_DECREF(h);
        if (entry == NULL) return NULL;
        PyObject *r = PyObject_Vectorcall(entry, args + 1, 5, NULL);
        Py_DECREF(entry);
        return r;
    }
    Pool *pool = direct_pool(self, args[0]);
    if (self->kind == 0) {
        if (pool == NULL || !PyLong_CheckExact(args[1])) return PyObject_Vectorcall(self->fallback, args, 2, NULL);
        PyObject *p;
        if (direct_intercept(self)) { /* `with stream:` somewhere: this thread's current stream is the home */
            PyObject *home = direct_home(self, args[0]);
            if (home == NULL) return PyObject_Vectorcall(self->fallback, args, 2, NULL);
            if (home == Py_None) {
                Py_DECREF(home);
                p = Pool_malloc(pool, args[1]);
            } else {
                PyObject *on[2] = {args[1], home};
                p = Pool_malloc_on(pool, on, 2);
                Py_DECREF(home);
            }
        } else {
            p = Pool_malloc(pool, args[1]);
        }
        if (p == NULL) return NULL;
        if (p == Py_None || (PyLong_CheckExact(p) && long_is_zero(p))) {
            Py_DECREF(p);
            return PyObject_Vectorcall(self->fallback, args, 2, NULL); /* a miss: the hook allocates */
        }
        return p;
    }
    /* free: never raises, like the hook */
    if (pool == NULL || !PyLong_CheckExact(args[1])) {
        PyObject *r = PyObject_Vectorcall(self->fallback, args, 2, NULL);
        if (r == NULL) PyErr_Clear();
        Py_XDECREF(r);
        Py_RETURN_NONE;
    }
    PyObject *r = Pool_free(pool, args[1]);
    if (r == NULL) {
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    if (!long_is_zero(r)) {
        PyObject *call[3] = {args[0], args[1], r};
        PyObject *x = PyObject_Vectorcall(self->fallback, call, 3, NULL);
        if (x == NULL) PyErr_Clear();
        Py_XDECREF(x);
    }
    Py_DECREF(r);
    Py_RETURN_NONE;
}

static PyObject *Direct_vcall_entry(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    return Direct_call((Direct *)self, args, nargsf, kwnames);
}

static PyObject *Direct_tp_call(PyObject *self, PyObject *args, PyObject *kw) {
    return PyVectorcall_Call(self, args, kw);
}

static PyObject *Direct_get_kind(Direct *self, void *c) { return PyLong_FromLong(self->kind); }

static PyGetSetDef Direct_getset[] = {
    {"kind", (getter)Direct_get_kind, NULL, "0 allocate, 1 free, 2 launch, 3 graph replay", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyObject *Direct_new(PyTypeObject *type, PyObject *args, PyObject *kw) {
    PyObject *self = PyType_GenericNew(type, args, kw);
    if (self) ((Direct *)self)->vectorcall = Direct_vcall_entry;
    return self;
}

static PyTypeObject DirectType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "_kbcuda_native.Direct",
    .tp_basicsize = sizeof(Direct),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "A hot-path hook (allocate, free, launch, graph replay) as a C callable, with its Python hook as the fallback.",
    .tp_new = Direct_new,
    .tp_init = (initproc)Direct_init,
    .tp_dealloc = (destructor)Direct_dealloc,
    .tp_call = Direct_tp_call,
    .tp_vectorcall_offset = offsetof(Direct, vectorcall),
    .tp_getset = Direct_getset,
};

/* Add the Pool type to module m; -1 with an exception set on failure. It adds Direct and
 * GraphEntry too (and readies PoolBin), so it comes after the types of _pool.c, _graphentry.c
 * and this file. */
static int pool_add_type(PyObject *m) {
    if (PyType_Ready(&BinType) < 0 || PyType_Ready(&PoolType) < 0 || PyType_Ready(&DirectType) < 0 || PyType_Ready(&GraphEntryType) < 0) return -1;
    Py_INCREF(&GraphEntryType);
    if (PyModule_AddObject(m, "GraphEntry", (PyObject *)&GraphEntryType) < 0) {
        Py_DECREF(&GraphEntryType);
        return -1;
    }
    Py_INCREF(&DirectType);
    if (PyModule_AddObject(m, "Direct", (PyObject *)&DirectType) < 0) {
        Py_DECREF(&DirectType);
        return -1;
    }
    Py_INCREF(&PoolType);
    if (PyModule_AddObject(m, "Pool", (PyObject *)&PoolType) < 0) {
        Py_DECREF(&PoolType);
        return -1;
    }
    return 0;
}
