// kernelbay CPU backend: barrier loop fission (kernelbay_cpu/fission.py).
// A kernel whose __syncthreads() calls stand at the top level of its body, or at the top level of
// a top-level `for` loop whose header every thread computes alike, runs with no fibers: the code
// between two barriers is one loop over the block's threads (KB_REGION_BEGIN/END), so a barrier is
// the end of a loop. Locals that live across a barrier are per-thread arrays indexed by kb_t,
// __shared__ arrays are the block's (one OS thread runs a block), and threads between two
// barriers are independent (CUDA gives them no order), which the loop pragma tells the vectoriser.
#pragma once

#define KB_FISSION_MAX_THREADS 1024
#define KB_FISSION_BEGIN                                                                   \
    const ::kb_cpu::dim3 kb_blockDim = ::kb_blockDim, kb_gridDim = ::kb_gridDim;           \
    const ::kb_cpu::uint3 kb_blockIdx = ::kb_blockIdx;                                     \
    auto kb_region = [&](auto&& kb_f) __attribute__((always_inline)) {                     \
        if (__builtin_expect(::kb_diag, 0)) { /* a faulting block again, to name its thread */ \
            for (unsigned kb_z = 0; kb_z < kb_blockDim.z; ++kb_z)                          \
                for (unsigned kb_y = 0; kb_y < kb_blockDim.y; ++kb_y)                      \
                    for (unsigned kb_x = 0; kb_x < kb_blockDim.x; ++kb_x) {                \
                        ::kb_cpu::diag_thread(kb_x, kb_y, kb_z);                           \
                        kb_f(::kb_cpu::uint3{kb_x, kb_y, kb_z},                            \
                             (kb_z * kb_blockDim.y + kb_y) * kb_blockDim.x + kb_x);        \
                    }                                                                      \
            return;                                                                        \
        }                                                                                  \
        for (unsigned kb_z = 0; kb_z < kb_blockDim.z; ++kb_z)                              \
            for (unsigned kb_y = 0; kb_y < kb_blockDim.y; ++kb_y) {                        \
                const unsigned kb_row = (kb_z * kb_blockDim.y + kb_y) * kb_blockDim.x;     \
                KB_SIMD for (unsigned kb_x = 0; kb_x < kb_blockDim.x; ++kb_x)              \
                    kb_f(::kb_cpu::uint3{kb_x, kb_y, kb_z}, kb_row + kb_x);                \
            }                                                                              \
    };
#define KB_REGION_BEGIN \
    kb_region([&](const ::kb_cpu::uint3 kb_threadIdx, const unsigned kb_t) __attribute__((always_inline)) {
#define KB_REGION_END \
    });
