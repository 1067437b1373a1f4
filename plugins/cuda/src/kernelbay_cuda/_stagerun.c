/* kernelbay-cuda's native helpers, part seven: the staged copies' threads and their Python type
 * (_stage.c has the pipeline they run).
 *
 * A run wakes its threads with one futex on `gen` (its low bits say how many take part); each
 * woken thread takes a seat in the run while it is open (stage_join), and the caller, once every
 * sub is claimed, closes the run and waits only for the threads inside. Threads start at the
 * first run, and again in a fork()ed child.
 */
#include <limits.h>
#ifdef __linux__
#include <linux/futex.h>
#include <sys/syscall.h>
#endif

/* how long the caller spins (yielding) for the threads before it sleeps */
#define STAGE_SPIN_NS 200000LL
/* Stager.gen: the run counter above the low bits, the threads taking part in the low bits */
#define STAGE_GEN_STEP 128
/* Stager.seat: the run (gen / STAGE_GEN_STEP) above these bits, closed, threads inside the run */
#define SEAT_CLOSED 128u
#define SEAT_INSIDE 127u

/* Sleep while *w == v; wake every sleeper on w. The threads of a run are woken by one call on
 * one word, all at once: with a condition variable each woken thread took its mutex in turn,
 * so the twelfth started one mutex hand-off per thread later (each a wake-up on a VM). */
#ifdef __linux__
static void stage_park(int *w, int v) { syscall(SYS_futex, w, FUTEX_WAIT_PRIVATE, v, NULL, NULL, 0); }
static void stage_unpark(int *w) { syscall(SYS_futex, w, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0); }
#else
static pthread_mutex_t stage_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t stage_cv = PTHREAD_COND_INITIALIZER;
static void stage_park(int *w, int v) {
    pthread_mutex_lock(&stage_mu);
    while (__atomic_load_n(w, __ATOMIC_ACQUIRE) == v) pthread_cond_wait(&stage_cv, &stage_mu);
    pthread_mutex_unlock(&stage_mu);
}
static void stage_unpark(int *w) {
    (void)w;
    pthread_mutex_lock(&stage_mu);
    pthread_cond_broadcast(&stage_cv);
    pthread_mutex_unlock(&stage_mu);
}
#endif

/* Take a seat in run `run` if it is still open: only then may the thread read its job. */
static int stage_join(Stager *st, unsigned int run) {
    unsigned int s = __atomic_load_n(&st->seat, __ATOMIC_ACQUIRE);
    for (;;) {
        if (s / 256u != run || (s & SEAT_CLOSED)) return 0;
        if (__atomic_compare_exchange_n(&st->seat, &s, s + 1, 1, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) return 1;
    }
}

static void *stage_thread(void *p) {
    StageArg *a = (StageArg *)p;
    Stager *st = a->st;
    int i = a->i;
    free(a);
    /* gen 0 is "no run yet": a run made before this thread first looks still counts (reading
     * gen here instead would miss it, and the run would wait forever) */
    int seen = 0;
    for (;;) {
        int g;
        while ((g = __atomic_load_n(&st->gen, __ATOMIC_ACQUIRE)) == seen) stage_park(&st->gen, seen);
        seen = g;
        if (__atomic_load_n(&st->stop, __ATOMIC_ACQUIRE)) break;
        /* taking part is read from gen itself, not from the job: a thread that wakes late for a
         * run it has no part in may already see the next run's job being written */
        if (i < g % STAGE_GEN_STEP && stage_join(st, (unsigned int)(g / STAGE_GEN_STEP))) {
            stage_work(st);
            unsigned int left = __atomic_sub_fetch(&st->seat, 1, __ATOMIC_ACQ_REL);
            if ((left & SEAT_CLOSED) && !(left & SEAT_INSIDE)) stage_unpark((int *)&st->seat);
        }
    }
    return NULL;
}

/* Start the threads (again, in a fork()ed child: the parent's are not there); -1 with an exception. */
static int stage_start(Stager *st) {
    pid_t pid = getpid();
    if (st->started && st->pid == pid) return 0;
    /* (a child of fork(): the parent's threads are gone; their words start again) */
    st->started = 0;
    st->stop = 0;
    st->gen = 0;
    st->seat = 0;
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
    return 0;
}

static void Stager_dealloc(Stager *self) {
    if (self->started && self->pid == getpid()) {
        __atomic_store_n(&self->stop, 1, __ATOMIC_RELEASE);
        __atomic_add_fetch(&self->gen, STAGE_GEN_STEP, __ATOMIC_RELEASE);
        stage_unpark(&self->gen);
        Py_BEGIN_ALLOW_THREADS
        for (int i = 0; i < self->nthreads; i++) pthread_join(self->threads[i], NULL);
        Py_END_ALLOW_THREADS
    }
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int stage_ptrs(PyObject *seq, void **out, int max, const char *what) {
    if (!PyTuple_Check(seq) || PyTuple_GET_SIZE(seq) < 1 || PyTuple_GET_SIZE(seq) > max) {
        PyErr_Format(PyExc_ValueError, "Stager.setup: %s must be a tuple of 1 to %d addresses", what, max);
        return -1;
    }
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(seq); i++) {
        out[i] = PyLong_AsVoidPtr(PyTuple_GET_ITEM(seq, i));
        if (out[i] == NULL && PyErr_Occurred()) return -1;
    }
    return (int)PyTuple_GET_SIZE(seq);
}

/* setup(fns, ctx, dma, pre, done, sub, piece, slots, events): between runs only (copies.py holds
 * the stager's lock around both); the ring's position stays (taken modulo the new slots). */
static PyObject *Stager_setup(Stager *self, PyObject *args) {
    PyObject *fns, *slots, *events;
    unsigned long long ctx, dma, pre, done;
    long long sub, piece;
    if (!PyArg_ParseTuple(args, "O!KKKKLLO!O!", &PyTuple_Type, &fns, &ctx, &dma, &pre, &done, &sub, &piece,
                          &PyTuple_Type, &slots, &PyTuple_Type, &events))
        return NULL;
    if (sub <= 0 || piece < sub || piece % sub != 0) {
        PyErr_SetString(PyExc_ValueError, "Stager.setup: sub must be > 0, piece a multiple of sub");
        return NULL;
    }
    void *fp[6], *sl[STAGE_MAX_SLOTS], *ev[STAGE_MAX_SLOTS];
    if (stage_ptrs(fns, fp, 6, "fns") != 6) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "Stager.setup: fns holds six addresses");
        return NULL;
    }
    int nslots = stage_ptrs(slots, sl, STAGE_MAX_SLOTS, "slots");
    if (nslots < 0) return NULL;
    if (stage_ptrs(events, ev, STAGE_MAX_SLOTS, "events") != nslots) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "Stager.setup: one event per slot");
        return NULL;
    }
    /* the threads read these only after a run's gen (release/acquire): no run is under way */
    StageFns fv = {(st_ctx_t)fp[0], (st_wait_t)fp[1], (st_h2d_t)fp[2], (st_d2h_t)fp[3], (st_record_t)fp[4], (st_sync_t)fp[5]};
    self->fns = fv;
    self->ctx = (void *)(uintptr_t)ctx;
    self->dma = (void *)(uintptr_t)dma;
    self->pre = (void *)(uintptr_t)pre;
    self->done = (void *)(uintptr_t)done;
    self->sub = sub;
    self->piece = piece;
    self->nslots = nslots;
    memcpy(self->slots, sl, sizeof(void *) * (size_t)nslots);
    memcpy(self->slot_ev, ev, sizeof(void *) * (size_t)nslots);
    self->configured = 1;
    Py_RETURN_NONE;
}

static PyObject *Stager_run(Stager *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "Stager.run(h2d, stream, dptr, hptr, nbytes)");
        return NULL;
    }
    if (!self->configured) {
        PyErr_SetString(PyExc_RuntimeError, "Stager.run before Stager.setup");
        return NULL;
    }
    int h2d = PyObject_IsTrue(args[0]);
    unsigned long long stream = PyLong_AsUnsignedLongLong(args[1]);
    unsigned long long dptr = PyLong_AsUnsignedLongLong(args[2]);
    unsigned long long hptr = PyLong_AsUnsignedLongLong(args[3]);
    long long nbytes = PyLong_AsLongLong(args[4]);
    if (h2d < 0 || PyErr_Occurred()) return NULL;
    if (nbytes <= 0) {
        PyErr_SetString(PyExc_ValueError, "Stager.run: nbytes must be > 0");
        return NULL;
    }
    if (stage_start(self) < 0) return NULL;
    long long sub = self->sub, piece = self->piece;
    int nslots = self->nslots;
    unsigned long long pre = (uintptr_t)self->pre, done = (uintptr_t)self->done, dma = (uintptr_t)self->dma;
    long long npieces = (nbytes + piece - 1) / piece, nsubs = (nbytes + sub - 1) / sub;
    int n = (int)(nsubs < self->nthreads + 1 ? nsubs : self->nthreads + 1);
    int *cnt = calloc((size_t)npieces, sizeof(int));
    unsigned char *flags = calloc((size_t)npieces * 3, 1);
    if (cnt == NULL || flags == NULL) {
        free(cnt);
        free(flags);
        return PyErr_NoMemory();
    }
    int rc = 0;
    Py_BEGIN_ALLOW_THREADS
    StageFns fv = self->fns;
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
        /* the job: read by the threads only after the gen below (release/acquire) */
        self->h2d = h2d;
        self->n = n;
        self->dptr = dptr;
        self->hptr = (char *)(uintptr_t)hptr;
        self->nbytes = nbytes;
        self->npieces = npieces;
        self->nsubs = nsubs;
        self->first = (int)(self->next_first % nslots);
        self->next_first = self->first + npieces % nslots;
        self->next_sub = 0;
        self->nfault = nfault;
        self->next_fault = 0;
        self->cnt = cnt;
        self->ready = flags;
        self->clear = flags + npieces;
        self->asked = flags + 2 * npieces;
        self->err = 0;
        /* D2H: the first two DMAs before the threads wake, who have nothing to copy out before
         * the first is done (waking twelve idle CPUs of a VM takes the caller ~20 us); the
         * rest of the ring's after */
        long long q = 0;
        if (!h2d)
            for (; q < npieces && q < nslots && q < 2; q++)
                if (stage_queue(self, q) != 0) break;
        if (n > 1) {
            int g = __atomic_load_n(&self->gen, __ATOMIC_RELAXED);
            g = (g - g % STAGE_GEN_STEP + STAGE_GEN_STEP) % (INT_MAX - INT_MAX % STAGE_GEN_STEP);
            g = g ? g : STAGE_GEN_STEP;
            /* the last run's seat is closed and empty: no thread reads this job before it opens */
            __atomic_store_n(&self->seat, (unsigned int)(g / STAGE_GEN_STEP) * 256u, __ATOMIC_RELEASE);
            __atomic_store_n(&self->gen, g + (n - 1), __ATOMIC_RELEASE);
            stage_unpark(&self->gen);
        }
        if (!h2d && !__atomic_load_n(&self->err, __ATOMIC_RELAXED))
            for (; q < npieces && q < nslots; q++)
                if (stage_queue(self, q) != 0) break;
        stage_work(self); /* returns once every sub is claimed (or the run failed) */
        /* Close the run to threads not in it yet and wait for those inside: spinning a little
         * first, since a sleeping caller pays a wake-up again (30-100 us on a virtual machine,
         * as long as a 4 MiB copy's DMA). */
        unsigned int seat = __atomic_or_fetch(&self->seat, SEAT_CLOSED, __ATOMIC_ACQ_REL);
        struct timespec t0, t;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        while ((seat = __atomic_load_n(&self->seat, __ATOMIC_ACQUIRE)) & SEAT_INSIDE) {
            clock_gettime(CLOCK_MONOTONIC, &t);
            if ((t.tv_sec - t0.tv_sec) * 1000000000LL + (t.tv_nsec - t0.tv_nsec) > STAGE_SPIN_NS) break;
            sched_yield(); /* another runnable thread of the machine goes first */
        }
        while ((seat = __atomic_load_n(&self->seat, __ATOMIC_ACQUIRE)) & SEAT_INSIDE) stage_park((int *)&self->seat, (int)seat);
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
    {"setup", (PyCFunction)Stager_setup, METH_VARARGS,
     "setup(fns, ctx, dma, pre, done, sub, piece, slots, events): what holds for every run (between runs only)"},
    {"run", (PyCFunction)(void (*)(void))Stager_run, METH_FASTCALL, "run(h2d, stream, dptr, hptr, nbytes) -> CUresult"},
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
