// kernelbay CPU backend: the fiber scheduler (kb_cpu_fiber.h), the block barrier and warp operations
// (kb_cpu_sync.h) and the yield (kb_cpu_yield.h), compiled once into the runner object
// (kernelbay_cpu/runners.py), after kb_cpu_launch.cpp in the same translation unit.
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <pthread.h>
#include <strings.h>
#if defined(__linux__)
#include <sys/auxv.h>  // getauxval(AT_MINSIGSTKSZ)
#endif
#include <sys/mman.h>
#include <unistd.h>

#include "kb_cpu_fiber.h"
#include "kb_cpu_sync.h"
#include "kb_cpu_yield.h"

#pragma GCC visibility push(hidden)

namespace kb_cpu {

// --- context switch ------------------------------------------------------------------------

#if defined(__x86_64__)
// Saves the callee-saved registers on the current stack, stores the stack pointer in *save and
// continues on `to`. A new fiber's stack holds a frame whose return address is kb_cpu_fiber_start,
// which calls the function in r13. MXCSR and the x87 control word are not switched: every fiber
// of a block runs on the same OS thread and kernels do not change them.
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
inline void ctx_make(Ctx& c, char* lo, std::size_t size, void (*entry)()) {
    getcontext(&c.uc);
    c.uc.uc_stack.ss_sp = lo;
    c.uc.uc_stack.ss_size = size;
    c.uc.uc_link = nullptr;
    makecontext(&c.uc, entry, 0);
}
#endif

const char* op_name(int op) {
    static const char* names[] = {"__syncwarp", "__shfl_sync", "__shfl_up_sync", "__shfl_down_sync",
                                  "__shfl_xor_sync", "__ballot_sync/__any_sync/__all_sync", "__match_any_sync",
                                  "__match_all_sync", "__reduce_add_sync", "__reduce_min_sync",
                                  "__reduce_max_sync", "__reduce_min_sync", "__reduce_max_sync",
                                  "__reduce_and_sync", "__reduce_or_sync", "__reduce_xor_sync", "__activemask"};
    return names[op];
}

static std::size_t fiber_stack = 128 * 1024;  // usable bytes per fiber; kb_set_fiber_stack
KB_CPU_TLS Sched* tls_sched = nullptr;

const char* base_name(const char* f) {
    const char* s = std::strrchr(f, '/');
    return s ? s + 1 : f;
}

[[noreturn]] void outside_block(const char* what) {
    char m[512];
    std::snprintf(m, sizeof(m), "%s was called outside a block run by fibers", what);
    stop(m);
}

// --- stacks and the guard page ----------------------------------------------------------------

// A fault on a guard page of this thread's fiber stacks ends the block with an error (siglongjmp
// back to the scheduler); any other fault goes to the handler that was there before.
static struct sigaction prev_segv;
static int handler_installed = 0;

static void on_segv(int sig, siginfo_t* info, void* uctx) {
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

static void install_guard_handler() {
    // A stack overflow runs the handler on an alternate stack: give this thread one if it has none.
    // (Without the runtime, KERNELBAY_CPU_RUNTIME=0: the same rule as kb_cpu_rt.cpp's
    // thread_setup, at least 64 KiB and 4x AT_MINSIGSTKSZ, which AMX frames need.)
    static KB_CPU_TLS bool alt_done = false;
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

static bool ensure_stacks(Sched& s, int n) {
    const std::size_t page = (std::size_t)sysconf(_SC_PAGESIZE);
    const std::size_t usable = (fiber_stack + page - 1) / page * page;
    if (rt != nullptr) {  // the thread's stacks, shared with every other module (Runtime::fiber_stacks)
        std::size_t bytes = 0;
        char* m = rt->fiber_stacks(usable + page, page, n, &bytes);
        if (m == nullptr) return false;
        s.stacks = m;
        s.page = page;
        s.stride = usable + page;
        s.map_bytes = bytes;
        s.nstacks = (int)(bytes / s.stride);
        return true;
    }
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

static void fiber_entry() {
    Sched& s = *tls_sched;
#if defined(__cpp_exceptions)
    try {
        s.body(s.body_ctx);
    } catch (const std::exception& e) {
        std::snprintf(s.msg, sizeof(s.msg), "%s", e.what());
        s.failed = true;
    } catch (...) {
        std::snprintf(s.msg, sizeof(s.msg), "a kernel threw a C++ exception that is not a std::exception");
        s.failed = true;
    }
#else
    s.body(s.body_ctx);  // a stop switches back to the scheduler from where it happens (stop_with)
#endif
    --s.live;
    if (s.failed) ctx_switch(s.ctx[s.cur], s.main);
    else switch_away(s, F_DONE);
    std::abort();  // a finished fiber is never resumed
}

// Why the block cannot go on: which threads wait where, and which thread they wait for.
static void describe_deadlock(Sched& s) {
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

void run_block_fibers(void (*body)(void*), void* ctx, uint3 block, unsigned bx, unsigned by, unsigned bz,
                             std::size_t shmem) {
    static KB_CPU_TLS Sched* mine = nullptr;
    if (mine == nullptr) {  // kept for the thread's life, as its stacks are (not `new`: no libstdc++)
        void* p = std::aligned_alloc(alignof(Sched) > 64 ? alignof(Sched) : 64, (sizeof(Sched) + 63) / 64 * 64);
        if (p == nullptr) {
            record_error("could not allocate the fiber scheduler");
            return;
        }
        mine = ::new (p) Sched();
    }
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

}  // namespace kb_cpu

#pragma GCC visibility pop

// --- the yield (kb_cpu_yield.h) --------------------------------------------------------------

#pragma GCC visibility push(hidden)

namespace kb_cpu {

extern "C" __attribute__((used, noinline)) void kb_cpu_yield_c(Sched* sp) {
    Sched& s = *sp;
    const int i = s.cur;
    int j = i + 1;
    while (j < s.n && s.state[j] != F_READY) ++j;
    if (j == s.n) {
        j = 0;
        while (j < i && s.state[j] != F_READY) ++j;
        if (j == i) return;
    }
    s.cur = j;
    *s.tid_slot = s.tid[j];
    prefetch_fiber(s, j + 1);
    ctx_switch(s.ctx[i], s.ctx[j]);
}

}  // namespace kb_cpu

#pragma GCC visibility pop

#if defined(__x86_64__)
// Called from inline asm at any point of a function, with the Sched in rdi: the stack may be
// unaligned and the 128 bytes below it (the red zone) in use, so the caller steps over the red
// zone and this aligns. Vector registers 0-7 are kept (saved here, on this fiber's stack), so a
// loop keeps its float accumulators in them across the yield: clobbered, an accumulator would
// live in a general register and each iteration would move it back and forth (3x the latency
// of the add it feeds).
#if defined(__AVX512F__)
#define KB_YIELD_FRAME "512"
#define KB_YIELD_SAVE "    vmovdqu64 %zmm0, 0(%rsp)\n    vmovdqu64 %zmm1, 64(%rsp)\n    vmovdqu64 %zmm2, 128(%rsp)\n    vmovdqu64 %zmm3, 192(%rsp)\n    vmovdqu64 %zmm4, 256(%rsp)\n    vmovdqu64 %zmm5, 320(%rsp)\n    vmovdqu64 %zmm6, 384(%rsp)\n    vmovdqu64 %zmm7, 448(%rsp)\n"
#define KB_YIELD_LOAD "    vmovdqu64 0(%rsp), %zmm0\n    vmovdqu64 64(%rsp), %zmm1\n    vmovdqu64 128(%rsp), %zmm2\n    vmovdqu64 192(%rsp), %zmm3\n    vmovdqu64 256(%rsp), %zmm4\n    vmovdqu64 320(%rsp), %zmm5\n    vmovdqu64 384(%rsp), %zmm6\n    vmovdqu64 448(%rsp), %zmm7\n"
#elif defined(__AVX__)
#define KB_YIELD_FRAME "256"
#define KB_YIELD_SAVE "    vmovdqu %ymm0, 0(%rsp)\n    vmovdqu %ymm1, 32(%rsp)\n    vmovdqu %ymm2, 64(%rsp)\n    vmovdqu %ymm3, 96(%rsp)\n    vmovdqu %ymm4, 128(%rsp)\n    vmovdqu %ymm5, 160(%rsp)\n    vmovdqu %ymm6, 192(%rsp)\n    vmovdqu %ymm7, 224(%rsp)\n"
#define KB_YIELD_LOAD "    vmovdqu 0(%rsp), %ymm0\n    vmovdqu 32(%rsp), %ymm1\n    vmovdqu 64(%rsp), %ymm2\n    vmovdqu 96(%rsp), %ymm3\n    vmovdqu 128(%rsp), %ymm4\n    vmovdqu 160(%rsp), %ymm5\n    vmovdqu 192(%rsp), %ymm6\n    vmovdqu 224(%rsp), %ymm7\n"
#else
#define KB_YIELD_FRAME "128"
#define KB_YIELD_SAVE "    movdqu %xmm0, 0(%rsp)\n    movdqu %xmm1, 16(%rsp)\n    movdqu %xmm2, 32(%rsp)\n    movdqu %xmm3, 48(%rsp)\n    movdqu %xmm4, 64(%rsp)\n    movdqu %xmm5, 80(%rsp)\n    movdqu %xmm6, 96(%rsp)\n    movdqu %xmm7, 112(%rsp)\n"
#define KB_YIELD_LOAD "    movdqu 0(%rsp), %xmm0\n    movdqu 16(%rsp), %xmm1\n    movdqu 32(%rsp), %xmm2\n    movdqu 48(%rsp), %xmm3\n    movdqu 64(%rsp), %xmm4\n    movdqu 80(%rsp), %xmm5\n    movdqu 96(%rsp), %xmm6\n    movdqu 112(%rsp), %xmm7\n"
#endif
asm(".text\n"
    ".globl kb_cpu_yield_entry\n"
    ".hidden kb_cpu_yield_entry\n"
    ".type kb_cpu_yield_entry,@function\n"
    "kb_cpu_yield_entry:\n"
    "    pushq %rbp\n"
    "    movq %rsp, %rbp\n"
    "    andq $-64, %rsp\n"
    "    subq $" KB_YIELD_FRAME ", %rsp\n"
    KB_YIELD_SAVE
    "    callq kb_cpu_yield_c\n"
    KB_YIELD_LOAD
    "    movq %rbp, %rsp\n"
    "    popq %rbp\n"
    "    ret\n"
    ".size kb_cpu_yield_entry,.-kb_cpu_yield_entry\n");
#undef KB_YIELD_FRAME
#undef KB_YIELD_SAVE
#undef KB_YIELD_LOAD
#endif

extern "C" __attribute__((visibility("default"))) void kb_set_fiber_stack(long long bytes) {
    kb_cpu::fiber_stack = bytes > 16384 ? (std::size_t)bytes : 16384;
}
