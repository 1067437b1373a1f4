// kernelbay CPU backend: the process-wide runtime, built once and shared by every kernel module
// (kernelbay_cpu/_runtime.py builds and loads it; each module gets kb_rt_api() at load).
//
// * Ctrl-C: a SIGINT handler, chained in front of Python's, that cancels the blocks of running
//   launches not yet started (kb_cpu::for_each_block checks the counter between blocks); a
//   second Ctrl-C while a launch still runs ends the process with a message.
// * Faults: a fault raised by kernel code in a thread that runs blocks (SIGSEGV, SIGBUS, SIGFPE,
//   SIGILL: Runtime::protect) stops that thread's blocks and becomes the launch's LaunchError
//   (kb_cpu_launch.h, run_range); the process goes on. Any other fatal signal (SIGABRT, a fault
//   outside kernel code) is reported naming the kernel, grid and block that were running (as
//   Python's faulthandler does for Python code), then handed to the handler that was there
//   before (faulthandler, or the default action).
// * fork(): libgomp's thread pool belongs to the thread that opened it; in a fork()ed child its
//   workers are gone and the first parallel region on the forking thread waits for them forever.
//   In a child, launches from the forking thread run on a new thread, which gets a new pool.
#include <dlfcn.h>
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#if defined(__linux__)
#include <sys/mman.h>
#include <sys/auxv.h>  // getauxval(AT_MINSIGSTKSZ)
#endif
#include <sys/syscall.h>
#if defined(__linux__)
#include <linux/futex.h>
#endif
#include <ucontext.h>
#include <unistd.h>

#include "kb_cpu_rt.h"

namespace {

constexpr int NSLOTS = 64;
struct Slot {
    int used;
    const char* name;
    int geom[6];
    void (*where)(unsigned*);
    int cancel;              // 0, CANCELLED (Ctrl-C) or TIMEOUT: the launch's blocks stop
    long long deadline_ns;   // CLOCK_MONOTONIC; 0: none
};
Slot slots[NSLOTS];
const int never_cancelled = 0;

// Every thread that has run blocks (thread_setup), by kernel thread id: the stop signal goes to
// each; one that is not running a block of a stopped launch ignores it.
constexpr int MAX_KERNEL_THREADS = 1024;
long kernel_tids[MAX_KERNEL_THREADS];
int n_kernel_tids = 0;
int stop_sig = 0;

long my_tid() {
#ifdef SYS_gettid
    return (long)syscall(SYS_gettid);  // async-signal-safe
#else
    return (long)(uintptr_t)pthread_self();
#endif
}

// Send the stop signal to every thread that runs blocks, but the caller (async-signal-safe).
void stop_threads() {
    if (stop_sig == 0) return;
    const long me = my_tid();
    const int n = __atomic_load_n(&n_kernel_tids, __ATOMIC_ACQUIRE);
    for (int i = 0; i < n && i < MAX_KERNEL_THREADS; ++i) {
        const long t = __atomic_load_n(&kernel_tids[i], __ATOMIC_ACQUIRE);
        if (t > 0 && t != me) syscall(SYS_tgkill, (long)getpid(), t, stop_sig);
    }
}
long interrupts = 0;
int active = 0;
int pending = 0;  // a Ctrl-C cancelled launches that have not all returned yet
int forked = 0;
pthread_t fork_thread;

struct sigaction prev_int;
int int_installed = 0;
const int FATAL[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};
struct sigaction prev_fatal[NSIG];
int fatal_installed = 0;

void put(const char* s) {
    ssize_t r = write(2, s, strlen(s));
    (void)r;
}

void put_num(long v) {
    char buf[24];
    int i = sizeof(buf) - 1;
    buf[i] = 0;
    bool neg = v < 0;
    unsigned long u = neg ? -(unsigned long)v : (unsigned long)v;
    do {
        buf[--i] = (char)('0' + u % 10);
        u /= 10;
    } while (u && i > 1);
    if (neg) buf[--i] = '-';
    put(buf + i);
}

void put_dim(const char* label, unsigned x, unsigned y, unsigned z) {
    put(label);
    put("(");
    put_num(x);
    put(", ");
    put_num(y);
    put(", ");
    put_num(z);
    put(")");
}

const char* first_running() {
    for (int i = 0; i < NSLOTS; ++i)
        if (__atomic_load_n(&slots[i].used, __ATOMIC_ACQUIRE)) return slots[i].name;
    return nullptr;
}

void chain(const struct sigaction& prev, int sig, siginfo_t* info, void* uc) {
    if (prev.sa_flags & SA_SIGINFO) {
        if (prev.sa_sigaction != nullptr) prev.sa_sigaction(sig, info, uc);
    } else if (prev.sa_handler != SIG_IGN && prev.sa_handler != SIG_DFL) {
        prev.sa_handler(sig);
    }
}

long int_owner = 0;  // the thread (tid) running on_int, 0 when none
void stop_self();    // below: the recovery points

void on_int(int sig, siginfo_t* info, void* uc) {
    // Re-entered on this thread: a handler installed after ours chains back to it, and ours
    // (put in front again at the next compile) chains to that one. Without this the two call
    // each other until the signal stack overflows and the kernel kills the process.
#ifdef SYS_gettid
    long me = (long)syscall(SYS_gettid);  // async-signal-safe
#else
    long me = (long)(uintptr_t)pthread_self();
#endif
    if (__atomic_load_n(&int_owner, __ATOMIC_ACQUIRE) == me) return;
    long none = 0;
    bool owner = __atomic_compare_exchange_n(&int_owner, &none, me, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
    if (__atomic_load_n(&active, __ATOMIC_ACQUIRE) > 0) {
        const char* name = first_running();
        if (__atomic_exchange_n(&pending, 1, __ATOMIC_ACQ_REL)) {
            put("\nkernelbay: a second Ctrl-C while cpu kernel '");
            put(name ? name : "?");
            put("' still runs: a block that never returns cannot be stopped from outside; ending the process\n");
            struct sigaction dfl;
            memset(&dfl, 0, sizeof(dfl));
            dfl.sa_handler = SIG_DFL;
            sigaction(SIGINT, &dfl, nullptr);
            sigset_t s;
            sigemptyset(&s);
            sigaddset(&s, SIGINT);
            pthread_sigmask(SIG_UNBLOCK, &s, nullptr);
            raise(SIGINT);
            _exit(130);
        }
        __atomic_add_fetch(&interrupts, 1, __ATOMIC_ACQ_REL);
        for (auto& s : slots)
            if (__atomic_load_n(&s.used, __ATOMIC_ACQUIRE) == 1) {
                int zero = 0;
                __atomic_compare_exchange_n(&s.cancel, &zero, kb_cpu::CANCELLED, false, __ATOMIC_ACQ_REL,
                                            __ATOMIC_ACQUIRE);
            }
        put("\nkernelbay: Ctrl-C: cancelling the blocks of cpu kernel '");
        put(name ? name : "?");
        put(stop_sig ? "': stopping the running ones and skipping the rest (Ctrl-C again ends the process)\n"
                     : "' that have not started; blocks already running finish first (Ctrl-C again ends the process)\n");
        stop_threads();
    }
    chain(prev_int, sig, info, uc);
    if (owner) __atomic_store_n(&int_owner, 0, __ATOMIC_RELEASE);
    stop_self();  // this thread was running a block of a cancelled launch: it stops too
}

int reporting = 0;

// The fiber stacks of the threads running a block with fibers (Runtime::guard).
thread_local const kb_cpu::Guard* guard_now = nullptr;
long guarded = 0;  // threads with a guard set: others never read guard_now in the handler

void set_guard(const kb_cpu::Guard* g) {
    const kb_cpu::Guard* old = guard_now;
    if (old == nullptr && g != nullptr) __atomic_add_fetch(&guarded, 1, __ATOMIC_ACQ_REL);
    else if (old != nullptr && g == nullptr) __atomic_sub_fetch(&guarded, 1, __ATOMIC_ACQ_REL);
    guard_now = g;
}

// The recovery point of this thread while it runs kernel code (protect). Touched first by
// thread_setup, which every thread that runs blocks calls before its first block, so that the
// handler never makes this thread-local on a signal stack.
thread_local sigjmp_buf* recover_now = nullptr;
thread_local kb_cpu::Fault* fault_now = nullptr;
thread_local const int* cancel_now = nullptr;

void protect(sigjmp_buf* jb, kb_cpu::Fault* f, const int* cancel) {
    cancel_now = cancel;
    fault_now = f;
    recover_now = jb;
}

const int* cancel_word(int slot) { return slot >= 0 && slot < NSLOTS ? &slots[slot].cancel : &never_cancelled; }

// Leave the block this thread runs, if its launch was cancelled: back to its recovery point
// (run_range) with the stop signal as the "fault". Called from a signal handler.
void stop_self() {
    sigjmp_buf* jb = recover_now;
    const int* c = cancel_now;
    if (jb == nullptr || c == nullptr || __atomic_load_n(c, __ATOMIC_ACQUIRE) == 0) return;
    if (fault_now != nullptr) {
        fault_now->sig = stop_sig;
        fault_now->code = 0;
        fault_now->addr = nullptr;
        fault_now->pc = nullptr;
        fault_now->sp = nullptr;
    }
    recover_now = nullptr;
    fault_now = nullptr;
    siglongjmp(*jb, stop_sig ? stop_sig : SIGINT);
}

// The stop signal: sent by this process (Ctrl-C's handler, the watchdog) to a thread that runs
// blocks. A block that never reaches a barrier or its end (a loop that spins) stops here.
void on_stop(int, siginfo_t* info, void*) {
    if (info == nullptr || info->si_code != SI_TKILL || info->si_pid != getpid()) return;
    stop_self();
}

// --- deadlines: one watchdog thread, started by the first launch that has one ---

pthread_mutex_t dog_mu = PTHREAD_MUTEX_INITIALIZER;
pthread_cond_t dog_cv;
int dog_up = 0;

long long now_ns() {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}

void* watchdog_main(void*) {
    pthread_mutex_lock(&dog_mu);
    for (;;) {
        long long next = 0;
        const long long now = now_ns();
        bool fired = false;
        for (auto& s : slots) {
            const long long d = __atomic_load_n(&s.deadline_ns, __ATOMIC_ACQUIRE);
            if (d == 0 || __atomic_load_n(&s.used, __ATOMIC_ACQUIRE) != 1) continue;
            if (d <= now) {
                int zero = 0;
                if (__atomic_compare_exchange_n(&s.cancel, &zero, kb_cpu::TIMEOUT, false, __ATOMIC_ACQ_REL,
                                                __ATOMIC_ACQUIRE))
                    fired = true;
                __atomic_store_n(&s.deadline_ns, 0, __ATOMIC_RELEASE);
            } else if (next == 0 || d < next) {
                next = d;
            }
        }
        if (fired) {
            pthread_mutex_unlock(&dog_mu);
            stop_threads();
            pthread_mutex_lock(&dog_mu);
            continue;
        }
        if (next == 0) {
            pthread_cond_wait(&dog_cv, &dog_mu);
        } else {
            struct timespec ts;
            ts.tv_sec = (time_t)(next / 1000000000LL);
            ts.tv_nsec = (long)(next % 1000000000LL);
            pthread_cond_timedwait(&dog_cv, &dog_mu, &ts);
        }
    }
    return nullptr;
}

void set_deadline(int slot, long ms) {
    if (slot < 0 || slot >= NSLOTS || ms <= 0) return;
    __atomic_store_n(&slots[slot].deadline_ns, now_ns() + (long long)ms * 1000000LL, __ATOMIC_RELEASE);
    pthread_mutex_lock(&dog_mu);
    if (!dog_up) {
        pthread_condattr_t ca;
        pthread_condattr_init(&ca);
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
        pthread_cond_init(&dog_cv, &ca);
        pthread_condattr_destroy(&ca);
        pthread_t t;
        pthread_attr_t a;
        pthread_attr_init(&a);
        pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
        // The watchdog takes no signal: the stop signal and Ctrl-C go to the threads that run blocks.
        sigset_t all, old;
        sigfillset(&all);
        pthread_sigmask(SIG_BLOCK, &all, &old);
        if (pthread_create(&t, &a, watchdog_main, nullptr) == 0) dog_up = 1;
        pthread_sigmask(SIG_SETMASK, &old, nullptr);
        pthread_attr_destroy(&a);
    }
    pthread_cond_signal(&dog_cv);
    pthread_mutex_unlock(&dog_mu);
}

void* pc_of(void* uc) {
#if defined(__x86_64__)
    return uc ? (void*)static_cast<ucontext_t*>(uc)->uc_mcontext.gregs[REG_RIP] : nullptr;
#elif defined(__aarch64__)
    return uc ? (void*)static_cast<ucontext_t*>(uc)->uc_mcontext.pc : nullptr;
#else
    (void)uc;
    return nullptr;
#endif
}

void* sp_of(void* uc) {
#if defined(__x86_64__)
    return uc ? (void*)static_cast<ucontext_t*>(uc)->uc_mcontext.gregs[REG_RSP] : nullptr;
#elif defined(__aarch64__)
    return uc ? (void*)static_cast<ucontext_t*>(uc)->uc_mcontext.sp : nullptr;
#else
    (void)uc;
    return nullptr;
#endif
}

void on_fatal(int sig, siginfo_t* info, void* uc) {
    // A fault on a guard page of this thread's fiber stacks: the block ends with an error
    // (the fiber code unblocks SIGSEGV after the jump).
    if (sig == SIGSEGV && __atomic_load_n(&guarded, __ATOMIC_ACQUIRE) > 0) {
        const kb_cpu::Guard* g = guard_now;
        char* a = static_cast<char*>(info->si_addr);
        if (g != nullptr && a >= g->stacks && a < g->stacks + g->map_bytes &&
            (size_t)(a - g->stacks) % g->stride < g->page)
            siglongjmp(*g->overflow, 1);
    }
    // A fault raised by kernel code (si_code > 0: by the CPU, not sent with kill) in a thread
    // that runs blocks: that thread's blocks stop and the launch reports it (run_range).
    if (sig != SIGABRT && info != nullptr && info->si_code > 0 && __atomic_load_n(&active, __ATOMIC_ACQUIRE) > 0) {
        sigjmp_buf* jb = recover_now;
        if (jb != nullptr) {
            kb_cpu::Fault* f = fault_now;
            if (f != nullptr) {
                f->sig = sig;
                f->code = info->si_code;
                f->addr = info->si_addr;
                f->pc = pc_of(uc);
                f->sp = sp_of(uc);
            }
            recover_now = nullptr;
            fault_now = nullptr;
            siglongjmp(*jb, sig);
        }
    }
    int idx = 0;
    while (FATAL[idx] != sig) ++idx;
    (void)idx;
    if (!__atomic_exchange_n(&reporting, 1, __ATOMIC_ACQ_REL) && __atomic_load_n(&active, __ATOMIC_ACQUIRE) > 0) {
        put("\nkernelbay: fatal signal ");
        put_num(sig);
        put(" (");
        put(strsignal(sig));  // not async-signal-safe in theory; glibc's reads a static table
        put(") while cpu kernel");
        int shown = 0;
        for (int i = 0; i < NSLOTS && shown < 4; ++i) {
            Slot& s = slots[i];
            if (!__atomic_load_n(&s.used, __ATOMIC_ACQUIRE)) continue;
            put(shown ? "; and kernel '" : " '");
            put(s.name);
            put("' ran, ");
            put_dim("grid ", s.geom[0], s.geom[1], s.geom[2]);
            put_dim(", block ", s.geom[3], s.geom[4], s.geom[5]);
            if (s.where != nullptr) {
                unsigned b[3];
                s.where(b);
                put_dim(", in blockIdx ", b[0], b[1], b[2]);
                put(" (the faulting thread's last block of this kernel)");
            }
            ++shown;
        }
        put("\nkernelbay: a fatal signal that kernelbay cannot turn into a LaunchError (abort(), or a fault in a "
            "thread that was not running a block); KERNELBAY_CPU_ISOLATE=1 turns even these into a LaunchError, "
            "KERNELBAY_CPU_CHECK=address finds the line\n");
    }
    // Hand the signal on: the previous handler (Python's faulthandler prints the Python stack),
    // else the default action, which ends the process with this signal.
    struct sigaction prev = prev_fatal[sig];
    sigaction(sig, &prev, nullptr);
    if ((prev.sa_flags & SA_SIGINFO) || (prev.sa_handler != SIG_IGN && prev.sa_handler != SIG_DFL))
        chain(prev, sig, info, uc);
    else
        raise(sig);
}

// --- the block pool: the threads that run a launch's chunks of blocks -----------------------
// An OpenMP parallel region ends at a barrier that waits for every thread of its team, also one
// that the scheduler has not run yet and that would find no chunk left: on a busy machine (a
// compiler on the other core) saxpy 2^20 on 2 threads took 2.3 ms against 0.9 ms on one. Here a
// launch waits only for the chunks a thread took: a worker that wakes after the caller took the
// last chunk finds none and goes back to sleep, without holding the launch back. Linux only
// (futexes); elsewhere, and while another launch holds the pool, launches use OpenMP as before.
#if defined(__linux__) && defined(SYS_futex)
#define KB_POOL 1
long futex(int* word, int op, int val) { return syscall(SYS_futex, word, op, val, nullptr, nullptr, 0); }

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

constexpr int MAX_WORKERS = 1023;
pthread_mutex_t pool_mu = PTHREAD_MUTEX_INITIALIZER;  // one launch at a time (try-locked)
int n_workers = 0;                                    // started (under pool_mu)
int posted = 0;                                       // futex word: the generation of the last job
// The job: generation (high 32 bits), next chunk (16 bits), chunks (low 16 bits). A worker takes
// a chunk by compare-and-swap, so it only ever takes one of the generation it was woken for,
// and fn/ctx stay valid while it runs it (the caller waits for every chunk taken).
unsigned long long claim = 0;
void (*job_run)(void*, long) = nullptr;
void* job_arg = nullptr;
int chunks_done = 0;     // futex word: chunks of this generation done
int caller_asleep = 0;   // the caller waits on chunks_done
long spin_count = 0;     // KERNELBAY_CPU_WAIT=spin: polls of `posted` before a worker sleeps
unsigned generation = 0;

void finish_chunk(int n) {
    if (__atomic_add_fetch(&chunks_done, 1, __ATOMIC_SEQ_CST) == n &&
        __atomic_load_n(&caller_asleep, __ATOMIC_SEQ_CST))
        futex(&chunks_done, FUTEX_WAKE_PRIVATE, 1);
}

// Take and run chunks of generation `gen` until none is left.
void run_chunks(unsigned gen) {
    unsigned long long c = __atomic_load_n(&claim, __ATOMIC_ACQUIRE);
    for (;;) {
        const unsigned long long next = (c >> 16) & 0xffff, n = c & 0xffff;
        if ((unsigned)(c >> 32) != gen || next >= n) return;
        if (__atomic_compare_exchange_n(&claim, &c, c + (1ull << 16), true, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
            job_run(job_arg, (long)next);
            finish_chunk((int)n);
            c = __atomic_load_n(&claim, __ATOMIC_ACQUIRE);
        }
    }
}

void* worker_main(void*) {
    // SCHED_BATCH (any user may choose it): a woken worker takes an idle core as before, but does
    // not preempt a running thread, which on a busy machine is often the launch's own caller:
    // it then waited behind the other processes for a scheduler tick or more (saxpy 2^20 on 2
    // threads with numpy between launches: medians 0.9-5.9 ms with OpenMP, 0.4-0.8 ms so).
    struct sched_param sp;
    memset(&sp, 0, sizeof(sp));
    pthread_setschedparam(pthread_self(), SCHED_BATCH, &sp);
    int seen = __atomic_load_n(&posted, __ATOMIC_ACQUIRE);
    for (;;) {
        int now = __atomic_load_n(&posted, __ATOMIC_ACQUIRE);
        for (long i = 0; now == seen && i < spin_count; ++i) {
            cpu_relax();
            now = __atomic_load_n(&posted, __ATOMIC_ACQUIRE);
        }
        if (now == seen) {
            futex(&posted, FUTEX_WAIT_PRIVATE, seen);
            continue;
        }
        seen = now;
        run_chunks((unsigned)now);
    }
    return nullptr;
}

// OMP_STACKSIZE as OpenMP reads it (a size in KiB, or with a B, K, M or G suffix), so that a
// kernel with large locals gets the stack its OpenMP threads had; 0: the default.
size_t worker_stack() {
    const char* e = getenv("OMP_STACKSIZE");
    if (e == nullptr) return 0;
    char* end = nullptr;
    unsigned long long v = strtoull(e, &end, 10);
    while (end && *end == ' ') ++end;
    const char u = end && *end ? (char)(*end | 0x20) : 'k';
    const unsigned long long scale = u == 'b' ? 1 : u == 'k' ? 1ull << 10 : u == 'm' ? 1ull << 20 : u == 'g' ? 1ull << 30 : 0;
    return (size_t)(v * scale);
}

// Run fn(ctx, c) for each c in [0, n) on up to `threads` threads, this one included; return
// once every chunk ran. -1 (nothing ran): the pool is busy with another launch, or n is too large.
int parallel(int threads, long n, void (*fn)(void*, long), void* ctx) {
    if (n < 1 || n > 0xffff || threads < 2 || pthread_mutex_trylock(&pool_mu) != 0) return -1;
    const int want = threads - 1 < MAX_WORKERS ? threads - 1 : MAX_WORKERS;
    if (n_workers < want) {
        pthread_attr_t a;
        pthread_attr_init(&a);
        pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
        if (const size_t st = worker_stack()) pthread_attr_setstacksize(&a, st);
        for (; n_workers < want; ++n_workers) {
            pthread_t t;
            if (pthread_create(&t, &a, worker_main, nullptr) != 0) break;  // fewer threads then
        }
        pthread_attr_destroy(&a);
    }
    job_run = fn;
    job_arg = ctx;
    __atomic_store_n(&chunks_done, 0, __ATOMIC_RELAXED);
    const unsigned gen = ++generation;
    __atomic_store_n(&claim, ((unsigned long long)gen << 32) | (unsigned long long)n, __ATOMIC_RELEASE);
    __atomic_store_n(&posted, (int)gen, __ATOMIC_RELEASE);
    const int wake = want < n_workers ? want : n_workers;
    if (wake > 0 && n > 1) futex(&posted, FUTEX_WAKE_PRIVATE, wake);
    run_chunks(gen);
    for (;;) {
        const int d = __atomic_load_n(&chunks_done, __ATOMIC_SEQ_CST);
        if (d == n) break;
        __atomic_store_n(&caller_asleep, 1, __ATOMIC_SEQ_CST);
        if (__atomic_load_n(&chunks_done, __ATOMIC_SEQ_CST) != n) futex(&chunks_done, FUTEX_WAIT_PRIVATE, d);
        __atomic_store_n(&caller_asleep, 0, __ATOMIC_SEQ_CST);
    }
    pthread_mutex_unlock(&pool_mu);
    return 0;
}
#endif

// --- running a launch on a new thread (fork()ed child) ----------------------------------------

pthread_mutex_t mover_mu = PTHREAD_MUTEX_INITIALIZER;
pthread_cond_t mover_cv = PTHREAD_COND_INITIALIZER;
int mover_up = 0;
int (*job_fn)(void*) = nullptr;
void* job_ctx = nullptr;
int job_result = 0;
int job_state = 0;  // 0 idle, 1 posted, 2 done

void* mover_main(void*) {
    pthread_mutex_lock(&mover_mu);
    for (;;) {
        while (job_state != 1) pthread_cond_wait(&mover_cv, &mover_mu);
        int (*fn)(void*) = job_fn;
        void* ctx = job_ctx;
        pthread_mutex_unlock(&mover_mu);
        int r = fn(ctx);
        pthread_mutex_lock(&mover_mu);
        job_result = r;
        job_state = 2;
        pthread_cond_broadcast(&mover_cv);
    }
    return nullptr;
}

int run_elsewhere(int (*fn)(void*), void* ctx) {
    pthread_mutex_lock(&mover_mu);
    if (!mover_up) {
        pthread_t t;
        pthread_attr_t a;
        pthread_attr_init(&a);
        pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
        pthread_attr_setstacksize(&a, 8 << 20);
        int rc = pthread_create(&t, &a, mover_main, nullptr);
        pthread_attr_destroy(&a);
        if (rc != 0) {
            pthread_mutex_unlock(&mover_mu);
            return fn(ctx);  // no thread to be had: run here (a parallel region may then hang)
        }
        mover_up = 1;
    }
    while (job_state != 0) pthread_cond_wait(&mover_cv, &mover_mu);
    job_fn = fn;
    job_ctx = ctx;
    job_state = 1;
    pthread_cond_broadcast(&mover_cv);
    while (job_state != 2) pthread_cond_wait(&mover_cv, &mover_mu);
    int r = job_result;
    job_state = 0;
    pthread_cond_broadcast(&mover_cv);
    pthread_mutex_unlock(&mover_mu);
    return r;
}

int must_move() { return __atomic_load_n(&forked, __ATOMIC_RELAXED) && pthread_equal(pthread_self(), fork_thread); }

void after_fork_child() {
    // Only the forking thread lives on: no launch runs, the mover thread is gone, and its lock
    // may have been held by a thread that no longer exists.
    forked = 1;
    fork_thread = pthread_self();
    for (auto& s : slots) s.used = 0;
    active = 0;
    pending = 0;
    reporting = 0;
    mover_mu = PTHREAD_MUTEX_INITIALIZER;
    mover_cv = PTHREAD_COND_INITIALIZER;
    mover_up = 0;
    job_state = 0;
    n_kernel_tids = 0;  // their threads are gone; this one registers again at its next block
    dog_mu = PTHREAD_MUTEX_INITIALIZER;
    dog_up = 0;
#ifdef KB_POOL
    pool_mu = PTHREAD_MUTEX_INITIALIZER;  // its workers are gone too
    n_workers = 0;
#endif
}

int enter(const char* name, const int* geom, void (*where)(unsigned*)) {
    __atomic_add_fetch(&active, 1, __ATOMIC_ACQ_REL);
    for (int i = 0; i < NSLOTS; ++i) {
        int expected = 0;
        if (__atomic_load_n(&slots[i].used, __ATOMIC_RELAXED) == 0 &&
            __atomic_compare_exchange_n(&slots[i].used, &expected, 2, false, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED)) {
            slots[i].name = name;
            memcpy(slots[i].geom, geom, sizeof(slots[i].geom));
            slots[i].where = where;
            __atomic_store_n(&slots[i].cancel, 0, __ATOMIC_RELEASE);
            __atomic_store_n(&slots[i].deadline_ns, 0, __ATOMIC_RELEASE);
            __atomic_store_n(&slots[i].used, 1, __ATOMIC_RELEASE);
            return i;
        }
    }
    return -1;  // more than NSLOTS launches at once: this one runs unnamed in fault reports
}

void leave(int slot) {
    if (slot >= 0) {
        __atomic_store_n(&slots[slot].deadline_ns, 0, __ATOMIC_RELEASE);
        __atomic_store_n(&slots[slot].used, 0, __ATOMIC_RELEASE);
    }
    if (__atomic_sub_fetch(&active, 1, __ATOMIC_ACQ_REL) == 0) __atomic_store_n(&pending, 0, __ATOMIC_RELEASE);
}

// The alternate signal stack every thread that runs kernels (and the thread that installs the
// Ctrl-C handler) gets: at least 64 KiB, and four times the kernel's minimum for a signal frame
// (AT_MINSIGSTKSZ: a frame carrying AMX tile state is over 11 KiB). Our handlers run on it
// (SA_ONSTACK, so that a fault on a fiber stack's guard page can be handled), and Python's
// own handlers, chained from ours, run there too.
size_t alt_stack_size() {
    size_t want = 64 * 1024;
#ifdef AT_MINSIGSTKSZ
    size_t min = (size_t)getauxval(AT_MINSIGSTKSZ);
    if (4 * min > want) want = 4 * min;
#endif
    return want;
}

void thread_setup() {
    // Give this thread an alternate stack if it has none, or only one too small for the signal
    // frames of this CPU: an alt stack of SIGSTKSZ (8 KiB, as older code allocates) cannot hold
    // a frame with AMX state, and the kernel then kills the process ("overflowed sigaltstack").
    // A smaller stack found here is left allocated (its owner may still free or restore it).
    static thread_local bool done = false;
    if (done) return;
    protect(nullptr, nullptr, nullptr);  // this thread's recovery point exists before any signal
    const int i = __atomic_fetch_add(&n_kernel_tids, 1, __ATOMIC_ACQ_REL);
    if (i < MAX_KERNEL_THREADS) __atomic_store_n(&kernel_tids[i], my_tid(), __ATOMIC_RELEASE);
    stack_t cur;
    if (sigaltstack(nullptr, &cur) != 0 || (cur.ss_flags & SS_ONSTACK)) return;  // on it now: later
    done = true;
    size_t want = alt_stack_size();
    if (!(cur.ss_flags & SS_DISABLE) && cur.ss_size >= want) return;
    stack_t ss;
    ss.ss_size = want;
    ss.ss_sp = malloc(ss.ss_size);  // kept for the thread's life
    ss.ss_flags = 0;
    if (ss.ss_sp != nullptr && sigaltstack(&ss, nullptr) != 0) free(ss.ss_sp);
}

#ifndef KB_POOL
constexpr int (*parallel)(int, long, void (*)(void*, long), void*) = nullptr;
#endif

// Runtime::fiber_stacks: this thread's stacks, for every module (kb_cpu_fiber.cpp's
// ensure_stacks asks for them before each block it runs on fibers).
thread_local char* t_stacks = nullptr;
thread_local size_t t_stacks_bytes = 0, t_stacks_stride = 0;
thread_local int t_stacks_n = 0;

char* fiber_stacks(size_t stride, size_t page, int n, size_t* map_bytes) {
    if (t_stacks != nullptr && t_stacks_n >= n && t_stacks_stride == stride) {
        *map_bytes = t_stacks_bytes;
        return t_stacks;
    }
    if (t_stacks != nullptr) munmap(t_stacks, t_stacks_bytes);
    t_stacks = nullptr;
    t_stacks_n = 0;
    const size_t bytes = stride * (size_t)n;
    void* m = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED) return nullptr;
    t_stacks = static_cast<char*>(m);
    t_stacks_bytes = bytes;
    t_stacks_stride = stride;
    t_stacks_n = n;
    for (int i = 0; i < n; ++i) mprotect(t_stacks + (size_t)i * stride, page, PROT_NONE);
    *map_bytes = bytes;
    return t_stacks;
}

kb_cpu::Runtime api = {KB_CPU_RT_VERSION, &interrupts, &forked,   enter,       leave,        must_move,
                       run_elsewhere,     thread_setup, set_guard, protect,     cancel_word, set_deadline,
                       0,                 parallel,     fiber_stacks};

}  // namespace

extern "C" {

__attribute__((visibility("default"))) const kb_cpu::Runtime* kb_rt_api() { return &api; }

void* handler_fn(const struct sigaction& a) {
    return (a.sa_flags & SA_SIGINFO) ? (void*)a.sa_sigaction : (void*)a.sa_handler;
}

bool same_handler(const struct sigaction& a, const struct sigaction& b) {
    return (a.sa_flags & SA_SIGINFO) == (b.sa_flags & SA_SIGINFO) && handler_fn(a) == handler_fn(b);
}

// Whether the handler is Python's own (signal.signal installs the same C function whatever the
// Python callable): it lives in the object that defines PyOS_getsig.
bool is_python_handler(const struct sigaction& a) {
    void* py = dlsym(RTLD_DEFAULT, "PyOS_getsig");
    Dl_info x, y;
    return py != nullptr && dladdr(handler_fn(a), &x) && dladdr(py, &y) && x.dli_fbase == y.dli_fbase;
}

// Put the SIGINT handler in front of the current one (Python's); again after Python replaced it
// (the current handler is Python's, or the one ours chained to). Returns 0 when ours is in
// front, 1 when SIGINT is ignored or has its default action, 2 when another library's handler
// went in front of ours since: it is left there (it may chain to ours, as LLVM's does; putting
// ours in front of it would make the two call each other, and lose Python's), -1 on error.
__attribute__((visibility("default"))) int kb_rt_install_interrupt() {
    struct sigaction cur;
    if (sigaction(SIGINT, nullptr, &cur) != 0) return -1;
    if ((cur.sa_flags & SA_SIGINFO) && cur.sa_sigaction == on_int) return 0;
    if (!(cur.sa_flags & SA_SIGINFO) && (cur.sa_handler == SIG_IGN || cur.sa_handler == SIG_DFL)) return 1;
    if (__atomic_load_n(&int_installed, __ATOMIC_ACQUIRE) && !same_handler(cur, prev_int) && !is_python_handler(cur))
        return 2;
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_sigaction = on_int;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK | (cur.sa_flags & SA_RESTART);
    sigemptyset(&sa.sa_mask);
    prev_int = cur;
    __atomic_store_n(&int_installed, 1, __ATOMIC_RELEASE);
    thread_setup();  // the installing thread (Python's main thread) is where Ctrl-C lands
    return sigaction(SIGINT, &sa, nullptr);
}

__attribute__((visibility("default"))) int kb_rt_install_fatal() {
    if (fatal_installed) return 0;
    fatal_installed = 1;
    // The stop signal: a real-time signal near the top of the range, where libraries rarely
    // look (glibc keeps the lowest ones), taken only if nobody handles it yet.
    for (int sig = SIGRTMAX - 3; sig >= SIGRTMAX - 8 && stop_sig == 0; --sig) {
        struct sigaction cur;
        if (sigaction(sig, nullptr, &cur) != 0) continue;
        if ((cur.sa_flags & SA_SIGINFO) || cur.sa_handler != SIG_DFL) continue;
        struct sigaction sa;
        memset(&sa, 0, sizeof(sa));
        sa.sa_sigaction = on_stop;
        sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_RESTART;
        sigemptyset(&sa.sa_mask);
        if (sigaction(sig, &sa, nullptr) == 0) stop_sig = sig;
    }
    api.stop_signal = stop_sig;
    for (int sig : FATAL) {
        struct sigaction sa;
        memset(&sa, 0, sizeof(sa));
        sa.sa_sigaction = on_fatal;
        sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
        sigemptyset(&sa.sa_mask);
        if (sigaction(sig, &sa, &prev_fatal[sig]) != 0) return -1;
    }
    thread_setup();
    return 0;
}

__attribute__((visibility("default"))) int kb_rt_install_fork() {
    return pthread_atfork(nullptr, nullptr, after_fork_child);
}

// KERNELBAY_CPU_WAIT=spin: the pool's workers poll for a next launch a while before they sleep
// (as OpenMP's threads do by default); passive (the default): they sleep at once.
__attribute__((visibility("default"))) void kb_rt_set_spin(long polls) {
#ifdef KB_POOL
    __atomic_store_n(&spin_count, polls, __ATOMIC_RELAXED);
#else
    (void)polls;
#endif
}

__attribute__((visibility("default"))) long kb_rt_active() { return __atomic_load_n(&active, __ATOMIC_ACQUIRE); }
}
