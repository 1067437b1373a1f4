/* The core's fronts: Kernel.launch / __call__, kb.buffer, kb.empty, Buffer.close and
 * Buffer.__del__ in C, built at first use by kernelbay._fronts (which says why and how: the
 * decision is docs/decisions.md, "The core's hot calls have C fronts").
 *
 * Each front serves the common case of its Python twin -- the same checks, the same attribute
 * writes, the same call of the binding's hook -- and hands every other call, unchanged, to the
 * twin (goto python): so every error a user can cause is the Python code's. Attributes are
 * read and written at the slot offsets of the attrs classes' member descriptors (checked by
 * init), for objects of exactly those classes only. Argument packing stays the backends'
 * (kernelbay.argrules): the launch front passes args through. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#define SLOT(o, off) (*(PyObject **)((char *)(o) + (off)))

/* Binding.fronts: which hooks are the backend's direct callables (kernelbay._binding). */
enum { F_ALLOCATE = 1, F_FREE = 2, F_LAUNCH = 4 };

static PyTypeObject *KernelT, *BufferT, *ArrayT, *DeviceT, *BindingT, *StreamT, *ConfigT, *GraphT;
static Py_ssize_t k_handle, k_binding, b_device, b_nbytes, b_handle, b_binding, a_shape, a_dtype, d_backend,
    g_allocate, g_free, g_launch, g_fronts, g_graph_replay, s_is_default, s_handle, c_grid, c_block, c_shared,
    gr_fast, gr_binding, gr_device, gr_handle;
static PyObject *streams_ns, *memory_ns, *kernel_ns, *runtime_ns, *dtypes; /* module dicts, vars(runtime), _api._dtypes */
static long long max_nbytes;
static PyObject *str_intercept, *str_closes, *str_bindings, *str_itemsize, *str_float32, *zero, *one, *empty_tuple;
static PyObject *kw_launch[8], *kw_buffer[2], *kw_empty[3], *kw_replay[1];

/* ---- helpers ---- */

/* A front: a callable that binds as a method (Py_TPFLAGS_METHOD_DESCRIPTOR, so obj.launch(...)
 * calls it with obj first and no bound object made) and checks its first argument itself, so a
 * wrong one goes to the twin and fails there as it does in Python. It holds its twin, and a
 * __dict__ for the twin's __doc__, __name__, __wrapped__ (kernelbay._fronts sets them). */
typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *twin;
    PyObject *dict;
} Front;

#define TWIN(callable, args, nargsf, kwnames) PyObject_Vectorcall(((Front *)(callable))->twin, args, nargsf, kwnames)

/* Fill out[] (n parameters, names[]) from positional and keyword arguments; 0 where the
 * spelling is one to leave to the Python twin (too many, unknown or repeated names). */
static int parse(PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames, PyObject **names, int n,
                 PyObject **out) {
    if (nargs > n)
        return 0;
    for (Py_ssize_t i = 0; i < nargs; i++)
        out[i] = args[i];
    if (kwnames == NULL)
        return 1;
    Py_ssize_t nk = PyTuple_GET_SIZE(kwnames);
    for (Py_ssize_t j = 0; j < nk; j++) {
        PyObject *key = PyTuple_GET_ITEM(kwnames, j);
        int found = -1;
        for (int i = 0; i < n && found < 0; i++)
            if (key == names[i])
                found = i;
        for (int i = 0; i < n && found < 0; i++) {
            int eq = PyUnicode_Compare(key, names[i]);
            if (eq == -1 && PyErr_Occurred()) {
                PyErr_Clear();
                return 0;
            }
            if (eq == 0)
                found = i;
        }
        if (found < 0 || out[found] != NULL)
            return 0;
        out[found] = args[nargs + j];
    }
    return 1;
}

/* The stream= value a front hands the backend's direct callable (borrowed), with no current
 * stream in this thread: the device's default kb.Stream, or one its backend does not see (handle
 * None), as None; anything else as given. NULL: a Stream in a state the Python twin decides. */
static PyObject *hook_stream(PyObject *stream) {
    if (stream == Py_None || Py_TYPE(stream) != StreamT)
        return stream;
    PyObject *d = SLOT(stream, s_is_default), *sh = SLOT(stream, s_handle);
    if (d == NULL || sh == NULL || (d != Py_True && d != Py_False))
        return NULL;
    return d == Py_True || sh == Py_None ? Py_None : stream;
}

/* Whether binding b (exactly a Binding) has the direct callable of hook bit. */
static inline int fronted(PyObject *b, long bit) {
    if (b == NULL || Py_TYPE(b) != BindingT)
        return 0;
    PyObject *f = SLOT(b, g_fronts);
    if (f == NULL || !PyLong_CheckExact(f))
        return 0;
    return (PyLong_AsLong(f) & bit) != 0;
}

/* kernelbay.streams.intercept != 0 (anything unexpected counts as non-zero: the twin decides). */
static inline int intercepting(void) {
    PyObject *v = PyDict_GetItemWithError(streams_ns, str_intercept);
    if (v == zero)
        return 0;
    if (v == NULL || !PyLong_CheckExact(v)) {
        PyErr_Clear();
        return 1;
    }
    int overflow;
    return PyLong_AsLongAndOverflow(v, &overflow) != 0 || overflow;
}

/* The binding runtime.bindings holds for device's backend (borrowed: the dicts keep it), or
 * NULL: the twin resolves it. */
static PyObject *binding_of(PyObject *device) {
    PyObject *backend = SLOT(device, d_backend);
    if (backend == NULL)
        return NULL;
    /* runtime.bindings, read from the runtime's own __dict__ (reset() assigns a new dict there) */
    PyObject *bindings = PyDict_GetItemWithError(runtime_ns, str_bindings);
    PyObject *b = bindings != NULL && PyDict_CheckExact(bindings) ? PyDict_GetItemWithError(bindings, backend) : NULL;
    if (b == NULL)
        PyErr_Clear();
    return b;
}

/* A size argument as a C integer: an exact int in [0, max_nbytes], else -1 (the twin decides). */
static long long size_of(PyObject *v) {
    if (!PyLong_CheckExact(v))
        return -1;
    int overflow;
    long long n = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (overflow || n < 0 || n > max_nbytes) {
        PyErr_Clear();
        return -1;
    }
    return n;
}

/* ---- Kernel.launch / Kernel.__call__ ---- */

static PyObject *launch(PyObject *front, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    /* grid, block, args, shared_mem, stream, config, reads, writes (the last three keyword-only) */
    PyObject *a[8] = {NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL};
    if (nargs < 1 || nargs > 6 || Py_TYPE(args[0]) != KernelT || !parse(args + 1, nargs - 1, kwnames, kw_launch, 8, a))
        goto python;
    PyObject *self = args[0];
    PyObject *grid = a[0], *block = a[1] ? a[1] : Py_None, *argv = a[2] ? a[2] : empty_tuple;
    PyObject *shared = a[3] ? a[3] : zero, *stream = a[4] ? a[4] : Py_None, *config = a[5];
    if (config != NULL && config != Py_None) {
        if (Py_TYPE(config) != ConfigT)
            goto python;
        grid = SLOT(config, c_grid);
        block = SLOT(config, c_block);
        shared = SLOT(config, c_shared);
        if (grid == NULL || block == NULL || shared == NULL)
            goto python;
    } else if (grid == NULL || grid == Py_None)
        goto python;
    PyObject *handle = SLOT(self, k_handle);
    if (handle == NULL || handle == Py_None || argv == Py_None || intercepting())
        goto python;
    if ((stream = hook_stream(stream)) == NULL)
        goto python;
    PyObject *b = SLOT(self, k_binding);
    if (!fronted(b, F_LAUNCH))
        goto python;
    PyObject *fn = SLOT(b, g_launch);
    if (fn == NULL)
        goto python;
    Py_INCREF(fn); /* a rebind on another thread must not free it under the call */
    PyObject *call[6] = {self, grid, block, argv, shared, stream};
    PyObject *r = PyObject_Vectorcall(fn, call, 6, NULL);
    Py_DECREF(fn);
    return r;
python:
    return TWIN(front, args, nargsf, kwnames);
}

/* ---- kb.buffer, kb.empty ---- */

static PyObject *buffer(PyObject *front, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    PyObject *a[2] = {NULL, NULL};
    if (!parse(args, nargs, kwnames, kw_buffer, 2, a) || a[0] == NULL || a[1] == NULL)
        goto python;
    PyObject *nbytes = a[0], *dev = a[1];
    if (size_of(nbytes) < 0 || Py_TYPE(dev) != DeviceT)
        goto python;
    PyObject *b = binding_of(dev);
    if (!fronted(b, F_ALLOCATE) || SLOT(b, g_allocate) == NULL)
        goto python;
    Py_INCREF(b);
    PyObject *fn = SLOT(b, g_allocate);
    Py_INCREF(fn);
    PyObject *call[2] = {dev, nbytes};
    PyObject *h = PyObject_Vectorcall(fn, call, 2, NULL);
    Py_DECREF(fn);
    if (h == NULL) {
        Py_DECREF(b);
        return NULL;
    }
    PyObject *buf = BufferT->tp_alloc(BufferT, 0); /* object.__new__(Buffer), as the twin makes it */
    if (buf == NULL) {
        Py_DECREF(h);
        Py_DECREF(b);
        return NULL;
    }
    Py_INCREF(dev);
    SLOT(buf, b_device) = dev;
    Py_INCREF(nbytes);
    SLOT(buf, b_nbytes) = nbytes;
    SLOT(buf, b_handle) = h;
    SLOT(buf, b_binding) = b;
    return buf;
python:
    return TWIN(front, args, nargsf, kwnames);
}

static PyObject *empty(PyObject *front, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    PyObject *a[3] = {NULL, NULL, NULL};
    if (!parse(args, nargs, kwnames, kw_empty, 3, a) || a[0] == NULL || a[2] == NULL)
        goto python;
    PyObject *shape = a[0], *spec = a[1] ? a[1] : str_float32, *dev = a[2];
    long long count = size_of(shape);
    if (count < 0 || Py_TYPE(dev) != DeviceT)
        goto python;
    PyObject *dt = PyDict_GetItemWithError(dtypes, spec); /* a dtype seen before, else the twin */
    if (dt == NULL) {
        PyErr_Clear();
        goto python;
    }
    PyObject *isz = PyObject_GetAttr(dt, str_itemsize);
    if (isz == NULL) {
        PyErr_Clear();
        goto python;
    }
    long itemsize = PyLong_AsLong(isz);
    Py_DECREF(isz);
    if (itemsize < 0 || itemsize > 1024) {
        PyErr_Clear();
        goto python;
    }
    long long n = count * itemsize; /* count <= 2**48: no overflow */
    if (n > max_nbytes)
        goto python;
    PyObject *b = binding_of(dev);
    if (!fronted(b, F_ALLOCATE) || SLOT(b, g_allocate) == NULL)
        goto python;
    PyObject *nb = PyLong_FromLongLong(n);
    if (nb == NULL)
        return NULL;
    PyObject *shp = PyTuple_Pack(1, shape);
    if (shp == NULL) {
        Py_DECREF(nb);
        return NULL;
    }
    Py_INCREF(b);
    Py_INCREF(dt);
    PyObject *fn = SLOT(b, g_allocate);
    Py_INCREF(fn);
    PyObject *call[2] = {dev, nb};
    PyObject *h = PyObject_Vectorcall(fn, call, 2, NULL);
    Py_DECREF(fn);
    PyObject *arr = h == NULL ? NULL : ArrayT->tp_alloc(ArrayT, 0);
    if (arr == NULL) {
        Py_XDECREF(h);
        Py_DECREF(nb);
        Py_DECREF(shp);
        Py_DECREF(b);
        Py_DECREF(dt);
        return NULL;
    }
    Py_INCREF(dev);
    SLOT(arr, b_device) = dev;
    SLOT(arr, b_nbytes) = nb;
    SLOT(arr, b_handle) = h;
    SLOT(arr, b_binding) = b;
    SLOT(arr, a_shape) = shp;
    SLOT(arr, a_dtype) = dt;
    return arr;
python:
    return TWIN(front, args, nargsf, kwnames);
}

/* ---- Buffer.close ---- */

static PyObject *close_(PyObject *front, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    if (PyVectorcall_NARGS(nargsf) != 1 || kwnames != NULL)
        goto python;
    PyObject *self = args[0];
    PyTypeObject *t = Py_TYPE(self);
    if (t != BufferT && t != ArrayT)
        goto python;
    PyObject *b = SLOT(self, b_binding), *h = SLOT(self, b_handle), *dev = SLOT(self, b_device);
    if (h == Py_None)
        Py_RETURN_NONE;
    if (h == NULL || dev == NULL || !fronted(b, F_FREE) || SLOT(b, g_free) == NULL)
        goto python;
    /* memory.closes += 1: a recorded graph re-checks its buffers when it moved */
    PyObject *c = PyDict_GetItemWithError(memory_ns, str_closes);
    if (c == NULL)
        goto python;
    PyObject *c1 = PyNumber_Add(c, one);
    if (c1 == NULL)
        return NULL;
    int rc = PyDict_SetItem(memory_ns, str_closes, c1);
    Py_DECREF(c1);
    if (rc < 0)
        return NULL;
    Py_INCREF(Py_None);
    SLOT(self, b_handle) = Py_None; /* h: the reference the slot held, now ours */
    PyObject *fn = SLOT(b, g_free);
    Py_INCREF(fn);
    Py_INCREF(dev);
    PyObject *call[2] = {dev, h};
    PyObject *r = PyObject_Vectorcall(fn, call, 2, NULL);
    Py_DECREF(fn);
    Py_DECREF(dev);
    Py_DECREF(h);
    if (r == NULL)
        return NULL;
    Py_DECREF(r);
    Py_RETURN_NONE;
python:
    return TWIN(front, args, nargsf, kwnames);
}

/* Buffer.__del__: nothing to do for a closed buffer (the common case: close() ran), else the twin. */
static PyObject *del_(PyObject *front, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    if (PyVectorcall_NARGS(nargsf) == 1 && kwnames == NULL) {
        PyTypeObject *t = Py_TYPE(args[0]);
        if ((t == BufferT || t == ArrayT) && SLOT(args[0], b_handle) == Py_None)
            Py_RETURN_NONE;
    }
    return TWIN(front, args, nargsf, kwnames);
}

/* ---- Graph.replay ---- */

/* A module's `closes` counter as a C integer, or -1 (the twin decides). */
static long long closes_of(PyObject *ns) {
    PyObject *c = PyDict_GetItemWithError(ns, str_closes);
    if (c == NULL || !PyLong_CheckExact(c)) {
        PyErr_Clear();
        return -1;
    }
    long long v = PyLong_AsLongLong(c);
    if (v < 0) {
        PyErr_Clear();
        return -1;
    }
    return v;
}

/* The twin's hot path, in C: a graph checked at an earlier native replay (its _fast is
 * memory.closes + kernel.closes: nothing closed since), no current stream or recording anywhere:
 * binding.graph_replay(device, handle, stream) with stream as the twin's route() would give it
 * (None for the default stream). Anything else: the twin. */
static PyObject *replay(PyObject *front, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    PyObject *stream = NULL;
    if (nargs < 1 || Py_TYPE(args[0]) != GraphT || !parse(args + 1, nargs - 1, kwnames, kw_replay, 1, &stream))
        goto python;
    if (intercepting())
        goto python;
    if ((stream = hook_stream(stream == NULL ? Py_None : stream)) == NULL)
        goto python;
    PyObject *self = args[0];
    long long m = closes_of(memory_ns), k = closes_of(kernel_ns);
    if (m < 0 || k < 0)
        goto python;
    /* the graph's slots (Graph.__slots__): NULL where one was never set, then the twin decides */
    PyObject *fast = SLOT(self, gr_fast), *b = SLOT(self, gr_binding);
    PyObject *dev = SLOT(self, gr_device), *h = SLOT(self, gr_handle);
    if (fast == NULL || b == NULL || dev == NULL || h == NULL || !PyLong_CheckExact(fast))
        goto python;
    int overflow;
    long long f = PyLong_AsLongLongAndOverflow(fast, &overflow);
    if (overflow || f != m + k) {
        PyErr_Clear();
        goto python;
    }
    PyObject *fn = Py_TYPE(b) == BindingT ? SLOT(b, g_graph_replay) : NULL;
    if (fn == NULL)
        goto python;
    /* hold what the call uses: the hook may replace the graph's attributes */
    Py_INCREF(fn);
    Py_INCREF(dev);
    Py_INCREF(h);
    PyObject *call[3] = {dev, h, stream};
    PyObject *r = PyObject_Vectorcall(fn, call, 3, NULL);
    Py_DECREF(fn);
    Py_DECREF(dev);
    Py_DECREF(h);
    if (r == NULL)
        return NULL;
    Py_DECREF(r);
    Py_RETURN_NONE;
python:
    return TWIN(front, args, nargsf, kwnames);
}

/* ---- the Front type ---- */

static PyObject *front_get(PyObject *self, PyObject *obj, PyObject *type) {
    if (obj == NULL || obj == Py_None) {
        Py_INCREF(self);
        return self;
    }
    return PyMethod_New(self, obj); /* k.launch as a value: a bound method, as a function gives */
}

static PyObject *front_repr(PyObject *self) {
    return PyUnicode_FromFormat("<C front of %R>", ((Front *)self)->twin);
}

/* Pickled by name, as the function it stands for is: kernelbay._api.buffer, Kernel.launch. */
static PyObject *front_reduce(PyObject *self, PyObject *unused) { return PyObject_GetAttrString(self, "__qualname__"); }

static PyMethodDef front_methods[] = {{"__reduce__", front_reduce, METH_NOARGS, NULL}, {NULL, NULL, 0, NULL}};

static void front_dealloc(PyObject *self) {
    Front *f = (Front *)self;
    Py_XDECREF(f->twin);
    Py_XDECREF(f->dict);
    Py_TYPE(self)->tp_free(self);
}

static PyTypeObject FrontType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "kernelbay._fronts.Front",
    .tp_basicsize = sizeof(Front),
    .tp_dealloc = front_dealloc,
    .tp_repr = front_repr,
    .tp_vectorcall_offset = offsetof(Front, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_getattro = PyObject_GenericGetAttr,
    .tp_setattro = PyObject_GenericSetAttr,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL | Py_TPFLAGS_METHOD_DESCRIPTOR,
    .tp_doc = "A C front of a core function; its twin is the Python function it stands for.",
    .tp_descr_get = front_get,
    .tp_methods = front_methods,
    .tp_dictoffset = offsetof(Front, dict),
};

static PyObject *new_front(vectorcallfunc fn, PyObject *twin) {
    Front *f = PyObject_New(Front, &FrontType);
    if (f == NULL)
        return NULL;
    f->vectorcall = fn;
    Py_INCREF(twin);
    f->twin = twin;
    f->dict = NULL;
    return (PyObject *)f;
}

/* ---- init ---- */

/* The slot offset of cls.__dict__[name], which must be an object slot (a member descriptor). */
static int offset(PyTypeObject *cls, const char *name, Py_ssize_t *out) {
    PyObject *d = PyDict_GetItemString(cls->tp_dict, name);
    if (d == NULL || Py_TYPE(d) != &PyMemberDescr_Type) {
        PyErr_Format(PyExc_TypeError, "%s.%s is not a slot", cls->tp_name, name);
        return -1;
    }
    PyMemberDef *m = ((PyMemberDescrObject *)d)->d_member;
    if (m->type != T_OBJECT_EX || (m->flags & READONLY)) {
        PyErr_Format(PyExc_TypeError, "%s.%s is not a writable object slot", cls->tp_name, name);
        return -1;
    }
    *out = m->offset;
    return 0;
}

/* cfg[key], a new reference; a class where cls is set. */
static PyObject *arg(PyObject *cfg, const char *key, int cls) {
    PyObject *v = PyDict_GetItemString(cfg, key);
    if (v == NULL || (cls && !PyType_Check(v)))
        return PyErr_Format(PyExc_TypeError, "init: %s is missing or not a class", key);
    Py_INCREF(v);
    return v;
}

/* init(cfg: dict) -> (launch, close, buffer, empty, __del__, replay): the classes, the Python twins
 * and the module namespaces in, the fronts out (Front objects). Called once per process (kernelbay._fronts). */
static PyObject *init(PyObject *mod, PyObject *cfg) {
    if (KernelT != NULL)
        return PyErr_Format(PyExc_RuntimeError, "the fronts are initialised once");
    if (!PyDict_Check(cfg))
        return PyErr_Format(PyExc_TypeError, "init takes a dict");
#define TYPE(var, key) if ((var = (PyTypeObject *)arg(cfg, key, 1)) == NULL) return NULL
#define OBJ(var, key) if ((var = arg(cfg, key, 0)) == NULL) return NULL
#define OFF(cls, name, var) if (offset(cls, name, &var) < 0) return NULL
    TYPE(KernelT, "Kernel"); TYPE(BufferT, "Buffer"); TYPE(ArrayT, "Array"); TYPE(DeviceT, "Device");
    TYPE(BindingT, "Binding"); TYPE(StreamT, "Stream"); TYPE(ConfigT, "LaunchConfig"); TYPE(GraphT, "Graph");
    OFF(KernelT, "handle", k_handle); OFF(KernelT, "_binding", k_binding);
    OFF(BufferT, "device", b_device); OFF(BufferT, "nbytes", b_nbytes); OFF(BufferT, "handle", b_handle);
    OFF(BufferT, "_binding", b_binding); OFF(ArrayT, "shape", a_shape); OFF(ArrayT, "dtype", a_dtype);
    OFF(DeviceT, "backend", d_backend); OFF(BindingT, "allocate", g_allocate); OFF(BindingT, "free", g_free);
    OFF(BindingT, "launch", g_launch); OFF(BindingT, "fronts", g_fronts); OFF(StreamT, "is_default", s_is_default); OFF(StreamT, "handle", s_handle);
    OFF(BindingT, "graph_replay", g_graph_replay);
    OFF(GraphT, "_fast", gr_fast); OFF(GraphT, "_binding", gr_binding); OFF(GraphT, "device", gr_device);
    OFF(GraphT, "_handle", gr_handle);
    /* LaunchConfig is frozen: its slots are read only, through the offsets of its own descriptors */
    OFF(ConfigT, "grid", c_grid); OFF(ConfigT, "block", c_block); OFF(ConfigT, "shared_mem", c_shared);
    PyObject *py_launch, *py_buffer, *py_empty, *py_close, *py_del, *py_replay;
    OBJ(py_launch, "launch"); OBJ(py_buffer, "buffer"); OBJ(py_empty, "empty"); OBJ(py_close, "close");
    OBJ(py_del, "__del__"); OBJ(py_replay, "replay");
    OBJ(streams_ns, "streams"); OBJ(memory_ns, "memory"); OBJ(kernel_ns, "kernel"); OBJ(runtime_ns, "runtime");
    OBJ(dtypes, "dtypes");
    if (!PyDict_Check(streams_ns) || !PyDict_Check(memory_ns) || !PyDict_Check(kernel_ns) || !PyDict_Check(runtime_ns) ||
        !PyDict_Check(dtypes))
        return PyErr_Format(PyExc_TypeError, "init: streams, memory, kernel, runtime and dtypes must be dicts");
    PyObject *mx = PyDict_GetItemString(cfg, "max_nbytes");
    if (mx == NULL || (max_nbytes = PyLong_AsLongLong(mx)) < 0 || max_nbytes > (1LL << 52))
        return PyErr_Occurred() ? NULL : PyErr_Format(PyExc_ValueError, "init: max_nbytes out of range");
    const char *launch_names[8] = {"grid", "block", "args", "shared_mem", "stream", "config", "reads", "writes"};
    for (int i = 0; i < 8; i++)
        if ((kw_launch[i] = PyUnicode_InternFromString(launch_names[i])) == NULL)
            return NULL;
    PyObject **strs[] = {&kw_buffer[0], &kw_buffer[1], &kw_empty[0], &kw_empty[1], &kw_empty[2], &str_intercept,
                         &str_closes, &str_bindings, &str_itemsize, &str_float32, &kw_replay[0]};
    const char *texts[] = {"nbytes", "device", "shape", "dtype", "device", "intercept", "closes", "bindings",
                           "itemsize", "float32", "stream"};
    for (size_t i = 0; i < sizeof(texts) / sizeof(texts[0]); i++)
        if ((*strs[i] = PyUnicode_InternFromString(texts[i])) == NULL)
            return NULL;
    if ((zero = PyLong_FromLong(0)) == NULL || (one = PyLong_FromLong(1)) == NULL ||
        (empty_tuple = PyTuple_New(0)) == NULL)
        return NULL;
    if (PyType_Ready(&FrontType) < 0)
        return NULL;
    return Py_BuildValue("(NNNNNN)", new_front(launch, py_launch), new_front(close_, py_close),
                         new_front(buffer, py_buffer), new_front(empty, py_empty), new_front(del_, py_del),
                         new_front(replay, py_replay));
#undef TYPE
#undef OBJ
#undef OFF
}

static PyMethodDef methods[] = {
    {"init", init, METH_O, "init(cfg) -> (launch, close, buffer, empty, __del__, replay): see kernelbay._fronts"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moddef = {PyModuleDef_HEAD_INIT, "_kb_fronts", "The core's fronts in C.", -1, methods};

PyMODINIT_FUNC PyInit__kb_fronts(void) { return PyModule_Create(&moddef); }
