/* kernelbay-cuda's native helpers, part five: staged copies between pageable host memory and
 * the device (copies.py's pipeline), run by C threads without the GIL.
 *
 * Stager(nthreads) keeps nthreads threads (started at the first run, again in a fork()ed child).
 * setup(fns, ctx, dma, pre, done, sub, piece, slots, events) gives it what holds for its life
 * (the driver's functions, the context, its DMA stream, events and page-locked slots: converted
 * once, not per copy); then run(h2d, stream, dptr, hptr, nbytes) -> CUresult moves nbytes
 * between the device address dptr and the pageable host address hptr:
 *
 * - the copy is cut into pieces of `piece` bytes, each ONE DMA on the stream `dma`, through one
 *   of the page-locked `slots` (piece p through slot (f + p) % len(slots), f where the last run's
 *   pieces ended; `events[i]` is recorded after each DMA that reads or writes slot i), and into
 *   subs of `sub` bytes (piece a multiple of it), the host side's unit: the caller and
 *   min(nthreads, subs - 1) threads claim subs in order;
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
 * completes at once); consecutive runs share only the ring's position.
 *
 * This file is the pipeline a run's threads follow; _stagerun.c has the threads, how a run wakes
 * and waits for them, and the Python type.
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
    int configured;       /* setup() was called: fns to slot_ev below hold for every run */
    StageFns fns;
    void *ctx, *dma, *pre, *done;
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
