// kernelbay CPU backend: launch state and grid runners shared by the cuda and c++ preludes.
// The generated launcher instantiates kb_cpu::run_threads<&kernel> (cuda: one call per thread),
// kb_cpu::run_blocks<&kernel> (c++, and cuda's loop path: one call per block) or
// kb_cpu::run_fibers<&kernel> (kb_cpu_fiber.h) for each entry.
//
// What does not depend on the kernel -- the grid loop over the cores, fault reports, Ctrl-C, the
// launch's bookkeeping -- is declared here and defined in kb_cpu_launch.cpp, which is compiled
// once per compiler and flags into an object beside the precompiled prelude and linked into
// every module (kernelbay_cpu/runners.py): a kernel's compile generates only its own code and
// a small per-entry thunk. The declarations are hidden (one copy per module, as before, when
// these were `static` in every module).
#pragma once
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

#include "kb_cpu_rt.h"

// Thread-locals shared by a module's kernel code and its runner object: local-dynamic, as a
// `static thread_local` of the module was (one __tls_get_addr per function for all of them), and
// `__thread`, so that no C++ TLS wrapper call is made at each use.
#define KB_CPU_TLS __thread __attribute__((tls_model("local-dynamic")))

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

#pragma GCC visibility push(hidden)

// The running block and thread. Thread-local: the blocks of a grid run on several cores.
// Each on its own cache line: cheap insurance against false sharing between the dynamic TLS
// blocks of two threads (not measured to matter). Kept as separate variables: grouped in one
// struct, GCC no longer keeps them apart from the kernel's stores and saxpy got 4x slower.
// In the global namespace, under the names the cuda prelude's threadIdx/blockIdx/... macros use
// unqualified: a kernel body run by KB_THREADS_BEGIN declares locals of the same names, which
// the compiler sees as loop variables and invariants (kb_cpu_cuda.h).
alignas(64) extern KB_CPU_TLS kb_cpu::uint3 kb_threadIdx;
alignas(64) extern KB_CPU_TLS kb_cpu::uint3 kb_blockIdx;
alignas(64) extern KB_CPU_TLS kb_cpu::dim3 kb_blockDim;
alignas(64) extern KB_CPU_TLS kb_cpu::dim3 kb_gridDim;
// Set only while a faulting block runs again to find its thread (run_range): the loop runners
// then run the block's threads one by one, each in ::kb_threadIdx (kb_cpu_cuda.h, kb_cpu_fission.h).
extern KB_CPU_TLS bool kb_diag;
// Blocks per call on the loop path: the runner offers this many consecutive blocks in x, from
// ::kb_blockIdx on (run_blocks_in); a kernel body wrapped in KB_THREADS_BEGIN/END runs them all,
// naming each in ::kb_blockIdx before it runs, and sets it to 0 (kb_cpu_cuda.h); any other
// kernel runs one block and leaves it as it was.
extern KB_CPU_TLS unsigned kb_span;

namespace kb_cpu {

// The thread a faulting block's re-run is at (kb_diag): stored before that thread's code runs,
// never sunk past it (a volatile store, then a compiler barrier).
inline void diag_thread(unsigned x, unsigned y, unsigned z) {
    *static_cast<volatile unsigned*>(&::kb_threadIdx.x) = x;
    *static_cast<volatile unsigned*>(&::kb_threadIdx.y) = y;
    *static_cast<volatile unsigned*>(&::kb_threadIdx.z) = z;
    __asm__ __volatile__("" ::: "memory");
}

// The blocks this call of a KB_THREADS kernel runs (::kb_span, taken: 0 tells the runner).
inline unsigned take_span() {
    const unsigned n = ::kb_span;
    ::kb_span = 0;
    return n > 1 ? n : 1u;
}

// The block a KB_THREADS kernel runs next, for fault reports and device asserts: stored in
// ::kb_blockIdx.x (`slot`: its address, taken once per call) before that block's code runs,
// never sunk past it (as diag_thread).
inline unsigned* block_slot() {
    unsigned* p = &::kb_blockIdx.x;
    __asm__("" : "+r"(p));  // opaque: kept (or spilled), not recomputed by a __tls_get_addr call per block
    return p;
}

inline void at_block(unsigned* slot, unsigned x) {
    *static_cast<volatile unsigned*>(slot) = x;
    __asm__ __volatile__("" ::: "memory");
}

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

// The dynamic shared memory (extern __shared__) of the block a loop runner runs on this thread;
// the fiber runner keeps its own (kb_cpu_fiber.h: dyn_shared() reads either).
extern KB_CPU_TLS char* loop_dyn;

// The launch's error: the first recorded wins (kb_error_message).
void record_error(const char* what);

// A device-side stop (__trap, __brkpt, a failed device assert, a misuse the fission or fiber
// runners find) ends the block, and `what` becomes the launch's error. Built with C++ exceptions
// (a source that uses them: flags.py), it throws std::runtime_error (a failed assert:
// DeviceAssert) and the runner catches it, as it always did. Built without them (-fno-exceptions:
// such a module links neither libstdc++ nor libgcc_s), a fiber switches back to its scheduler
// (kb_cpu_fiber.h, fail_here), and the loop and per-thread runners jump back to where their chunk
// of blocks started (run_chunk, kb_cpu_launch.cpp), which records it: the kernel's frames are
// left without running destructors, as a fault leaves them.
[[noreturn]] void stop(const char* what);

#if defined(__cpp_exceptions)
// A failed device assert (include/assert.h): the block stops with this exception, which
// the runner records as the launch's error.
struct DeviceAssert : std::exception {
    char msg[400];
    const char* what() const noexcept override { return msg; }
};
#endif

[[noreturn]] void assert_fail(const char* cond, const char* file, unsigned line, const char* func);

// How a grid's blocks run (run_grid).
enum : int {
    BLOCK_LOOP,     // body(ctx) once per block: the kernel runs the block's threads itself
    BLOCK_THREADS,  // body(ctx) once per block: it calls the kernel once per thread, in ::kb_threadIdx
    BLOCK_FIBERS,   // body(ctx) once per thread of each block, each thread a fiber (kb_cpu_fiber.h)
};

// Runs blocks [0, gx*gy*gz) of a bx*by*bz launch on the cores, ::kb_gridDim, ::kb_blockDim and
// ::kb_blockIdx set for each; `shmem` bytes of dynamic shared memory per block. The launch's
// status: 0, or an error (kb_error_message), CANCELLED, FAULT or TIMEOUT.
int run_grid(int how, void (*body)(void*), void* ctx, long gx, long gy, long gz, long bx, long by, long bz,
             std::size_t shmem);

using RunFn = int (*)(void**, long, long, long, long, long, long, long);
// The generated kb_launch_<i> runs each launch through here: announced to the runtime (fault
// reports, Ctrl-C), and moved to another thread in a fork()ed child (see kb_cpu_rt.cpp).
int launch(const char* name, void** a, const int* g, int shmem, RunFn run);

// The per-entry code: the kernel's arguments unpacked once per launch, and a thunk per block
// (or per fiber) that calls the kernel with them.
template <auto KbF, std::size_t... KbI>
void call_block(void* c) {
    const auto& p = *static_cast<const typename sig<decltype(KbF)>::values*>(c);
    KbF(std::get<KbI>(p)...);
}

template <auto KbF, std::size_t... KbI>
void call_threads(void* c) {
    const auto& p = *static_cast<const typename sig<decltype(KbF)>::values*>(c);
    const dim3 b = ::kb_blockDim;
    for (unsigned z = 0; z < b.z; ++z)
        for (unsigned y = 0; y < b.y; ++y)
            for (unsigned x = 0; x < b.x; ++x) {
                ::kb_threadIdx = uint3{x, y, z};
                KbF(std::get<KbI>(p)...);
            }
}

template <auto KbF, int KbHow, std::size_t... KbI>
inline int run_(void** args, long gx, long gy, long gz, long bx, long by, long bz, long shmem,
                std::index_sequence<KbI...> seq) {
    using S = sig<decltype(KbF)>;
    typename S::values p = S::load(args, seq);
    void (*body)(void*);
    if constexpr (KbHow == BLOCK_THREADS) body = &call_threads<KbF, KbI...>;
    else body = &call_block<KbF, KbI...>;
    return run_grid(KbHow, body, &p, gx, gy, gz, bx, by, bz, shmem > 0 ? (std::size_t)shmem : 0);
}

// cuda: each block on one core, its threads in turn, the kernel called once per thread.
template <auto KbF>
inline int run_threads(void** args, long gx, long gy, long gz, long bx, long by, long bz, long shmem) {
    return run_<KbF, BLOCK_THREADS>(args, gx, gy, gz, bx, by, bz, shmem,
                                    std::make_index_sequence<sig<decltype(KbF)>::n>{});
}

// c++ (and cuda's loop path): the kernel called once per block; it runs the block's threads itself.
template <auto KbF>
inline int run_blocks(void** args, long gx, long gy, long gz, long bx, long by, long bz, long shmem) {
    return run_<KbF, BLOCK_LOOP>(args, gx, gy, gz, bx, by, bz, shmem,
                                 std::make_index_sequence<sig<decltype(KbF)>::n>{});
}

}  // namespace kb_cpu

#pragma GCC visibility pop
