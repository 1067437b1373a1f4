// kernelbay CPU backend: launch state and grid runners shared by the cuda and c++ preludes.
// The generated launcher instantiates kb_cpu::run_threads<&kernel> (cuda: one call per thread)
// or kb_cpu::run_blocks<&kernel> (c++: one call per block) for each entry.
#pragma once
#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>

#include <csetjmp>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <tuple>
#include <type_traits>
#include <utility>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "kb_cpu_rt.h"

namespace kb_cpu {

struct uint3 {
    unsigned int x, y, z;
};

struct dim3 {
    unsigned int x, y, z;
    constexpr dim3(unsigned int x_ = 1, unsigned int y_ = 1, unsigned int z_ = 1) : x(x_), y(y_), z(z_) {}
    constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
    constexpr operator uint3() const { return uint3{x, y, z}; }
};

}  // namespace kb_cpu

// The running block and thread. thread_local: the blocks of a grid run on several cores.
// Each on its own cache line: cheap insurance against false sharing between the dynamic TLS
// blocks of two threads (not measured to matter). Kept as separate variables: grouped in one
// struct, GCC no longer keeps them apart from the kernel's stores and saxpy got 4x slower.
// In the global namespace, under the names the cuda prelude's threadIdx/blockIdx/... macros use
// unqualified: a kernel body run by KB_THREADS_BEGIN declares locals of the same names, which
// the compiler sees as loop variables and invariants (kb_cpu_cuda.h).
alignas(64) static thread_local kb_cpu::uint3 kb_threadIdx;
alignas(64) static thread_local kb_cpu::uint3 kb_blockIdx;
alignas(64) static thread_local kb_cpu::dim3 kb_blockDim;
alignas(64) static thread_local kb_cpu::dim3 kb_gridDim;
// Set only while a faulting block runs again to find its thread (run_range): the loop runners
// then run the block's threads one by one, each in ::kb_threadIdx (kb_cpu_cuda.h, kb_cpu_fission.h).
static thread_local bool kb_diag = false;

namespace kb_cpu {

// The thread a faulting block's re-run is at (kb_diag): stored before that thread's code runs,
// never sunk past it (a volatile store, then a compiler barrier).
inline void diag_thread(unsigned x, unsigned y, unsigned z) {
    *static_cast<volatile unsigned*>(&::kb_threadIdx.x) = x;
    *static_cast<volatile unsigned*>(&::kb_threadIdx.y) = y;
    *static_cast<volatile unsigned*>(&::kb_threadIdx.z) = z;
    __asm__ __volatile__("" ::: "memory");
}

static int n_threads = 0;  // 0: OpenMP's default (OMP_NUM_THREADS, else all cores)
static long timeout_ms = 0;  // KERNELBAY_CPU_TIMEOUT: a launch still running after it is stopped (0: never)
static char error_message[512];
static int error_flag = 0;
static const Runtime* rt = nullptr;  // kb_set_runtime; null: no Ctrl-C, fault report or fork care
static long no_interrupts = 0;

template <class KbT>
constexpr char kind_of() {
    using KbU = std::remove_cv_t<std::remove_reference_t<KbT>>;
    if constexpr (std::is_pointer<KbU>::value) return 'p';
    else if constexpr (std::is_same<KbU, bool>::value) return 'b';
    else if constexpr (std::is_floating_point<KbU>::value) return 'f';
    else if constexpr (std::is_integral<KbU>::value) return std::is_signed<KbU>::value ? 'i' : 'u';
    else if constexpr (std::is_enum<KbU>::value) return std::is_signed<std::underlying_type_t<KbU>>::value ? 'i' : 'u';
    else
    return 'o';
}

template <class KbF>
struct sig;

template <class KbF>
struct sig<KbF const> : sig<KbF> {};

template <class... KbP>
struct sig<void (*)(KbP...)> {
    static constexpr int n = sizeof...(KbP);
    using values = std::tuple<std::decay_t<KbP>...>;
    static int info(long long* sizes, char* kinds, int cap) {
        const long long s[] = {(long long)sizeof(std::decay_t<KbP>)..., 0};
        const char k[] = {kind_of<KbP>()..., 0};
        for (int i = 0; i < n && i < cap; ++i) {
            sizes[i] = s[i];
            kinds[i] = k[i];
        }
        return n;
    }
    template <std::size_t... KbI>
    static values load(void** args, std::index_sequence<KbI...>) {
        // The driver convention: args[i] points at the value of parameter i.
        return values{*static_cast<std::tuple_element_t<KbI, values>*>(args[KbI])...};
    }
};

inline void record_error(const char* what) {
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
static thread_local bool thread_known = false;

inline const char* fault_what(const Fault& f) {
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

// A failed device assert (include/assert.h): the block stops with this exception, which
// run_block (or the fiber runner) records as the launch's error.
struct DeviceAssert : std::exception {
    char msg[400];
    const char* what() const noexcept override { return msg; }
};

[[noreturn]] inline void assert_fail(const char* cond, const char* file, unsigned line, const char* func) {
    DeviceAssert a;
    const uint3 b = ::kb_blockIdx, t = ::kb_threadIdx;
    const char* base = std::strrchr(file, '/');
    char thread[64] = "";
    if (thread_known || ::kb_diag) std::snprintf(thread, sizeof(thread), ", thread (%u,%u,%u)", t.x, t.y, t.z);
    const bool lambda = std::strcmp(func, "operator()") == 0;  // the body of a kernel on the loop path
    std::snprintf(a.msg, sizeof(a.msg), "device assert `%s` failed at %s:%u%s%s (block (%u,%u,%u)%s)", cond,
                  base ? base + 1 : file, line, lambda ? "" : " in ", lambda ? "" : func, b.x, b.y, b.z, thread);
    throw a;
}

template <class Body>
inline void run_block(Body& body, uint3 bi) {
    try {
        body(bi);
    } catch (const DeviceAssert& e) {
        if (!thread_known && !::kb_diag) {  // the loop path: run the block again to name the thread
            ::kb_diag = true;
            try {
                body(bi);
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

// After a jump out of the runtime's handler: `sig` (and SIGINT, which Ctrl-C's handler may
// have jumped from) is still blocked on this thread, and a fiber block was left half-way.
inline void after_jump(int sig) {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, sig);
    sigaddset(&set, SIGINT);
    pthread_sigmask(SIG_UNBLOCK, &set, nullptr);
    if (rt != nullptr) rt->guard(nullptr);
}

// Back from the fault handler (kb_cpu_rt.cpp): the block stops, and the launch fails with what
// happened, where (block, and thread where the runner knows it) and in which function.
inline void fault_report(const Fault& f) {
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
alignas(64) static thread_local bool thread_ready = false;

inline void setup_thread() {
    thread_ready = true;
    if (rt != nullptr) rt->thread_setup();
}

// Blocks [b, end) in order. Block coordinates are stepped, not divided out of the linear index:
// three 64-bit divisions per block cost as much as a small block's work. False: Ctrl-C
// cancelled the blocks not yet started.
template <class Body>
inline bool run_blocks_in(Body& body, long b, long end, long gx, long gy, const long* irq, long irq0,
                          const int* cancel) {
    unsigned x = (unsigned)(b % gx), y = (unsigned)((b / gx) % gy), z = (unsigned)(b / (gx * gy));
    for (; b < end; ++b) {
        if (__atomic_load_n(&error_flag, __ATOMIC_RELAXED)) return true;
        if (__atomic_load_n(irq, __ATOMIC_RELAXED) != irq0 || __atomic_load_n(cancel, __ATOMIC_RELAXED))
            return false;
        run_block(body, uint3{x, y, z});
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

// Blocks [b, end) on this thread, with the runtime's recovery point set: a fault in kernel code
// comes back here (the jump leaves the blocks' frames, and any fiber, behind) and ends the
// launch with FAULT. The OpenMP loop that called this goes on normally (a jump out of its body
// would be undefined); its other chunks see error_flag and return.
static const int not_cancelled = 0;

template <class Body>
inline bool run_range(Body& body, long b, long end, long gx, long gy, const long* irq, long irq0,
                      const int* cancel) {
    if (__builtin_expect(!thread_ready, 0)) setup_thread();
    const Runtime* const r = rt;
    if (r == nullptr) return run_blocks_in(body, b, end, gx, gy, irq, irq0, cancel);
    sigjmp_buf jb;
    Fault f{};
    if (__builtin_expect(sigsetjmp(jb, 0) != 0, 0)) {
        if (r->stop_signal != 0 && f.sig == r->stop_signal) {  // Ctrl-C or a deadline: left where it was
            after_jump(f.sig);
            return false;
        }
        if (!thread_known) {
            after_jump(f.sig);
            find_thread(body, r, cancel);
        }
        fault_report(f);
        return true;
    }
    r->protect(&jb, &f, cancel);
    const bool done = run_blocks_in(body, b, end, gx, gy, irq, irq0, cancel);
    r->protect(nullptr, nullptr, nullptr);
    return done;
}

// The loop runners keep the thread index in a local: to name the faulting thread, run the
// faulting block again with its threads one by one (::kb_diag), each in ::kb_threadIdx. Its
// outputs were undefined already; a fault that does not come back leaves the thread unnamed.
template <class Body>
inline void find_thread(Body& body, const Runtime* r, const int* cancel) {
    const uint3 bi = ::kb_blockIdx;
    sigjmp_buf jb;
    Fault again{};
    if (sigsetjmp(jb, 0) == 0) {
        r->protect(&jb, &again, cancel);
        ::kb_diag = true;
        run_block(body, bi);
        ::kb_diag = false;
        r->protect(nullptr, nullptr, nullptr);
        return;  // no fault this time: the report goes without the thread
    }
    ::kb_diag = false;
    after_jump(again.sig);
    ::kb_blockIdx = bi;
    thread_known = true;  // ::kb_threadIdx is the thread that faulted again
}

// The cancel word of the launch this thread starts (launch(), below): read by for_each_block on
// the same thread, before its parallel region, and handed to each thread that runs blocks.
static thread_local const int* launch_cancel = nullptr;

template <class Body>
inline int for_each_block(long gx, long gy, long gz, Body body) {
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
            Body* body;
            long chunk, nblocks, gx, gy;
            const long* irq;
            long irq0;
            const int* cancel;
            static void run(void* j, long c) {
                const Job& o = *static_cast<const Job*>(j);
                const long b = c * o.chunk;
                run_range(*o.body, b, b + o.chunk < o.nblocks ? b + o.chunk : o.nblocks, o.gx, o.gy, o.irq, o.irq0,
                          o.cancel);
            }
        } job{&body, chunk, nblocks, gx, gy, irq, irq0, cancel};
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
    if (!run_range(body, 0, nblocks, gx, gy, irq, irq0, cancel)) {
        if (error_flag) return error_flag;
        const int c = __atomic_load_n(cancel, __ATOMIC_ACQUIRE);
        return c ? c : CANCELLED;
    }
    return error_flag;
}

inline void where(unsigned* b) {
    b[0] = ::kb_blockIdx.x;
    b[1] = ::kb_blockIdx.y;
    b[2] = ::kb_blockIdx.z;
}

// The generated kb_launch_<i> runs each launch through here: announced to the runtime (fault
// reports, Ctrl-C), and moved to another thread in a fork()ed child (see kb_cpu_rt.cpp).
template <int (*Run)(void**, long, long, long, long, long, long, long)>
inline int launch(const char* name, void** a, const int* g, int shmem) {
    const Runtime* r = rt;
    if (r == nullptr) return Run(a, g[0], g[1], g[2], g[3], g[4], g[5], shmem);
    if (__builtin_expect(*r->forked, 0) && r->must_move()) {
        struct Job {
            const char* name;
            void** a;
            const int* g;
            int shmem;
        } job{name, a, g, shmem};
        return r->run_elsewhere(
            [](void* c) {
                Job* j = static_cast<Job*>(c);
                return launch<Run>(j->name, j->a, j->g, j->shmem);
            },
            &job);
    }
    const int slot = r->enter(name, g, where);
    if (timeout_ms > 0) r->set_deadline(slot, timeout_ms);
    const int* const outer = launch_cancel;  // a launch inside a launch's thread (streams): restored after
    launch_cancel = r->cancel_word(slot);
    const int status = Run(a, g[0], g[1], g[2], g[3], g[4], g[5], shmem);
    launch_cancel = outer;
    r->leave(slot);
    return status;
}

// cuda: each block on one core, its threads in turn, the kernel called once per thread.
template <auto KbF, std::size_t... KbI>
inline int run_threads_(void** args, long gx, long gy, long gz, long bx, long by, long bz,
                        std::index_sequence<KbI...> seq) {
    using S = sig<decltype(KbF)>;
    const typename S::values p = S::load(args, seq);
    const dim3 grid((unsigned)gx, (unsigned)gy, (unsigned)gz), block((unsigned)bx, (unsigned)by, (unsigned)bz);
    return for_each_block(gx, gy, gz, [&](uint3 bi) {
        ::kb_gridDim = grid;
        ::kb_blockDim = block;
        ::kb_blockIdx = bi;
        thread_known = true;
        for (unsigned z = 0; z < (unsigned)bz; ++z)
            for (unsigned y = 0; y < (unsigned)by; ++y)
                for (unsigned x = 0; x < (unsigned)bx; ++x) {
                    ::kb_threadIdx = uint3{x, y, z};
                    KbF(std::get<KbI>(p)...);
                }
    });
}

template <auto KbF>
inline int run_threads(void** args, long gx, long gy, long gz, long bx, long by, long bz, long /*shmem*/) {
    return run_threads_<KbF>(args, gx, gy, gz, bx, by, bz, std::make_index_sequence<sig<decltype(KbF)>::n>{});
}

// The dynamic shared memory (extern __shared__) of the block a loop runner runs on this thread;
// the fiber runner keeps its own (kb_cpu_fiber.h: dyn_shared() reads either).
static thread_local char* loop_dyn = nullptr;
static thread_local std::size_t loop_dyn_cap = 0;

inline void ensure_loop_dyn(std::size_t shmem) {
    if (shmem <= loop_dyn_cap && loop_dyn != nullptr) return;
    std::free(loop_dyn);
    loop_dyn_cap = shmem > 64 ? shmem : 64;
    loop_dyn = static_cast<char*>(std::aligned_alloc(64, (loop_dyn_cap + 63) / 64 * 64));
}

// c++: the kernel called once per block; it runs the block's blockDim threads itself.
template <auto KbF, std::size_t... KbI>
inline int run_blocks_(void** args, long gx, long gy, long gz, long bx, long by, long bz, std::size_t shmem,
                       std::index_sequence<KbI...> seq) {
    using S = sig<decltype(KbF)>;
    const typename S::values p = S::load(args, seq);
    const dim3 grid((unsigned)gx, (unsigned)gy, (unsigned)gz), block((unsigned)bx, (unsigned)by, (unsigned)bz);
    return for_each_block(gx, gy, gz, [&](uint3 bi) {
        ::kb_gridDim = grid;
        ::kb_blockDim = block;
        ::kb_blockIdx = bi;
        thread_known = false;  // a fiber runner sets it; the loop runners keep threadIdx in a local
        if (shmem > 0) ensure_loop_dyn(shmem);
        KbF(std::get<KbI>(p)...);
    });
}

template <auto KbF>
inline int run_blocks(void** args, long gx, long gy, long gz, long bx, long by, long bz, long shmem) {
    return run_blocks_<KbF>(args, gx, gy, gz, bx, by, bz, shmem > 0 ? (std::size_t)shmem : 0,
                          std::make_index_sequence<sig<decltype(KbF)>::n>{});
}

}  // namespace kb_cpu

extern "C" {
__attribute__((visibility("default"))) void kb_set_threads(int n) { kb_cpu::n_threads = n; }
__attribute__((visibility("default"))) void kb_set_timeout(long ms) { kb_cpu::timeout_ms = ms; }
__attribute__((visibility("default"))) const char* kb_error_message() { return kb_cpu::error_message; }
__attribute__((visibility("default"))) void* kb_fault_address() { return kb_cpu::fault_address; }
__attribute__((visibility("default"))) int kb_set_runtime(const kb_cpu::Runtime* r) {
    if (r == nullptr || r->version != KB_CPU_RT_VERSION) return -1;
    kb_cpu::rt = r;
    return 0;
}
}
