/* kernelbay-cuda's native helpers, part two: the allocator's cached-block pool.
 *
 * Built with _launch.c into one extension (native.py joins the two sources, this one first):
 * pool_add_type() is what _launch.c's module init calls. Runs with the GIL held and calls no
 * Python code, so each method is atomic with respect to other Python threads.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

/* ---- the pool of one device's allocator --------------------------------------------------
 *
 * free_lists: {size class: [pointer, ...]} of cached blocks; live: {pointer: size class} of
 * blocks handed out. Requests of at most 8 bytes and cache misses return 0: the Python
 * allocator serves those (under its lock) and registers new blocks with adopt(). */

#define SMALL 8
#define PAGE (16 * 1024)

typedef struct {
    PyObject_HEAD
    PyObject *free_lists;
    PyObject *live;
    long long active, peak, cached, limit; /* limit < 0: none */
} Pool;

static long long size_class(long long n) {
    if (n < PAGE) {
        long long s = 16;
        while (s < n) s <<= 1;
        return s;
    }
    return (n + PAGE - 1) / PAGE * PAGE;
}

static int Pool_init(Pool *self, PyObject *args, PyObject *kw) {
    long long limit = -1;
    if (!PyArg_ParseTuple(args, "|L", &limit)) return -1;
    Py_XSETREF(self->free_lists, PyDict_New());
    Py_XSETREF(self->live, PyDict_New());
    if (!self->free_lists || !self->live) return -1;
    self->active = self->peak = self->cached = 0;
    self->limit = limit;
    return 0;
}

static void Pool_dealloc(Pool *self) {
    Py_XDECREF(self->free_lists);
    Py_XDECREF(self->live);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static void add_active(Pool *self, long long n) {
    self->active += n;
    if (self->active > self->peak) self->peak = self->active;
}

/* malloc(nbytes) -> a cached block's pointer, or 0 (a request <= 8 bytes, or no cached block
 * of its size class: the caller allocates). */
static PyObject *Pool_malloc(Pool *self, PyObject *arg) {
    long long n = PyLong_AsLongLong(arg);
    if (n == -1 && PyErr_Occurred()) return NULL;
    if (n <= SMALL) return PyLong_FromLong(0);
    long long size = size_class(n);
    PyObject *key = PyLong_FromLongLong(size);
    if (!key) return NULL;
    PyObject *lst = PyDict_GetItemWithError(self->free_lists, key); /* borrowed */
    Py_ssize_t len = lst ? PyList_GET_SIZE(lst) : 0;
    if (len == 0) {
        Py_DECREF(key);
        if (PyErr_Occurred()) return NULL;
        return PyLong_FromLong(0);
    }
    PyObject *p = PyList_GET_ITEM(lst, len - 1);
    Py_INCREF(p);
    if (PyList_SetSlice(lst, len - 1, len, NULL) < 0 || PyDict_SetItem(self->live, p, key) < 0) {
        Py_DECREF(key);
        Py_DECREF(p);
        return NULL;
    }
    Py_DECREF(key);
    self->cached -= size;
    add_active(self, size);
    return p;
}

/* adopt(pointer, size): register a block the caller allocated (for a malloc that returned 0). */
static PyObject *Pool_adopt(Pool *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "adopt(pointer, size)");
        return NULL;
    }
    long long size = PyLong_AsLongLong(args[1]);
    if (size == -1 && PyErr_Occurred()) return NULL;
    if (PyDict_SetItem(self->live, args[0], args[1]) < 0) return NULL;
    add_active(self, size);
    Py_RETURN_NONE;
}

/* free(pointer) -> 0: cached for reuse; > 0: the block's size, which the caller must give back
 * to the driver (keeping it would pass the limit); -1: not a block of this pool. */
static PyObject *Pool_free(Pool *self, PyObject *p) {
    PyObject *key = PyDict_GetItemWithError(self->live, p); /* borrowed */
    if (key == NULL) {
        if (PyErr_Occurred()) return NULL;
        return PyLong_FromLong(-1);
    }
    Py_INCREF(key);
    long long size = PyLong_AsLongLong(key);
    if ((size == -1 && PyErr_Occurred()) || PyDict_DelItem(self->live, p) < 0) {
        Py_DECREF(key);
        return NULL;
    }
    self->active -= size;
    if (self->limit >= 0 && self->active + self->cached + size > self->limit) {
        Py_DECREF(key);
        return PyLong_FromLongLong(size);
    }
    PyObject *lst = PyDict_GetItemWithError(self->free_lists, key);
    int rc;
    if (lst == NULL) {
        if (PyErr_Occurred()) {
            Py_DECREF(key);
            return NULL;
        }
        lst = PyList_New(1);
        if (lst == NULL) {
            Py_DECREF(key);
            return NULL;
        }
        Py_INCREF(p);
        PyList_SET_ITEM(lst, 0, p);
        rc = PyDict_SetItem(self->free_lists, key, lst);
        Py_DECREF(lst);
    } else {
        rc = PyList_Append(lst, p);
    }
    Py_DECREF(key);
    if (rc < 0) return NULL;
    self->cached += size;
    return PyLong_FromLong(0);
}

/* take_cached() -> every cached pointer (the cache is then empty). */
static PyObject *Pool_take_cached(Pool *self, PyObject *unused) {
    PyObject *out = PyList_New(0);
    if (!out) return NULL;
    PyObject *k, *lst;
    Py_ssize_t pos = 0;
    while (PyDict_Next(self->free_lists, &pos, &k, &lst)) {
        Py_ssize_t n = PyList_GET_SIZE(lst);
        for (Py_ssize_t i = 0; i < n; i++)
            if (PyList_Append(out, PyList_GET_ITEM(lst, i)) < 0) {
                Py_DECREF(out);
                return NULL;
            }
    }
    PyObject *fresh = PyDict_New();
    if (!fresh) {
        Py_DECREF(out);
        return NULL;
    }
    Py_SETREF(self->free_lists, fresh);
    self->cached = 0;
    return out;
}

/* add_active(n): account n bytes served outside the pool (small slots; negative to give back). */
static PyObject *Pool_add_active(Pool *self, PyObject *arg) {
    long long n = PyLong_AsLongLong(arg);
    if (n == -1 && PyErr_Occurred()) return NULL;
    add_active(self, n);
    Py_RETURN_NONE;
}

static PyObject *Pool_size_of(Pool *self, PyObject *p) {
    PyObject *v = PyDict_GetItemWithError(self->live, p);
    if (v == NULL) {
        if (PyErr_Occurred()) return NULL;
        Py_RETURN_NONE;
    }
    Py_INCREF(v);
    return v;
}

static PyObject *Pool_stats(Pool *self, PyObject *unused) {
    return Py_BuildValue("(LLL)", self->active, self->peak, self->cached);
}

static PyObject *Pool_reset_peak(Pool *self, PyObject *unused) {
    self->peak = self->active;
    Py_RETURN_NONE;
}

static PyObject *Pool_get_limit(Pool *self, void *c) {
    if (self->limit < 0) Py_RETURN_NONE;
    return PyLong_FromLongLong(self->limit);
}

static int Pool_set_limit(Pool *self, PyObject *v, void *c) {
    if (v == NULL || v == Py_None) {
        self->limit = -1;
        return 0;
    }
    long long n = PyLong_AsLongLong(v);
    if (n == -1 && PyErr_Occurred()) return -1;
    if (n < 0) {
        PyErr_SetString(PyExc_ValueError, "limit must be >= 0 or None");
        return -1;
    }
    self->limit = n;
    return 0;
}

static PyObject *Pool_get_active(Pool *self, void *c) { return PyLong_FromLongLong(self->active); }
static PyObject *Pool_get_peak(Pool *self, void *c) { return PyLong_FromLongLong(self->peak); }
static PyObject *Pool_get_cached(Pool *self, void *c) { return PyLong_FromLongLong(self->cached); }

static PyMethodDef Pool_methods[] = {
    {"malloc", (PyCFunction)Pool_malloc, METH_O, NULL},
    {"free", (PyCFunction)Pool_free, METH_O, NULL},
    {"adopt", (PyCFunction)(void (*)(void))Pool_adopt, METH_FASTCALL, NULL},
    {"take_cached", (PyCFunction)Pool_take_cached, METH_NOARGS, NULL},
    {"add_active", (PyCFunction)Pool_add_active, METH_O, NULL},
    {"size_of", (PyCFunction)Pool_size_of, METH_O, NULL},
    {"stats", (PyCFunction)Pool_stats, METH_NOARGS, NULL},
    {"reset_peak", (PyCFunction)Pool_reset_peak, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Pool_getset[] = {
    {"limit", (getter)Pool_get_limit, (setter)Pool_set_limit, NULL, NULL},
    {"active", (getter)Pool_get_active, NULL, NULL, NULL},
    {"peak", (getter)Pool_get_peak, NULL, NULL, NULL},
    {"cached", (getter)Pool_get_cached, NULL, NULL, NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject PoolType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "_kbcuda_native.Pool",
    .tp_basicsize = sizeof(Pool),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "The cached blocks of one device's allocator.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Pool_init,
    .tp_dealloc = (destructor)Pool_dealloc,
    .tp_methods = Pool_methods,
    .tp_getset = Pool_getset,
};

/* Add the Pool type to module m; -1 with an exception set on failure. */
static int pool_add_type(PyObject *m) {
    if (PyType_Ready(&PoolType) < 0) return -1;
    Py_INCREF(&PoolType);
    if (PyModule_AddObject(m, "Pool", (PyObject *)&PoolType) < 0) {
        Py_DECREF(&PoolType);
        return -1;
    }
    return 0;
}
