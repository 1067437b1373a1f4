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

// The next ready thread of the block runs; this one stays ready. When no other thread is ready
// it returns at once.
extern "C" __attribute__((used, noinline)) inline void kb_cpu_yield_c(Sched* sp) {
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

#if defined(__x86_64__)
// Called from inline asm at any point of a function, with the Sched in rdi: the stack may be
// unaligned and the 128 bytes below it (the red zone) in use, so the caller steps over the red
// zone and this aligns. Vector registers 0-7 are kept (saved here, on this fiber's stack), so a
// loop keeps its float accumulators in them across the yield: clobbered, an accumulator would
// live in a general register and each iteration would move it back and forth (3x the latency
// of the add it feeds).
extern "C" void kb_cpu_yield_entry();
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
