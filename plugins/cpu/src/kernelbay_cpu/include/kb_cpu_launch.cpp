// kernelbay CPU backend: the kernel-independent part of the grid runners (kb_cpu_launch.h), compiled
// once per compiler and flags into an object that every module links (kernelbay_cpu/runners.py).
// This file comes after the prelude, whose declarations it defines.
#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "kb_cpu_launch.h"
#if defined(__cpp_exceptions)
#include <stdexcept>
#endif

#pragma GCC visibility push(hidden)

alignas(64) KB_CPU_TLS kb_cpu::uint3 kb_threadIdx;
alignas(64) KB_CPU_TLS kb_cpu::uint3 kb_blockIdx;
alignas(64) KB_CPU_TLS kb_cpu::dim3 kb_blockDim;
alignas(64) KB_CPU_TLS kb_cpu::dim3 kb_gridDim;
KB_CPU_TLS bool kb_diag = false;
KB_CPU_TLS unsigned kb_span = 0;

namespace kb_cpu {

int n_threads = 0;  // 0: OpenMP's default (OMP_NUM_THREADS, else all cores)
long timeout_ms = 0;  // KERNELBAY_CPU_TIMEOUT: a launch still running after it is stopped (0: never)
char error_message[512];
int error_flag = 0;
const Runtime* rt = nullptr;  // kb_set_runtime; null: no Ctrl-C, fault report or fork care
static long no_interrupts = 0;

void record_error(const char* what) {
    int expected = 0;
    if (__atomic_compare_exchange_n(&error_flag, &expected, 1, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
        std::strncpy(error_message, what, sizeof(error_message) - 1);
        error_message[sizeof(error_message) - 1] = 0;
    }
}

static void* fault_address = nullptr;  // the last fault's address (kb_fault_address)

// Whether ::kb_threadIdx names the running thread: the per-thread and fiber runners set it per
// thread; the loop runners keep the thread index in a local, and set it only while a faulting
// block runs again to find its thread (find_thread, ::kb_diag).
static KB_CPU_TLS bool thread_known = false;

static const char* fault_what(const Fault& f) {
    switch (f.sig) {
        case SIGSEGV:
            if (f.code == SI_KERNEL)  // x86-64: a general-protection fault, no address given
                return "invalid memory access (SIGSEGV: an address no process can map, far out of bounds)";
            return f.code == SEGV_ACCERR ? "invalid memory access (SIGSEGV: a protected page, such as the guard "
                                           "page after a buffer)"
                                         : "invalid memory access (SIGSEGV: unmapped memory)";
        case SIGBUS: return "invalid memory access (SIGBUS: misaligned or past the end of a mapping)";
        case SIGFPE:
            return f.code == FPE_INTDIV   ? "integer division by zero (SIGFPE)"
                   : f.code == FPE_INTOVF ? "integer overflow in a division (SIGFPE)"
                                          : "arithmetic fault (SIGFPE)";
        case SIGILL: return "illegal instruction (SIGILL: __trap(), or code built for another CPU)";
        default: return "fault";
    }
}

#if defined(__cpp_exceptions)
[[noreturn]] void stop(const char* what) { throw std::runtime_error(what); }
#else
// Without C++ exceptions: where a stop on the loop and per-thread runners goes (run_chunk, or
// run_block for a re-run), its message, and whether it was a failed device assert.
static KB_CPU_TLS void** stop_target = nullptr;
static KB_CPU_TLS char stop_message[512];
static KB_CPU_TLS bool stop_assert = false;

[[noreturn]] static void stop_with(const char* what, bool assert) {
#ifdef KB_CPU_HAS_FIBERS
    if (Sched* s = tls_sched; s != nullptr && s->in_block) {  // a fiber: back to its scheduler
        std::snprintf(s->msg, sizeof(s->msg), "%s", what);
        fail_here(*s);
    }
#endif
    std::strncpy(stop_message, what, sizeof(stop_message) - 1);
    stop_message[sizeof(stop_message) - 1] = 0;
    stop_assert = assert;
    if (stop_target == nullptr) {  // kernel code always runs inside run_chunk or run_block: never met
        std::fprintf(stderr, "kernelbay: %s, outside a block\n", what);
        std::abort();
    }
    __builtin_longjmp(stop_target, 1);
}

[[noreturn]] void stop(const char* what) { stop_with(what, false); }
#endif

[[noreturn]] void assert_fail(const char* cond, const char* file, unsigned line, const char* func) {
#if defined(__cpp_exceptions)
    DeviceAssert a;
#else
    struct {
        char msg[400];
    } a;
#endif
    const uint3 b = ::kb_blockIdx, t = ::kb_threadIdx;
    const char* base = std::strrchr(file, '/');
    char thread[64] = "";
    if (thread_known || ::kb_diag) std::snprintf(thread, sizeof(thread), ", thread (%u,%u,%u)", t.x, t.y, t.z);
    const bool lambda = std::strcmp(func, "operator()") == 0;  // the body of a kernel on the loop path
    std::snprintf(a.msg, sizeof(a.msg), "device assert `%s` failed at %s:%u%s%s (block (%u,%u,%u)%s)", cond,
                  base ? base + 1 : file, line, lambda ? "" : " in ", lambda ? "" : func, b.x, b.y, b.z, thread);
#if defined(__cpp_exceptions)
    throw a;
#else
    stop_with(a.msg, true);
#endif
}

KB_CPU_TLS char* loop_dyn = nullptr;
static KB_CPU_TLS std::size_t loop_dyn_cap = 0;

static void ensure_loop_dyn(std::size_t shmem) {
    if (shmem <= loop_dyn_cap && loop_dyn != nullptr) return;
    std::free(loop_dyn);
    loop_dyn_cap = shmem > 64 ? shmem : 64;
    loop_dyn = static_cast<char*>(std::aligned_alloc(64, (loop_dyn_cap + 63) / 64 * 64));
}

// One launch's grid: what each block runs, and how.
struct Grid {
    int how;
    void (*body)(void*);
    void* ctx;
    dim3 grid, block;
    std::size_t shmem;
};

// One block of the grid, ::kb_blockIdx set: the kernel code (through the per-entry thunk).
static void block_body(const Grid& g, uint3 bi) {
    ::kb_blockIdx = bi;
    switch (g.how) {
        case BLOCK_THREADS:
            thread_known = true;
            g.body(g.ctx);
            break;
#ifdef KB_CPU_HAS_FIBERS  // the cuda prelude's (kb_cpu_fiber.h); a c++ module has no fibers
        case BLOCK_FIBERS:
            run_block_fibers(g.body, g.ctx, bi, g.block.x, g.block.y, g.block.z, g.shmem);
            break;
#endif
        default:
            thread_known = false;  // a fiber runner sets it; the loop runners keep threadIdx in a local
            if (g.shmem > 0) ensure_loop_dyn(g.shmem);
            g.body(g.ctx);
    }
}

#if defined(__cpp_exceptions)
static void run_block(const Grid& g, uint3 bi) {
    try {
        block_body(g, bi);
    } catch (const DeviceAssert& e) {
        if (!thread_known && !::kb_diag) {  // the loop path: run the block again to name the thread
            ::kb_diag = true;
            try {
                block_body(g, ::kb_blockIdx);  // the block that failed (of a call's span: at_block)
            } catch (const DeviceAssert& again) {
                ::kb_diag = false;
                record_error(again.what());
                return;
            } catch (...) {
            }
            ::kb_diag = false;
        }
        record_error(e.what());
    } catch (const std::exception& e) {
        record_error(e.what());
    } catch (...) {
        record_error("a kernel threw a C++ exception that is not a std::exception");
    }
}
#else
// The loop path's failed assert: the block runs again, its threads one by one (::kb_diag), so
// that the assert's report names the thread; `first` is the report when it does not fail again.
static __attribute__((noinline)) void assert_again(const Grid& g, const char* first) {
    char kept[sizeof(stop_message)];
    std::memcpy(kept, first, sizeof(kept));
    void** const outer = stop_target;
    void* jb[5];
    ::kb_diag = true;
    stop_target = jb;
    if (__builtin_setjmp(jb) == 0) {
        block_body(g, ::kb_blockIdx);  // the block that failed (of a call's span: at_block)
        stop_target = outer;
        ::kb_diag = false;
        record_error(kept);
        return;
    }
    stop_target = outer;
    ::kb_diag = false;
    record_error(stop_assert ? stop_message : kept);
}

// After a stop (stop_with): recorded as the launch's error, as run_block's catch did.
static void stopped(const Grid& g) {
    if (stop_assert && !thread_known && !::kb_diag) assert_again(g, stop_message);
    else record_error(stop_message);
}

// One block, its stops caught (find_thread's re-run of a faulting block).
static void run_block(const Grid& g, uint3 bi) {
    void** const outer = stop_target;
    void* jb[5];
    stop_target = jb;
    if (__builtin_setjmp(jb) == 0) {
        block_body(g, bi);
        stop_target = outer;
        return;
    }
    stop_target = outer;  // stopped: the kernel's frames are left behind
    stopped(g);
}
#endif

// After a jump out of the runtime's handler: `sig` (and SIGINT, which Ctrl-C's handler may
// have jumped from) is still blocked on this thread, and a fiber block was left half-way.
static void after_jump(int sig) {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, sig);
    sigaddset(&set, SIGINT);
    pthread_sigmask(SIG_UNBLOCK, &set, nullptr);
    if (rt != nullptr) rt->guard(nullptr);
}

// Back from the fault handler (kb_cpu_rt.cpp): the block stops, and the launch fails with what
// happened, where (block, and thread where the runner knows it) and in which function.
static void fault_report(const Fault& f) {
    after_jump(f.sig);
    const uint3 b = ::kb_blockIdx, t = ::kb_threadIdx;
    char thread[64] = "";
    if (thread_known) std::snprintf(thread, sizeof(thread), ", thread (%u,%u,%u)", t.x, t.y, t.z);
    char where[200] = "";
    Dl_info di;
    if (f.pc != nullptr && dladdr(f.pc, &di) && di.dli_sname != nullptr)
        std::snprintf(where, sizeof(where), " in %s+0x%lx", di.dli_sname,
                      (unsigned long)((char*)f.pc - (char*)di.dli_saddr));
    // A fault next to the stack pointer, or just below this thread's stack (its guard page),
    // is a stack overflow: deep recursion or large local arrays in the kernel.
    const char* what = fault_what(f);
    const char* a0 = static_cast<const char*>(f.addr);
    const char* sp = static_cast<const char*>(f.sp);
    pthread_attr_t attr;
    if ((f.sig == SIGSEGV || f.sig == SIGBUS) && sp != nullptr && a0 != nullptr && a0 < sp + 4096 &&
        a0 + (1 << 20) > sp) {
        what = "stack overflow (SIGSEGV: deep recursion or large local arrays in the kernel)";
    } else if ((f.sig == SIGSEGV || f.sig == SIGBUS) && pthread_getattr_np(pthread_self(), &attr) == 0) {
        void* lo = nullptr;
        std::size_t size = 0;
        if (pthread_attr_getstack(&attr, &lo, &size) == 0) {
            const char* a = static_cast<const char*>(f.addr);
            const char* bottom = static_cast<const char*>(lo);
            if (a >= bottom - (1 << 20) && a < bottom + size)
                what = "stack overflow (SIGSEGV: deep recursion or large local arrays in the kernel)";
        }
        pthread_attr_destroy(&attr);
    }
    const bool data = f.sig == SIGSEGV || f.sig == SIGBUS;
    char m[512];
    std::snprintf(m, sizeof(m), "block (%u,%u,%u)%s: %s at %s %p%s", b.x, b.y, b.z, thread, what,
                  data ? "address" : "instruction", data ? f.addr : (f.pc ? f.pc : f.addr), where);
    int expected = 0;
    if (__atomic_compare_exchange_n(&error_flag, &expected, FAULT, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
        fault_address = f.addr;
        std::strncpy(error_message, m, sizeof(error_message) - 1);
        error_message[sizeof(error_message) - 1] = 0;
    }
}

// Whether this thread has what the runtime's fault report needs (an alternate signal stack).
alignas(64) static KB_CPU_TLS bool thread_ready = false;

static void setup_thread() {
    thread_ready = true;
    if (rt != nullptr) rt->thread_setup();
}

// Blocks [b, end) in order. Block coordinates are stepped, not divided out of the linear index:
// three 64-bit divisions per block cost as much as a small block's work. False: Ctrl-C
// cancelled the blocks not yet started.
//
// On the loop path a call runs up to SPAN_THREADS threads' worth of consecutive blocks in x
// (::kb_span): the per-block cost of a call (the runner's checks, the kernel's prologue, a
// few dozen instructions) otherwise sits between the loads of a memory-bound kernel. saxpy 2^24
// with 256-thread blocks, one thread: 1024-thread blocks were 5-12% faster before spans.
constexpr long SPAN_THREADS = 8192;

static bool run_blocks_in(const Grid& g, long b, long end, const long* irq, long irq0, const int* cancel) {
    const long gx = g.grid.x, gy = g.grid.y;
    ::kb_gridDim = g.grid;
    ::kb_blockDim = g.block;
    const long threads = (long)g.block.x * g.block.y * g.block.z;
    const long span_max = threads < SPAN_THREADS ? SPAN_THREADS / threads : 1;
    unsigned x = (unsigned)(b % gx), y = (unsigned)((b / gx) % gy), z = (unsigned)(b / (gx * gy));
    while (b < end) {
        if (__atomic_load_n(&error_flag, __ATOMIC_RELAXED)) return true;
        if (__atomic_load_n(irq, __ATOMIC_RELAXED) != irq0 || __atomic_load_n(cancel, __ATOMIC_RELAXED))
            return false;
        long n = 1;
        if (g.how == BLOCK_LOOP) {  // set for every call: another kernel of the module may have left it
            n = gx - x < end - b ? gx - x : end - b;
            if (n > span_max) n = span_max;
            ::kb_span = (unsigned)n;
        }
#if defined(__cpp_exceptions)
        run_block(g, uint3{x, y, z});
#else
        block_body(g, uint3{x, y, z});  // a stop leaves through run_chunk
#endif
        if (n > 1 && ::kb_span != 0) n = 1;  // not a KB_THREADS kernel: it ran one block
        b += n;
        x += (unsigned)n - 1;
        if (++x == (unsigned)gx) {
            x = 0;
            if (++y == (unsigned)gy) {
                y = 0;
                ++z;
            }
        }
    }
    return true;
}

// Blocks [b, end) (run_blocks_in), with a target for their stops. Without exceptions one per
// chunk, not per block (run_block): a setjmp per block cost the per-thread runner 10 ns a block
// (8192 blocks of 32 threads, y[i] += 1: 0.29 -> 0.39 ms). After a stop the chunk ends as it
// did when run_block recorded the error (run_blocks_in returns at the next block's check).
static bool run_chunk(const Grid& g, long b, long end, const long* irq, long irq0, const int* cancel) {
#if defined(__cpp_exceptions)
    return run_blocks_in(g, b, end, irq, irq0, cancel);
#else
    void** const outer = stop_target;
    void* jb[5];
    stop_target = jb;
    if (__builtin_expect(__builtin_setjmp(jb) == 0, 1)) {
        const bool done = run_blocks_in(g, b, end, irq, irq0, cancel);
        stop_target = outer;
        return done;
    }
    stop_target = outer;
    stopped(g);
    return true;
#endif
}

// The loop runners keep the thread index in a local: to name the faulting thread, run the
// faulting block again with its threads one by one (::kb_diag), each in ::kb_threadIdx. Its
// outputs were undefined already; a fault that does not come back leaves the thread unnamed.
static void find_thread(const Grid& g, const Runtime* r, const int* cancel) {
    const uint3 bi = ::kb_blockIdx;
    sigjmp_buf jb;
    Fault again{};
    if (sigsetjmp(jb, 0) == 0) {
        r->protect(&jb, &again, cancel);
        ::kb_diag = true;
        run_block(g, bi);
        ::kb_diag = false;
        r->protect(nullptr, nullptr, nullptr);
        return;  // no fault this time: the report goes without the thread
    }
    ::kb_diag = false;
    after_jump(again.sig);
    ::kb_blockIdx = bi;
    thread_known = true;  // ::kb_threadIdx is the thread that faulted again
}

// Blocks [b, end) on this thread, with the runtime's recovery point set: a fault in kernel code
// comes back here (the jump leaves the blocks' frames, and any fiber, behind) and ends the
// launch with FAULT. The OpenMP loop that called this goes on normally (a jump out of its body
// would be undefined); its other chunks see error_flag and return.
static const int not_cancelled = 0;

static bool run_range(const Grid& g, long b, long end, const long* irq, long irq0, const int* cancel) {
    if (__builtin_expect(!thread_ready, 0)) setup_thread();
    const Runtime* const r = rt;
    if (r == nullptr) return run_chunk(g, b, end, irq, irq0, cancel);
    sigjmp_buf jb;
    Fault f{};
    if (__builtin_expect(sigsetjmp(jb, 0) != 0, 0)) {
#if !defined(__cpp_exceptions)
        stop_target = nullptr;  // the jump left run_chunk's frame (and its jump buffer) behind
#endif
        if (r->stop_signal != 0 && f.sig == r->stop_signal) {  // Ctrl-C or a deadline: left where it was
            after_jump(f.sig);
            return false;
        }
        if (!thread_known) {
            after_jump(f.sig);
            find_thread(g, r, cancel);
        }
        fault_report(f);
        return true;
    }
    r->protect(&jb, &f, cancel);
    const bool done = run_chunk(g, b, end, irq, irq0, cancel);
    r->protect(nullptr, nullptr, nullptr);
    return done;
}

// The cancel word of the launch this thread starts (launch(), below): read by run_grid on
// the same thread, before its parallel region, and handed to each thread that runs blocks.
static KB_CPU_TLS const int* launch_cancel = nullptr;

int run_grid(int how, void (*body)(void*), void* ctx, long gx, long gy, long gz, long bx, long by, long bz,
             std::size_t shmem) {
    const Grid g{how, body, ctx, dim3((unsigned)gx, (unsigned)gy, (unsigned)gz),
                 dim3((unsigned)bx, (unsigned)by, (unsigned)bz), shmem};
    const long nblocks = gx * gy * gz;
    error_flag = 0;
    // Ctrl-C bumps the runtime's counter: blocks not yet started are then skipped.
    const long* irq = rt != nullptr ? rt->interrupts : &no_interrupts;
    const long irq0 = __atomic_load_n(irq, __ATOMIC_RELAXED);
    const int* cancel = launch_cancel != nullptr ? launch_cancel : &not_cancelled;
#ifdef _OPENMP
    const int nt = n_threads > 0 ? n_threads : omp_get_max_threads();
    if (nblocks > 1 && nt > 1) {
        // Chunks of blocks handed out on demand: a core that is busy elsewhere (a loaded
        // machine, another process) does not hold the whole grid back as a static split would.
        const long chunk = nblocks / ((long)nt * 8) > 1 ? nblocks / ((long)nt * 8) : 1;
        const long nchunks = (nblocks + chunk - 1) / chunk;
        struct Job {
            const Grid* g;
            long chunk, nblocks;
            const long* irq;
            long irq0;
            const int* cancel;
            static void run(void* j, long c) {
                const Job& o = *static_cast<const Job*>(j);
                const long b = c * o.chunk;
                run_range(*o.g, b, b + o.chunk < o.nblocks ? b + o.chunk : o.nblocks, o.irq, o.irq0, o.cancel);
            }
        } job{&g, chunk, nblocks, irq, irq0, cancel};
        // The runtime's pool (kb_cpu_rt.cpp) waits only for the chunks its threads took; OpenMP
        // where there is none, or while another launch uses it.
        const bool pooled = rt != nullptr && rt->parallel != nullptr && rt->parallel(nt, nchunks, &Job::run, &job) == 0;
        if (!pooled) {
#pragma omp parallel for schedule(dynamic, 1) num_threads(nt)
            for (long c = 0; c < nchunks; ++c) Job::run(&job, c);
        }
        if (error_flag) return error_flag;
        if (const int c = __atomic_load_n(cancel, __ATOMIC_ACQUIRE)) return c;
        return __atomic_load_n(irq, __ATOMIC_RELAXED) != irq0 ? CANCELLED : 0;
    }
#endif
    // One block (or one thread): no parallel region to open.
    if (!run_range(g, 0, nblocks, irq, irq0, cancel)) {
        if (error_flag) return error_flag;
        const int c = __atomic_load_n(cancel, __ATOMIC_ACQUIRE);
        return c ? c : CANCELLED;
    }
    return error_flag;
}

static void where(unsigned* b) {
    b[0] = ::kb_blockIdx.x;
    b[1] = ::kb_blockIdx.y;
    b[2] = ::kb_blockIdx.z;
}

int launch(const char* name, void** a, const int* g, int shmem, RunFn run) {
    const Runtime* r = rt;
    if (r == nullptr) return run(a, g[0], g[1], g[2], g[3], g[4], g[5], shmem);
    if (__builtin_expect(*r->forked, 0) && r->must_move()) {
        struct Job {
            const char* name;
            void** a;
            const int* g;
            int shmem;
            RunFn run;
        } job{name, a, g, shmem, run};
        return r->run_elsewhere(
            [](void* c) {
                Job* j = static_cast<Job*>(c);
                return launch(j->name, j->a, j->g, j->shmem, j->run);
            },
            &job);
    }
    const int slot = r->enter(name, g, where);
    if (timeout_ms > 0) r->set_deadline(slot, timeout_ms);
    const int* const outer = launch_cancel;  // a launch inside a launch's thread (streams): restored after
    launch_cancel = r->cancel_word(slot);
    const int status = run(a, g[0], g[1], g[2], g[3], g[4], g[5], shmem);
    launch_cancel = outer;
    r->leave(slot);
    return status;
}

}  // namespace kb_cpu

#pragma GCC visibility pop

extern "C" {
__attribute__((visibility("default"))) void kb_set_threads(int n) { kb_cpu::n_threads = n; }
__attribute__((visibility("default"))) void kb_set_timeout(long ms) { kb_cpu::timeout_ms = ms; }
__attribute__((visibility("default"))) const char* kb_error_message() { return kb_cpu::error_message; }
__attribute__((visibility("default"))) void* kb_fault_address() { return kb_cpu::fault_address; }
// The OpenMP runtime this module uses, made never to unload (RTLD_NODELETE): its worker threads
// stay parked inside it after a launch, so unloading it with the last kernel module would leave
// them in unmapped code. Found by the address of one of its functions, so it costs no search of
// the library path. 1: pinned; 0: this module has no OpenMP; -1: not found (the caller probes).
__attribute__((visibility("default"))) int kb_pin_openmp() {
#ifdef _OPENMP
    Dl_info info;
    if (dladdr(reinterpret_cast<void*>(&omp_get_max_threads), &info) == 0 || info.dli_fname == nullptr) return -1;
    return dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE) != nullptr ? 1 : -1;
#else
    return 0;
#endif
}
__attribute__((visibility("default"))) int kb_set_runtime(const kb_cpu::Runtime* r) {
    if (r == nullptr || r->version != KB_CPU_RT_VERSION) return -1;
    kb_cpu::rt = r;
    return 0;
}
}
