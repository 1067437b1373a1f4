/* kernelbay-cuda's native helpers, part five: staged copies between pageable host memory and
 * the device (copies.py's pipeline), run by C threads without the GIL.
 *
 * Stager(nthreads) keeps nthreads threads (started at the first run, again in a fork()ed child).
 * run(h2d, fns, ctx, pre, dptr, hptr, nbytes, chunk, workers) -> [CUresult per share]
 * splits the copy into chunks of `chunk` bytes and the chunks into n shares (n: as many as there
 * are chunks, at most len(workers) and nthreads + 1), share i a span of neighbouring chunks (so
 * that two threads seldom fault in the same page of a fresh destination). `workers` holds one
 * tuple per share: (stream, done event, (pinned buffer addresses), (one event per buffer)). The
 * caller runs share 0 itself (it is awake) and thread t share t + 1. Each makes `ctx` current,
 * waits on its stream for `pre` (recorded on the caller's stream), moves the chunks it claims
 * through its pinned buffers on its stream -- its own span's first, then what is left of the
 * others' (stage_claim: threads wake at different times) -- and records `done`; run() returns
 * when every share's host side is done (the caller spins a little, yielding, before it sleeps
 * on the rest; it then makes its stream wait for each `done`). The GIL is released for the whole
 * run. One run at a time per Stager (copies.py holds its stager's lock around it): the job lives
 * in the Stager while its threads read it.
 *
 * fns: the addresses of cuCtxSetCurrent, cuStreamWaitEvent, cuMemcpyHtoDAsync_v2,
 * cuMemcpyDtoHAsync_v2, cuEventRecord and cuEventSynchronize (copies.py takes them from the
 * driver library). A buffer is reused only after its event completed (an event never recorded
 * completes at once), so consecutive runs need no other state.
 *
 * One thread per worker, not Python's: a run of a few MiB took 0.5 ms of thread hand-offs and
 * GIL switches through a Python thread pool, several times the copy itself.
 */
#include <pthread.h>
#include <sched.h>
#include <time.h>
#include <string.h>
#include <unistd.h>

typedef int (*st_wait_t)(void *, void *, unsigned int);
typedef int (*st_h2d_t)(unsigned long long, const void *, size_t, void *);
typedef int (*st_d2h_t)(void *, unsigned long long, size_t, void *);
typedef int (*st_record_t)(void *, void *);
typedef int (*st_sync_t)(void *);

typedef struct {
    st_wait_t wait;
    st_h2d_t h2d;
    st_d2h_t d2h;
    st_record_t record;
    st_sync_t sync;
} StageFns;

#define STAGE_MAX_BUFS 16
#define STAGE_MAX_THREADS 64
/* how long the caller spins (yielding) for the threads' shares before it sleeps */
#define STAGE_SPIN_NS 200000LL

typedef int (*st_ctx_t)(void *);

typedef struct {
    long long next, end; /* the span's chunks not yet claimed: [next, end) */
} StageSpan;

typedef struct {
    void *stream, *done;
    void *bufs[STAGE_MAX_BUFS], *events[STAGE_MAX_BUFS];
    int k;
    int rc;
} StageWorker;

typedef struct {
    PyObject_HEAD
    int nthreads;
    int started; /* threads running in process `pid` */
    pid_t pid;
    pthread_t threads[STAGE_MAX_THREADS];
    pthread_mutex_t mu;
    pthread_cond_t go, finished;
    unsigned long long generation;
    int remaining, stop;
    /* the job of this generation */
    int h2d, n;
    StageFns fns;
    st_ctx_t set_ctx;
    void *ctx, *pre;
    unsigned long long dptr;
    char *hptr;
    long long nbytes, chunk;
    StageWorker w[STAGE_MAX_THREADS];
    StageSpan spans[STAGE_MAX_THREADS];
} Stager;

typedef struct {
    Stager *st;
    int i;
} StageArg;

/* The next chunk for the share `home` (-1: none left): from its own span first, then, once that
 * is done, from the other shares' spans in turn (a thread that woke late finds its span taken
 * over by those that finished theirs: on a virtual machine a thread can take 300 us to wake, as
 * long as the whole copy). Claims only move forward, so once this returns -1 every later call
 * does too. */
static long long stage_claim(Stager *st, int home, int *cursor) {
    for (;;) {
        StageSpan *sp = &st->spans[*cursor];
        if (__atomic_load_n(&sp->next, __ATOMIC_RELAXED) < sp->end) {
            long long j = __atomic_fetch_add(&sp->next, 1, __ATOMIC_RELAXED);
            if (j < sp->end) return j;
        }
        int next = (*cursor + 1) % st->n;
        if (next == home) return -1;
        *cursor = next;
    }
}

/* H2D: copy each claimed chunk into buffer c % K (after that buffer's previous DMA) and queue its
 * DMA. D2H: queue the DMAs of the first K claimed chunks; then, buffer by buffer in that order,
 * wait for its DMA, copy it out, and queue the next claimed chunk's DMA into it. K buffers keep K
 * DMAs or copies in flight; the host copy of one chunk overlaps the DMA of the next. */
static int stage_share(Stager *st, int i) {
    StageWorker *w = &st->w[i];
    const StageFns *f = &st->fns;
    int k = w->k, cursor = i, rc = st->set_ctx(st->ctx);
    if (rc == 0) rc = f->wait(w->stream, st->pre, 0);
    if (rc != 0) return rc;
    long long chunk = st->chunk, nbytes = st->nbytes, j;
    if (st->h2d) {
        for (long long c = 0; (j = stage_claim(st, i, &cursor)) >= 0; c++) {
            int b = (int)(c % k);
            long long off = j * chunk;
            size_t n = (size_t)(nbytes - off < chunk ? nbytes - off : chunk);
            if ((rc = f->sync(w->events[b])) != 0) return rc; /* the DMA that last read this buffer is done */
            memcpy(w->bufs[b], st->hptr + off, n);
            if ((rc = f->h2d(st->dptr + (unsigned long long)off, w->bufs[b], n, w->stream)) != 0) return rc;
            if ((rc = f->record(w->events[b], w->stream)) != 0) return rc;
        }
    } else {
        long long held[STAGE_MAX_BUFS]; /* the chunk whose DMA buffer b holds, or -1 */
        for (int b = 0; b < k; b++) {
            held[b] = b == 0 || held[b - 1] >= 0 ? stage_claim(st, i, &cursor) : -1;
            if (held[b] < 0) continue;
            long long off = held[b] * chunk;
            size_t n = (size_t)(nbytes - off < chunk ? nbytes - off : chunk);
            if ((rc = f->sync(w->events[b])) != 0) return rc; /* a previous call's DMA from it is done */
            if ((rc = f->d2h(w->bufs[b], st->dptr + (unsigned long long)off, n, w->stream)) != 0) return rc;
            if ((rc = f->record(w->events[b], w->stream)) != 0) return rc;
        }
        for (int b = 0; held[b] >= 0; b = (b + 1) % k) {
            long long off = held[b] * chunk;
            size_t n = (size_t)(nbytes - off < chunk ? nbytes - off : chunk);
            if ((rc = f->sync(w->events[b])) != 0) return rc;
            memcpy(st->hptr + off, w->bufs[b], n);
            held[b] = stage_claim(st, i, &cursor);
            if (held[b] < 0) continue;
            off = held[b] * chunk;
            n = (size_t)(nbytes - off < chunk ? nbytes - off : chunk);
            if ((rc = f->d2h(w->bufs[b], st->dptr + (unsigned long long)off, n, w->stream)) != 0) return rc;
            if ((rc = f->record(w->events[b], w->stream)) != 0) return rc;
        }
    }
    return f->record(w->done, w->stream);
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
        int share = i + 1, mine = share < st->n;
        pthread_mutex_unlock(&st->mu);
        if (mine) st->w[share].rc = stage_share(st, share);
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
    PyObject *fns, *workers;
    unsigned long long ctx, pre, dptr, hptr;
    long long nbytes, chunk;
    if (!PyArg_ParseTuple(args, "pO!KKKKLLO!", &h2d, &PyTuple_Type, &fns, &ctx, &pre, &dptr, &hptr, &nbytes, &chunk,
                          &PyTuple_Type, &workers))
        return NULL;
    void *fp[6];
    if (stage_ptrs(fns, fp, 6, "fns") != 6) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "Stager.run: fns holds six addresses");
        return NULL;
    }
    if (chunk <= 0 || nbytes <= 0) {
        PyErr_SetString(PyExc_ValueError, "Stager.run: chunk and nbytes must be > 0");
        return NULL;
    }
    if (stage_start(self) < 0) return NULL;
    long long chunks = (nbytes + chunk - 1) / chunk;
    Py_ssize_t nw = PyTuple_GET_SIZE(workers);
    int n = (int)(chunks < nw ? chunks : nw);
    if (n > self->nthreads + 1) n = self->nthreads + 1; /* the caller runs one share */
    if (n > STAGE_MAX_THREADS) n = STAGE_MAX_THREADS;
    if (n < 1) {
        PyErr_SetString(PyExc_ValueError, "Stager.run: no workers");
        return NULL;
    }
    for (int i = 0; i < n; i++) {
        PyObject *t = PyTuple_GET_ITEM(workers, i);
        PyObject *stream, *done, *bufs, *events;
        if (!PyArg_ParseTuple(t, "OOO!O!", &stream, &done, &PyTuple_Type, &bufs, &PyTuple_Type, &events)) return NULL;
        StageWorker *w = &self->w[i];
        w->stream = PyLong_AsVoidPtr(stream);
        w->done = PyLong_AsVoidPtr(done);
        if (PyErr_Occurred()) return NULL;
        w->k = stage_ptrs(bufs, w->bufs, STAGE_MAX_BUFS, "a worker's buffers");
        if (w->k < 0) return NULL;
        if (stage_ptrs(events, w->events, STAGE_MAX_BUFS, "a worker's events") != w->k) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "Stager.run: one event per buffer");
            return NULL;
        }
        w->rc = 0;
    }
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&self->mu);
    self->h2d = h2d;
    self->n = n;
    for (int i = 0; i < n; i++) {
        self->spans[i].next = chunks * i / n;
        self->spans[i].end = chunks * (i + 1) / n;
    }
    self->fns = (StageFns){(st_wait_t)fp[1], (st_h2d_t)fp[2], (st_d2h_t)fp[3], (st_record_t)fp[4], (st_sync_t)fp[5]};
    self->set_ctx = (st_ctx_t)fp[0];
    self->ctx = (void *)(uintptr_t)ctx;
    self->pre = (void *)(uintptr_t)pre;
    self->dptr = dptr;
    self->hptr = (char *)(uintptr_t)hptr;
    self->nbytes = nbytes;
    self->chunk = chunk;
    self->remaining = n - 1;
    if (n > 1) {
        self->generation++;
        pthread_cond_broadcast(&self->go);
    }
    pthread_mutex_unlock(&self->mu);
    /* The caller runs share 0 while the threads wake (a sleeping thread takes 30-100 us and more to
     * run on a virtual machine, as long as a 4 MiB copy's DMA), then waits for theirs: spinning a
     * little first, since a sleeping caller pays that wake-up again. */
    self->w[0].rc = stage_share(self, 0);
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
    Py_END_ALLOW_THREADS
    PyObject *out = PyList_New(n);
    if (out == NULL) return NULL;
    for (int i = 0; i < n; i++) PyList_SET_ITEM(out, i, PyLong_FromLong(self->w[i].rc));
    return out;
}

static PyMethodDef Stager_methods[] = {
    {"run", (PyCFunction)Stager_run, METH_VARARGS,
     "run(h2d, fns, ctx, pre, dptr, hptr, nbytes, chunk, workers) -> [CUresult per share]"},
    {NULL, NULL, 0, NULL},
};

static PyObject *Stager_get_threads(Stager *self, void *c) {
    (void)c;
    return PyLong_FromLong(self->nthreads);
}

static PyGetSetDef Stager_getset[] = {
    {"threads", (getter)Stager_get_threads, NULL, "the copy threads", NULL},
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
