// kernelbay CPU backend: a fiber yields every few iterations of its loops.
//
// Run one after another, the threads of a block each sweep their whole loop before the next one
// starts. For the access pattern CUDA code is written for (coalesced: in each iteration the
// threads of a block touch neighbouring addresses, e.g. a grid-stride loop) that is the worst
// order for a CPU cache: every thread walks the same cache lines far apart, and with a stride
// that is a multiple of 4 KiB they all fall in one cache set and evict each other before the
// next thread comes back to them. kernelbay_cpu.compiler therefore makes each `for` loop of a
// kernel run by fibers (outside loops that contain a barrier or warp operation, whose threads
// already meet at every iteration) tick a counter; every TICKS_PER_YIELD iterations the fiber
// yields to the next ready thread of its block, so the threads advance through the loop
// together, as warps do on a GPU.
//
// A yield is always allowed: CUDA promises no order between the threads of a block between two
// barriers. It is an asm call that clobbers only the registers a call clobbers, not memory, so
// the loop keeps its invariants (blockDim, gridDim, __shared__ addresses) in registers: threads
// that do not synchronise are not promised to see each other's plain stores (volatile and atomic
// accesses are never cached by the compiler).
#pragma once
#include "kb_cpu_fiber.h"

namespace kb_cpu {

constexpr int TICKS_PER_YIELD = 8;  // 8: fewer keeps lines in cache longer, more switches less

#pragma GCC visibility push(hidden)
// The next ready thread of the block runs; this one stays ready. When no other thread is ready
// it returns at once (kb_cpu_fiber.cpp).
extern "C" void kb_cpu_yield_c(Sched* sp);

#if defined(__x86_64__)
// kb_cpu_yield_entry (kb_cpu_fiber.cpp) is called from inline asm at any point of a function, with
// the Sched in rdi: it keeps vector registers 0-7, so a loop keeps its float accumulators in them
// across the yield.
extern "C" void kb_cpu_yield_entry();
#endif
#pragma GCC visibility pop

#if defined(__x86_64__)
#if defined(__AVX512F__)
#define KB_CLOBBER_AVX512                                                                                   \
    , "xmm16", "xmm17", "xmm18", "xmm19", "xmm20", "xmm21", "xmm22", "xmm23", "xmm24", "xmm25", "xmm26", \
        "xmm27", "xmm28", "xmm29", "xmm30", "xmm31", "k1", "k2", "k3", "k4", "k5", "k6", "k7"
#else
#define KB_CLOBBER_AVX512
#endif
inline void yield_to(Sched* s) {
    // The x87 registers too: another fiber may use them, and kb_cpu_switch does not save them.
    void* clobbered;
    asm volatile("leaq -128(%%rsp), %%rsp\n\tcallq kb_cpu_yield_entry\n\tleaq 128(%%rsp), %%rsp"
                 : "=D"(clobbered)
                 : "0"(s)
                 : "rax", "rcx", "rdx", "rsi", "r8", "r9", "r10", "r11", "cc", "xmm8", "xmm9", "xmm10", "xmm11",
                   "xmm12", "xmm13", "xmm14", "xmm15", "st", "st(1)", "st(2)", "st(3)", "st(4)", "st(5)", "st(6)",
                   "st(7)" KB_CLOBBER_AVX512);
}
#undef KB_CLOBBER_AVX512
#else
inline void yield_to(Sched* s) { kb_cpu_yield_c(s); }
#endif

// The Sched is looked up once per loop and only when it first yields: a thread_local costs a
// __tls_get_addr call in a shared object, as much again as the switch. Outside a block run by
// fibers (a loop in a static initializer) there is none, and nothing happens.
inline void yield_now(Sched*& s) {
    if (s == nullptr) {
        s = tls_sched;
        if (s == nullptr) return;
    }
    yield_to(s);
}

// One per loop: `for (Ticker kb_tk_; kb_tk_.once();) for (init; cond; (void)(step), kb_tk_.tick())`
// (kernelbay_cpu._loops).
// The outer loop runs its body once, so `break` and `continue` keep their meaning.
struct Ticker {
    int left = TICKS_PER_YIELD, done = 0;
    Sched* sched = nullptr;
    constexpr bool once() { return done++ == 0; }
    constexpr bool pass() { return tick(), true; }
    constexpr void tick() {
        if (__builtin_expect(--left == 0, 0)) {
            left = TICKS_PER_YIELD;
            if (!__builtin_is_constant_evaluated()) yield_now(sched);
        }
    }
};

}  // namespace kb_cpu
