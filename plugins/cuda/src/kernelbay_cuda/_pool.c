/* kernelbay-cuda's native helpers, part two: the allocator's cached-block pool (Pool, its bins
 * and their stream homes).
 *
 * Built with _launch.c into one extension (native.py joins the sources, this one first, then
 * _graphentry.c and _direct.c, which build on its Pool): pool_add_type() (at the end of
 * _direct.c, after the types of all three files) is what _launch.c's module init calls. Runs
 * with the GIL held and calls no Python code, so each method is atomic with respect to other
 * Python threads.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stddef.h>
#include <stdint.h>
#include "pythread.h"

/* ---- the pool of one device's allocator --------------------------------------------------
 *
 * A bin holds the cached blocks of one size class whose home is one stream (Bin: a C array of
 * pointers, with the count of live blocks that go back to it). live: {pointer: bin} of blocks
 * handed out, so free finds where a block goes back, its size and its home in one lookup;
 * free_lists: {size class: bin} of the legacy default stream's bins. Requests of at most 8 bytes
 * and cache misses return 0: the Python allocator serves those (under its lock) and registers
 * new blocks with adopt().
 *
 * Stream-ordered memory (as PyTorch's and CuPy's per-stream pools): every block has a home
 * stream, the one it was allocated on (0: the legacy default stream). A block freed goes back to
 * its home's bin at once, with no event: reuse on the same stream is in stream order.
 * stream_lists: {home: {size class: bin}} of the user streams' bins; homed: the number of live
 * blocks whose home is a user stream. rehome(stream) moves a stream's cached blocks to the
 * default stream's bins and retires its bins (home NULL, `to` the default stream's bin of their
 * size): their live blocks go back there when freed.
 * uses: {pointer: [stream, ...]} of the streams other than its home that work on the block was
 * queued on (note_use): such a block is not cached at free (free returns -2) until an event
 * recorded on each of those streams has completed (the Python allocator's defer/reclaim);
 * blocking: {stream} of the user streams that synchronise with the legacy default stream (made
 * without CU_STREAM_NON_BLOCKING): work on a blocking stream waits for earlier work on the legacy
 * default stream, so a block cached by the default stream may be handed to one at once.
 * The pool keeps the bins malloc and malloc_on used last, a few per kind by size class (c_def,
 * c_user): a request of a recent size (and home) finds its bin with no dict lookup. */

#define SMALL 8
#define PAGE (16 * 1024)
#define NCACHE 8 /* recent bins kept per kind, by a hash of the size class */

static inline unsigned cache_slot(long long size) {
    return (unsigned)(((unsigned long long)size * 0x9E3779B97F4A7C15ull) >> 61);
}

typedef struct Bin {
    PyObject_HEAD
    PyObject *key;   /* the size class, as an int (size_of's answer) */
    long long size;
    PyObject *home;  /* the user stream; NULL: the legacy default stream, or retired */
    struct Bin *to;  /* retired: the default stream's bin its live blocks go back to; else NULL */
    PyObject **items; /* cached pointers, owned */
    Py_ssize_t n, cap;
    Py_ssize_t live; /* live blocks whose entry in `live` is this bin */
} Bin;

static void Bin_dealloc(Bin *self) {
    for (Py_ssize_t i = 0; i < self->n; i++) Py_DECREF(self->items[i]);
    PyMem_Free(self->items);
    Py_XDECREF(self->key);
    Py_XDECREF(self->home);
    Py_XDECREF((PyObject *)self->to);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyTypeObject BinType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "_kbcuda_native.PoolBin",
    .tp_basicsize = sizeof(Bin),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "The cached blocks of one size class and one home stream (internal to Pool).",
    .tp_dealloc = (destructor)Bin_dealloc,
};

/* Append p (a new reference is taken) to bin b's cached blocks; 0, or -1 with an exception. */
static int bin_push(Bin *b, PyObject *p) {
    if (b->n == b->cap) {
        Py_ssize_t cap = b->cap ? b->cap * 2 : 4;
        PyObject **items = PyMem_Realloc(b->items, (size_t)cap * sizeof(PyObject *));
        if (items == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        b->items = items;
        b->cap = cap;
    }
    Py_INCREF(p);
    b->items[b->n++] = p;
    return 0;
}

typedef struct {
    PyObject_HEAD
    PyObject *free_lists;
    PyObject *live;
    PyObject *stream_lists;
    PyObject *uses;
    PyObject *blocking;
    Bin *c_def[NCACHE], *c_user[NCACHE]; /* recent bins of malloc and malloc_on (owned), or NULL */
    long long active, peak, cached, limit; /* limit < 0: none */
    Py_ssize_t homed;
    /* Bumped whenever a stream may leave a block's entry in `uses` (take_uses, rehome): a caller
     * that saw (pointer, stream) noted at one value knows it is still noted while it holds. */
    unsigned long long uses_gen;
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
    Py_XSETREF(self->stream_lists, PyDict_New());
    Py_XSETREF(self->uses, PyDict_New());
    Py_XSETREF(self->blocking, PySet_New(NULL));
    for (int i = 0; i < NCACHE; i++) {
        Py_CLEAR(self->c_def[i]);
        Py_CLEAR(self->c_user[i]);
    }
    if (!self->free_lists || !self->live || !self->stream_lists || !self->uses || !self->blocking) return -1;
    self->active = self->peak = self->cached = 0;
    self->homed = 0;
    self->uses_gen++;
    self->limit = limit;
    return 0;
}

static void Pool_dealloc(Pool *self) {
    Py_XDECREF(self->free_lists);
    Py_XDECREF(self->live);
    Py_XDECREF(self->stream_lists);
    Py_XDECREF(self->uses);
    Py_XDECREF(self->blocking);
    for (int i = 0; i < NCACHE; i++) {
        Py_XDECREF((PyObject *)self->c_def[i]);
        Py_XDECREF((PyObject *)self->c_user[i]);
    }
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static void add_active(Pool *self, long long n) {
    self->active += n;
    if (self->active > self->peak) self->peak = self->active;
}

/* The bin of size class `size` (`key`: it as an int, or NULL: made here) in `bins` ({size: bin}), for
 * `home` (NULL: the legacy default stream); made there when `make` and absent. Borrowed, NULL
 * with no exception (absent, not made), or NULL with an exception. */
static Bin *bin_of(PyObject *bins, PyObject *key, long long size, PyObject *home, int make) {
    PyObject *k;
    if (key) {
        k = key;
        Py_INCREF(k);
    } else if ((k = PyLong_FromLongLong(size)) == NULL) {
        return NULL;
    }
    Bin *b = (Bin *)PyDict_GetItemWithError(bins, k); /* borrowed */
    if (b == NULL && make && !PyErr_Occurred() && (b = PyObject_New(Bin, &BinType)) != NULL) {
        Py_INCREF(k);
        b->key = k;
        b->size = size;
        Py_XINCREF(home);
        b->home = home;
        b->to = NULL;
        b->items = NULL;
        b->n = b->cap = b->live = 0;
        int rc = PyDict_SetItem(bins, k, (PyObject *)b);
        Py_DECREF(b); /* the dict holds it */
        if (rc < 0) b = NULL;
    }
    Py_DECREF(k);
    return b;
}

/* The bins ({size: bin}) of user stream `home` (borrowed); made when `make` and absent. NULL
 * with no exception (absent, not made) or with one. */
static PyObject *bins_of(Pool *self, PyObject *home, int make) {
    PyObject *bins = PyDict_GetItemWithError(self->stream_lists, home);
    if (bins == NULL && make && !PyErr_Occurred()) {
        bins = PyDict_New();
        if (bins && PyDict_SetItem(self->stream_lists, home, bins) < 0) Py_CLEAR(bins);
        Py_XDECREF(bins); /* the dict holds it */
    }
    return bins;
}

/* A cached block from bin `from`, made live with `owner` (the bin it goes back to), or NULL
 * (none cached, no exception; or an exception). */
static PyObject *take(Pool *self, Bin *from, Bin *owner) {
    if (from->n == 0) return NULL;
    PyObject *p = from->items[from->n - 1]; /* its reference passes to the caller */
    if (PyDict_SetItem(self->live, p, (PyObject *)owner) < 0) return NULL;
    from->n--;
    owner->live++;
    if (owner->home) self->homed++;
    self->cached -= from->size;
    add_active(self, from->size);
    return p;
}

/* The legacy default stream's bin of class `size` (borrowed; c_def, or looked up), or NULL with
 * no exception (none yet) or with one. */
static Bin *default_bin(Pool *self, long long size) {
    Bin **slot = &self->c_def[cache_slot(size)];
    if (*slot && (*slot)->size == size) return *slot;
    Bin *b = bin_of(self->free_lists, NULL, size, NULL, 0);
    if (b) {
        Py_INCREF(b);
        Py_XSETREF(*slot, b);
    }
    return b;
}

/* malloc(nbytes) -> a cached block's pointer (home: the legacy default stream), or 0 (a request
 * <= 8 bytes, or no cached block of its size class: the caller allocates). */
static PyObject *Pool_malloc(Pool *self, PyObject *arg) {
    long long n = PyLong_AsLongLong(arg);
    if (n == -1 && PyErr_Occurred()) return NULL;
    if (n <= SMALL) return PyLong_FromLong(0);
    Bin *b = default_bin(self, size_class(n));
    PyObject *p = b ? take(self, b, b) : NULL;
    if (p == NULL && !PyErr_Occurred()) return PyLong_FromLong(0);
    return p;
}

/* malloc_on(nbytes, home) -> a cached block for work on user stream `home` (its own cached
 * blocks first; for a blocking stream, then those of the legacy default stream, which is ordered
 * with it), or 0 (the caller allocates and adopts it with that home). */
static PyObject *Pool_malloc_on(Pool *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "malloc_on(nbytes, home)");
        return NULL;
    }
    long long n = PyLong_AsLongLong(args[0]);
    if (n == -1 && PyErr_Occurred()) return NULL;
    if (n <= SMALL) return PyLong_FromLong(0);
    long long size = size_class(n);
    PyObject *home = args[1];
    Bin **slot = &self->c_user[cache_slot(size)];
    Bin *b = *slot;
    int same = b && b->home && b->size == size;
    if (same && b->home != home) {
        same = PyObject_RichCompareBool(b->home, home, Py_EQ);
        if (same < 0) return NULL;
    }
    if (!same) { /* no bin is made for a miss: the caller adopts the block it allocates */
        PyObject *bins = bins_of(self, home, 0);
        b = bins ? bin_of(bins, NULL, size, home, 0) : NULL;
        if (b == NULL && PyErr_Occurred()) return NULL;
        if (b) {
            Py_INCREF(b);
            Py_XSETREF(*slot, b);
        }
    }
    PyObject *p = b ? take(self, b, b) : NULL;
    if (p || PyErr_Occurred()) return p;
    int blocking = PySet_GET_SIZE(self->blocking) ? PySet_Contains(self->blocking, home) : 0;
    if (blocking < 0) return NULL;
    if (!blocking) return PyLong_FromLong(0);
    Bin *d = default_bin(self, size);
    if (d == NULL && PyErr_Occurred()) return NULL;
    if (d == NULL || d->n == 0) return PyLong_FromLong(0);
    if (b == NULL) {
        PyObject *bins = bins_of(self, home, 1);
        if (bins == NULL || (b = bin_of(bins, NULL, size, home, 1)) == NULL) return NULL;
        Py_INCREF(b);
        Py_XSETREF(*slot, b);
    }
    PyObject *q = take(self, d, b);
    if (q == NULL && !PyErr_Occurred()) return PyLong_FromLong(0);
    return q;
}

/* Note that work on `stream` (0: the legacy default stream) uses live block `p`: 1 when
 * (p, stream) is in `uses` now, 0 when nothing needs noting (not a live block of this pool, or
 * work on its home stream), -1 with an exception. (CUDA orders the legacy default
 * stream with blocking streams, but not transitively: a block the default stream freed may go to
 * a blocking stream not ordered with a third stream that used it. So every other stream counts.) */
static int note_use(Pool *self, PyObject *p, PyObject *stream) {
    Bin *b = (Bin *)PyDict_GetItemWithError(self->live, p); /* borrowed */
    if (b == NULL) return PyErr_Occurred() ? -1 : 0;
    if (b->home == NULL) { /* the legacy default stream */
        if (PyLong_Check(stream) && PyLong_AsLongLong(stream) == 0) return 0;
    } else {
        int same = PyObject_RichCompareBool(b->home, stream, Py_EQ);
        if (same != 0) return same < 0 ? -1 : 0;
    }
    PyObject *lst = PyDict_GetItemWithError(self->uses, p);
    if (lst == NULL) {
        if (PyErr_Occurred()) return -1;
        lst = PyList_New(0);
        if (lst == NULL) return -1;
        int rc = PyDict_SetItem(self->uses, p, lst);
        Py_DECREF(lst);
        if (rc < 0) return -1;
    }
    int has = PySequence_Contains(lst, stream);
    if (has != 0) return has < 0 ? -1 : 1;
    return PyList_Append(lst, stream) < 0 ? -1 : 1;
}

/* Whether work on `stream` (a CUstream; NULL: the legacy default) with blocks of this pool may
 * need note_use: false when every live block's home is the legacy default stream and so is the
 * stream. The fast launch path asks this once per launch. */
static int pool_may_track(Pool *self, void *stream) {
    return stream != NULL || self->homed != 0;
}

/* may_track(stream) -> whether launches on `stream` (an int; 0: legacy default) must note uses. */
static PyObject *Pool_may_track(Pool *self, PyObject *stream) {
    long long s = PyLong_AsLongLong(stream);
    if (s == -1 && PyErr_Occurred()) return NULL;
    return PyBool_FromLong(pool_may_track(self, (void *)(uintptr_t)s));
}

static PyObject *Pool_note_use(Pool *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "note_use(pointer, stream)");
        return NULL;
    }
    if (note_use(self, args[0], args[1]) < 0) return NULL;
    Py_RETURN_NONE;
}

/* take_uses(pointer) -> [stream, ...] noted for it (then forgotten). */
static PyObject *Pool_take_uses(Pool *self, PyObject *p) {
    PyObject *lst = PyDict_GetItemWithError(self->uses, p);
    if (lst == NULL) {
        if (PyErr_Occurred()) return NULL;
        return PyList_New(0);
    }
    Py_INCREF(lst);
    self->uses_gen++;
    if (PyDict_DelItem(self->uses, p) < 0) {
        Py_DECREF(lst);
        return NULL;
    }
    return lst;
}

/* set_blocking(stream, flag): whether user stream `stream` synchronises with the legacy default. */
static PyObject *Pool_set_blocking(Pool *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "set_blocking(stream, flag)");
        return NULL;
    }
    int f = PyObject_IsTrue(args[1]);
    if (f < 0) return NULL;
    if ((f ? PySet_Add(self->blocking, args[0]) : PySet_Discard(self->blocking, args[0])) < 0) return NULL;
    Py_RETURN_NONE;
}

/* rehome(stream) -> whether any block had `stream` as its home: its live blocks and cached
 * blocks move to the legacy default stream (call after the stream's work has finished, before
 * its handle is destroyed and may be reused). */
static PyObject *Pool_rehome(Pool *self, PyObject *home) {
    int any = 0;
    self->uses_gen++; /* the stream leaves every block's uses below */
    PyObject *k, *v;
    Py_ssize_t pos = 0;
    PyObject *bins = PyDict_GetItemWithError(self->stream_lists, home);
    if (bins == NULL) {
        if (PyErr_Occurred()) return NULL;
    } else {
        Py_INCREF(bins);
        while (PyDict_Next(bins, &pos, &k, &v)) {
            Bin *b = (Bin *)v;
            Bin *d = bin_of(self->free_lists, b->key, b->size, NULL, 1);
            if (d == NULL) {
                Py_DECREF(bins);
                return NULL;
            }
            if (b->n || b->live) any = 1;
            while (b->n) { /* the stream's cached blocks, to the default stream's bin */
                if (bin_push(d, b->items[b->n - 1]) < 0) {
                    Py_DECREF(bins);
                    return NULL;
                }
                Py_DECREF(b->items[--b->n]);
            }
            self->homed -= b->live; /* its live blocks go back to d when freed */
            Py_CLEAR(b->home);
            Py_INCREF(d);
            Py_XSETREF(b->to, d);
        }
        int rc = PyDict_DelItem(self->stream_lists, home);
        Py_DECREF(bins);
        if (rc < 0) return NULL;
        for (int i = 0; i < NCACHE; i++) Py_CLEAR(self->c_user[i]);
    }
    /* its uses: the stream's work is done, so they no longer hold their blocks */
    PyObject *empty = PyList_New(0);
    if (!empty) return NULL;
    pos = 0;
    while (PyDict_Next(self->uses, &pos, &k, &v)) {
        Py_ssize_t n = PyList_GET_SIZE(v);
        for (Py_ssize_t i = n - 1; i >= 0; i--) {
            int eq = PyObject_RichCompareBool(PyList_GET_ITEM(v, i), home, Py_EQ);
            if (eq < 0 || (eq && PyList_SetSlice(v, i, i + 1, NULL) < 0)) {
                Py_DECREF(empty);
                return NULL;
            }
            if (eq) any = 1;
        }
        if (PyList_GET_SIZE(v) == 0 && PyList_Append(empty, k) < 0) {
            Py_DECREF(empty);
            return NULL;
        }
    }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(empty); i++)
        if (PyDict_DelItem(self->uses, PyList_GET_ITEM(empty, i)) < 0) {
            Py_DECREF(empty);
            return NULL;
        }
    Py_DECREF(empty);
    if (PySet_Discard(self->blocking, home) < 0) return NULL;
    return PyBool_FromLong(any);
}

/* has_home(stream) -> whether a live or cached block has `stream` as its home, or a live block
 * was used on it (its work must finish before the stream is destroyed and forgotten). */
static PyObject *Pool_has_home(Pool *self, PyObject *home) {
    PyObject *bins = PyDict_GetItemWithError(self->stream_lists, home);
    if (bins == NULL && PyErr_Occurred()) return NULL;
    PyObject *k, *v;
    Py_ssize_t pos = 0;
    if (bins)
        while (PyDict_Next(bins, &pos, &k, &v))
            if (((Bin *)v)->n || ((Bin *)v)->live) Py_RETURN_TRUE;
    pos = 0;
    while (PyDict_Next(self->uses, &pos, &k, &v)) {
        int has = PySequence_Contains(v, home);
        if (has < 0) return NULL;
        if (has) Py_RETURN_TRUE;
    }
    Py_RETURN_FALSE;
}

/* adopt(pointer, size[, home]): register a block the caller allocated (for a malloc that returned 0). */
static PyObject *Pool_adopt(Pool *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2 && nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "adopt(pointer, size[, home])");
        return NULL;
    }
    long long size = PyLong_AsLongLong(args[1]);
    if (size == -1 && PyErr_Occurred()) return NULL;
    int homed = nargs == 3 ? PyObject_IsTrue(args[2]) : 0;
    if (homed < 0) return NULL;
    PyObject *bins = homed ? bins_of(self, args[2], 1) : self->free_lists;
    Bin *b = bins ? bin_of(bins, args[1], size, homed ? args[2] : NULL, 1) : NULL;
    if (b == NULL) return NULL;
    Bin *old = (Bin *)PyDict_GetItemWithError(self->live, args[0]); /* a pointer adopted twice */
    if (old == NULL && PyErr_Occurred()) return NULL;
    if (old) {
        old->live--;
        if (old->home) self->homed--;
    }
    if (PyDict_SetItem(self->live, args[0], (PyObject *)b) < 0) return NULL;
    b->live++;
    if (b->home) self->homed++;
    add_active(self, size);
    Py_RETURN_NONE;
}

/* free(pointer) -> 0: cached for reuse on its home stream; > 0: the block's size, which the
 * caller must give back to the driver (keeping it would pass the limit); -1: not a block of this
 * pool; -2: still live, used on other streams (take_uses): the caller records an event on each
 * and frees it again once they have completed. */
static PyObject *Pool_free(Pool *self, PyObject *p) {
    if (PyDict_GET_SIZE(self->uses)) {
        int u = PyDict_Contains(self->uses, p);
        if (u < 0) return NULL;
        if (u) return PyLong_FromLong(-2);
    }
    Bin *b = (Bin *)PyDict_GetItemWithError(self->live, p); /* borrowed */
    if (b == NULL) {
        if (PyErr_Occurred()) return NULL;
        return PyLong_FromLong(-1);
    }
    Py_INCREF(b);
    if (PyDict_DelItem(self->live, p) < 0) {
        Py_DECREF(b);
        return NULL;
    }
    long long size = b->size;
    b->live--;
    if (b->home) self->homed--;
    self->active -= size;
    Bin *to = b->to ? b->to : b; /* b's, or (b retired) the default stream's, held by b */
    int keep = self->limit < 0 || self->active + self->cached + size <= self->limit;
    int rc = keep ? bin_push(to, p) : 0;
    if (keep && rc == 0) self->cached += size;
    Py_DECREF(b);
    if (rc < 0) return NULL;
    return keep ? PyLong_FromLong(0) : PyLong_FromLongLong(size);
}

/* take_cached() -> every cached pointer (the cache is then empty). */
static PyObject *Pool_take_cached(Pool *self, PyObject *unused) {
    PyObject *out = PyList_New(0);
    if (!out) return NULL;
    PyObject *k, *v, *h, *bins;
    Py_ssize_t pos, hpos = 0;
    for (bins = self->free_lists;;) {
        pos = 0;
        while (PyDict_Next(bins, &pos, &k, &v)) {
            Bin *b = (Bin *)v;
            while (b->n) {
                if (PyList_Append(out, b->items[b->n - 1]) < 0) {
                    Py_DECREF(out);
                    return NULL;
                }
                Py_DECREF(b->items[--b->n]);
                self->cached -= b->size;
            }
        }
        if (!PyDict_Next(self->stream_lists, &hpos, &h, &bins)) break;
    }
    /* the user streams with no live block keep no bins (no rehome will come for them) */
    PyObject *idle = PyList_New(0);
    if (!idle) {
        Py_DECREF(out);
        return NULL;
    }
    hpos = 0;
    while (PyDict_Next(self->stream_lists, &hpos, &h, &bins)) {
        int used = 0;
        pos = 0;
        while (!used && PyDict_Next(bins, &pos, &k, &v)) used = ((Bin *)v)->live != 0;
        if (!used && PyList_Append(idle, h) < 0) {
            Py_DECREF(idle);
            Py_DECREF(out);
            return NULL;
        }
    }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(idle); i++)
        if (PyDict_DelItem(self->stream_lists, PyList_GET_ITEM(idle, i)) < 0) {
            Py_DECREF(idle);
            Py_DECREF(out);
            return NULL;
        }
    Py_DECREF(idle);
    for (int i = 0; i < NCACHE; i++) Py_CLEAR(self->c_user[i]); /* none may name a bin dropped here */
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
    Bin *b = (Bin *)PyDict_GetItemWithError(self->live, p);
    if (b == NULL) {
        if (PyErr_Occurred()) return NULL;
        Py_RETURN_NONE;
    }
    Py_INCREF(b->key);
    return b->key;
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

static PyObject *Pool_get_homes(Pool *self, void *c) { return PyLong_FromSsize_t(self->homed); }
static PyObject *Pool_get_active(Pool *self, void *c) { return PyLong_FromLongLong(self->active); }
static PyObject *Pool_get_peak(Pool *self, void *c) { return PyLong_FromLongLong(self->peak); }
static PyObject *Pool_get_cached(Pool *self, void *c) { return PyLong_FromLongLong(self->cached); }

static PyMethodDef Pool_methods[] = {
    {"malloc", (PyCFunction)Pool_malloc, METH_O, NULL},
    {"malloc_on", (PyCFunction)(void (*)(void))Pool_malloc_on, METH_FASTCALL, NULL},
    {"note_use", (PyCFunction)(void (*)(void))Pool_note_use, METH_FASTCALL, NULL},
    {"may_track", (PyCFunction)Pool_may_track, METH_O, NULL},
    {"take_uses", (PyCFunction)Pool_take_uses, METH_O, NULL},
    {"set_blocking", (PyCFunction)(void (*)(void))Pool_set_blocking, METH_FASTCALL, NULL},
    {"rehome", (PyCFunction)Pool_rehome, METH_O, NULL},
    {"has_home", (PyCFunction)Pool_has_home, METH_O, NULL},
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
    {"homed", (getter)Pool_get_homes, NULL, "live blocks whose home is a user stream", NULL},
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
