/* kernelbay-cuda's native helpers, part five: staged copies between pageable host memory and
 * the device (copies.py's pipeline), run by C threads without the GIL.
 *
 * Stager(nthreads) keeps nthreads threads (started at the first run, again in a fork()ed child).
 * run(h2d, fns, ctx, stream, dma, pre, done, dptr, hptr, nbytes, sub, piece, slots, events)
 * -> CUresult moves nbytes between the device address dptr and the pageable host address hptr:
 *
 * - the copy is cut into pieces of `piece` bytes, each ONE DMA on the stream `dma`, through one
 *   of the page-locked `slots` (piece p through slot (f + p) % len(slots), f where the last run's
 *   pieces ended; `events[i]` is recorded after each DMA that reads or writes slot i), and into subs of `sub` bytes (piece a multiple of it),
 *   the host side's unit: the caller and min(nthreads, subs - 1) threads claim subs in order;
 * - H2D: a sub is copied into its piece's slot once the slot's previous DMA is done, and whoever
 *   copies a piece's last sub queues the piece's DMA; D2H: the caller queues the first slots'
 *   DMAs, then wakes the threads; a sub is copied out once its piece's DMA is done, and whoever
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
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <time.h>
#include <string.h>
#include <unistd.h>
#ifdef __linux__
#include <linux/futex.h>
#include <sys/syscall.h>
#endif

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

typedef struct {
    PyObject_HEAD
    int nthreads;
    int nt; /* non-temporal stores in the host copies: 1 H2D, 2 D2H, 3 both (the default) */
    int started; /* threads running in process `pid` */
    pid_t pid;
    pthread_t threads[STAGE_MAX_THREADS];
    /* a run: `gen` goes up by STAGE_GEN_STEP, its low bits saying how many threads take part
     * (n - 1), and every thread is woken at once; a woken thread takes a `seat` in the run
     * while it is open, and the caller, once every sub is claimed, closes it and waits only for
     * the threads inside (one that wakes later has no part: on a VM the last of twelve woke
     * 100-200 us after the first, after a 4 MiB copy was done) */
    int gen, stop;
    unsigned int seat;
    /* the job of this generation */
    int h2d, n, nslots, err;
    int first;  /* the slot of this run's piece 0 */
    long long next_first; /* the next run's: each run starts where the last one's pieces ended */
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
    unsigned char *asked; /* per piece: a thread asks the driver whether that DMA is done */
} Stager;

typedef struct {
    Stager *st;
    int i;
} StageArg;

/* How many times (some 50-100 us) a thread looks at a flag on its CPU before it yields the CPU
 * between looks. Yielding at once: on a host whose CPUs are all busy, a yielded thread got its
 * CPU back only after another's time slice (16 busy loops beside an H200: staged 64 MiB H2D
 * 4.6 GB/s against 10-40 spinning first). Spinning with PAUSE: on a virtual machine the
 * hypervisor takes a vCPU that pauses in a loop off its CPU (pause-loop exiting): a 4 MiB D2H
 * after 1 ms idle at 0.52-0.61x pinned against 0.65-0.66 with plain loads. */
#define STAGE_SPINS 40000

/* Wait until `flag` is set (1) or the run failed (0). */
static int stage_await(Stager *st, unsigned char *flag) {
    for (int i = 0; !__atomic_load_n(flag, __ATOMIC_ACQUIRE);) {
        if (__atomic_load_n(&st->err, __ATOMIC_RELAXED)) return 0;
        if (i < STAGE_SPINS)
            i++;
        else
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

/* The slot of piece p. A run's pieces go through the ring from where the last run's ended, not
 * from slot 0 each time: a DMA into a slot the host read from in the run before ran at half the
 * engine's rate (H200 host: the four 1 MiB DMAs of a 4 MiB D2H done 176 us after the first
 * was queued, 91 us in slots that had rested; the run 224 -> 128 us). */
static int stage_slot(const Stager *st, long long p) { return (int)((st->first + p) % st->nslots); }

/* Queue piece p's DMA out of (H2D) or into (D2H) its slot on the DMA stream and record the slot's event. */
static int stage_queue(Stager *st, long long p) {
    const StageFns *f = &st->fns;
    int s = stage_slot(st, p), rc;
    unsigned long long dev = st->dptr + (unsigned long long)(p * st->piece);
    size_t n = (size_t)stage_piece_len(st, p);
    rc = st->h2d ? f->h2d(dev, st->slots[s], n, st->dma) : f->d2h(st->slots[s], dev, n, st->dma);
    if (rc == 0) rc = f->record(st->slot_ev[s], st->dma);
    if (rc != 0) return stage_fail(st, rc);
    __atomic_store_n(&st->ready[p], 1, __ATOMIC_RELEASE);
    return 0;
}

/* Piece p's slot event done: once per piece, by whoever gets there first; the others wait for
 * its answer. (Each asking the driver itself, eight threads in cuEventSynchronize on one event,
 * some returned 100 us after the first: a 4 MiB D2H's first piece was copied out at 198 us
 * instead of 81.) */
static int stage_cleared(Stager *st, long long p) {
    if (__atomic_load_n(&st->clear[p], __ATOMIC_ACQUIRE)) return 1;
    if (__atomic_exchange_n(&st->asked[p], 1, __ATOMIC_ACQ_REL)) return stage_await(st, &st->clear[p]);
    int rc = st->fns.sync(st->slot_ev[stage_slot(st, p)]);
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
        char *slot = (char *)st->slots[stage_slot(st, p)] + in;
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
    unsigned char *flags = calloc((size_t)npieces * 3, 1);
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
        /* the job: read by the threads only after the gen below (release/acquire) */
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
