// kernelbay CPU backend: the fiber scheduler (kb_cpu_fiber.h), the block barrier and warp operations
// (kb_cpu_sync.h) and the yield (kb_cpu_yield.h), compiled once into the runner object
// (kernelbay_cpu/runners.py), after kb_cpu_launch.cpp in the same translation unit.
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <stdexcept>
#include <string>
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
inline void ctx_switch(Ctx& from, Ctx& to) { swapcontext(&from.uc, &to.uc); }
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

static uint3 tid_of(const Sched& s, int i) {
    return uint3{(unsigned)(i % s.bx), (unsigned)((i / s.bx) % s.by), (unsigned)(i / (s.bx * s.by))};
}

const char* base_name(const char* f) {
    const char* s = std::strrchr(f, '/');
    return s ? s + 1 : f;
}

[[noreturn]] static void fail_here(Sched& s) {
    s.failed = true;
    s.state[s.cur] = F_DONE;
    ctx_switch(s.ctx[s.cur], s.main);
    std::abort();  // never resumed
}

template <class... KbA>
[[noreturn]] static void fail(const char* fmt, KbA... a) {
    Sched& s = *tls_sched;
    std::snprintf(s.msg, sizeof(s.msg), fmt, a...);
    fail_here(s);
}

static Sched& sched(const char* what) {
    Sched* s = tls_sched;
    if (s == nullptr) throw std::runtime_error(std::string(what) + " was called outside a block run by fibers");
    return *s;
}

// Brings the saved registers of fiber k into the cache ahead of the switch to it: 256 fiber stacks
// do not fit in L1, and the switch's first pop would otherwise wait for L2 (measured: a yield
// every 8 loop iterations cost 11 ns, 6.5 ns with this; prefetching the 6 lines a yield's frames
// span made a barrier cost 15 ns instead of 12).
static void prefetch_fiber(const Sched& s, int k) {
#if defined(__x86_64__)
    const char* sp = static_cast<const char*>(s.ctx[k < s.n ? k : 0].sp);
    __builtin_prefetch(sp);
    __builtin_prefetch(sp + 56);
#else
    (void)s, (void)k;
#endif
}

// __activemask (kb_cpu_sync.h): its waiting lanes are released once no lane of the warp can run.
static void release_active(Sched& s, int w);

// The running fiber stops (waits, or has finished) and the next ready one in thread order runs,
// by one direct switch; with none ready, the scheduler loop in run_block_fibers decides.
static void switch_away(Sched& s, unsigned char st) {
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

static void wait_here(Sched& s, unsigned char st, int line, const char* file) {
    s.wait_line[s.cur] = line;
    s.wait_file[s.cur] = file;
    switch_away(s, st);
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

}  // namespace kb_cpu

#pragma GCC visibility pop

#pragma GCC visibility push(hidden)

namespace kb_cpu {

bool checked() {
    const char* e = std::getenv("KERNELBAY_CPU_CHECK");
    if (e == nullptr || *e == 0) return false;
    return std::strcmp(e, "0") != 0 && strcasecmp(e, "off") != 0 && strcasecmp(e, "no") != 0 &&
           strcasecmp(e, "false") != 0;
}

// --- block barrier ----------------------------------------------------------------------------

int barrier(int kind, int pred, int line, const char* file) {
    Sched& s = sched("__syncthreads");
    // bar.sync counts arrivals, wherever they come from: halves of a block meeting at two
    // __syncthreads (a double-buffered GEMM) pass together on a GPU, and do here.
    if (s.bar_count > 0 && (s.bar_line != line || (s.bar_file != file && std::strcmp(s.bar_file, file) != 0)) &&
        checked()) {
        uint3 t = tid_of(s, s.cur);
        fail("block (%u,%u,%u): thread (%u,%u,%u) reached the barrier at %s:%d while %d other threads wait at "
             "the barrier at %s:%d; every thread of a block must reach the same __syncthreads (CUDA leaves "
             "this undefined; reported because KERNELBAY_CPU_CHECK is set)",
             s.block.x, s.block.y, s.block.z, t.x, t.y, t.z, base_name(file), line, s.bar_count,
             base_name(s.bar_file), s.bar_line);
    }
    if (s.bar_count == 0) {
        s.bar_line = line;
        s.bar_file = file;
        s.bar_acc = 0;
    }
    s.bar_acc += pred != 0;
    const unsigned gen = s.bar_gen;
    if (++s.bar_count == s.n) {  // the last to arrive releases the others and runs on
        s.bar_res[gen & 1] = s.bar_acc;
        s.bar_count = 0;
        ++s.bar_gen;
        for (int i = 0; i < s.n; ++i)
            if (s.state[i] == F_BARRIER) s.state[i] = F_READY;
    } else {
        wait_here(s, F_BARRIER, line, file);
    }
    // Two results suffice: no thread can pass the next barrier while one has not left this one.
    const int c = s.bar_res[gen & 1];
    return kind == BAR_COUNT ? c : kind == BAR_AND ? (c == s.n) : kind == BAR_OR ? (c > 0) : 0;
}

// --- the sync of a cooperative_groups tile of n > 32 threads (n a power of two) ----------------------

void tile_barrier(unsigned n, int line, const char* file) {
    Sched& s = sched("thread_block_tile::sync");
    const int first = (int)((unsigned)s.cur / n * n), end = first + (int)n < s.n ? first + (int)n : s.n;
    int& count = s.tile_count[first >> 5];
    if (++count == end - first) {
        count = 0;
        for (int i = first; i < end; ++i)
            if (s.state[i] == F_TILE) s.state[i] = F_READY;
    } else {
        wait_here(s, F_TILE, line, file);
    }
}

// --- warp operations: a rendezvous of the lanes named by the mask --------------------------------

// Releases the lanes of warp w that wait in __activemask once none of its lanes can still run:
// each call site's (file, line, column) lanes get the mask of the lanes waiting at that site.
static void release_active(Sched& s, int w) {
    const int base = w * 32, end = base + 32 < s.n ? base + 32 : s.n;
    for (int l = base; l < end; ++l)
        if (s.state[l] == F_READY) return;
    for (int l = base; l < end; ++l) {
        if (s.state[l] != F_WARP || s.lane[l].op != W_ACTIVE) continue;
        unsigned m = 0;
        for (int k = l; k < end; ++k) {
            const Lane& o = s.lane[k];
            if (s.state[k] == F_WARP && o.op == W_ACTIVE && o.line == s.lane[l].line && o.arg == s.lane[l].arg &&
                (o.file == s.lane[l].file || std::strcmp(o.file, s.lane[l].file) == 0))
                m |= 1u << (k - base);
        }
        for (int k = l; k < end; ++k)
            if (m >> (k - base) & 1) {
                s.lane[k].res = m;
                s.state[k] = F_READY;
                --s.active_wait[w];
            }
    }
}


static void warp_complete(Sched& s, int base, unsigned mask, int op) {
    Lane* L = s.lane + base;
    std::uint64_t acc = 0;
    unsigned bits = 0;
    switch (op) {
    case W_BALLOT:
        for (int l = 0; l < 32; ++l)
            if ((mask >> l & 1) && L[l].val) bits |= 1u << l;
        acc = bits;
        break;
    case W_ADD: case W_AND: case W_OR: case W_XOR_R: case W_MIN_S: case W_MAX_S: case W_MIN_U: case W_MAX_U: {
        bool first = true;
        for (int l = 0; l < 32; ++l) {
            if (!(mask >> l & 1)) continue;
            const std::uint32_t v = (std::uint32_t)L[l].val;
            std::uint32_t a = (std::uint32_t)acc;
            if (first) a = v;
            else if (op == W_ADD) a += v;
            else if (op == W_AND) a &= v;
            else if (op == W_OR) a |= v;
            else if (op == W_XOR_R) a ^= v;
            else if (op == W_MIN_S) a = (std::int32_t)v < (std::int32_t)a ? v : a;
            else if (op == W_MAX_S) a = (std::int32_t)v > (std::int32_t)a ? v : a;
            else if (op == W_MIN_U) a = v < a ? v : a;
            else a = v > a ? v : a;
            acc = a;
            first = false;
        }
        break;
    }
    case W_MATCH_ALL: {
        int first = __builtin_ctz(mask);
        bits = mask;
        for (int l = 0; l < 32; ++l)
            if ((mask >> l & 1) && L[l].val != L[first].val) bits = 0;
        acc = bits;
        break;
    }
    default:
        break;
    }
    for (int l = 0; l < 32; ++l) {
        if (!(mask >> l & 1)) continue;
        Lane& me = L[l];
        const int w = me.width, seg = l & ~(w - 1);
        int src = l;
        // Where the CUDA guide defines the result as the caller's own value, src stays l.
        switch (op) {
        case W_SHFL: src = seg + (me.arg & (w - 1)); break;
        case W_UP: src = (l - seg) >= me.arg ? l - me.arg : l; break;
        case W_DOWN: src = (l - seg) + me.arg < w ? l + me.arg : l; break;
        // A lane may read an earlier group of `width` lanes, not a later one.
        case W_XOR: src = (unsigned)me.arg < 32u && ((l ^ me.arg) & ~(w - 1)) <= seg ? (l ^ me.arg) : l; break;
        case W_MATCH_ANY: {
            unsigned m = 0;
            for (int k = 0; k < 32; ++k)
                if ((mask >> k & 1) && L[k].val == me.val) m |= 1u << k;
            me.res = m;
            continue;
        }
        case W_SYNC: case W_ACTIVE: me.res = mask; continue;
        default: me.res = acc; continue;
        }
        if (!(mask >> src & 1)) {
            // PTX: "results are undefined if a thread sources a register from an inactive thread or a
            // thread that is not in membermask". A lane waiting at this same call with another mask
            // gives its value. Any other lane (exited, elsewhere, past the end of the block) gives 0:
            // what the final partial-mask reduction of NVIDIA's reduction sample needs to sum
            // correctly, as it does on GPUs (lane 0 adds lanes 16, 8 and 4, which sit out).
            // Checked mode reports the read instead.
            const int sl = base + src;
            const bool past = sl >= s.n;
            const bool here = !past && s.state[sl] == F_WARP && L[src].op == op && L[src].line == me.line &&
                              (L[src].file == me.file || std::strcmp(L[src].file, me.file) == 0);
            if (checked()) {
                const uint3 t = tid_of(s, base + l);
                fail("block (%u,%u,%u): thread (%u,%u,%u) (lane %d) in %s at %s:%d reads lane %d, which mask "
                     "0x%08x does not name (a GPU gives an undefined value; reported because KERNELBAY_CPU_CHECK "
                     "is set); name every lane read in the mask, or read only lanes that take part",
                     s.block.x, s.block.y, s.block.z, t.x, t.y, t.z, l, op_name(op), base_name(me.file), me.line,
                     src, mask);
            }
            me.res = here ? L[src].val : 0;
            continue;
        }
        me.res = L[src].val;
    }
    for (int l = 0; l < 32; ++l)
        if ((mask >> l & 1) && s.state[base + l] == F_WARP) s.state[base + l] = F_READY;
}

std::uint64_t warp_op(int op, unsigned mask, std::uint64_t val, int arg, int width, int line,
                             const char* file) {
    Sched& s = sched(op_name(op));
    const int t = s.cur, base = t & ~31, lane = t & 31;
    const int nl = s.n - base < 32 ? s.n - base : 32;
    const unsigned exist = nl == 32 ? ~0u : ((1u << nl) - 1);
    const uint3 me3 = tid_of(s, t);
    if (op == W_ACTIVE) {
        // The lanes executing together here: those that reach this same call before every other
        // lane of the warp has to wait elsewhere, exits or waits here too (release_active).
        Lane& me = s.lane[t];
        me.op = W_ACTIVE;
        me.mask = 0;
        me.arg = arg;  // the call's column: two calls on one line are two sites
        me.line = line;
        me.file = file;
        ++s.active_wait[t >> 5];
        wait_here(s, F_WARP, line, file);
        return me.res;
    }
    if (!(mask >> lane & 1))
        fail("block (%u,%u,%u): thread (%u,%u,%u) (lane %d) calls %s at %s:%d with mask 0x%08x, which does not "
             "name the calling lane",
             s.block.x, s.block.y, s.block.z, me3.x, me3.y, me3.z, lane, op_name(op), base_name(file), line, mask);
    // A full mask in a block whose last warp is partial (blockDim 16, 48, ...): GPUs run it, the
    // lanes past the block taking no part. Checked mode reports it.
    if ((mask & ~exist) && !checked()) mask &= exist;
    if (mask & ~exist)
        fail("block (%u,%u,%u): %s at %s:%d has mask 0x%08x, but warp %d has only %d lanes (blockDim has %d "
             "threads): lanes past the block do not exist (reported because KERNELBAY_CPU_CHECK is set)",
             s.block.x, s.block.y, s.block.z, op_name(op), base_name(file), line, mask, t >> 5, nl, s.n);
    if (width <= 0 || width > 32 || (width & (width - 1)))
        fail("%s at %s:%d: width %d must be a power of two from 1 to 32", op_name(op), base_name(file), line, width);
    Lane& me = s.lane[t];
    me.val = val;
    me.mask = mask;
    me.op = op;
    me.arg = arg;
    me.width = width;
    me.line = line;
    me.file = file;
    bool all = true;
    for (int l = 0; l < nl; ++l) {
        if (l == lane || !(mask >> l & 1)) continue;
        const unsigned char st = s.state[base + l];
        if (st == F_DONE) {
            uint3 o = tid_of(s, base + l);
            fail("block (%u,%u,%u): %s at %s:%d has mask 0x%08x naming lane %d (thread (%u,%u,%u)), which has "
                 "exited; a warp operation's mask may name only lanes that reach it",
                 s.block.x, s.block.y, s.block.z, op_name(op), base_name(file), line, mask, l, o.x, o.y, o.z);
        }
        // A lane waiting with another mask is in another group (legal divergence): not here yet.
        if (st != F_WARP || s.lane[base + l].mask != mask || s.lane[base + l].op != op) all = false;
    }
    if (all) warp_complete(s, base, mask, op);
    else wait_here(s, F_WARP, line, file);
    return me.res;
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
