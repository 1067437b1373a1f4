/* kernelbay-cuda's native helpers, part one: the launch call and each kernel's fast path.
 *
 * native.py builds this with _pool.c (the allocator's cached-block pool), _graphentry.c (a CUDA
 * graph's replay in C) and _direct.c (the hot-path hooks as C callables) into one extension,
 * those first: the module init at the end of this file adds their types and its own.
 * Built at first use by kernelbay.native (no CUDA headers needed: the driver's entry point is
 * handed over as an address). Everything here runs with the GIL held and calls no Python
 * code, so each function is atomic with respect to other Python threads; only the driver's
 * cuLaunchKernel runs with the GIL released.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <structmember.h>

typedef int (*cu_launch_t)(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                           unsigned bz, unsigned shm, void *stream, void **params, void **extra);

static cu_launch_t cu_launch = NULL;

static int as_u32(PyObject *o, unsigned *out) {
    unsigned long v = PyLong_AsUnsignedLong(o);
    if (v == (unsigned long)-1 && PyErr_Occurred()) return -1;
    if (v > 0xFFFFFFFFUL) {
        PyErr_SetString(PyExc_OverflowError, "launch dimension or shared memory size does not fit 32 bits");
        return -1;
    }
    *out = (unsigned)v;
    return 0;
}

static int as_ptr(PyObject *o, void **out) {
    if (o == Py_None) {
        *out = NULL;
        return 0;
    }
    unsigned long long v = PyLong_AsUnsignedLongLong(o);
    if (v == (unsigned long long)-1 && PyErr_Occurred()) return -1;
    *out = (void *)(uintptr_t)v;
    return 0;
}

/* set_launch(address of cuLaunchKernel) */
static PyObject *set_launch(PyObject *self, PyObject *arg) {
    void *p;
    if (as_ptr(arg, &p) < 0) return NULL;
    cu_launch = (cu_launch_t)p;
    Py_RETURN_NONE;
}

/* launch(function, gx, gy, gz, bx, by, bz, shared_mem, stream, params) -> CUresult as int.
 * function, stream and params are addresses (ints; stream may be None or 0). */
static PyObject *launch(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 10) {
        PyErr_Format(PyExc_TypeError, "launch() takes 10 arguments, got %zd", nargs);
        return NULL;
    }
    if (cu_launch == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "launch(): set_launch() was not called");
        return NULL;
    }
    void *f, *stream, *params;
    unsigned d[7];
    if (as_ptr(args[0], &f) < 0) return NULL;
    for (int i = 0; i < 7; i++)
        if (as_u32(args[1 + i], &d[i]) < 0) return NULL;
    if (as_ptr(args[8], &stream) < 0 || as_ptr(args[9], &params) < 0) return NULL;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = cu_launch(f, d[0], d[1], d[2], d[3], d[4], d[5], d[6], stream, (void **)params, NULL);
    Py_END_ALLOW_THREADS
    return PyLong_FromLong(rc);
}

/* graph_launch(cuGraphLaunch address, exec, stream) -> CUresult as int: a graph replay without
 * ctypes' per-call conversions. exec and stream are addresses (stream 0 or None: the legacy
 * default stream). */
typedef int (*cu_graph_launch_t)(void *, void *);
static PyObject *graph_launch(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3) {
        PyErr_Format(PyExc_TypeError, "graph_launch() takes 3 arguments, got %zd", nargs);
        return NULL;
    }
    void *fn, *exec, *stream;
    if (as_ptr(args[0], &fn) < 0 || as_ptr(args[1], &exec) < 0 || as_ptr(args[2], &stream) < 0) return NULL;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = ((cu_graph_launch_t)fn)(exec, stream);
    Py_END_ALLOW_THREADS
    return PyLong_FromLong(rc);
}

/* ---- a kernel's launch fast path --------------------------------------------------------
 *
 * FastLaunch(...)(grid, block, args, shared_mem, stream) does in C what launcher.py's generated
 * Python fast path does, for every call form the core hands over: grid and block as ints or
 * tuples of 1 to 3 ints (a LaunchConfig arrives as 3-tuples) within the kernel's limits; the
 * default stream, a kb.Stream or a backend stream handle of the kernel's device, or a foreign
 * stream (an object with __cuda_stream__, or a PyTorch stream's int .cuda_stream: its handle is
 * read once per object, the last one kept by reference); arguments of exactly the types
 * seen when it was made, launched from the kernel's first thread. It writes every argument
 * value into the kernel's parameter buffer and calls cuLaunchKernel. Anything else -- and any
 * value that does not fit its parameter -- goes to the Python slow path, which validates fully
 * and says what is wrong.
 *
 * kinds, one per argument: 'P' a kernelbay buffer's handle; a struct format code (f d e b B h H
 * i I q Q ?) with that code's range; '1' '2' '4' '8' an integer of that many bytes whose sign
 * the parameter does not say (either sign's range: kernelbay.argrules.int_range("n", size)). */

#include <float.h>
#include <math.h>
#include <string.h>
#include "pythread.h"

static PyObject *s_handle, *s_device, *s_index, *s_cuda_stream_proto, *s_cuda_stream, *s_zero;

/* The stream epoch: bumped whenever a backend stream handle gives its CUstream up
 * (streams._StreamHandle.close calls stream_closed()), so that a stream handle remembered at an
 * older epoch is read again. */
static unsigned long long stream_epoch = 1;

static PyObject *stream_closed(PyObject *mod, PyObject *unused) {
    (void)mod, (void)unused;
    stream_epoch++;
    Py_RETURN_NONE;
}

#define NOTED 8

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    void *fn;
    void *params;
    char *buf;
    unsigned long tid;
    long long max_g[3], max_b[3], max_threads, dynamic_shared_limit;
    long long fixed_b[3], shm_base; /* fixed_b[0] == 0: the caller gives the block */
    PyObject *stream_type;    /* the backend's stream handle (streams._StreamHandle) */
    PyObject *kb_stream_type; /* kernelbay.Stream: its .handle is one of those */
    PyObject *fs_obj;         /* the last stream object given (a strong reference), or NULL */
    void *fs_handle;          /* its CUstream, read once from it */
    unsigned long long fs_epoch; /* stream_epoch when it was read */
    PyObject *fs_key;         /* its CUstream as an int (the allocator pool's key for it) */
    PyObject *pool;           /* the device allocator's Pool (note_use), or NULL */
    /* The first NOTED pointer arguments' last note_use that left (pointer, stream) in the pool's
     * uses, and the pool's uses_gen then: the same pair at the same gen needs no note again. */
    unsigned long long noted_p[NOTED], noted_gen[NOTED];
    void *noted_s[NOTED];
    long long index;
    PyObject *dev;
    PyObject *types; /* tuple of exact types, one per argument */
    char kinds[256];
    Py_ssize_t offsets[256];
    Py_ssize_t nargs;
    PyObject *slow, *kernel, *failed, *cell, *name;
} FastLaunch;

static PyObject *fl_slow(FastLaunch *self, PyObject *const *a) {
    if (PyErr_Occurred()) PyErr_Clear();
    PyObject *call[6] = {self->kernel, a[0], a[1], a[2], a[3], a[4]};
    return PyObject_Vectorcall(self->slow, call, 6, NULL);
}

static int as_ll(PyObject *o, long long *out) {
    /* -1: not an exact int that fits (the caller takes the slow path) */
    if (PyLong_CheckExact(o)) {
        int overflow = 0;
        *out = PyLong_AsLongLongAndOverflow(o, &overflow);
        if (overflow || (*out == -1 && PyErr_Occurred())) return -1;
        return 0;
    }
    return -1;
}

/* A grid or block size: an int, or a tuple of 1 to 3 ints, each in [1, max]. 0: ok. */
static int dims(PyObject *o, const long long *max, long long *d) {
    d[0] = d[1] = d[2] = 1;
    if (PyLong_CheckExact(o)) {
        if (as_ll(o, &d[0])) return -1;
    } else if (PyTuple_CheckExact(o)) {
        Py_ssize_t n = PyTuple_GET_SIZE(o);
        if (n < 1 || n > 3) return -1;
        for (Py_ssize_t i = 0; i < n; i++)
            if (as_ll(PyTuple_GET_ITEM(o, i), &d[i])) return -1;
    } else {
        return -1;
    }
    for (int i = 0; i < 3; i++)
        if (d[i] < 1 || d[i] > max[i]) return -1;
    return 0;
}

/* The CUstream of a foreign stream object: __cuda_stream__() -> (version, handle), else an
 * int .cuda_stream (PyTorch before the protocol). 0: ok. */
static int foreign_stream(PyObject *o, void **out) {
    PyObject *h = NULL;
    PyObject *proto = PyObject_GetAttr(o, s_cuda_stream_proto);
    if (proto != NULL) {
        PyObject *got = PyCallable_Check(proto) ? PyObject_CallNoArgs(proto) : (Py_INCREF(proto), proto);
        Py_DECREF(proto);
        if (got == NULL) return -1;
        if (PyTuple_Check(got) && PyTuple_GET_SIZE(got) == 2) {
            h = PyTuple_GET_ITEM(got, 1);
            Py_INCREF(h);
        }
        Py_DECREF(got);
    } else {
        PyErr_Clear();
        h = PyObject_GetAttr(o, s_cuda_stream);
    }
    if (h == NULL || !PyLong_Check(h)) {
        Py_XDECREF(h);
        return -1;
    }
    unsigned long long v = PyLong_AsUnsignedLongLong(h);
    Py_DECREF(h);
    if (v == (unsigned long long)-1 && PyErr_Occurred()) return -1;
    *out = (void *)(uintptr_t)v;
    return 0;
}

/* The CUstream of a backend stream handle of this kernel's device. 0: ok; -1: the slow path
 * decides (another device, a closed stream, the default stream's wrapper). */
static int own_stream(FastLaunch *self, PyObject *s, void **out) {
    PyObject *idx = PyObject_GetAttr(s, s_index);
    long long si = -1;
    int bad = idx == NULL || as_ll(idx, &si) || si != self->index;
    Py_XDECREF(idx);
    if (bad) return -1;
    PyObject *h = PyObject_GetAttr(s, s_handle);
    if (h == NULL || !PyLong_Check(h)) {
        Py_XDECREF(h);
        return -1;
    }
    unsigned long long hv = PyLong_AsUnsignedLongLong(h);
    Py_DECREF(h);
    /* 0: a closed stream (or the default stream's wrapper): the slow path tells them apart */
    if (hv == 0 || (hv == (unsigned long long)-1 && PyErr_Occurred())) return -1;
    *out = (void *)(uintptr_t)hv;
    return 0;
}

/* The CUstream of any stream= value but None. 0: ok; -1: the slow path decides.
 * The last stream object given is remembered (a strong reference, so it cannot die and be
 * replaced by another object at its address), with its handle and the stream epoch when that
 * was read: the next launch on the same object, while no backend stream handle has been closed
 * since, costs two compares. Holding the object keeps only that Python object alive: closing a
 * kernelbay stream destroys its CUstream and bumps the epoch whoever holds the object. (A weak
 * reference was kept here before: under GC at interpreter exit it was found pointing at freed
 * memory on an H100 host, with PyTorch and cuda.core loaded.) */
static int stream_handle(FastLaunch *self, PyObject *stream, void **out) {
    if (self->fs_obj == stream && self->fs_epoch == stream_epoch) {
        *out = self->fs_handle;
        return 0;
    }
    PyObject *t = (PyObject *)Py_TYPE(stream);
    int rc;
    if (t == self->stream_type) {
        rc = own_stream(self, stream, out);
    } else if (t == self->kb_stream_type) {
        PyObject *h = PyObject_GetAttr(stream, s_handle);
        if (h == NULL) return -1;
        rc = (PyObject *)Py_TYPE(h) == self->stream_type ? own_stream(self, h, out) : -1;
        Py_DECREF(h);
    } else if (PyLong_Check(stream) || PyObject_TypeCheck(stream, (PyTypeObject *)self->stream_type) ||
               PyObject_TypeCheck(stream, (PyTypeObject *)self->kb_stream_type)) {
        rc = -1;
    } else {
        rc = foreign_stream(stream, out) ? -1 : 0;
    }
    if (rc) return -1;
    unsigned long long epoch = stream_epoch; /* the GIL is held: no stream closed since the read */
    PyObject *key = PyLong_FromVoidPtr(*out);
    if (key == NULL) return -1;
    Py_INCREF(stream);
    Py_XSETREF(self->fs_obj, stream);
    Py_XSETREF(self->fs_key, key);
    self->fs_handle = *out;
    self->fs_epoch = epoch;
    return 0;
}

static int pack_int(PyObject *o, char kind, char *dst) {
    PyObject *v = PyLong_Check(o) ? (Py_INCREF(o), o) : PyNumber_Index(o);
    if (v == NULL) return -1;
    int rc = 0;
    if (kind == 'B' || kind == 'H' || kind == 'I' || kind == 'Q') {
        unsigned long long u = PyLong_AsUnsignedLongLong(v);
        if (u == (unsigned long long)-1 && PyErr_Occurred()) rc = -1;
        else if (kind == 'B' && u > 0xFFULL) rc = -1;
        else if (kind == 'H' && u > 0xFFFFULL) rc = -1;
        else if (kind == 'I' && u > 0xFFFFFFFFULL) rc = -1;
        else {
            unsigned char b1 = (unsigned char)u; unsigned short b2 = (unsigned short)u; unsigned int b4 = (unsigned int)u;
            if (kind == 'B') memcpy(dst, &b1, 1);
            else if (kind == 'H') memcpy(dst, &b2, 2);
            else if (kind == 'I') memcpy(dst, &b4, 4);
            else memcpy(dst, &u, 8);
        }
    } else if (kind == '8') {
        /* either sign, 8 bytes: [-2**63, 2**64 - 1] */
        int overflow = 0;
        long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
        if (overflow > 0) {
            unsigned long long u = PyLong_AsUnsignedLongLong(v);
            if (u == (unsigned long long)-1 && PyErr_Occurred()) rc = -1;
            else memcpy(dst, &u, 8);
        } else if (overflow < 0 || (x == -1 && PyErr_Occurred())) {
            rc = -1;
        } else {
            memcpy(dst, &x, 8);
        }
    } else {
        int overflow = 0;
        long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
        if (overflow || (x == -1 && PyErr_Occurred())) rc = -1;
        else if (kind == 'b' && (x < -128 || x > 127)) rc = -1;
        else if (kind == 'h' && (x < -32768 || x > 32767)) rc = -1;
        else if (kind == 'i' && (x < -2147483648LL || x > 2147483647LL)) rc = -1;
        else if (kind == '1' && (x < -128 || x > 255)) rc = -1;
        else if (kind == '2' && (x < -32768 || x > 65535)) rc = -1;
        else if (kind == '4' && (x < -2147483648LL || x > 4294967295LL)) rc = -1;
        else {
            signed char b1 = (signed char)x; short b2 = (short)x; int b4 = (int)x;
            if (kind == 'b' || kind == '1') memcpy(dst, &b1, 1);
            else if (kind == 'h' || kind == '2') memcpy(dst, &b2, 2);
            else if (kind == 'i' || kind == '4') memcpy(dst, &b4, 4);
            else memcpy(dst, &x, 8);
        }
    }
    Py_DECREF(v);
    return rc;
}

static PyObject *fl_call(FastLaunch *self, PyObject *const *a, size_t nargsf, PyObject *kwnames) {
    Py_ssize_t n = PyVectorcall_NARGS(nargsf);
    if (n != 5 || (kwnames && PyTuple_GET_SIZE(kwnames))) {
        PyErr_SetString(PyExc_TypeError, "fast launch takes (grid, block, args, shared_mem, stream)");
        return NULL;
    }
    PyObject *grid = a[0], *block = a[1], *args = a[2], *shm = a[3], *stream = a[4];
    long long g[3], b[3], sm;
    if (PyThread_get_thread_ident() != self->tid) return fl_slow(self, a);
    if (dims(grid, self->max_g, g) || as_ll(shm, &sm) || sm < 0) return fl_slow(self, a);
    if (self->fixed_b[0]) { /* a kernel whose block is fixed (Triton's): the caller leaves it out */
        if (block != Py_None) return fl_slow(self, a);
        b[0] = self->fixed_b[0], b[1] = self->fixed_b[1], b[2] = self->fixed_b[2];
    } else if (dims(block, self->max_b, b)) {
        return fl_slow(self, a);
    }
    sm += self->shm_base;
    if (b[0] * b[1] * b[2] > self->max_threads || sm > self->dynamic_shared_limit) return fl_slow(self, a);
    void *sh = NULL;
    if (stream != Py_None && stream_handle(self, stream, &sh)) return fl_slow(self, a);
    PyObject *const *items;
    Py_ssize_t len;
    if (PyTuple_CheckExact(args)) {
        items = &PyTuple_GET_ITEM(args, 0);
        len = PyTuple_GET_SIZE(args);
    } else if (PyList_CheckExact(args)) {
        items = (PyObject *const *)((PyListObject *)args)->ob_item;
        len = PyList_GET_SIZE(args);
    } else {
        return fl_slow(self, a);
    }
    if (len != self->nargs) return fl_slow(self, a);
    /* Stream-ordered memory: note a block used on a stream not ordered with its home (_pool.c). */
    Pool *pool = NULL;
    PyObject *skey = s_zero;
    if (self->pool && pool_may_track((Pool *)self->pool, sh)) {
        pool = (Pool *)self->pool;
        if (stream != Py_None) skey = self->fs_key;
    }
    for (Py_ssize_t i = 0; i < len; i++) {
        PyObject *o = items[i];
        if ((PyObject *)Py_TYPE(o) != PyTuple_GET_ITEM(self->types, i)) return fl_slow(self, a);
        char *dst = self->buf + self->offsets[i];
        char kind = self->kinds[i];
        if (kind == 'P') {
            PyObject *d = PyObject_GetAttr(o, s_device);
            Py_XDECREF(d); /* compared by identity only: another Device object takes the slow path */
            if (d != self->dev) return fl_slow(self, a);
            PyObject *h = PyObject_GetAttr(o, s_handle);
            if (h == NULL || !PyLong_Check(h)) {
                Py_XDECREF(h);
                return fl_slow(self, a);
            }
            unsigned long long p = PyLong_AsUnsignedLongLong(h);
            if (pool && !(p == (unsigned long long)-1 && PyErr_Occurred())) {
                int k = (int)i; /* noted on this stream since the pool last dropped a use: done */
                if (k >= NOTED || self->noted_p[k] != p || self->noted_s[k] != sh || self->noted_gen[k] != pool->uses_gen) {
                    int r = note_use(pool, h, skey);
                    if (r < 0) {
                        Py_DECREF(h);
                        return fl_slow(self, a);
                    }
                    if (r == 1 && k < NOTED) {
                        self->noted_p[k] = p;
                        self->noted_s[k] = sh;
                        self->noted_gen[k] = pool->uses_gen;
                    }
                }
            }
            Py_DECREF(h);
            if (p == (unsigned long long)-1 && PyErr_Occurred()) return fl_slow(self, a);
            memcpy(dst, &p, 8);
        } else if (kind == 'f' || kind == 'd' || kind == 'e') {
            double v = PyFloat_AsDouble(o);
            if (v == -1.0 && PyErr_Occurred()) return fl_slow(self, a);
            if (kind == 'f') {
                if (isfinite(v) && (v > FLT_MAX || v < -FLT_MAX)) return fl_slow(self, a); /* out of range */
                float f = (float)v;
                memcpy(dst, &f, 4);
            } else if (kind == 'e') {
                if (isfinite(v) && (v > 65504.0 || v < -65504.0)) return fl_slow(self, a);
                if (PyFloat_Pack2(v, dst, 1) < 0) return fl_slow(self, a);
            } else {
                memcpy(dst, &v, 8);
            }
        } else if (kind == '?') {
            /* the type is bool or numpy.bool_ (argrules takes nothing else for a bool) */
            int t = PyObject_IsTrue(o);
            if (t < 0) return fl_slow(self, a);
            *dst = (char)t;
        } else if (pack_int(o, kind, dst) < 0) {
            return fl_slow(self, a);
        }
    }
    if (cu_launch == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "fast launch: set_launch() was not called");
        return NULL;
    }
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = cu_launch(self->fn, (unsigned)g[0], (unsigned)g[1], (unsigned)g[2], (unsigned)b[0], (unsigned)b[1],
                   (unsigned)b[2], (unsigned)sm, sh, (void **)self->params, NULL);
    Py_END_ALLOW_THREADS
    PyObject *c0 = self->name, *c1 = grid, *c2 = block;
    Py_INCREF(c0);
    Py_INCREF(c1);
    Py_INCREF(c2);
    PyList_SetItem(self->cell, 0, c0);
    PyList_SetItem(self->cell, 1, c1);
    PyList_SetItem(self->cell, 2, c2);
    if (rc == 0) Py_RETURN_NONE;
    PyObject *rco = PyLong_FromLong(rc);
    if (rco == NULL) return NULL;
    PyObject *call[6] = {rco, grid, block, args, shm, stream};
    PyObject *r = PyObject_Vectorcall(self->failed, call, 6, NULL);
    Py_DECREF(rco);
    return r;
}

static int FastLaunch_init(FastLaunch *self, PyObject *args, PyObject *kw) {
    unsigned long long fn, params, buf;
    unsigned long tid;
    const char *kinds;
    Py_ssize_t nkinds;
    PyObject *offsets, *fixed = Py_None, *pool = Py_None;
    self->shm_base = 0;
    if (!PyArg_ParseTuple(args, "KKKk(LLL)(LLL)LL(OO)LOOs#OOOOOO|OLO", &fn, &params, &buf, &tid, &self->max_g[0],
                          &self->max_g[1], &self->max_g[2], &self->max_b[0], &self->max_b[1], &self->max_b[2],
                          &self->max_threads, &self->dynamic_shared_limit, &self->stream_type, &self->kb_stream_type, &self->index, &self->dev,
                          &self->types, &kinds, &nkinds, &offsets, &self->slow, &self->kernel, &self->failed,
                          &self->cell, &self->name, &fixed, &self->shm_base, &pool))
        return -1;
    Py_CLEAR(self->pool);
    memset(self->noted_p, 0, sizeof self->noted_p); /* a pool of its own: nothing noted there yet */
    if (pool != Py_None) {
        if (Py_TYPE(pool) != &PoolType) {
            PyErr_SetString(PyExc_TypeError, "FastLaunch: pool must be a Pool or None");
            return -1;
        }
        Py_INCREF(pool);
        self->pool = pool;
    }
    self->fixed_b[0] = self->fixed_b[1] = self->fixed_b[2] = 0;
    if (fixed != Py_None && !PyArg_ParseTuple(fixed, "LLL", &self->fixed_b[0], &self->fixed_b[1], &self->fixed_b[2]))
        return -1;
    if (!PyTuple_Check(self->types) || !PyTuple_Check(offsets) || !PyList_Check(self->cell) ||
        PyList_GET_SIZE(self->cell) < 3 || PyTuple_GET_SIZE(self->types) != nkinds ||
        PyTuple_GET_SIZE(offsets) != nkinds || nkinds > 256 || !PyType_Check(self->stream_type) ||
        !PyType_Check(self->kb_stream_type)) {
        PyErr_SetString(PyExc_ValueError, "FastLaunch: inconsistent arguments");
        return -1;
    }
    for (Py_ssize_t i = 0; i < nkinds; i++) {
        if (!strchr("PfdebBhHiIqQ?1248", kinds[i])) {
            PyErr_Format(PyExc_ValueError, "FastLaunch: unknown kind %c", kinds[i]);
            return -1;
        }
        self->kinds[i] = kinds[i];
        self->offsets[i] = PyLong_AsSsize_t(PyTuple_GET_ITEM(offsets, i));
        if (self->offsets[i] < 0) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "FastLaunch: negative offset");
            return -1;
        }
    }
    self->nargs = nkinds;
    self->fn = (void *)(uintptr_t)fn;
    self->params = (void *)(uintptr_t)params;
    self->buf = (char *)(uintptr_t)buf;
    self->tid = tid;
    Py_INCREF(self->stream_type);
    Py_INCREF(self->kb_stream_type);
    Py_CLEAR(self->fs_obj);
    Py_CLEAR(self->fs_key);
    self->fs_handle = NULL;
    self->fs_epoch = 0;
    Py_INCREF(self->dev);
    Py_INCREF(self->types);
    Py_INCREF(self->slow);
    Py_INCREF(self->kernel);
    Py_INCREF(self->failed);
    Py_INCREF(self->cell);
    Py_INCREF(self->name);
    self->vectorcall = (vectorcallfunc)fl_call;
    return 0;
}

static int FastLaunch_traverse(FastLaunch *self, visitproc visit, void *arg) {
    Py_VISIT(self->stream_type);
    Py_VISIT(self->kb_stream_type);
    Py_VISIT(self->fs_obj);
    Py_VISIT(self->fs_key);
    Py_VISIT(self->pool);
    Py_VISIT(self->dev);
    Py_VISIT(self->types);
    Py_VISIT(self->slow);
    Py_VISIT(self->kernel);
    Py_VISIT(self->failed);
    Py_VISIT(self->cell);
    Py_VISIT(self->name);
    return 0;
}

static int FastLaunch_clear(FastLaunch *self) {
    Py_CLEAR(self->stream_type);
    Py_CLEAR(self->kb_stream_type);
    Py_CLEAR(self->fs_obj);
    Py_CLEAR(self->fs_key);
    Py_CLEAR(self->pool);
    Py_CLEAR(self->dev);
    Py_CLEAR(self->types);
    Py_CLEAR(self->slow);
    Py_CLEAR(self->kernel);
    Py_CLEAR(self->failed);
    Py_CLEAR(self->cell);
    Py_CLEAR(self->name);
    return 0;
}

static void FastLaunch_dealloc(FastLaunch *self) {
    PyObject_GC_UnTrack(self);
    FastLaunch_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMemberDef FastLaunch_members[] = {
    {"dynamic_shared_limit", T_LONGLONG, offsetof(FastLaunch, dynamic_shared_limit), 0,
     "dynamic shared memory the fast path allows"},
    {NULL, 0, 0, 0, NULL},
};

static PyTypeObject FastLaunchType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "_kbcuda_native.FastLaunch",
    .tp_basicsize = sizeof(FastLaunch),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "A kernel's launch fast path (see launcher.make_fast).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)FastLaunch_init,
    .tp_dealloc = (destructor)FastLaunch_dealloc,
    .tp_traverse = (traverseproc)FastLaunch_traverse,
    .tp_clear = (inquiry)FastLaunch_clear,
    .tp_call = PyVectorcall_Call,
    .tp_vectorcall_offset = offsetof(FastLaunch, vectorcall),
    .tp_members = FastLaunch_members,
};

static PyMethodDef module_methods[] = {
    {"set_launch", (PyCFunction)set_launch, METH_O, NULL},
    {"launch", (PyCFunction)(void (*)(void))launch, METH_FASTCALL, NULL},
    {"graph_launch", (PyCFunction)(void (*)(void))graph_launch, METH_FASTCALL, NULL},
    {"stream_closed", (PyCFunction)stream_closed, METH_NOARGS, "a backend stream handle gave its CUstream up"},
    {"after_fork", (PyCFunction)ge_after_fork, METH_NOARGS, "in a fork()ed child: no GraphEntry replays in C"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "_kbcuda_native", "kernelbay-cuda native helpers", -1, module_methods,
};

static int timer_add_type(PyObject *m); /* _timer.c, joined after this file */
static int stage_add_functions(PyObject *m); /* _stage.c, joined last */

PyMODINIT_FUNC PyInit__kbcuda_native(void) {
    if (PyType_Ready(&FastLaunchType) < 0) return NULL;
    s_zero = PyLong_FromLong(0);
    s_handle = PyUnicode_InternFromString("handle");
    s_device = PyUnicode_InternFromString("device");
    s_index = PyUnicode_InternFromString("index");
    s_cuda_stream_proto = PyUnicode_InternFromString("__cuda_stream__");
    s_cuda_stream = PyUnicode_InternFromString("cuda_stream");
    if (!s_zero || !s_handle || !s_device || !s_index || !s_cuda_stream_proto || !s_cuda_stream) return NULL;
    PyObject *m = PyModule_Create(&module_def);
    if (m == NULL) return NULL;
    if (pool_add_type(m) < 0 || timer_add_type(m) < 0 || stage_add_functions(m) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    Py_INCREF(&FastLaunchType);
    if (PyModule_AddObject(m, "FastLaunch", (PyObject *)&FastLaunchType) < 0) {
        Py_DECREF(&FastLaunchType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
