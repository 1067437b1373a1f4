/* kernelbay-cuda's native helpers, part four: the tracer's CUPTI timer (cupti.py).
 *
 * No CUPTI header is needed to build this (the wheel is built where there is none): cupti.py
 * loads libcupti with ctypes and hands the addresses of the few functions used to
 * cupti_set_api(); the enum values and record offsets below are CUPTI's, checked against the
 * real headers by tests/trace/test_cupti_layout.py (CUDA 12.9's and 13.0's cupti_activity.h:
 * CUpti_ActivityKernel4/9/10, CUpti_ActivityMemcpy5/6, CUpti_ActivityMemset3/4,
 * CUpti_ActivityExternalCorrelation). Only fields at the same offset in every one are read.
 *
 *   cupti_mark(device, stream)  the hot path. Alternates per thread: the first call pushes a
 *                    new external correlation id (cuptiActivityPushExternalCorrelationId,
 *                    CUSTOM0) and returns it; the next pops it and returns it negated. The CUDA
 *                    calls made in between (the launch or copy) get an EXTERNAL_CORRELATION
 *                    record tying CUPTI's correlation id to ours. None where it cannot mark.
 *   cupti_cancel(mark)  the start mark of a call that raised: pops it (no end mark will come).
 *   cupti_resolve(starts, ends, host_t0s) -> (begins, ends): perf_counter_ns spans of the
 *                    records received so far (cupti.py synchronizes and flushes first), None
 *                    where unknown; then drops what is older than two resolves.
 *   cupti_feed(records)  the parse step of the buffer-completed callback, for a list of
 *                    records as bytes (tests build them with struct; no GPU needed).
 *
 * Records arrive on CUPTI's own thread (the buffer-completed callback): two tables, guarded by
 * one mutex, never touch Python. `corr` maps CUPTI's correlation id to our external id and/or
 * the device span seen for it (whichever record came first waits for the other); once both
 * are known the span is folded into `ext` (external id -> min start, max end: a copy may be
 * several records, a hook several driver calls).
 *
 * Clock: where cuptiActivityRegisterTimestampCallback exists, CUPTI takes its timestamps from
 * clock_gettime(CLOCK_MONOTONIC), which is what time.perf_counter_ns() reads on Linux, so
 * record times are host times (offset 0); otherwise the offset between cuptiGetTimestamp() and
 * CLOCK_MONOTONIC is the middle of the narrowest of five bracketed reads.
 */
#include <Python.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* CUpti_ActivityKind, CUpti_ExternalCorrelationKind, CUpti_ActivityFlag values. */
#define CU_KIND_MEMCPY 1
#define CU_KIND_MEMSET 2
#define CU_KIND_KERNEL 3
#define CU_KIND_DRIVER 4
#define CU_KIND_CONCURRENT_KERNEL 10
#define CU_KIND_EXTERNAL_CORRELATION 39
#define CU_EXT_CUSTOM0 3
#define CU_FLUSH_FORCED 1
/* Record offsets (bytes): kind is a uint32 at 0 in every record. */
#define CU_OFF_START 16        /* uint64, kernel/memcpy/memset */
#define CU_OFF_END 24          /* uint64, kernel/memcpy/memset */
#define CU_OFF_KERNEL_CORR 92  /* uint32, CUpti_ActivityKernel4..10 */
#define CU_OFF_COPY_CORR 44    /* uint32, CUpti_ActivityMemcpy5/6, CUpti_ActivityMemset3/4 */
#define CU_OFF_EXT_ID 8        /* uint64, CUpti_ActivityExternalCorrelation */
#define CU_OFF_EXT_CORR 16     /* uint32, CUpti_ActivityExternalCorrelation */
#define CU_REC_MIN 96          /* the largest offset read + 4: shorter records are ignored */
#define CU_BUFFER_BYTES (8u << 20)

typedef int (*cu_push_t)(int kind, uint64_t id);
typedef int (*cu_pop_t)(int kind, uint64_t *id);
typedef int (*cu_flush_t)(uint32_t flag);
typedef int (*cu_next_t)(uint8_t *buffer, size_t valid, void **record);
typedef int (*cu_kind_t)(int kind);
typedef void (*cu_req_t)(uint8_t **buffer, size_t *size, size_t *max_records);
typedef void (*cu_done_t)(void *ctx, uint32_t stream, uint8_t *buffer, size_t size, size_t valid);
typedef int (*cu_callbacks_t)(cu_req_t requested, cu_done_t completed);
typedef uint64_t (*cu_ts_func_t)(void);
typedef int (*cu_ts_register_t)(cu_ts_func_t f);
typedef int (*cu_ts_get_t)(uint64_t *ts);

static const int cu_kinds[] = {CU_KIND_DRIVER, CU_KIND_CONCURRENT_KERNEL, CU_KIND_MEMCPY, CU_KIND_MEMSET,
                               CU_KIND_EXTERNAL_CORRELATION};
#define CU_NKINDS ((int)(sizeof(cu_kinds) / sizeof(cu_kinds[0])))

typedef struct {
    uint64_t key; /* 0: empty */
    uint64_t ext; /* corr table: our external id, 0 while unknown */
    uint64_t start, end; /* start == UINT64_MAX: no span yet */
    uint32_t gen;
    uint32_t used; /* ext table: looked up by a resolve */
} cu_entry;

typedef struct {
    cu_entry *e;
    size_t cap, n; /* cap a power of two (or 0) */
} cu_table;

static struct {
    cu_push_t push;
    cu_pop_t pop;
    cu_flush_t flush;
    cu_next_t next;
    cu_kind_t enable, disable;
    cu_callbacks_t callbacks;
    cu_ts_register_t ts_register;
    cu_ts_get_t ts_get;
    int enabled, callbacks_set, host_clock;
    long long offset; /* host ns = record ns + offset */
    uint64_t next_id;
    pthread_mutex_t lock;
    cu_table corr, ext;
    uint32_t gen;
    unsigned long long records, buffers, lost; /* lost: a table could not grow */
} cu = {.lock = PTHREAD_MUTEX_INITIALIZER};

/* Per thread: an id pushed by a start mark and not yet popped (open: a start mark was made,
 * id 0 if its push failed). */
static __thread struct {
    int open;
    uint64_t id;
} cu_tls;

static uint64_t cu_monotonic(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* --- tables (open addressing, linear probing; rebuilt, not deleted from) ---------------- */

static size_t cu_slot(const cu_table *t, uint64_t key) {
    return (size_t)((key * 0x9E3779B97F4A7C15ull) >> 17) & (t->cap - 1);
}

static int cu_grow(cu_table *t) {
    size_t cap = t->cap ? t->cap * 2 : 4096;
    cu_entry *e = calloc(cap, sizeof(cu_entry));
    if (e == NULL) return -1;
    cu_table nt = {e, cap, 0};
    for (size_t i = 0; i < t->cap; i++) {
        if (t->e[i].key == 0) continue;
        size_t j = cu_slot(&nt, t->e[i].key);
        while (nt.e[j].key != 0) j = (j + 1) & (cap - 1);
        nt.e[j] = t->e[i];
        nt.n++;
    }
    free(t->e);
    *t = nt;
    return 0;
}

/* The entry of `key`, made (empty span, this generation) where there is none; NULL: no memory. */
static cu_entry *cu_get(cu_table *t, uint64_t key, int make) {
    if (t->cap) {
        size_t j = cu_slot(t, key);
        while (t->e[j].key != 0) {
            if (t->e[j].key == key) return &t->e[j];
            j = (j + 1) & (t->cap - 1);
        }
    }
    if (!make) return NULL;
    if ((t->n + 1) * 2 > t->cap && cu_grow(t) < 0) return NULL;
    size_t j = cu_slot(t, key);
    while (t->e[j].key != 0) j = (j + 1) & (t->cap - 1);
    cu_entry *e = &t->e[j];
    memset(e, 0, sizeof(*e));
    e->key = key;
    e->start = UINT64_MAX;
    e->gen = cu.gen;
    t->n++;
    return e;
}

/* Keep the entries made in the last two generations and not used; the rest go. */
static void cu_prune(cu_table *t) {
    if (t->cap == 0) return;
    cu_table nt = {NULL, t->cap, 0};
    while (nt.cap > 4096 && t->n * 8 < nt.cap) nt.cap /= 2; /* shrink after a burst */
    nt.e = calloc(nt.cap, sizeof(cu_entry));
    if (nt.e == NULL) return;
    for (size_t i = 0; i < t->cap; i++) {
        cu_entry *e = &t->e[i];
        if (e->key == 0 || e->used || cu.gen - e->gen > 2) continue;
        size_t j = cu_slot(&nt, e->key);
        while (nt.e[j].key != 0) j = (j + 1) & (nt.cap - 1);
        nt.e[j] = *e;
        nt.n++;
    }
    free(t->e);
    *t = nt;
}

/* --- parsing (the lock held) ------------------------------------------------------------- */

static void cu_fold(uint64_t ext, uint64_t start, uint64_t end) {
    cu_entry *x = cu_get(&cu.ext, ext, 1);
    if (x == NULL) {
        cu.lost++;
        return;
    }
    if (start < x->start) x->start = start;
    if (end > x->end) x->end = end;
}

static void cu_parse(const uint8_t *r) {
    uint32_t kind, corr;
    memcpy(&kind, r, 4);
    if (kind == CU_KIND_EXTERNAL_CORRELATION) {
        uint64_t ext;
        memcpy(&ext, r + CU_OFF_EXT_ID, 8);
        memcpy(&corr, r + CU_OFF_EXT_CORR, 4);
        if (ext == 0 || corr == 0) return;
        cu_entry *c = cu_get(&cu.corr, corr, 1);
        if (c == NULL) {
            cu.lost++;
            return;
        }
        c->ext = ext;
        if (c->start != UINT64_MAX) cu_fold(ext, c->start, c->end);
        return;
    }
    size_t off;
    if (kind == CU_KIND_CONCURRENT_KERNEL || kind == CU_KIND_KERNEL)
        off = CU_OFF_KERNEL_CORR;
    else if (kind == CU_KIND_MEMCPY || kind == CU_KIND_MEMSET)
        off = CU_OFF_COPY_CORR;
    else
        return; /* driver API records and anything else: only there for the correlation */
    uint64_t start, end;
    memcpy(&start, r + CU_OFF_START, 8);
    memcpy(&end, r + CU_OFF_END, 8);
    memcpy(&corr, r + off, 4);
    cu.records++;
    if (corr == 0 || start == 0 || end < start) return;
    cu_entry *c = cu_get(&cu.corr, corr, 1);
    if (c == NULL) {
        cu.lost++;
        return;
    }
    if (start < c->start) c->start = start;
    if (end > c->end) c->end = end;
    if (c->ext != 0) cu_fold(c->ext, start, end);
}

/* --- CUPTI's buffer callbacks (its thread; no Python) ------------------------------------- */

static void cu_requested(uint8_t **buffer, size_t *size, size_t *max_records) {
    void *p = NULL;
    if (posix_memalign(&p, 8, CU_BUFFER_BYTES) != 0) p = NULL;
    *buffer = p;
    *size = p ? CU_BUFFER_BYTES : 0;
    *max_records = 0;
}

static void cu_completed(void *ctx, uint32_t stream, uint8_t *buffer, size_t size, size_t valid) {
    (void)ctx;
    (void)stream;
    (void)size;
    if (buffer == NULL) return;
    pthread_mutex_lock(&cu.lock);
    cu.buffers++;
    void *rec = NULL;
    while (valid > 0 && cu.next != NULL && cu.next(buffer, valid, &rec) == 0) cu_parse(rec);
    pthread_mutex_unlock(&cu.lock);
    free(buffer);
}

static uint64_t cu_timestamp(void) { return cu_monotonic(); }

/* --- the module's functions ----------------------------------------------------------------- */

static PyObject *cupti_mark(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
    (void)mod;
    (void)args;
    (void)nargs; /* (device, stream): the external id covers whatever the thread calls */
    if (cu_tls.open) { /* the end mark, also after a disable, so the thread's stack stays even */
        uint64_t id = cu_tls.id, last = 0;
        cu_tls.open = 0;
        if (id == 0 || cu.pop == NULL || cu.pop(CU_EXT_CUSTOM0, &last) != 0) Py_RETURN_NONE;
        return PyLong_FromLongLong(-(long long)id);
    }
    if (!cu.enabled) Py_RETURN_NONE;
    uint64_t id = __atomic_add_fetch(&cu.next_id, 1, __ATOMIC_RELAXED);
    cu_tls.open = 1;
    cu_tls.id = cu.push(CU_EXT_CUSTOM0, id) == 0 ? id : 0;
    if (cu_tls.id == 0) Py_RETURN_NONE;
    return PyLong_FromUnsignedLongLong(id);
}

static PyObject *cupti_cancel(PyObject *mod, PyObject *arg) {
    (void)mod;
    long long m = PyLong_AsLongLong(arg);
    if (m == -1 && PyErr_Occurred()) return NULL;
    if (cu_tls.open && m > 0 && cu_tls.id == (uint64_t)m) {
        uint64_t last = 0;
        cu_tls.open = 0;
        if (cu.pop != NULL) cu.pop(CU_EXT_CUSTOM0, &last);
    }
    Py_RETURN_NONE;
}

static PyObject *cupti_flush(PyObject *mod, PyObject *unused) {
    (void)mod;
    (void)unused;
    int rc = 0;
    if (cu.flush != NULL) {
        Py_BEGIN_ALLOW_THREADS
        rc = cu.flush(CU_FLUSH_FORCED);
        Py_END_ALLOW_THREADS
    }
    return PyLong_FromLong(rc);
}

/* A start mark as an id (0: none), or -1 with an exception set. */
static long long cu_mark_id(PyObject *m, int sign) {
    if (m == Py_None) return 0;
    long long v = PyLong_AsLongLong(m);
    if (v == -1 && PyErr_Occurred()) return -1;
    v *= sign;
    return v > 0 ? v : 0;
}

static PyObject *cupti_resolve(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
    (void)mod;
    PyObject *starts = NULL, *ends = NULL, *t0s = NULL, *b = NULL, *e = NULL, *out = NULL;
    Py_ssize_t n = tm_batch("cupti_resolve", args, nargs, &starts, &ends, &t0s, &b, &e);
    if (n < 0) goto done;
    pthread_mutex_lock(&cu.lock);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *s0 = Py_None, *s1 = Py_None;
        long long a = cu_mark_id(PySequence_Fast_GET_ITEM(starts, i), 1);
        long long z = a < 0 ? -1 : cu_mark_id(PySequence_Fast_GET_ITEM(ends, i), -1);
        if (a < 0 || z < 0) goto unlock;
        cu_entry *x = a > 0 && z == a ? cu_get(&cu.ext, (uint64_t)a, 0) : NULL;
        if (x != NULL && x->start != UINT64_MAX) {
            x->used = 1;
            long long begin = (long long)x->start + cu.offset, end = (long long)x->end + cu.offset;
            if (tm_span(PySequence_Fast_GET_ITEM(t0s, i), begin, end, &s0, &s1) < 0) goto unlock;
        } else {
            Py_INCREF(Py_None);
            Py_INCREF(Py_None);
        }
        PyList_SET_ITEM(b, i, s0);
        PyList_SET_ITEM(e, i, s1);
    }
    cu.gen++;
    cu_prune(&cu.ext);
    cu_prune(&cu.corr);
    out = PyTuple_Pack(2, b, e);
unlock:
    pthread_mutex_unlock(&cu.lock);
done:
    Py_XDECREF(starts);
    Py_XDECREF(ends);
    Py_XDECREF(t0s);
    Py_XDECREF(b);
    Py_XDECREF(e);
    return out;
}

static PyObject *cupti_feed(PyObject *mod, PyObject *records) {
    (void)mod;
    PyObject *seq = PySequence_Fast(records, "cupti_feed(): a list of records (bytes)");
    if (seq == NULL) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *r = PySequence_Fast_GET_ITEM(seq, i);
        if (!PyBytes_Check(r) || PyBytes_GET_SIZE(r) < CU_REC_MIN) {
            PyErr_Format(PyExc_ValueError, "cupti_feed(): record %zd is not bytes of at least %d", i, CU_REC_MIN);
            Py_DECREF(seq);
            return NULL;
        }
    }
    pthread_mutex_lock(&cu.lock);
    for (Py_ssize_t i = 0; i < n; i++) cu_parse((const uint8_t *)PyBytes_AS_STRING(PySequence_Fast_GET_ITEM(seq, i)));
    pthread_mutex_unlock(&cu.lock);
    Py_DECREF(seq);
    Py_RETURN_NONE;
}

/* cupti_set_api(push, pop, flush, next_record, enable, disable, register_callbacks,
 *               get_timestamp, register_timestamp_callback or 0): the functions' addresses. */
static PyObject *cupti_set_api(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
    (void)mod;
    void *p[9];
    if (nargs != 9) {
        PyErr_Format(PyExc_TypeError, "cupti_set_api() takes 9 addresses, got %zd", nargs);
        return NULL;
    }
    for (int i = 0; i < 9; i++) {
        unsigned long long v = PyLong_AsUnsignedLongLong(args[i]);
        if (v == (unsigned long long)-1 && PyErr_Occurred()) return NULL;
        p[i] = (void *)(uintptr_t)v;
        if (p[i] == NULL && i < 8) {
            PyErr_Format(PyExc_ValueError, "cupti_set_api(): address %d is null", i);
            return NULL;
        }
    }
    if (cu.push == (cu_push_t)p[0] && cu.pop == (cu_pop_t)p[1] && cu.flush == (cu_flush_t)p[2] &&
        cu.next == (cu_next_t)p[3] && cu.enable == (cu_kind_t)p[4] && cu.disable == (cu_kind_t)p[5] &&
        cu.callbacks == (cu_callbacks_t)p[6] && cu.ts_get == (cu_ts_get_t)p[7] &&
        cu.ts_register == (cu_ts_register_t)p[8])
        Py_RETURN_NONE; /* the same library: its callbacks stay registered */
    if (cu.enabled) {
        PyErr_SetString(PyExc_RuntimeError, "cupti_set_api(): CUPTI activities are enabled; disable them first");
        return NULL;
    }
    cu.push = (cu_push_t)p[0];
    cu.pop = (cu_pop_t)p[1];
    cu.flush = (cu_flush_t)p[2];
    cu.next = (cu_next_t)p[3];
    cu.enable = (cu_kind_t)p[4];
    cu.disable = (cu_kind_t)p[5];
    cu.callbacks = (cu_callbacks_t)p[6];
    cu.ts_get = (cu_ts_get_t)p[7];
    cu.ts_register = (cu_ts_register_t)p[8];
    cu.callbacks_set = 0; /* registered with this library at the next enable */
    Py_RETURN_NONE;
}

/* Enable the activity kinds: None, or (what failed, CUPTI status) with nothing left enabled. */
static PyObject *cupti_enable(PyObject *mod, PyObject *unused) {
    (void)mod;
    (void)unused;
    if (cu.enabled) Py_RETURN_NONE;
    if (cu.enable == NULL) return Py_BuildValue("(si)", "cupti_set_api() was not called", -1);
    if (!cu.callbacks_set) {
        int rc = cu.callbacks(cu_requested, cu_completed);
        if (rc != 0) return Py_BuildValue("(si)", "cuptiActivityRegisterCallbacks", rc);
        cu.callbacks_set = 1;
        /* Before the first enable, as CUPTI asks: its timestamps then are CLOCK_MONOTONIC. */
        cu.host_clock = cu.ts_register != NULL && cu.ts_register(cu_timestamp) == 0;
    }
    for (int k = 0; k < CU_NKINDS; k++) {
        int rc = cu.enable(cu_kinds[k]);
        if (rc != 0) {
            for (int j = 0; j < k; j++) cu.disable(cu_kinds[j]);
            return Py_BuildValue("(si)",
                                 k == 0 ? "cuptiActivityEnable(DRIVER)"
                                 : k == 1 ? "cuptiActivityEnable(CONCURRENT_KERNEL)"
                                 : k == 2 ? "cuptiActivityEnable(MEMCPY)"
                                 : k == 3 ? "cuptiActivityEnable(MEMSET)"
                                          : "cuptiActivityEnable(EXTERNAL_CORRELATION)",
                                 rc);
        }
    }
    if (cu.host_clock) {
        cu.offset = 0;
    } else {
        long long best = -1;
        for (int i = 0; i < 5; i++) {
            uint64_t ts = 0, before = cu_monotonic();
            if (cu.ts_get(&ts) != 0) continue;
            uint64_t after = cu_monotonic();
            if (best < 0 || (long long)(after - before) < best) {
                best = (long long)(after - before);
                cu.offset = (long long)(before + (after - before) / 2) - (long long)ts;
            }
        }
    }
    cu.enabled = 1;
    Py_RETURN_NONE;
}

static PyObject *cupti_disable(PyObject *mod, PyObject *unused) {
    (void)mod;
    (void)unused;
    if (!cu.enabled) Py_RETURN_NONE;
    cu.enabled = 0;
    for (int k = 0; k < CU_NKINDS; k++) cu.disable(cu_kinds[k]);
    Py_BEGIN_ALLOW_THREADS
    cu.flush(CU_FLUSH_FORCED);
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

/* The clock and the tables: what cupti.py logs and the tests check. */
static PyObject *cupti_state(PyObject *mod, PyObject *unused) {
    (void)mod;
    (void)unused;
    pthread_mutex_lock(&cu.lock);
    PyObject *d = Py_BuildValue("{s:i,s:s,s:L,s:n,s:n,s:K,s:K,s:K,s:K}", "enabled", cu.enabled, "clock",
                                cu.host_clock ? "callback" : "offset", "offset", cu.offset, "pending_corr",
                                (Py_ssize_t)cu.corr.n, "pending_ext", (Py_ssize_t)cu.ext.n, "records", cu.records,
                                "buffers", cu.buffers, "lost", cu.lost, "last_id", (unsigned long long)cu.next_id);
    pthread_mutex_unlock(&cu.lock);
    return d;
}

static PyObject *cupti_reset(PyObject *mod, PyObject *unused) {
    (void)mod;
    (void)unused;
    pthread_mutex_lock(&cu.lock);
    free(cu.corr.e);
    free(cu.ext.e);
    memset(&cu.corr, 0, sizeof(cu.corr));
    memset(&cu.ext, 0, sizeof(cu.ext));
    cu.records = cu.buffers = cu.lost = 0;
    pthread_mutex_unlock(&cu.lock);
    Py_RETURN_NONE;
}

static PyObject *cupti_host_ns(PyObject *mod, PyObject *unused) {
    (void)mod;
    (void)unused;
    return PyLong_FromUnsignedLongLong(cu_monotonic());
}

static PyMethodDef cupti_functions[] = {
    {"cupti_mark", (PyCFunction)(void (*)(void))cupti_mark, METH_FASTCALL, "cupti_mark(device, stream) -> mark or None"},
    {"cupti_cancel", (PyCFunction)cupti_cancel, METH_O, "cupti_cancel(start mark): pop it (its call raised)"},
    {"cupti_flush", (PyCFunction)cupti_flush, METH_NOARGS, "cupti_flush() -> CUPTI status (forced flush)"},
    {"cupti_resolve", (PyCFunction)(void (*)(void))cupti_resolve, METH_FASTCALL,
     "cupti_resolve(starts, ends, host_t0s) -> (begins, ends)"},
    {"cupti_feed", (PyCFunction)cupti_feed, METH_O, "cupti_feed(records): parse records given as bytes"},
    {"cupti_set_api", (PyCFunction)(void (*)(void))cupti_set_api, METH_FASTCALL, "cupti_set_api(9 addresses)"},
    {"cupti_enable", (PyCFunction)cupti_enable, METH_NOARGS, "cupti_enable() -> None or (what failed, status)"},
    {"cupti_disable", (PyCFunction)cupti_disable, METH_NOARGS, "cupti_disable(): disable and flush"},
    {"cupti_state", (PyCFunction)cupti_state, METH_NOARGS, "cupti_state() -> dict"},
    {"cupti_reset", (PyCFunction)cupti_reset, METH_NOARGS, "cupti_reset(): empty the tables"},
    {"cupti_host_ns", (PyCFunction)cupti_host_ns, METH_NOARGS, "cupti_host_ns() -> CLOCK_MONOTONIC ns"},
    {NULL, NULL, 0, NULL},
};

/* Adds the cupti_* functions to the module: called by _timer.c's timer_add_type. */
static int cupti_add_functions(PyObject *m) { return PyModule_AddFunctions(m, cupti_functions); }
