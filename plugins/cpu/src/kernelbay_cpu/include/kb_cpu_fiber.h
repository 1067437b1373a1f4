// kernelbay CPU backend: the block scheduler for kernels that use barriers, shared memory or warp
// intrinsics. Each CUDA thread of a block is a fiber (its own stack, a hand-written context switch
// on x86-64, ucontext elsewhere); all fibers of a block run on the one OS thread that runs the
// block, so __shared__ is a thread_local and needs no locking. A fiber runs until it waits (a
// barrier, a warp operation) or exits; the scheduler then resumes the next ready fiber, in
// thread order. When none is ready and some have not exited, the block is deadlocked (on a GPU,
// a hang): the launch fails with a message naming the block, the barrier or warp operation and
// its line, and the thread that is missing.
//
// The scheduler is defined in kb_cpu_fiber.cpp, compiled once into the runner object
// (kb_cpu_launch.h says why); what kernel code reads is here.
#pragma once
#include <csetjmp>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#if !defined(__x86_64__)
#include <ucontext.h>
#endif

#include "kb_cpu_launch.h"

#define KB_CPU_HAS_FIBERS 1

#pragma GCC visibility push(hidden)

namespace kb_cpu {

#if defined(__x86_64__)
struct Ctx {
    void* sp = nullptr;
};
#else
struct Ctx {
    ucontext_t uc;
};
#endif

// --- per-OS-thread block state ---------------------------------------------------------------

enum : unsigned char { F_READY, F_BARRIER, F_WARP, F_DONE, F_TILE };

// --- warp operation names (the operations are in kb_cpu_sync.h) ----------------------------------

enum : int {
    W_SYNC, W_SHFL, W_UP, W_DOWN, W_XOR, W_BALLOT, W_MATCH_ANY, W_MATCH_ALL,
    W_ADD, W_MIN_S, W_MAX_S, W_MIN_U, W_MAX_U, W_AND, W_OR, W_XOR_R, W_ACTIVE
};

const char* op_name(int op);
// The file name without its directories, for messages.
const char* base_name(const char* f);

// One warp operation in flight: what a lane brought to the rendezvous and what it takes away.
struct Lane {
    std::uint64_t val, res;
    unsigned mask;
    int op, arg, width, line;
    const char* file;
};

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

// The block this OS thread runs as fibers, if any.
extern KB_CPU_TLS Sched* tls_sched;

// --- the switch, and what a waiting fiber runs (kb_cpu_sync.h) ------------------------------------
// Inline in the kernel's code, as they always were: called from the runner object instead, each
// barrier's wait had frames of its own on the fiber's stack to bring back into the cache at the
// switch (a shared-memory tree sum on fibers took 1.6x as long).

#if defined(__x86_64__)
// Saves the callee-saved registers on the current stack, stores the stack pointer in *save and
// continues on `to` (kb_cpu_fiber.cpp).
extern "C" void kb_cpu_switch(void** save, void* to);
inline void ctx_switch(Ctx& from, Ctx& to) { kb_cpu_switch(&from.sp, to.sp); }
#else
inline void ctx_switch(Ctx& from, Ctx& to) { swapcontext(&from.uc, &to.uc); }
#endif

inline uint3 tid_of(const Sched& s, int i) {
    return uint3{(unsigned)(i % s.bx), (unsigned)((i / s.bx) % s.by), (unsigned)(i / (s.bx * s.by))};
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

[[noreturn]] void outside_block(const char* what);

inline Sched& sched(const char* what) {
    Sched* s = tls_sched;
    if (s == nullptr) outside_block(what);
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

// Runs one block: body(ctx) once per thread, each thread a fiber. Records an error and returns
// on deadlock, misuse, a C++ exception or a fiber stack overflow.
void run_block_fibers(void (*body)(void*), void* ctx, uint3 block, unsigned bx, unsigned by, unsigned bz,
                      std::size_t shmem);

inline char* dyn_shared() {
    Sched* s = tls_sched;
    return s != nullptr ? s->dyn : loop_dyn;  // fibers, or a loop runner's block (fission)
}

// cuda kernels with barriers, shared memory or warp operations: each block's threads as fibers.
template <auto KbF>
inline int run_fibers(void** args, long gx, long gy, long gz, long bx, long by, long bz, long shmem) {
    return run_<KbF, BLOCK_FIBERS>(args, gx, gy, gz, bx, by, bz, shmem,
                                   std::make_index_sequence<sig<decltype(KbF)>::n>{});
}

}  // namespace kb_cpu

#pragma GCC visibility pop
