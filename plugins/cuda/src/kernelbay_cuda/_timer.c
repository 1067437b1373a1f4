/* kernelbay-cuda's native helpers, part three: the tracer's CUDA-event timer (timing.py).
 *
 * Timer(slow, cuda_stream_type, core_stream_type) keeps, per device, a stack of free CUDA
 * events (created 64 at a time) and, for the whole process, a table of every event it made;
 * a mark is an index into that table (a small int, no object kept by the tracer).
 *
 *   mark(device, stream)   records a free event of the device on the stream and returns its
 *                          mark. The stream: None -> the default stream (0); a backend
 *                          stream handle -> .handle; a kernelbay.Stream -> .handle.handle.
 *                          Anything it cannot do here (first use of a device, another context
 *                          current, any other stream object) it hands to slow(device, stream),
 *                          which does it in Python and calls record().
 *   record(index, stream)  the same, for device `index` and a stream handle (an int), with the
 *                          device's context current (the caller made it so). None on failure.
 *   resolve(starts, ends, host_t0s) -> (begins, ends): the device spans of a batch of mark
 *                          pairs in perf_counter_ns units, None where unknown; waits for each
 *                          end event (cuEventQuery first, cuEventSynchronize without the GIL
 *                          where not done) and gives every mark back to its device's stack.
 *   add_device(index, reference_event, host_ns), set_driver(addresses...): set-up, from Python.
 *
 * Times: a device's reference event was recorded at host time host_ns (timing.py measures
 * that); the first start mark of a batch on each device is placed through it, every other mark
 * of the batch through that first one, so the float milliseconds cuEventElapsedTime gives stay
 * small (precise) within a batch. A span is clamped to begin no earlier than its host call.
 *
 * Every function runs with the GIL held except around cuEventSynchronize; marks are given back
 * only at the end of resolve(), so no event it is reading is recorded again meanwhile.
 * Driver errors never raise from mark/record (tracing never fails a launch): they give None.
 */
#include <Python.h>
#include <math.h>
#include <stdint.h>

typedef int (*tm_create_t)(void **event, unsigned flags);
typedef int (*tm_record_t)(void *event, void *stream);
typedef int (*tm_query_t)(void *event);
typedef int (*tm_sync_t)(void *event);
typedef int (*tm_elapsed_t)(float *ms, void *start, void *end);
typedef int (*tm_ctx_get_t)(void **ctx);

#define TM_DEVICES 64
#define TM_BATCH 64
#define TM_NOT_READY 600 /* CUDA_ERROR_NOT_READY */

typedef struct {
    void *ev;
    int dev;
} tm_event;

typedef struct {
    void *ctx; /* the context current when add_device() was called; NULL: not set up */
    void *ref; /* the reference event (completed) */
    long long ref_ns;
    Py_ssize_t *free;
    Py_ssize_t nfree, capfree;
} tm_device;

typedef struct {
    PyObject_HEAD
    tm_create_t create;
    tm_record_t record;
    tm_query_t query;
    tm_sync_t sync;
    tm_elapsed_t elapsed;
    tm_ctx_get_t ctx_get;
    PyObject *slow, *cuda_stream_type, *core_stream_type;
    PyObject *last_dev; /* the device object of the last mark (a strong reference) */
    int last_index;
    tm_event *events;
    Py_ssize_t nevents, capevents;
    tm_device devs[TM_DEVICES];
} Timer;

static PyObject *tm_s_index, *tm_s_handle;

static int tm_ptr(PyObject *o, void **out) {
    if (o == Py_None) {
        *out = NULL;
        return 0;
    }
    unsigned long long v = PyLong_AsUnsignedLongLong(o);
    if (v == (unsigned long long)-1 && PyErr_Occurred()) return -1;
    *out = (void *)(uintptr_t)v;
    return 0;
}

/* Make TM_BATCH more events for device `index` (its context current). 0: at least one made. */
static int tm_refill(Timer *self, int index) {
    tm_device *d = &self->devs[index];
    if (self->nevents + TM_BATCH > self->capevents) {
        Py_ssize_t cap = self->capevents ? self->capevents * 2 : 256;
        tm_event *e = PyMem_Realloc(self->events, cap * sizeof(tm_event));
        if (e == NULL) return -1;
        self->events = e;
        self->capevents = cap;
    }
    if (d->nfree + TM_BATCH > d->capfree) {
        Py_ssize_t cap = d->capfree ? d->capfree * 2 : 256;
        Py_ssize_t *f = PyMem_Realloc(d->free, cap * sizeof(Py_ssize_t));
        if (f == NULL) return -1;
        d->free = f;
        d->capfree = cap;
    }
    int made = 0;
    for (int i = 0; i < TM_BATCH; i++) {
        void *ev = NULL;
        if (self->create(&ev, 0) != 0) break; /* default flags: timing on, spin-wait sync */
        self->events[self->nevents].ev = ev;
        self->events[self->nevents].dev = index;
        d->free[d->nfree++] = self->nevents++;
        made++;
    }
    return made ? 0 : -1;
}

/* A free event of device `index` recorded on `stream`: its mark, or None. */
static PyObject *tm_record_on(Timer *self, int index, void *stream) {
    tm_device *d = &self->devs[index];
    if (d->nfree == 0 && tm_refill(self, index) < 0) {
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    Py_ssize_t id = d->free[--d->nfree];
    if (self->record(self->events[id].ev, stream) != 0) {
        d->free[d->nfree++] = id;
        Py_RETURN_NONE;
    }
    return PyLong_FromSsize_t(id);
}

/* The CUstream of a backend stream handle or kernelbay.Stream. 0: ok; -1: not one of those. */
static int tm_stream(Timer *self, PyObject *stream, void **out) {
    PyObject *h;
    if (Py_TYPE(stream) == (PyTypeObject *)self->core_stream_type) {
        PyObject *inner = PyObject_GetAttr(stream, tm_s_handle);
        if (inner == NULL) return -1;
        if (Py_TYPE(inner) != (PyTypeObject *)self->cuda_stream_type) {
            Py_DECREF(inner);
            return -1;
        }
        h = PyObject_GetAttr(inner, tm_s_handle);
        Py_DECREF(inner);
    } else if (Py_TYPE(stream) == (PyTypeObject *)self->cuda_stream_type) {
        h = PyObject_GetAttr(stream, tm_s_handle);
    } else {
        return -1;
    }
    if (h == NULL) return -1;
    int rc = PyLong_CheckExact(h) ? tm_ptr(h, out) : -1;
    Py_DECREF(h);
    return rc;
}

static PyObject *Timer_mark(Timer *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_Format(PyExc_TypeError, "mark() takes (device, stream), got %zd arguments", nargs);
        return NULL;
    }
    PyObject *device = args[0], *stream = args[1];
    int index;
    if (self->record == NULL) goto slow;
    if (device == self->last_dev) {
        index = self->last_index;
    } else {
        PyObject *o = PyObject_GetAttr(device, tm_s_index);
        if (o == NULL) goto slow;
        long v = PyLong_AsLong(o);
        Py_DECREF(o);
        if (v < 0 || v >= TM_DEVICES || self->devs[v].ctx == NULL) goto slow;
        index = (int)v;
        Py_INCREF(device);
        Py_XSETREF(self->last_dev, device);
        self->last_index = index;
    }
    void *cur = NULL;
    if (self->ctx_get(&cur) != 0 || cur != self->devs[index].ctx) goto slow;
    void *h = NULL;
    if (stream != Py_None && tm_stream(self, stream, &h) < 0) goto slow;
    return tm_record_on(self, index, h);
slow:
    PyErr_Clear();
    return PyObject_Vectorcall(self->slow, args, 2, NULL);
}

static PyObject *Timer_record(Timer *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_Format(PyExc_TypeError, "record() takes (index, stream handle), got %zd arguments", nargs);
        return NULL;
    }
    long index = PyLong_AsLong(args[0]);
    if (index == -1 && PyErr_Occurred()) return NULL;
    void *h;
    if (tm_ptr(args[1], &h) < 0) return NULL;
    if (index < 0 || index >= TM_DEVICES || self->devs[index].ctx == NULL || self->record == NULL) {
        PyErr_Format(PyExc_ValueError, "record(): device %ld was not set up with add_device()", index);
        return NULL;
    }
    return tm_record_on(self, (int)index, h);
}

/* A device span as the two ints resolve() returns: begin clamped to the host clock at the
 * call's start (t0, an int, or None for no clamp), end to begin. 0: *s0 and *s1 are new
 * references; -1: an exception is set. Shared with _cupti.c's resolve (joined after this). */
static int tm_span(PyObject *t0, long long begin, long long end, PyObject **s0, PyObject **s1) {
    if (PyLong_Check(t0)) {
        long long host = PyLong_AsLongLong(t0);
        if (host == -1 && PyErr_Occurred()) return -1;
        if (begin < host) begin = host;
    }
    if (end < begin) end = begin;
    *s0 = PyLong_FromLongLong(begin);
    *s1 = *s0 ? PyLong_FromLongLong(end) : NULL;
    if (*s1 == NULL) {
        Py_CLEAR(*s0);
        return -1;
    }
    return 0;
}

/* A mark (an int or None) as an event index: -1 for None; -2 (exception set) for a bad one. */
static Py_ssize_t tm_mark_id(Timer *self, PyObject *m) {
    if (m == Py_None) return -1;
    Py_ssize_t id = PyLong_AsSsize_t(m);
    if (id == -1 && PyErr_Occurred()) return -2;
    if (id < 0 || id >= self->nevents) {
        PyErr_Format(PyExc_ValueError, "resolve(): %zd is not a mark of this timer", id);
        return -2;
    }
    return id;
}

/* A resolve()'s arguments (starts, ends, host_t0s): three sequences of one length, as fast
 * sequences, and the two lists it fills (begins, ends). Returns their length, or -1 with an
 * exception set; what was made is in the pointers either way (the caller releases them).
 * Shared with _cupti.c's resolve (joined after this file). */
static Py_ssize_t tm_batch(const char *fn, PyObject *const *args, Py_ssize_t nargs, PyObject **starts,
                           PyObject **ends, PyObject **t0s, PyObject **b, PyObject **e) {
    if (nargs != 3) {
        PyErr_Format(PyExc_TypeError, "%s() takes (starts, ends, host_t0s), got %zd arguments", fn, nargs);
        return -1;
    }
    *starts = PySequence_Fast(args[0], "resolve(): starts must be a sequence");
    *ends = *starts ? PySequence_Fast(args[1], "resolve(): ends must be a sequence") : NULL;
    *t0s = *ends ? PySequence_Fast(args[2], "resolve(): host_t0s must be a sequence") : NULL;
    if (*t0s == NULL) return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(*starts);
    if (PySequence_Fast_GET_SIZE(*ends) != n || PySequence_Fast_GET_SIZE(*t0s) != n) {
        PyErr_Format(PyExc_ValueError, "%s(): starts, ends and host_t0s differ in length", fn);
        return -1;
    }
    *b = PyList_New(n);
    *e = *b ? PyList_New(n) : NULL;
    return *e ? n : -1;
}

static PyObject *Timer_resolve(Timer *self, PyObject *const *args, Py_ssize_t nargs) {
    PyObject *starts = NULL, *ends = NULL, *t0s = NULL, *b = NULL, *e = NULL, *out = NULL;
    Py_ssize_t *ids = NULL, nids = 0;
    Py_ssize_t n = tm_batch("resolve", args, nargs, &starts, &ends, &t0s, &b, &e);
    if (n < 0) goto done;
    ids = PyMem_Malloc((2 * n + 1) * sizeof(Py_ssize_t));
    if (ids == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    /* Per device: the batch's anchor (its first start mark with a known time) and that time. */
    Py_ssize_t anchor[TM_DEVICES];
    long long anchor_ns[TM_DEVICES];
    for (int i = 0; i < TM_DEVICES; i++) anchor[i] = -1;
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_ssize_t a = tm_mark_id(self, PySequence_Fast_GET_ITEM(starts, i));
        Py_ssize_t z = a == -2 ? -2 : tm_mark_id(self, PySequence_Fast_GET_ITEM(ends, i));
        if (a == -2 || z == -2) goto done;
        if (a >= 0) ids[nids++] = a;
        if (z >= 0) ids[nids++] = z;
        PyObject *s0 = Py_None, *s1 = Py_None;
        int dev = a >= 0 ? self->events[a].dev : -1;
        if (a >= 0 && z >= 0 && self->events[z].dev == dev && self->devs[dev].ref != NULL) {
            void *ev_end = self->events[z].ev;
            int rc = self->query(ev_end);
            if (rc == TM_NOT_READY) {
                Py_BEGIN_ALLOW_THREADS
                rc = self->sync(ev_end);
                Py_END_ALLOW_THREADS
            }
            void *ev_a = self->events[a].ev, *ev_z = self->events[z].ev; /* the table may have moved */
            float ms0 = 0.0f, ms1 = 0.0f;
            if (rc == 0 && anchor[dev] < 0) {
                if (self->elapsed(&ms0, self->devs[dev].ref, ev_a) == 0) {
                    anchor[dev] = a;
                    anchor_ns[dev] = self->devs[dev].ref_ns + llround((double)ms0 * 1e6);
                } else {
                    rc = -1;
                }
            }
            if (rc == 0 && (self->elapsed(&ms0, self->events[anchor[dev]].ev, ev_a) != 0 ||
                            self->elapsed(&ms1, ev_a, ev_z) != 0))
                rc = -1;
            if (rc == 0) {
                long long begin = anchor_ns[dev] + llround((double)ms0 * 1e6);
                long long end = begin + llround((double)ms1 * 1e6);
                if (tm_span(PySequence_Fast_GET_ITEM(t0s, i), begin, end, &s0, &s1) < 0) goto done;
            }
        }
        if (s0 == Py_None) {
            Py_INCREF(Py_None);
            Py_INCREF(Py_None);
        }
        PyList_SET_ITEM(b, i, s0);
        PyList_SET_ITEM(e, i, s1);
    }
    out = PyTuple_Pack(2, b, e);
done:
    /* Every mark seen goes back to its device's stack, also after an error. */
    for (Py_ssize_t i = 0; i < nids; i++) {
        tm_device *d = &self->devs[self->events[ids[i]].dev];
        if (d->nfree < d->capfree) d->free[d->nfree++] = ids[i];
    }
    PyMem_Free(ids);
    Py_XDECREF(starts);
    Py_XDECREF(ends);
    Py_XDECREF(t0s);
    Py_XDECREF(b);
    Py_XDECREF(e);
    return out;
}

static PyObject *Timer_add_device(Timer *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3) {
        PyErr_Format(PyExc_TypeError, "add_device() takes (index, reference event, host ns), got %zd", nargs);
        return NULL;
    }
    long index = PyLong_AsLong(args[0]);
    if (index == -1 && PyErr_Occurred()) return NULL;
    if (index < 0 || index >= TM_DEVICES) {
        PyErr_Format(PyExc_ValueError, "add_device(): device index %ld is not in [0, %d)", index, TM_DEVICES);
        return NULL;
    }
    void *ref;
    if (tm_ptr(args[1], &ref) < 0) return NULL;
    long long ns = PyLong_AsLongLong(args[2]);
    if (ns == -1 && PyErr_Occurred()) return NULL;
    if (self->ctx_get == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "add_device(): set_driver() was not called");
        return NULL;
    }
    void *ctx = NULL;
    if (self->ctx_get(&ctx) != 0 || ctx == NULL) {
        PyErr_Format(PyExc_RuntimeError, "add_device(): no CUDA context is current for device %ld", index);
        return NULL;
    }
    self->devs[index].ref = ref;
    self->devs[index].ref_ns = ns;
    self->devs[index].ctx = ctx;
    Py_RETURN_NONE;
}

/* set_driver(cuEventCreate, cuEventRecord, cuEventQuery, cuEventSynchronize,
 *            cuEventElapsedTime, cuCtxGetCurrent): the functions' addresses. */
static PyObject *Timer_set_driver(Timer *self, PyObject *const *args, Py_ssize_t nargs) {
    void *p[6];
    if (nargs != 6) {
        PyErr_Format(PyExc_TypeError, "set_driver() takes 6 addresses, got %zd", nargs);
        return NULL;
    }
    for (int i = 0; i < 6; i++) {
        if (tm_ptr(args[i], &p[i]) < 0) return NULL;
        if (p[i] == NULL) {
            PyErr_Format(PyExc_ValueError, "set_driver(): address %d is null", i);
            return NULL;
        }
    }
    self->create = (tm_create_t)p[0];
    self->query = (tm_query_t)p[2];
    self->sync = (tm_sync_t)p[3];
    self->elapsed = (tm_elapsed_t)p[4];
    self->ctx_get = (tm_ctx_get_t)p[5];
    self->record = (tm_record_t)p[1]; /* last: mark() takes the fast path once this is set */
    Py_RETURN_NONE;
}

static PyObject *Timer_free_events(Timer *self, PyObject *arg) {
    long index = PyLong_AsLong(arg);
    if (index == -1 && PyErr_Occurred()) return NULL;
    if (index < 0 || index >= TM_DEVICES) return PyLong_FromLong(0);
    return PyLong_FromSsize_t(self->devs[index].nfree);
}

static int Timer_init(Timer *self, PyObject *args, PyObject *kwds) {
    PyObject *slow, *cuda_type, *core_type;
    if (!PyArg_ParseTuple(args, "OOO:Timer", &slow, &cuda_type, &core_type)) return -1;
    if (!PyCallable_Check(slow) || !PyType_Check(cuda_type) || !PyType_Check(core_type)) {
        PyErr_SetString(PyExc_TypeError, "Timer(slow, cuda_stream_type, core_stream_type): a callable and two types");
        return -1;
    }
    Py_INCREF(slow);
    Py_INCREF(cuda_type);
    Py_INCREF(core_type);
    Py_XSETREF(self->slow, slow);
    Py_XSETREF(self->cuda_stream_type, cuda_type);
    Py_XSETREF(self->core_stream_type, core_type);
    return 0;
}

static int Timer_traverse(Timer *self, visitproc visit, void *arg) {
    Py_VISIT(self->slow);
    Py_VISIT(self->cuda_stream_type);
    Py_VISIT(self->core_stream_type);
    Py_VISIT(self->last_dev);
    return 0;
}

static int Timer_clear(Timer *self) {
    Py_CLEAR(self->slow);
    Py_CLEAR(self->cuda_stream_type);
    Py_CLEAR(self->core_stream_type);
    Py_CLEAR(self->last_dev);
    return 0;
}

static void Timer_dealloc(Timer *self) {
    PyObject_GC_UnTrack(self);
    Timer_clear(self);
    /* The events themselves stay: the driver frees them with the context. */
    for (int i = 0; i < TM_DEVICES; i++) PyMem_Free(self->devs[i].free);
    PyMem_Free(self->events);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMethodDef Timer_methods[] = {
    {"mark", (PyCFunction)(void (*)(void))Timer_mark, METH_FASTCALL, "mark(device, stream) -> mark or None"},
    {"record", (PyCFunction)(void (*)(void))Timer_record, METH_FASTCALL, "record(index, stream handle) -> mark or None"},
    {"resolve", (PyCFunction)(void (*)(void))Timer_resolve, METH_FASTCALL,
     "resolve(starts, ends, host_t0s) -> (begins, ends)"},
    {"add_device", (PyCFunction)(void (*)(void))Timer_add_device, METH_FASTCALL,
     "add_device(index, reference event, host ns)"},
    {"set_driver", (PyCFunction)(void (*)(void))Timer_set_driver, METH_FASTCALL, "set_driver(6 addresses)"},
    {"free_events", (PyCFunction)Timer_free_events, METH_O, "free_events(index) -> events ready to record"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject TimerType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "kernelbay_cuda._kbcuda_native.Timer",
    .tp_basicsize = sizeof(Timer),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "The tracer's CUDA-event timer (see timing.py).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Timer_init,
    .tp_dealloc = (destructor)Timer_dealloc,
    .tp_traverse = (traverseproc)Timer_traverse,
    .tp_clear = (inquiry)Timer_clear,
    .tp_methods = Timer_methods,
};

/* Adds Timer to the module: called by _native.c's init. A module built at first use from the
 * joined sources has _launch.c's init, which does not call it (timing.py then runs its Python
 * timer), hence "maybe unused". */
static int cupti_add_functions(PyObject *m); /* _cupti.c, joined after this file */

#if defined(__GNUC__)
__attribute__((unused))
#endif
static int timer_add_type(PyObject *m) {
    if (PyType_Ready(&TimerType) < 0) return -1;
    tm_s_index = PyUnicode_InternFromString("index");
    tm_s_handle = PyUnicode_InternFromString("handle");
    if (tm_s_index == NULL || tm_s_handle == NULL) return -1;
    Py_INCREF(&TimerType);
    if (PyModule_AddObject(m, "Timer", (PyObject *)&TimerType) < 0) {
        Py_DECREF(&TimerType);
        return -1;
    }
    return cupti_add_functions(m);
}
