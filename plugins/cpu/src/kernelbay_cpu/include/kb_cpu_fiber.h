// kernelbay CPU backend: the block scheduler for kernels that use barriers, shared memory or warp
// intrinsics. Each CUDA thread of a block is a fiber (its own stack, a hand-written context switch
// on x86-64, ucontext elsewhere); all fibers of a block run on the one OS thread that runs the
// block, so __shared__ is a thread_local and needs no locking. A fiber runs until it waits (a
// barrier, a warp operation) or exits; the scheduler then resumes the next ready fiber, in
// thread order. When none is ready and some have not exited, the block is deadlocked (on a GPU,
// a hang): the launch fails with a message naming the block, the barrier or warp operation and
// its line, and the thread that is missing.
#pragma once
#include <csetjmp>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <stdexcept>
#include <string>
#include <pthread.h>
#if defined(__linux__)
#include <sys/auxv.h>  // getauxval(AT_MINSIGSTKSZ)
#endif
#include <sys/mman.h>
#include <unistd.h>
#if !defined(__x86_64__)
#include <ucontext.h>
#endif

#include "kb_cpu_launch.h"

namespace kb_cpu {

// --- context switch ------------------------------------------------------------------------

#if defined(__x86_64__)
// Saves the callee-saved registers on the current stack, stores the stack pointer in *save and
// continues on `to`. A new fiber's stack holds a frame whose return address is kb_cpu_fiber_start,
// which calls the function in r13. MXCSR and the x87 control word are not switched: every fiber
// of a block runs on the same OS thread and kernels do not change them.
extern "C" void kb_cpu_switch(void** save, void* to);
extern "C" void kb_cpu_fiber_start();
asm(R"(
    .text
    .globl kb_cpu_switch
    .hidden kb_cpu_switch
    .type kb_cpu_switch,@function
kb_cpu_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size kb_cpu_switch,.-kb_cpu_switch
    .globl kb_cpu_fiber_start
    .hidden kb_cpu_fiber_start
    .type kb_cpu_fiber_start,@function
kb_cpu_fiber_start:
    callq *%r13
    ud2
    .size kb_cpu_fiber_start,.-kb_cpu_fiber_start
)");

struct Ctx {
    void* sp = nullptr;
};
inline void ctx_switch(Ctx& from, Ctx& to) { kb_cpu_switch(&from.sp, to.sp); }
inline void ctx_make(Ctx& c, char* lo, std::size_t size, void (*entry)()) {
    // After the six pops and the ret, rsp must be 16-byte aligned so that the call in
    // kb_cpu_fiber_start enters `entry` with the alignment the ABI promises.
    std::uintptr_t top = (reinterpret_cast<std::uintptr_t>(lo) + size) & ~std::uintptr_t(15);
    void** sp = reinterpret_cast<void**>(top - 72);
    sp[0] = sp[1] = nullptr;                          // r15, r14
    sp[2] = reinterpret_cast<void*>(entry);           // r13
    sp[3] = sp[4] = sp[5] = nullptr;                  // r12, rbx, rbp
    sp[6] = reinterpret_cast<void*>(&kb_cpu_fiber_start);
    sp[7] = sp[8] = nullptr;
    c.sp = sp;
}
#else
struct Ctx {
    ucontext_t uc;
};
inline void ctx_switch(Ctx& from, Ctx& to) { swapcontext(&from.uc, &to.uc); }
inline void ctx_make(Ctx& c, char* lo, std::size_t size, void (*entry)()) {
    getcontext(&c.uc);
    c.uc.uc_stack.ss_sp = lo;
    c.uc.uc_stack.ss_size = size;
    c.uc.uc_link = nullptr;
    makecontext(&c.uc, entry, 0);
}
#endif

// --- per-OS-thread block state ---------------------------------------------------------------

enum : unsigned char { F_READY, F_BARRIER, F_WARP, F_DONE, F_TILE };

// --- warp operation names (the operations are in kb_cpu_sync.h) ----------------------------------

enum : int {
    W_SYNC, W_SHFL, W_UP, W_DOWN, W_XOR, W_BALLOT, W_MATCH_ANY, W_MATCH_ALL,
    W_ADD, W_MIN_S, W_MAX_S, W_MIN_U, W_MAX_U, W_AND, W_OR, W_XOR_R, W_ACTIVE
};

inline const char* op_name(int op) {
    static const char* names[] = {"__syncwarp", "__shfl_sync", "__shfl_up_sync", "__shfl_down_sync",
                                  "__shfl_xor_sync", "__ballot_sync/__any_sync/__all_sync", "__match_any_sync",
                                  "__match_all_sync", "__reduce_add_sync", "__reduce_min_sync",
                                  "__reduce_max_sync", "__reduce_min_sync", "__reduce_max_sync",
                                  "__reduce_and_sync", "__reduce_or_sync", "__reduce_xor_sync", "__activemask"};
    return names[op];
}

// One warp operation in flight: what a lane brought to the rendezvous and what it takes away.
struct Lane {
    std::uint64_t val, res;
    unsigned mask;
    int op, arg, width, line;
    const char* file;
};

static std::size_t fiber_stack = 128 * 1024;  // usable bytes per fiber; kb_set_fiber_stack
constexpr int MAX_FIBERS = 1024;

struct Sched {
    Ctx main;
    Ctx ctx[MAX_FIBERS];
    unsigned char state[MAX_FIBERS];
    Lane lane[MAX_FIBERS];
    int n = 0, cur = 0, live = 0;
    unsigned bx = 1, by = 1;
    uint3 tid[MAX_FIBERS];           // each fiber's threadIdx, computed once per block
    uint3* tid_slot = nullptr;       // this OS thread's ::kb_threadIdx
    // the block barrier
    int bar_count = 0, bar_line = 0, bar_acc = 0, bar_res[2] = {0, 0};
    unsigned bar_gen = 0;
    const char* bar_file = "";
    // tiles of more than 32 threads (cooperative_groups): arrivals at each tile's sync, by first warp
    int tile_count[MAX_FIBERS / 32];
    int active_wait[MAX_FIBERS / 32];  // lanes of each warp waiting in __activemask
    int wait_line[MAX_FIBERS];
    const char* wait_file[MAX_FIBERS];
    // the running block
    void (*body)(void*) = nullptr;
    void* body_ctx = nullptr;
    uint3 block{0, 0, 0};
    bool failed = false;
    char msg[480];
    // fiber stacks: one mapping, each stack above a PROT_NONE guard page
    char* stacks = nullptr;
    std::size_t stride = 0, map_bytes = 0, page = 4096;
    int nstacks = 0;
    // dynamic shared memory (extern __shared__)
    char* dyn = nullptr;
    std::size_t dyn_cap = 0;
    sigjmp_buf overflow;
    volatile int in_block = 0;
};

static thread_local Sched* tls_sched = nullptr;

inline uint3 tid_of(const Sched& s, int i) {
    return uint3{(unsigned)(i % s.bx), (unsigned)((i / s.bx) % s.by), (unsigned)(i / (s.bx * s.by))};
}

inline const char* base_name(const char* f) {
    const char* s = std::strrchr(f, '/');
    return s ? s + 1 : f;
}

[[noreturn]] inline void fail_here(Sched& s) {
    s.failed = true;
    s.state[s.cur] = F_DONE;
    ctx_switch(s.ctx[s.cur], s.main);
    std::abort();  // never resumed
}

template <class... KbA>
[[noreturn]] inline void fail(const char* fmt, KbA... a) {
    Sched& s = *tls_sched;
    std::snprintf(s.msg, sizeof(s.msg), fmt, a...);
    fail_here(s);
}

inline Sched& sched(const char* what) {
    Sched* s = tls_sched;
    if (s == nullptr) throw std::runtime_error(std::string(what) + " was called outside a block run by fibers");
    return *s;
}

// Brings the saved registers of fiber k into the cache ahead of the switch to it: 256 fiber stacks
// do not fit in L1, and the switch's first pop would otherwise wait for L2 (measured: a yield
// every 8 loop iterations cost 11 ns, 6.5 ns with this; prefetching the 6 lines a yield's frames
// span made a barrier cost 15 ns instead of 12).
inline void prefetch_fiber(const Sched& s, int k) {
#if defined(__x86_64__)
    const char* sp = static_cast<const char*>(s.ctx[k < s.n ? k : 0].sp);
    __builtin_prefetch(sp);
    __builtin_prefetch(sp + 56);
#else
    (void)s, (void)k;
#endif
}

// __activemask (kb_cpu_sync.h): its waiting lanes are released once no lane of the warp can run.
inline void release_active(Sched& s, int w);

// The running fiber stops (waits, or has finished) and the next ready one in thread order runs,
// by one direct switch; with none ready, the scheduler loop in run_block_fibers decides.
inline void switch_away(Sched& s, unsigned char st) {
    const int i = s.cur;
    s.state[i] = st;
    if (s.active_wait[i >> 5]) release_active(s, i >> 5);
    int j = i + 1;
    while (j < s.n && s.state[j] != F_READY) ++j;
    if (j == s.n) {
        j = 0;
        while (j < i && s.state[j] != F_READY) ++j;
        if (j == i) {
            ctx_switch(s.ctx[i], s.main);
            return;
        }
    }
    s.cur = j;
    *s.tid_slot = s.tid[j];
    prefetch_fiber(s, j + 1);
    ctx_switch(s.ctx[i], s.ctx[j]);
}

inline void wait_here(Sched& s, unsigned char st, int line, const char* file) {
    s.wait_line[s.cur] = line;
    s.wait_file[s.cur] = file;
    switch_away(s, st);
}

// --- stacks and the guard page ----------------------------------------------------------------

// A fault on a guard page of this thread's fiber stacks ends the block with an error (siglongjmp
// back to the scheduler); any other fault goes to the handler that was there before.
static struct sigaction prev_segv;
static int handler_installed = 0;

inline void on_segv(int sig, siginfo_t* info, void* uctx) {
    Sched* s = tls_sched;
    char* a = static_cast<char*>(info->si_addr);
    if (s != nullptr && s->in_block && s->stacks != nullptr && a >= s->stacks && a < s->stacks + s->map_bytes &&
        (std::size_t)(a - s->stacks) % s->stride < s->page)
        siglongjmp(s->overflow, 1);
    if (prev_segv.sa_flags & SA_SIGINFO) {
        if (prev_segv.sa_sigaction != nullptr) return prev_segv.sa_sigaction(sig, info, uctx);
    } else if (prev_segv.sa_handler != SIG_IGN && prev_segv.sa_handler != SIG_DFL) {
        return prev_segv.sa_handler(sig);
    }
    // default action: die with SIGSEGV as if no handler had been installed
    struct sigaction dfl;
    std::memset(&dfl, 0, sizeof(dfl));
    dfl.sa_handler = SIG_DFL;
    sigaction(SIGSEGV, &dfl, nullptr);
}

inline void install_guard_handler() {
    // A stack overflow runs the handler on an alternate stack: give this thread one if it has none.
    // (Without the runtime, KERNELBAY_CPU_RUNTIME=0: the same rule as kb_cpu_rt.cpp's
    // thread_setup, at least 64 KiB and 4x AT_MINSIGSTKSZ, which AMX frames need.)
    static thread_local bool alt_done = false;
    if (!alt_done) {
        stack_t cur;
        size_t want = 64 * 1024;
#ifdef AT_MINSIGSTKSZ
        if (4 * (size_t)getauxval(AT_MINSIGSTKSZ) > want) want = 4 * (size_t)getauxval(AT_MINSIGSTKSZ);
#endif
        if (sigaltstack(nullptr, &cur) == 0 && !(cur.ss_flags & SS_ONSTACK) &&
            ((cur.ss_flags & SS_DISABLE) || cur.ss_size < want)) {
            stack_t ss;
            ss.ss_size = want;
            ss.ss_sp = std::malloc(ss.ss_size);  // kept for the thread's life
            ss.ss_flags = 0;
            if (ss.ss_sp != nullptr && sigaltstack(&ss, nullptr) != 0) std::free(ss.ss_sp);
        }
        alt_done = true;
    }
    if (!__atomic_load_n(&handler_installed, __ATOMIC_ACQUIRE)) {
        static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
        pthread_mutex_lock(&mu);
        if (!handler_installed) {
            struct sigaction sa;
            std::memset(&sa, 0, sizeof(sa));
            sa.sa_sigaction = on_segv;
            sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_NODEFER;
            sigemptyset(&sa.sa_mask);
            sigaction(SIGSEGV, &sa, &prev_segv);
            __atomic_store_n(&handler_installed, 1, __ATOMIC_RELEASE);
        }
        pthread_mutex_unlock(&mu);
    }
}

inline bool ensure_stacks(Sched& s, int n) {
    const std::size_t page = (std::size_t)sysconf(_SC_PAGESIZE);
    const std::size_t usable = (fiber_stack + page - 1) / page * page;
    if (s.stacks != nullptr && s.nstacks >= n && s.stride == usable + page) return true;
    if (s.stacks != nullptr) munmap(s.stacks, s.map_bytes);
    s.stacks = nullptr;
    s.page = page;
    s.stride = usable + page;
    s.map_bytes = s.stride * (std::size_t)n;
    void* m = mmap(nullptr, s.map_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED) return false;
    s.stacks = static_cast<char*>(m);
    s.nstacks = n;
    for (int i = 0; i < n; ++i) mprotect(s.stacks + (std::size_t)i * s.stride, page, PROT_NONE);
    return true;
}

inline void fiber_entry() {
    Sched& s = *tls_sched;
    try {
        s.body(s.body_ctx);
    } catch (const std::exception& e) {
        std::snprintf(s.msg, sizeof(s.msg), "%s", e.what());
        s.failed = true;
    } catch (...) {
        std::snprintf(s.msg, sizeof(s.msg), "a kernel threw a C++ exception that is not a std::exception");
        s.failed = true;
    }
    --s.live;
    if (s.failed) ctx_switch(s.ctx[s.cur], s.main);
    else switch_away(s, F_DONE);
    std::abort();  // a finished fiber is never resumed
}

// Why the block cannot go on: which threads wait where, and which thread they wait for.
inline void describe_deadlock(Sched& s) {
    int at_bar = 0, first_bar = -1, first_done = -1, first_warp = -1, first_tile = -1;
    for (int i = 0; i < s.n; ++i) {
        if (s.state[i] == F_TILE && first_tile < 0) first_tile = i;
        if (s.state[i] == F_BARRIER) { ++at_bar; if (first_bar < 0) first_bar = i; }
        else if (s.state[i] == F_DONE) { if (first_done < 0) first_done = i; }
        else if (s.state[i] == F_WARP && first_warp < 0) first_warp = i;
    }
    const uint3 b = s.block;
    if (first_bar >= 0) {
        const int other = first_done >= 0 ? first_done : first_warp >= 0 ? first_warp : first_tile;
        const uint3 o = tid_of(s, other);
        if (first_done >= 0)
            std::snprintf(s.msg, sizeof(s.msg),
                          "block (%u,%u,%u): %d of %d threads wait at the barrier at %s:%d, but thread (%u,%u,%u) "
                          "exited without reaching it; every thread of a block must reach each __syncthreads "
                          "(a GPU would hang)",
                          b.x, b.y, b.z, at_bar, s.n, base_name(s.bar_file), s.bar_line, o.x, o.y, o.z);
        else
            std::snprintf(s.msg, sizeof(s.msg),
                          "block (%u,%u,%u): %d of %d threads wait at the barrier at %s:%d, but thread (%u,%u,%u) "
                          "waits in %s at %s:%d for lanes that are at the barrier (a GPU would hang)",
                          b.x, b.y, b.z, at_bar, s.n, base_name(s.bar_file), s.bar_line, o.x, o.y, o.z,
                          first_warp >= 0 ? op_name(s.lane[other].op) : "a cooperative_groups tile's sync",
                          base_name(s.wait_file[other]), s.wait_line[other]);
        return;
    }
    if (first_warp < 0) {
        const uint3 t = tid_of(s, first_tile);
        std::snprintf(s.msg, sizeof(s.msg),
                      "block (%u,%u,%u): thread (%u,%u,%u) waits in a cooperative_groups tile's sync at %s:%d, but "
                      "not every thread of its tile reaches it (a GPU would hang)",
                      b.x, b.y, b.z, t.x, t.y, t.z, base_name(s.wait_file[first_tile]), s.wait_line[first_tile]);
        return;
    }
    const Lane& w = s.lane[first_warp];
    const uint3 t = tid_of(s, first_warp);
    std::snprintf(s.msg, sizeof(s.msg),
                  "block (%u,%u,%u): thread (%u,%u,%u) waits in %s at %s:%d with mask 0x%08x, but not every lane "
                  "the mask names reaches it (a GPU would hang or give wrong results)",
                  b.x, b.y, b.z, t.x, t.y, t.z, op_name(w.op), base_name(w.file), w.line, w.mask);
}

// Runs one block: body(ctx) once per thread, each thread a fiber. Records an error and returns
// on deadlock, misuse, a C++ exception or a fiber stack overflow.
inline void run_block_fibers(void (*body)(void*), void* ctx, uint3 block, unsigned bx, unsigned by, unsigned bz,
                             std::size_t shmem) {
    static thread_local Sched* mine = nullptr;
    if (mine == nullptr) mine = new Sched();  // kept for the thread's life, as its stacks are
    Sched& s = *mine;
    const int n = (int)(bx * by * bz);
    if (!ensure_stacks(s, n)) {
        record_error("could not map the fiber stacks (set KERNELBAY_CPU_FIBER_STACK to fewer bytes)");
        return;
    }
    if (shmem > s.dyn_cap || s.dyn == nullptr) {
        std::free(s.dyn);
        s.dyn_cap = shmem > 64 ? shmem : 64;
        s.dyn = static_cast<char*>(std::aligned_alloc(64, (s.dyn_cap + 63) / 64 * 64));
    }
    // The guard-page handler: the runtime's (never unloaded) where there is one; else this
    // module's own, which must then stay loaded while installed.
    if (rt != nullptr) rt->thread_setup();
    else install_guard_handler();
    const Guard guard = {s.stacks, s.map_bytes, s.stride, s.page, &s.overflow};
    s.n = n;
    s.bx = bx;
    s.by = by;
    s.block = block;
    s.body = body;
    s.body_ctx = ctx;
    s.failed = false;
    s.bar_count = 0;
    s.bar_gen = 0;
    std::memset(s.active_wait, 0, sizeof(int) * (std::size_t)((n + 31) / 32));
    std::memset(s.tile_count, 0, sizeof(int) * (std::size_t)((n + 31) / 32));
    s.tid_slot = &::kb_threadIdx;
    thread_known = true;  // a fault report names the fiber's thread
    for (int i = 0; i < n; ++i) {
        s.tid[i] = tid_of(s, i);
        s.state[i] = F_READY;
        // Stack tops staggered by a cache line per fiber: at one offset modulo 4 KiB they would
        // all fall in the same L1 sets and evict each other at every switch.
        ctx_make(s.ctx[i], s.stacks + (std::size_t)i * s.stride + s.page,
                 s.stride - s.page - (std::size_t)(i & 63) * 64, &fiber_entry);
    }
    tls_sched = &s;
    if (sigsetjmp(s.overflow, 0)) {
        s.in_block = 0;
        tls_sched = nullptr;
        if (rt != nullptr) rt->guard(nullptr);
        sigset_t set;
        sigemptyset(&set);
        sigaddset(&set, SIGSEGV);
        pthread_sigmask(SIG_UNBLOCK, &set, nullptr);
        const uint3 t = tid_of(s, s.cur);
        char m[400];
        std::snprintf(m, sizeof(m),
                      "block (%u,%u,%u): thread (%u,%u,%u) overflowed its fiber stack of %zu bytes; set "
                      "KERNELBAY_CPU_FIBER_STACK to a larger size (bytes, or e.g. 1M)",
                      block.x, block.y, block.z, t.x, t.y, t.z, s.stride - s.page);
        record_error(m);
        return;
    }
    if (rt != nullptr) rt->guard(&guard);
    s.in_block = 1;
    s.live = n;
    // Fibers switch among themselves; control comes back here only when none is ready.
    while (s.live > 0 && !s.failed) {
        int i = 0;
        while (i < n && s.state[i] != F_READY) ++i;
        if (i == n) {
            describe_deadlock(s);
            s.failed = true;
            break;
        }
        s.cur = i;
        *s.tid_slot = s.tid[i];
        ctx_switch(s.main, s.ctx[i]);
    }
    s.in_block = 0;
    tls_sched = nullptr;
    if (rt != nullptr) rt->guard(nullptr);
    if (s.failed) record_error(s.msg);
}

inline char* dyn_shared() {
    Sched* s = tls_sched;
    return s != nullptr ? s->dyn : loop_dyn;  // fibers, or a loop runner's block (fission)
}

template <auto KbF, std::size_t... KbI>
inline int run_fibers_(void** args, long gx, long gy, long gz, long bx, long by, long bz, std::size_t shmem,
                       std::index_sequence<KbI...> seq) {
    using S = sig<decltype(KbF)>;
    const typename S::values p = S::load(args, seq);
    const dim3 grid((unsigned)gx, (unsigned)gy, (unsigned)gz), block((unsigned)bx, (unsigned)by, (unsigned)bz);
    void (*body)(void*) = [](void* c) {
        const typename S::values& t = *static_cast<const typename S::values*>(c);
        KbF(std::get<KbI>(t)...);
    };
    return for_each_block(gx, gy, gz, [&](uint3 bi) {
        ::kb_gridDim = grid;
        ::kb_blockDim = block;
        ::kb_blockIdx = bi;
        run_block_fibers(body, const_cast<void*>(static_cast<const void*>(&p)), bi, (unsigned)bx, (unsigned)by,
                         (unsigned)bz, shmem);
    });
}

// cuda kernels with barriers, shared memory or warp operations: each block's threads as fibers.
template <auto KbF>
inline int run_fibers(void** args, long gx, long gy, long gz, long bx, long by, long bz, long shmem) {
    return run_fibers_<KbF>(args, gx, gy, gz, bx, by, bz, (std::size_t)shmem,
                          std::make_index_sequence<sig<decltype(KbF)>::n>{});
}

}  // namespace kb_cpu

extern "C" __attribute__((visibility("default"))) void kb_set_fiber_stack(long long bytes) {
    kb_cpu::fiber_stack = bytes > 16384 ? (std::size_t)bytes : 16384;
}
