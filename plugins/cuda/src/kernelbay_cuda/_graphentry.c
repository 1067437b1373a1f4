/* kernelbay-cuda's native helpers, part two (continued): GraphEntry, the checks that let a CUDA
 * graph's replay on the default stream or a kb.Stream run in C (graphs.py arms it; Direct's graph replay, in
 * _direct.c, calls graph_entry_replay()).
 *
 * Joined after _pool.c (it uses nothing of the pool) and before _direct.c, in the one
 * translation unit native.py and _native.c make of the sources; its type is readied and added
 * to the module by pool_add_type() at the end of _direct.c. Runs with the GIL held, except
 * around cuGraphLaunch.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include "pythread.h"

/* ---- GraphEntry: a CUDA graph's replay on the default stream or a kb.Stream without a Python
 * frame ----
 *
 * GraphEntry(cuGraphLaunch address, exec, allocator module dict, failed) belongs to one
 * graphs.CudaGraph (its `entry`). graphs.graph_replay, the Python hook, arms it after a replay
 * from this thread (the graph's context current, its buffers' use on that stream noted): on the
 * default stream, arm(closed_streams); on a kb.Stream, arm_stream(closed_streams, stream, its
 * CUstream) -- the last such stream only, held (a strong reference: it cannot die and another
 * object take its address; closing it bumps closed_streams). Armed, Direct's graph replay (kind
 * 3) launches the graph here for that stream (None, or that very object) while the thread, the
 * process (no fork since) and allocator.closed_streams (a stream closed since: its notes are
 * re-made) are what they were; anything else runs the hook. A non-zero CUresult calls
 * failed(rc), which raises the hook's error. */
typedef int (*ge_graph_launch_t)(void *, void *);

static unsigned long long ge_fork_epoch = 1;

static PyObject *ge_after_fork(PyObject *mod, PyObject *unused) {
    (void)mod, (void)unused;
    ge_fork_epoch++;
    Py_RETURN_NONE;
}

typedef struct {
    PyObject *armed;  /* closed_streams when armed, or NULL */
    PyObject *stream; /* the kb.Stream armed (a strong reference), or NULL: the default stream */
    void *handle;     /* its CUstream (NULL: the legacy default stream) */
    unsigned long tid;
    unsigned long long fork_epoch;
} GraphArm;

typedef struct {
    PyObject_HEAD
    void *fn;
    void *exec;
    PyObject *alloc; /* the allocator module's dict: "closed_streams" */
    PyObject *failed;
    GraphArm on[2];  /* [0]: the default stream; [1]: the last kb.Stream */
} GraphEntry;

static PyObject *ge_closed_streams;

static void ge_clear(GraphArm *a) {
    Py_CLEAR(a->armed);
    Py_CLEAR(a->stream);
    a->handle = NULL;
}

static int GraphEntry_init(GraphEntry *self, PyObject *args, PyObject *kw) {
    unsigned long long fn, exec;
    PyObject *alloc, *failed;
    if (!PyArg_ParseTuple(args, "KKO!O", &fn, &exec, &PyDict_Type, &alloc, &failed)) return -1;
    if (!ge_closed_streams && !(ge_closed_streams = PyUnicode_InternFromString("closed_streams"))) return -1;
    self->fn = (void *)(uintptr_t)fn;
    self->exec = (void *)(uintptr_t)exec;
    Py_INCREF(alloc);
    Py_XSETREF(self->alloc, alloc);
    Py_INCREF(failed);
    Py_XSETREF(self->failed, failed);
    ge_clear(&self->on[0]);
    ge_clear(&self->on[1]);
    return 0;
}

static void GraphEntry_dealloc(GraphEntry *self) {
    Py_XDECREF(self->alloc);
    Py_XDECREF(self->failed);
    ge_clear(&self->on[0]);
    ge_clear(&self->on[1]);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static void ge_arm(GraphArm *a, PyObject *closed, PyObject *stream, void *handle) {
    Py_INCREF(closed);
    Py_XSETREF(a->armed, closed);
    Py_XINCREF(stream);
    Py_XSETREF(a->stream, stream);
    a->handle = handle;
    a->tid = PyThread_get_thread_ident();
    a->fork_epoch = ge_fork_epoch;
}

static PyObject *GraphEntry_arm(GraphEntry *self, PyObject *closed) {
    ge_arm(&self->on[0], closed, NULL, NULL);
    Py_RETURN_NONE;
}

static PyObject *GraphEntry_arm_stream(GraphEntry *self, PyObject *args) {
    PyObject *closed, *stream;
    unsigned long long handle;
    if (!PyArg_ParseTuple(args, "OOK", &closed, &stream, &handle)) return NULL;
    if (stream == Py_None || handle == 0) {
        PyErr_SetString(PyExc_ValueError, "arm_stream: a stream and its CUstream (use arm() for the default stream)");
        return NULL;
    }
    ge_arm(&self->on[1], closed, stream, (void *)(uintptr_t)handle);
    Py_RETURN_NONE;
}

static PyObject *GraphEntry_disarm(GraphEntry *self, PyObject *unused) {
    (void)unused;
    ge_clear(&self->on[0]);
    ge_clear(&self->on[1]);
    Py_RETURN_NONE;
}

static PyObject *GraphEntry_get_armed(GraphEntry *self, void *c) {
    (void)c;
    return PyBool_FromLong(self->on[0].armed != NULL);
}

static PyObject *GraphEntry_get_armed_stream(GraphEntry *self, void *c) {
    (void)c;
    PyObject *s = self->on[1].armed != NULL && self->on[1].stream != NULL ? self->on[1].stream : Py_None;
    Py_INCREF(s);
    return s;
}

/* Replay on `stream` (None: the default stream; else the object the hook would get). 1: launched
 * (or failed(rc) raised: -1 with the exception set); 0: not armed for this call, the hook must
 * run. */
static int graph_entry_replay(GraphEntry *self, PyObject *stream) {
    GraphArm *a = &self->on[stream == Py_None ? 0 : 1];
    if (a->armed == NULL || self->exec == NULL || a->fork_epoch != ge_fork_epoch ||
        (stream != Py_None && stream != a->stream) || PyThread_get_thread_ident() != a->tid)
        return 0;
    PyObject *now = PyDict_GetItemWithError(self->alloc, ge_closed_streams); /* borrowed */
    if (now == NULL) {
        PyErr_Clear();
        return 0;
    }
    int same = PyObject_RichCompareBool(now, a->armed, Py_EQ);
    if (same != 1) {
        if (same < 0) PyErr_Clear();
        return 0;
    }
    int rc;
    void *handle = a->handle;
    Py_BEGIN_ALLOW_THREADS
    rc = ((ge_graph_launch_t)self->fn)(self->exec, handle);
    Py_END_ALLOW_THREADS
    if (rc == 0) return 1;
    PyObject *rco = PyLong_FromLong(rc);
    if (rco == NULL) return -1;
    PyObject *r = PyObject_CallOneArg(self->failed, rco);
    Py_DECREF(rco);
    if (r == NULL) return -1;
    Py_DECREF(r);
    return 1;
}

static PyMethodDef GraphEntry_methods[] = {
    {"arm", (PyCFunction)GraphEntry_arm, METH_O, "arm(closed_streams): replays on the default stream from this thread run here"},
    {"arm_stream", (PyCFunction)GraphEntry_arm_stream, METH_VARARGS,
     "arm_stream(closed_streams, stream, cu_stream): replays on that kb.Stream from this thread run here"},
    {"disarm", (PyCFunction)GraphEntry_disarm, METH_NOARGS, "the next replay runs the Python hook"},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef GraphEntry_getset[] = {
    {"armed", (getter)GraphEntry_get_armed, NULL, "whether a default-stream replay runs in C", NULL},
    {"armed_stream", (getter)GraphEntry_get_armed_stream, NULL, "the kb.Stream whose replays run in C, or None", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject GraphEntryType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "_kbcuda_native.GraphEntry",
    .tp_basicsize = sizeof(GraphEntry),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A CUDA graph's replay on the default stream or a kb.Stream in C, armed by the Python hook.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)GraphEntry_init,
    .tp_dealloc = (destructor)GraphEntry_dealloc,
    .tp_methods = GraphEntry_methods,
    .tp_getset = GraphEntry_getset,
};
