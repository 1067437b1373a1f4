/* kernelbay-cuda's native helpers, part five: staged copies between pageable host memory and
 * the device (copies.py's pipeline), run by C threads without the GIL.
 *
 * Stager(nthreads) keeps nthreads threads (started at the first run, again in a fork()ed child).
 * run(h2d, fns, ctx, stream, dma, pre, done, dptr, hptr, nbytes, sub, piece, slots, events)
 * -> CUresult moves nbytes between the device address dptr and the pageable host address hptr:
 *
 * - the copy is cut into pieces of `piece` bytes, each ONE DMA on the stream `dma`, through one
 *   of the page-locked `slots` (piece p through slot p % len(slots); `events[i]` is recorded after
 *   each DMA that reads or writes slot i), and into subs of `sub` bytes (piece a multiple of it),
 *   the host side's unit: the caller and min(nthreads, subs - 1) threads claim subs in order;
 * - H2D: a sub is copied into its piece's slot once the slot's previous DMA is done, and whoever
 *   copies a piece's last sub queues the piece's DMA; D2H: the caller queues the first slots'
 *   DMAs while the threads wake, a sub is copied out once its piece's DMA is done, and whoever
 *   copies out a piece's last sub queues the DMA of the piece len(slots) later into that slot.
 *
 * So the DMA engine starts after the first piece (H2D) and the host copies after it (D2H), one
 * DMA of 1 MiB runs at the engine's full rate (where twelve streams of 192 KiB DMAs, one per
 * thread, ran at half of it), and a slow thread holds back only the subs it claimed. `dma` waits
 * for `pre` (recorded on the caller's `stream` first) and the caller's stream for `done`
 * (recorded on `dma` last). run() returns when the host side is done: every sub copied (D2H: the
 * data is in hptr; H2D: hptr may be reused). The GIL is released for the whole run. One run at a
 * time per Stager (copies.py holds its stager's lock around it): the job lives in the Stager while
 * its threads read it. An error stops every thread at its next sub and is returned.
 *
 * The host copies use streaming stores (_hostcopy.c; attribute `nt`). A D2H destination that
 * host_resident() says is not all resident (a fresh np.empty) is first faulted in by 2 MiB blocks,
 * each thread its own block, ahead of the subs (stage_fault): in-order subs alone would send
 * every thread into the same new huge page, which the kernel zeroes while the others wait.
 *
 * fns: the addresses of cuCtxSetCurrent, cuStreamWaitEvent, cuMemcpyHtoDAsync_v2,
 * cuMemcpyDtoHAsync_v2, cuEventRecord and cuEventSynchronize (copies.py takes them from the
 * driver library). A slot is reused only after its event completed (an event never recorded
 * completes at once), so consecutive runs need no other state.
 *
 * C threads, not Python's: a run of a few MiB took 0.5 ms of thread hand-offs and GIL switches
 * through a Python thread pool, several times the copy itself.
 */
#include <pthread.h>
#include <sched.h>
#include <time.h>
#include <string.h>
#include <unistd.h>

typedef int (*st_ctx_t)(void *);
typedef int (*st_wait_t)(void *, void *, unsigned int);
typedef int (*st_h2d_t)(unsigned long long, const void *, size_t, void *);
typedef int (*st_d2h_t)(void *, unsigned long long, size_t, void *);
typedef int (*st_record_t)(void *, void *);
typedef int (*st_sync_t)(void *);

typedef struct {
    st_ctx_t set_ctx;
    st_wait_t wait;
    st_h2d_t h2d;
    st_d2h_t d2h;
    st_record_t record;
    st_sync_t sync;
} StageFns;

#define STAGE_MAX_THREADS 64
#define STAGE_MAX_SLOTS 1024
/* D2H into memory not yet faulted in: the threads fault it in by blocks of this size (a huge
 * page), up to two blocks a thread ahead of the subs being copied out (so that every thread can
 * be in a page fault of its own at once: the kernel zeroes each new page first) */
#define STAGE_FAULT_BLOCK (2LL << 20)
/* how long the caller spins (yielding) for the threads before it sleeps */
#define STAGE_SPIN_NS 200000LL

typedef struct {
    PyObject_HEAD
    int nthreads;
    int nt; /* non-temporal stores in the host copies: 1 H2D, 2 D2H, 3 both (the default) */
    int started; /* threads running in process `pid` */
    pid_t pid;
    pthread_t threads[STAGE_MAX_THREADS];
    pthread_mutex_t mu;
    pthread_cond_t go, finished;
    unsigned long long generation;
    int remaining, stop;
    /* the job of this generation */
    int h2d, n, nslots, err;
    StageFns fns;
    void *ctx, *dma;
    unsigned long long dptr;
    char *hptr;
    long long nbytes, sub, piece, npieces, nsubs, next_sub;
    long long nfault, next_fault; /* D2H into memory not all resident: blocks to fault in */
    void *slots[STAGE_MAX_SLOTS], *slot_ev[STAGE_MAX_SLOTS];
    int *cnt;             /* per piece: subs copied in (H2D) or out (D2H) */
    unsigned char *ready; /* per piece: its DMA is queued and its slot's event recorded for it */
    unsigned char *clear; /* per piece: H2D its slot's previous DMA, D2H its own DMA, known done */
} Stager;

typedef struct {
    Stager *st;
    int i;
} StageArg;

/* Wait until `flag` is set (1) or the run failed (0). */
static int stage_await(Stager *st, unsigned char *flag) {
    while (!__atomic_load_n(flag, __ATOMIC_ACQUIRE)) {
        if (__atomic_load_n(&st->err, __ATOMIC_RELAXED)) return 0;
        sched_yield();
    }
    return 1;
}

/* Keep the run's first error (the others stop at their next sub); returns rc. */
static int stage_fail(Stager *st, int rc) {
    int zero = 0;
    __atomic_compare_exchange_n(&st->err, &zero, rc, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
    return rc;
}

static long long stage_piece_len(Stager *st, long long p) {
    long long off = p * st->piece;
    return st->nbytes - off < st->piece ? st->nbytes - off : st->piece;
}

/* Queue piece p's DMA out of (H2D) or into (D2H) its slot on the DMA stream and record the slot's event. */
static int stage_queue(Stager *st, long long p) {
    const StageFns *f = &st->fns;
    int s = (int)(p % st->nslots), rc;
    unsigned long long dev = st->dptr + (unsigned long long)(p * st->piece);
    size_t n = (size_t)stage_piece_len(st, p);
    rc = st->h2d ? f->h2d(dev, st->slots[s], n, st->dma) : f->d2h(st->slots[s], dev, n, st->dma);
    if (rc == 0) rc = f->record(st->slot_ev[s], st->dma);
    if (rc != 0) return stage_fail(st, rc);
    __atomic_store_n(&st->ready[p], 1, __ATOMIC_RELEASE);
    return 0;
}

/* Piece p's slot event done: once per piece (whoever gets there first asks the driver). */
static int stage_cleared(Stager *st, long long p) {
    if (__atomic_load_n(&st->clear[p], __ATOMIC_ACQUIRE)) return 1;
    int rc = st->fns.sync(st->slot_ev[p % st->nslots]);
    if (rc != 0) {
        stage_fail(st, rc);
        return 0;
    }
    __atomic_store_n(&st->clear[p], 1, __ATOMIC_RELEASE);
    return 1;
}

/* Fault in block b of the D2H destination (the part of the aligned 2 MiB block b inside it).
 * Threads fault disjoint blocks at once, where the in-order subs would have them queue on the
 * same huge page. */
static void stage_fault(Stager *st, long long b) {
    uintptr_t base = (uintptr_t)st->hptr & ~(uintptr_t)(STAGE_FAULT_BLOCK - 1);
    uintptr_t lo = base + (uintptr_t)(b * STAGE_FAULT_BLOCK), hi = lo + (uintptr_t)STAGE_FAULT_BLOCK;
    uintptr_t start = (uintptr_t)st->hptr, end = start + (uintptr_t)st->nbytes;
    host_fault_in(lo < start ? start : lo, hi > end ? end : hi);
}

/* One thread's part of a run (the caller's too): subs claimed in order until none is left. */
static void stage_work(Stager *st) {
    int rc = st->fns.set_ctx(st->ctx);
    if (rc != 0) {
        stage_fail(st, rc);
        return;
    }
    long long per = st->piece / st->sub;
    for (;;) {
        if (__atomic_load_n(&st->err, __ATOMIC_RELAXED)) return;
        long long b = __atomic_load_n(&st->next_fault, __ATOMIC_RELAXED);
        if (b < st->nfault &&
            b * STAGE_FAULT_BLOCK < __atomic_load_n(&st->next_sub, __ATOMIC_RELAXED) * st->sub + 2 * st->n * STAGE_FAULT_BLOCK) {
            b = __atomic_fetch_add(&st->next_fault, 1, __ATOMIC_RELAXED);
            if (b < st->nfault) stage_fault(st, b);
            continue;
        }
        long long j = __atomic_fetch_add(&st->next_sub, 1, __ATOMIC_RELAXED);
        if (j >= st->nsubs) return;
        long long p = j / per, off = j * st->sub, in = off - p * st->piece;
        char *slot = (char *)st->slots[p % st->nslots] + in;
        size_t n = (size_t)(st->nbytes - off < st->sub ? st->nbytes - off : st->sub);
        long long subs = (stage_piece_len(st, p) + st->sub - 1) / st->sub;
        if (st->h2d) {
            /* the slot's last DMA (this run's piece p - nslots, or an earlier run's) is done */
            if (p >= st->nslots && !stage_await(st, &st->ready[p - st->nslots])) return;
            if (!stage_cleared(st, p)) return;
            host_copy(slot, st->hptr + off, n, st->nt & 1);
            if (__atomic_add_fetch(&st->cnt[p], 1, __ATOMIC_ACQ_REL) == subs && stage_queue(st, p) != 0) return;
        } else {
            if (!stage_await(st, &st->ready[p]) || !stage_cleared(st, p)) return;
            host_copy(st->hptr + off, slot, n, st->nt & 2);
            if (__atomic_add_fetch(&st->cnt[p], 1, __ATOMIC_ACQ_REL) == subs && p + st->nslots < st->npieces &&
                stage_queue(st, p + st->nslots) != 0)
                return;
        }
    }
}

static void *stage_thread(void *p) {
    StageArg *a = (StageArg *)p;
    Stager *st = a->st;
    int i = a->i;
    free(a);
    /* generation 0 is "no job yet": a run made before this thread first takes the lock still
     * counts (reading the generation here instead would miss it, and the run would wait forever) */
    unsigned long long seen = 0;
    pthread_mutex_lock(&st->mu);
    for (;;) {
        while (st->generation == seen && !st->stop) pthread_cond_wait(&st->go, &st->mu);
        if (st->stop) break;
        seen = st->generation;
        int mine = i + 1 < st->n; /* the caller is the first of n */
        pthread_mutex_unlock(&st->mu);
        if (mine) stage_work(st);
        pthread_mutex_lock(&st->mu);
        if (mine && __atomic_sub_fetch(&st->remaining, 1, __ATOMIC_RELEASE) == 0) pthread_cond_signal(&st->finished);
    }
    pthread_mutex_unlock(&st->mu);
    return NULL;
}

/* Start the threads (again, in a fork()ed child: the parent's are not there); -1 with an exception. */
static int stage_start(Stager *st) {
    pid_t pid = getpid();
    if (st->started && st->pid == pid) return 0;
    if (st->started) { /* a child of fork(): the parent's threads and lock state are gone */
        pthread_mutex_init(&st->mu, NULL);
        pthread_cond_init(&st->go, NULL);
        pthread_cond_init(&st->finished, NULL);
        st->started = 0;
    }
    st->stop = 0;
    st->generation = 0;
    for (int i = 0; i < st->nthreads; i++) {
        StageArg *a = malloc(sizeof(StageArg));
        if (a == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        a->st = st;
        a->i = i;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setstacksize(&attr, 256 * 1024);
        int err = pthread_create(&st->threads[i], &attr, stage_thread, a);
        pthread_attr_destroy(&attr);
        if (err) {
            free(a);
            /* the threads made so far stay: a later run uses them (nthreads shrinks to them) */
            st->nthreads = i;
            if (i == 0) {
                PyErr_Format(PyExc_OSError, "could not start the copy threads (error %d)", err);
                return -1;
            }
            break;
        }
    }
    st->started = 1;
    st->pid = pid;
    return 0;
}

static int Stager_init(Stager *self, PyObject *args, PyObject *kw) {
    int n;
    if (!PyArg_ParseTuple(args, "i", &n)) return -1;
    if (n < 1 || n > STAGE_MAX_THREADS) {
        PyErr_Format(PyExc_ValueError, "Stager: 1 to %d threads", STAGE_MAX_THREADS);
        return -1;
    }
    if (self->started) {
        PyErr_SetString(PyExc_RuntimeError, "Stager is initialised once");
        return -1;
    }
    self->nthreads = n;
    self->nt = 3;
    pthread_mutex_init(&self->mu, NULL);
    pthread_cond_init(&self->go, NULL);
    pthread_cond_init(&self->finished, NULL);
    return 0;
}

static void Stager_dealloc(Stager *self) {
    if (self->started && self->pid == getpid()) {
        pthread_mutex_lock(&self->mu);
        self->stop = 1;
        pthread_cond_broadcast(&self->go);
        pthread_mutex_unlock(&self->mu);
        Py_BEGIN_ALLOW_THREADS
        for (int i = 0; i < self->nthreads; i++) pthread_join(self->threads[i], NULL);
        Py_END_ALLOW_THREADS
    }
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int stage_ptrs(PyObject *seq, void **out, int max, const char *what) {
    if (!PyTuple_Check(seq) || PyTuple_GET_SIZE(seq) < 1 || PyTuple_GET_SIZE(seq) > max) {
        PyErr_Format(PyExc_ValueError, "Stager.run: %s must be a tuple of 1 to %d addresses", what, max);
        return -1;
    }
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(seq); i++) {
        out[i] = PyLong_AsVoidPtr(PyTuple_GET_ITEM(seq, i));
        if (out[i] == NULL && PyErr_Occurred()) return -1;
    }
    return (int)PyTuple_GET_SIZE(seq);
}

static PyObject *Stager_run(Stager *self, PyObject *args) {
    int h2d;
    PyObject *fns, *slots, *events;
    unsigned long long ctx, stream, dma, pre, done, dptr, hptr;
    long long nbytes, sub, piece;
    if (!PyArg_ParseTuple(args, "pO!KKKKKKKLLLO!O!", &h2d, &PyTuple_Type, &fns, &ctx, &stream, &dma, &pre, &done, &dptr,
                          &hptr, &nbytes, &sub, &piece, &PyTuple_Type, &slots, &PyTuple_Type, &events))
        return NULL;
    void *fp[6];
    if (stage_ptrs(fns, fp, 6, "fns") != 6) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "Stager.run: fns holds six addresses");
        return NULL;
    }
    if (sub <= 0 || nbytes <= 0 || piece < sub || piece % sub != 0) {
        PyErr_SetString(PyExc_ValueError, "Stager.run: sub and nbytes must be > 0, piece a multiple of sub");
        return NULL;
    }
    int nslots = stage_ptrs(slots, self->slots, STAGE_MAX_SLOTS, "slots");
    if (nslots < 0) return NULL;
    if (stage_ptrs(events, self->slot_ev, STAGE_MAX_SLOTS, "events") != nslots) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "Stager.run: one event per slot");
        return NULL;
    }
    if (stage_start(self) < 0) return NULL;
    long long npieces = (nbytes + piece - 1) / piece, nsubs = (nbytes + sub - 1) / sub;
    int n = (int)(nsubs < self->nthreads + 1 ? nsubs : self->nthreads + 1);
    int *cnt = calloc((size_t)npieces, sizeof(int));
    unsigned char *flags = calloc((size_t)npieces * 2, 1);
    if (cnt == NULL || flags == NULL) {
        free(cnt);
        free(flags);
        return PyErr_NoMemory();
    }
    int rc = 0;
    Py_BEGIN_ALLOW_THREADS
    StageFns fv = {(st_ctx_t)fp[0], (st_wait_t)fp[1], (st_h2d_t)fp[2], (st_d2h_t)fp[3], (st_record_t)fp[4], (st_sync_t)fp[5]};
    /* the DMA stream runs after the work already queued on the caller's stream */
    rc = fv.record((void *)(uintptr_t)pre, (void *)(uintptr_t)stream);
    if (rc == 0) rc = fv.wait((void *)(uintptr_t)dma, (void *)(uintptr_t)pre, 0);
    /* a destination not all faulted in yet (a fresh np.empty): fault it in by blocks, in parallel */
    long long nfault = 0;
    if (rc == 0 && !h2d && !host_resident((const char *)(uintptr_t)hptr, nbytes)) {
        uintptr_t base = (uintptr_t)hptr & ~(uintptr_t)(STAGE_FAULT_BLOCK - 1);
        nfault = (long long)(((uintptr_t)hptr + (uintptr_t)nbytes - base + STAGE_FAULT_BLOCK - 1) / STAGE_FAULT_BLOCK);
    }
    if (rc == 0) {
        pthread_mutex_lock(&self->mu);
        self->h2d = h2d;
        self->n = n;
        self->fns = fv;
        self->ctx = (void *)(uintptr_t)ctx;
        self->dma = (void *)(uintptr_t)dma;
        self->dptr = dptr;
        self->hptr = (char *)(uintptr_t)hptr;
        self->nbytes = nbytes;
        self->sub = sub;
        self->piece = piece;
        self->npieces = npieces;
        self->nsubs = nsubs;
        self->nslots = nslots;
        self->next_sub = 0;
        self->nfault = nfault;
        self->next_fault = 0;
        self->cnt = cnt;
        self->ready = flags;
        self->clear = flags + npieces;
        self->err = 0;
        self->remaining = n - 1;
        if (n > 1) {
            self->generation++;
            pthread_cond_broadcast(&self->go);
        }
        pthread_mutex_unlock(&self->mu);
        if (!h2d) /* the first slots' DMAs, while the threads wake */
            for (long long q = 0; q < npieces && q < nslots; q++)
                if (stage_queue(self, q) != 0) break;
        stage_work(self);
        /* Then wait for the threads: spinning a little first, since a sleeping caller pays a
         * wake-up again (30-100 us on a virtual machine, as long as a 4 MiB copy's DMA). */
        struct timespec t0, t;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        while (__atomic_load_n(&self->remaining, __ATOMIC_ACQUIRE) > 0) {
            clock_gettime(CLOCK_MONOTONIC, &t);
            if ((t.tv_sec - t0.tv_sec) * 1000000000LL + (t.tv_nsec - t0.tv_nsec) > STAGE_SPIN_NS) break;
            sched_yield(); /* another runnable thread of the machine goes first */
        }
        pthread_mutex_lock(&self->mu);
        while (self->remaining > 0) pthread_cond_wait(&self->finished, &self->mu);
        pthread_mutex_unlock(&self->mu);
        rc = self->err;
        /* later work on the caller's stream waits for the last DMA */
        if (rc == 0) rc = fv.record((void *)(uintptr_t)done, (void *)(uintptr_t)dma);
        if (rc == 0) rc = fv.wait((void *)(uintptr_t)stream, (void *)(uintptr_t)done, 0);
    }
    Py_END_ALLOW_THREADS
    free(cnt);
    free(flags);
    return PyLong_FromLong(rc);
}

static PyMethodDef Stager_methods[] = {
    {"run", (PyCFunction)Stager_run, METH_VARARGS,
     "run(h2d, fns, ctx, stream, dma, pre, done, dptr, hptr, nbytes, sub, piece, slots, events) -> CUresult"},
    {NULL, NULL, 0, NULL},
};

static PyObject *Stager_get_threads(Stager *self, void *c) {
    (void)c;
    return PyLong_FromLong(self->nthreads);
}

static PyObject *Stager_get_nt(Stager *self, void *c) {
    (void)c;
    return PyLong_FromLong(self->nt);
}

static int Stager_set_nt(Stager *self, PyObject *v, void *c) {
    (void)c;
    long x = v == NULL ? -1 : PyLong_AsLong(v);
    if (x == -1 && PyErr_Occurred()) return -1;
    if (x < 0 || x > 3) {
        PyErr_SetString(PyExc_ValueError, "Stager.nt: 0 to 3");
        return -1;
    }
    self->nt = (int)x; /* read by the next run (set between runs: copies.py holds the lock) */
    return 0;
}

static PyGetSetDef Stager_getset[] = {
    {"threads", (getter)Stager_get_threads, NULL, "the copy threads", NULL},
    {"nt", (getter)Stager_get_nt, (setter)Stager_set_nt,
     "non-temporal stores in the host copies: 1 H2D, 2 D2H, 3 both", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject StagerType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "_kbcuda_native.Stager",
    .tp_basicsize = sizeof(Stager),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "C threads that run staged pageable copies without the GIL.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Stager_init,
    .tp_dealloc = (destructor)Stager_dealloc,
    .tp_methods = Stager_methods,
    .tp_getset = Stager_getset,
};

static int stage_add_functions(PyObject *m) {
    if (PyType_Ready(&StagerType) < 0) return -1;
    Py_INCREF(&StagerType);
    if (PyModule_AddObject(m, "Stager", (PyObject *)&StagerType) < 0) {
        Py_DECREF(&StagerType);
        return -1;
    }
    return 0;
}
