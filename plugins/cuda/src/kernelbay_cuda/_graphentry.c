/* kernelbay-cuda's native helpers, part two (continued): GraphEntry, the checks that let a CUDA
 * graph's replay on the default stream run in C (graphs.py arms it; Direct's graph replay, in
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

/* ---- GraphEntry: a CUDA graph's replay on the default stream without a Python frame ----
 *
 * GraphEntry(cuGraphLaunch address, exec, allocator module dict, failed) belongs to one
 * graphs.CudaGraph (its `entry`). graphs.graph_replay, the Python hook, arms it after a replay on
 * the default stream from this thread (the graph's context current, its buffers' use on that
 * stream noted): arm(closed_streams). Armed, Direct's graph replay (kind 3) launches the graph
 * here while the thread, the process (no fork since) and allocator.closed_streams (a stream
 * closed since: its notes are re-made) are what they were; anything else runs the hook. A
 * non-zero CUresult calls failed(rc), which raises the hook's error. */
typedef int (*ge_graph_launch_t)(void *, void *);

static unsigned long long ge_fork_epoch = 1;

static PyObject *ge_after_fork(PyObject *mod, PyObject *unused) {
    (void)mod, (void)unused;
    ge_fork_epoch++;
    Py_RETURN_NONE;
}

typedef struct {
    PyObject_HEAD
    void *fn;
    void *exec;
    PyObject *alloc; /* the allocator module's dict: "closed_streams" */
    PyObject *failed;
    PyObject *armed; /* closed_streams when armed, or NULL */
    unsigned long tid;
    unsigned long long fork_epoch;
} GraphEntry;

static PyObject *ge_closed_streams;

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
    Py_CLEAR(self->armed);
    return 0;
}

static void GraphEntry_dealloc(GraphEntry *self) {
    Py_XDECREF(self->alloc);
    Py_XDECREF(self->failed);
    Py_XDECREF(self->armed);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *GraphEntry_arm(GraphEntry *self, PyObject *closed) {
    Py_INCREF(closed);
    Py_XSETREF(self->armed, closed);
    self->tid = PyThread_get_thread_ident();
    self->fork_epoch = ge_fork_epoch;
    Py_RETURN_NONE;
}

static PyObject *GraphEntry_disarm(GraphEntry *self, PyObject *unused) {
    (void)unused;
    Py_CLEAR(self->armed);
    Py_RETURN_NONE;
}

static PyObject *GraphEntry_get_armed(GraphEntry *self, void *c) {
    (void)c;
    return PyBool_FromLong(self->armed != NULL);
}

/* 1: launched (or failed(rc) raised: -1 with the exception set); 0: not armed for this call, the
 * hook must run. */
static int graph_entry_replay(GraphEntry *self) {
    if (self->armed == NULL || self->exec == NULL || self->fork_epoch != ge_fork_epoch ||
        PyThread_get_thread_ident() != self->tid)
        return 0;
    PyObject *now = PyDict_GetItemWithError(self->alloc, ge_closed_streams); /* borrowed */
    if (now == NULL) {
        PyErr_Clear();
        return 0;
    }
    int same = PyObject_RichCompareBool(now, self->armed, Py_EQ);
    if (same != 1) {
        if (same < 0) PyErr_Clear();
        return 0;
    }
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = ((ge_graph_launch_t)self->fn)(self->exec, NULL);
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
    {"disarm", (PyCFunction)GraphEntry_disarm, METH_NOARGS, "the next replay runs the Python hook"},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef GraphEntry_getset[] = {
    {"armed", (getter)GraphEntry_get_armed, NULL, "whether a default-stream replay runs in C", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject GraphEntryType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "_kbcuda_native.GraphEntry",
    .tp_basicsize = sizeof(GraphEntry),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A CUDA graph's default-stream replay in C, armed by the Python hook.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)GraphEntry_init,
    .tp_dealloc = (destructor)GraphEntry_dealloc,
    .tp_methods = GraphEntry_methods,
    .tp_getset = GraphEntry_getset,
};
