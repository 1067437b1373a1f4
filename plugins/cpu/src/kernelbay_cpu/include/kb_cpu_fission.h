// kernelbay CPU backend: barrier loop fission (kernelbay_cpu/fission.py).
// A kernel whose __syncthreads() calls stand at the top level of its body, or at the top level of
// a top-level `for` loop whose header every thread computes alike, runs with no fibers: the code
// between two barriers is one loop over the block's threads (KB_REGION_BEGIN/END), so a barrier is
// the end of a loop. Locals that live across a barrier are per-thread arrays indexed by kb_t,
// __shared__ arrays are the block's (one OS thread runs a block), and threads between two
// barriers are independent (CUDA gives them no order), which the loop pragma tells the vectoriser.
// An `if` around barriers that every thread decides alike stays around the loops; one that passes
// whole warps (`if (tid < 32)`) guards each loop of its body, which runs over the threads below
// the bound, and its warp operations run over their warps (Block::only/ranks; fission_if.py).
//
// Warp operations (shuffles, votes, cooperative_groups tiles' shuffles and reduce) at those same
// places split the block's loop the same way: one loop stores each lane's operand in a lane array
// (kb_cpu::fis::Lanes), the next reads each lane's result from it, so a shuffle is an array
// permutation (two contiguous loads and a blend for shfl_down/up/xor) and a tile's reduce a
// butterfly over the array. The checks and the values where CUDA is undefined are the fiber
// runner's (kb_cpu_sync.h), message for message.
#pragma once

#define KB_FISSION_MAX_THREADS 1024
// The threads' loops of a fissioned kernel. kb_t, the thread's index in the block, is an
// `unsigned` (KB_FISSION_BEGIN) or, for a kernel with warp operations, an `int`
// (KB_FISSION_BEGIN_WARPS): g++ vectorises the lane-array passes and reads of the warp
// operations with an int index only, and the shared-memory tree reductions with an unsigned one
// only (a 2^22-float tree sum took 3.5 ms with unsigned, 28-46 ms with int, one thread; a warp
// shuffle sum 18 ms with int, 67 ms with unsigned). With an int kb_t, the x loop counts the
// global index blockIdx.x * blockDim.x + threadIdx.x itself where it cannot wrap (kb_small), as
// KB_THREADS does: `x[blockIdx.x * blockDim.x + threadIdx.x]` is then a contiguous load, not a
// gather (a cooperative-groups block sum 16.4 -> 10.3 ms; the tree kernel does not need it),
// and is unrolled: the regions that stay scalar (a guarded store such as `if (lane == 0)
// sums[threadIdx.x / 32] = v;`) cost less per thread (a shuffle block sum 12.1-12.5 -> 10.2-10.9
// ms; unrolling the tree kernel's loops gained nothing measurable).
#define KB_FISSION_BEGIN KB_FISSION_BEGIN_AS(unsigned)
#define KB_FISSION_BEGIN_WARPS KB_FISSION_BEGIN_AS(int)
#define KB_FISSION_BEGIN_AS(KbT)                                                             \
    const ::kb_cpu::dim3 kb_blockDim = ::kb_blockDim, kb_gridDim = ::kb_gridDim;           \
    const ::kb_cpu::uint3 kb_blockIdx = ::kb_blockIdx;                                     \
    const ::kb_cpu::fis::Block kb_fb(kb_blockIdx, kb_blockDim);                            \
    /* outside the loops, kb_t names no thread: only types are taken of what it indexes */ \
    constexpr KbT kb_t = 0;                                                                  \
    (void)kb_t;                                                                            \
    const bool kb_small = kb_blockIdx.x < 1048576u && kb_blockDim.x <= 1024u;              \
    auto kb_region = [&](auto&& kb_f) __attribute__((always_inline)) {                     \
        /* a faulting block again (::kb_diag): its threads one at a time, each named in */    \
        /* ::kb_threadIdx first. With an int kb_t, the general loop with a step of one */     \
        /* (not a third copy of the region to compile); with an unsigned one, whose general */ \
        /* loop is the fast one, a loop of its own (the step made the tree sum 8x slower) */  \
        const bool kb_one = __builtin_expect(::kb_diag, 0);                                    \
        if (!::std::is_same_v<KbT, int> && kb_one) {                                           \
            for (unsigned kb_z = 0; kb_z < kb_blockDim.z; ++kb_z)                              \
                for (unsigned kb_y = 0; kb_y < kb_blockDim.y; ++kb_y)                          \
                    for (unsigned kb_x = 0; kb_x < kb_blockDim.x; ++kb_x) {                    \
                        ::kb_cpu::diag_thread(kb_x, kb_y, kb_z);                               \
                        kb_f(::kb_cpu::uint3{kb_x, kb_y, kb_z},                                \
                             (KbT)((kb_z * kb_blockDim.y + kb_y) * kb_blockDim.x + kb_x));       \
                    }                                                                          \
            return;                                                                            \
        }                                                                                      \
        for (unsigned kb_z = 0; kb_z < kb_blockDim.z; ++kb_z)                                  \
            for (unsigned kb_y = 0; kb_y < kb_blockDim.y; ++kb_y) {                            \
                const KbT kb_row = (KbT)((kb_z * kb_blockDim.y + kb_y) * kb_blockDim.x);       \
                const KbT kb_nx = (KbT)kb_blockDim.x;                                          \
                if constexpr (::std::is_same_v<KbT, int>) {                                    \
                    if (kb_small && !kb_one) {                                                 \
                        const int kb_base = (int)(kb_blockIdx.x * kb_blockDim.x);              \
                        KB_SIMD _Pragma("GCC unroll 4")                                        \
                        for (int kb_g = kb_base; kb_g < kb_base + (int)kb_nx; ++kb_g)          \
                            kb_f(::kb_cpu::uint3{(unsigned)(kb_g - kb_base), kb_y, kb_z},      \
                                 kb_row + (KbT)(kb_g - kb_base));                              \
                    } else {                                                                   \
                        const KbT kb_step = kb_one ? (KbT)1 : kb_nx;                           \
                        for (KbT kb_x0 = 0; kb_x0 < kb_nx; kb_x0 += kb_step) {                 \
                            if (kb_one) ::kb_cpu::diag_thread((unsigned)kb_x0, kb_y, kb_z);    \
                            KB_SIMD for (KbT kb_x = kb_x0; kb_x < kb_x0 + kb_step; ++kb_x)     \
                                kb_f(::kb_cpu::uint3{(unsigned)kb_x, kb_y, kb_z}, kb_row + kb_x); \
                        }                                                                      \
                    }                                                                          \
                } else {                                                                       \
                    KB_SIMD for (KbT kb_x = 0; kb_x < kb_nx; ++kb_x)                           \
                        kb_f(::kb_cpu::uint3{(unsigned)kb_x, kb_y, kb_z}, kb_row + kb_x);      \
                }                                                                              \
            }                                                                                  \
    };                                                                                     \
    auto kb_region_range = [&](long long kb_lo, long long kb_hi, long long kb_step,        \
                               auto&& kb_f) __attribute__((always_inline)) {               \
        if (__builtin_expect(::kb_diag, 0) || kb_blockDim.y != 1 || kb_blockDim.z != 1) {  \
            kb_region(kb_f);                                                               \
            return;                                                                        \
        }                                                                                  \
        const KbT kb_a = (KbT)(kb_lo < 0 ? 0 : kb_lo);                                     \
        const KbT kb_b = (KbT)(kb_hi < (long long)kb_blockDim.x ? (kb_hi < 0 ? 0 : kb_hi)  \
                                                                : (long long)kb_blockDim.x); \
        if (kb_step == 1) {                                                                \
            KB_SIMD for (KbT kb_x = kb_a; kb_x < kb_b; ++kb_x)                              \
                kb_f(::kb_cpu::uint3{(unsigned)kb_x, 0u, 0u}, kb_x);                       \
        } else {                                                                           \
            for (KbT kb_x = kb_a; kb_x < kb_b; kb_x += (KbT)kb_step)                        \
                kb_f(::kb_cpu::uint3{(unsigned)kb_x, 0u, 0u}, kb_x);                       \
        }                                                                                  \
    };                                                                                     \
    /* each thread's strided loop as written (kb_fast false: blocks of more dimensions, a */  \
    /* faulting block again, threads returned): one plain loop over the threads, the rare */   \
    /* case compiled once */                                                                 \
    auto kb_strided_each = [&](auto kb_zero, auto kb_e, auto kb_s, auto&& kb_f) __attribute__((always_inline)) { \
        using KbI = decltype(kb_zero);                                                     \
        for (unsigned kb_z = 0; kb_z < kb_blockDim.z; ++kb_z)                              \
            for (unsigned kb_y = 0; kb_y < kb_blockDim.y; ++kb_y)                          \
                for (unsigned kb_x = 0; kb_x < kb_blockDim.x; ++kb_x) {                    \
                    if (__builtin_expect(::kb_diag, 0)) ::kb_cpu::diag_thread(kb_x, kb_y, kb_z); \
                    const ::kb_cpu::uint3 kb_ti{kb_x, kb_y, kb_z};                         \
                    const KbT kb_tt = (KbT)((kb_z * kb_blockDim.y + kb_y) * kb_blockDim.x + kb_x); \
                    for (KbI kb_i = (KbI)kb_x; kb_i < kb_e; kb_i += kb_s)                  \
                        kb_f(kb_ti, kb_tt, kb_i, ::std::false_type{});                     \
                }                                                                          \
    };                                                                                     \
    auto kb_strided = [&](auto kb_zero, auto kb_e, auto kb_s, auto&& kb_f) __attribute__((always_inline)) { \
        using KbI = decltype(kb_zero);                                                     \
        if (!__builtin_expect(::kb_diag, 0) && kb_blockDim.y == 1 && kb_blockDim.z == 1 && \
            ::kb_cpu::fis::strided_fits<KbI>(kb_e, kb_s, kb_blockDim.x)) {                 \
            const KbI kb_end = ::kb_cpu::fis::strided_end<KbI>(kb_e), kb_step = (KbI)kb_s; \
            const KbI kb_nx = (KbI)kb_blockDim.x;                                          \
            for (KbI kb_c = 0; kb_c < kb_end; kb_c += kb_step) {                           \
                const KbI kb_n = kb_end - kb_c < kb_nx ? kb_end - kb_c : kb_nx;            \
                KB_SIMD for (KbI kb_x = 0; kb_x < kb_n; ++kb_x)                            \
                    kb_f(::kb_cpu::uint3{(unsigned)kb_x, 0u, 0u}, (KbT)kb_x, (KbI)(kb_c + kb_x), ::std::true_type{}); \
            }                                                                              \
            return;                                                                        \
        }                                                                                  \
        kb_strided_each(kb_zero, kb_e, kb_s, kb_f);                                        \
    };                                                                                     \
    /* each thread's loop as written (fission_lanes.py's blocks of more than one dimension, a */ \
    /* faulting block again): one plain loop over the threads, the rare case compiled once */    \
    auto kb_lanes_each = [&](auto&& kb_f) __attribute__((always_inline)) {                 \
        for (unsigned kb_z = 0; kb_z < kb_blockDim.z; ++kb_z)                              \
            for (unsigned kb_y = 0; kb_y < kb_blockDim.y; ++kb_y)                          \
                for (unsigned kb_x = 0; kb_x < kb_blockDim.x; ++kb_x) {                    \
                    if (__builtin_expect(::kb_diag, 0)) ::kb_cpu::diag_thread(kb_x, kb_y, kb_z); \
                    kb_f(::kb_cpu::uint3{kb_x, kb_y, kb_z},                                \
                         (KbT)((kb_z * kb_blockDim.y + kb_y) * kb_blockDim.x + kb_x));     \
                }                                                                          \
    };                                                                                     \
    auto kb_lanes = [&](auto kb_zero, auto kb_e, auto kb_s, auto&& kb_f) __attribute__((always_inline)) { \
        using KbI = decltype(kb_zero);                                                     \
        if (!__builtin_expect(::kb_diag, 0) && kb_blockDim.y == 1 && kb_blockDim.z == 1 && \
            ::kb_cpu::fis::strided_fits<KbI>(kb_e, kb_s, 32u) && kb_s == 32) {             \
            const KbI kb_end = ::kb_cpu::fis::strided_end<KbI>(kb_e);                      \
            const int kb_nx = (int)kb_blockDim.x;                                          \
            for (int kb_w = 0; kb_w < kb_nx; kb_w += 32) {                                 \
                const ::kb_cpu::uint3 kb_ti0{(unsigned)kb_w, 0u, 0u};                      \
                const KbI kb_nl = (KbI)(kb_nx - kb_w < 32 ? kb_nx - kb_w : 32);            \
                for (KbI kb_c = 0; kb_c < kb_end; kb_c += (KbI)32) {                       \
                    const KbI kb_n = kb_end - kb_c < kb_nl ? kb_end - kb_c : kb_nl;        \
                    KB_SIMD for (KbI kb_x = 0; kb_x < kb_n; ++kb_x)                        \
                        kb_f(::kb_cpu::uint3{(unsigned)(kb_w + (int)kb_x), 0u, 0u}, (KbT)(kb_w + (int)kb_x), \
                             kb_ti0, ::std::true_type{}, (KbI)(kb_c + kb_x));              \
                }                                                                          \
            }                                                                              \
            return;                                                                        \
        }                                                                                  \
        kb_lanes_each([&](const ::kb_cpu::uint3 kb_ti, const auto kb_tt) __attribute__((always_inline)) { \
            kb_f(kb_ti, kb_tt, kb_ti, ::std::false_type{}, (KbI)0);                        \
        });                                                                                \
    };
// A block-strided loop (fission_strided.py): `for (I i = threadIdx.x; i < e; i += s)` in each
// thread, as one vector loop over the threads per chunk of s, where the block has one dimension
// and s is a multiple of blockDim.x (thread t at i = chunk + t: llm.c's softmax kernel7 steps
// by blockDim.x * UNROLL_FACTOR); else as written. kb_fast (std::true_type) says the first: there
// 0 <= i < e <= INT_MAX / 2 for an int i (strided_fits), which fission_index.py's indices rely on.
#define KB_STRIDED_BEGIN(KbI, i, e, s)                                                             \
    kb_strided((KbI)0, (e), (s),                                                                   \
               [&](const ::kb_cpu::uint3 kb_threadIdx, const auto kb_t, const KbI i, [[maybe_unused]] const auto kb_fast) __attribute__((always_inline)) {
// A loop over a warp's lanes (fission_lanes.py): `for (I i = lane; i < e; i += 32)` in each
// thread, as chunks of 32 columns per warp, each a vector loop over the warp's lanes (lane x at
// i = chunk + x), where the block has one dimension and e is an integer I holds (or a float);
// else each thread's loop as written. The region's code gets kb_ti0, the thread index of its
// warp's lane 0 (the thread's own in the fallback), for the locals every lane of a warp holds
// alike; kb_one (std::true_type) says the loop in the text runs once, at kb_i.
#define KB_LANES_BEGIN(KbI, e, s)                                                                  \
    kb_lanes((KbI)0, (e), (s),                                                                     \
             [&](const ::kb_cpu::uint3 kb_threadIdx, const auto kb_t, const ::kb_cpu::uint3 kb_ti0, \
                 const auto kb_one, const KbI kb_i) __attribute__((always_inline)) {
#define KB_REGION_BEGIN \
    kb_region([&](const ::kb_cpu::uint3 kb_threadIdx, const auto kb_t) __attribute__((always_inline)) {
// A region only the threads in [lo, hi) (every step-th) act in (fission_ranges.py): the others'
// test fails. Blocks of more than one dimension run it for all threads.
#define KB_REGION_RANGE_BEGIN(lo, hi, step)                  \
    kb_region_range((long long)(lo), (long long)(hi), (long long)(step), \
                    [&](const ::kb_cpu::uint3 kb_threadIdx, const auto kb_t) __attribute__((always_inline)) {
#define KB_REGION_END \
    });
// A kernel some of whose threads return before its last region (fission_exit.py): kb_done[t]
// once thread t has returned (`return;` in a region sets it and leaves the thread's call), and
// every region after the first return loops over the threads that have not (kb_live). Until a
// thread returns, the regions run their usual loops: the check is one branch a region.
#define KB_FISSION_LIVE                                                                          \
    bool kb_done[KB_FISSION_MAX_THREADS];                                                          \
    bool kb_any_done = false;                                                                      \
    __builtin_memset(kb_done, 0, kb_fb.n);                                                         \
    auto kb_live = [&](auto&& kb_f) __attribute__((always_inline)) {                              \
        return [&](const ::kb_cpu::uint3 kb_ti, const auto kb_tt, auto... kb_r) __attribute__((always_inline)) { \
            if (!kb_done[kb_tt]) kb_f(kb_ti, kb_tt, kb_r...);                                      \
        };                                                                                        \
    };                                                                                            \
    auto kb_region_live = [&](auto&& kb_f) __attribute__((always_inline)) {                      \
        if (__builtin_expect(kb_any_done, 0)) kb_region(kb_live(kb_f));                           \
        else kb_region(kb_f);                                                                     \
    };                                                                                            \
    auto kb_region_range_live = [&](long long kb_lo, long long kb_hi, long long kb_step,          \
                                    auto&& kb_f) __attribute__((always_inline)) {                 \
        if (__builtin_expect(kb_any_done, 0)) kb_region_range(kb_lo, kb_hi, kb_step, kb_live(kb_f)); \
        else kb_region_range(kb_lo, kb_hi, kb_step, kb_f);                                        \
    };                                                                                            \
    auto kb_strided_live = [&](auto kb_zero, auto kb_e, auto kb_s, auto&& kb_f) __attribute__((always_inline)) { \
        /* once a thread has returned, each thread's loop as written (a block past the rows' */  \
        /* end, kernel7's tid >= C): one vector path less to compile */                          \
        if (__builtin_expect(kb_any_done, 0)) kb_strided_each(kb_zero, kb_e, kb_s, kb_live(kb_f)); \
        else kb_strided(kb_zero, kb_e, kb_s, kb_f);                                               \
    };                                                                                            \
    /* once a thread has returned, each thread's loop as written (a block past the rows' end) */ \
    auto kb_lanes_live = [&](auto kb_zero, auto kb_e, auto kb_s, auto&& kb_f) __attribute__((always_inline)) { \
        using KbI = decltype(kb_zero);                                                            \
        if (__builtin_expect(kb_any_done, 0))                                                     \
            kb_lanes_each(kb_live([&](const ::kb_cpu::uint3 kb_ti, const auto kb_tt) __attribute__((always_inline)) { \
                kb_f(kb_ti, kb_tt, kb_ti, ::std::false_type{}, (KbI)0);                           \
            }));                                                                                  \
        else kb_lanes(kb_zero, kb_e, kb_s, kb_f);                                                 \
    };
#define KB_REGION_LIVE_BEGIN \
    kb_region_live([&](const ::kb_cpu::uint3 kb_threadIdx, const auto kb_t) __attribute__((always_inline)) {
#define KB_REGION_RANGE_LIVE_BEGIN(lo, hi, step)                  \
    kb_region_range_live((long long)(lo), (long long)(hi), (long long)(step), \
                         [&](const ::kb_cpu::uint3 kb_threadIdx, const auto kb_t) __attribute__((always_inline)) {
#define KB_STRIDED_LIVE_BEGIN(KbI, i, e, s)                                                        \
    kb_strided_live((KbI)0, (e), (s),                                                              \
                    [&](const ::kb_cpu::uint3 kb_threadIdx, const auto kb_t, const KbI i, [[maybe_unused]] const auto kb_fast) __attribute__((always_inline)) {
#define KB_LANES_LIVE_BEGIN(KbI, e, s)                                                             \
    kb_lanes_live((KbI)0, (e), (s),                                                                \
                  [&](const ::kb_cpu::uint3 kb_threadIdx, const auto kb_t, const ::kb_cpu::uint3 kb_ti0, \
                      const auto kb_one, const KbI kb_i) __attribute__((always_inline)) {
// A thread's `return;` in a kernel of live regions.
#define KB_RETURN          \
    {                      \
        kb_done[kb_t] = true; \
        kb_any_done = true;   \
        return;               \
    }

#pragma GCC visibility push(hidden)

namespace kb_cpu {
namespace fis {

// The running block's shape, for the warp operations' checks and messages.
struct Block {
    uint3 idx;
    dim3 dim;
    unsigned n;
    bool full;  // every warp has 32 lanes
    // the threads whose lanes a warp operation computes: whole warps (only())
    int first = 0, last;
    // the threads that have returned (kb_done), where one has (live()): else null
    const bool* done = nullptr;
    // done names whole warps only (an if whose test they failed, warps_agree): the group of a lane
    // that takes part names none of them, so the checks of lanes that left have nothing to find
    bool whole = false;
    Block(uint3 i, dim3 d) : idx(i), dim(d), n(d.x * d.y * d.z), full(d.x * d.y * d.z % 32 == 0), last((int)n) {}
    uint3 tid(unsigned t) const { return uint3{t % dim.x, (t / dim.x) % dim.y, t / (dim.x * dim.y)}; }
    unsigned lanes(unsigned t) const {  // how many lanes the warp of thread t has
        const unsigned base = t & ~31u;
        return n - base < 32 ? n - base : 32;
    }
    unsigned exist(unsigned t) const { return lanes(t) == 32 ? ~0u : (1u << lanes(t)) - 1; }
    // The block for a warp operation whose results the threads [lo, hi) only read (a region of
    // a range, fission_ranges.py): their warps (in a block of one dimension; else all).
    Block only(long long lo, long long hi) const {
        Block b = *this;
        if (dim.y == 1 && dim.z == 1) {
            b.first = (int)(lo < 0 ? 0 : lo > (long long)n ? (long long)n : lo) & ~31;
            b.last = hi < (long long)b.first ? b.first : hi > (long long)n ? (int)n : (int)((hi + 31) & ~31LL);
            if (b.last > (int)n) b.last = (int)n;
        }
        return b;
    }
    // The block for a warp operation inside `if (block.thread_rank() < hi)`, hi a multiple of 32
    // (fission_if.py): the warps of the threads [0, hi) by their rank, in a block of any shape.
    Block ranks(long long hi) const {
        Block b = *this;
        b.last = hi < (long long)n ? (int)(hi < 0 ? 0 : hi) : (int)n;
        return b;
    }
    // The block for a warp operation inside an if each thread decided (fission_if.py): the warps
    // whose lanes failed its test (off) take no part, as the lanes of warps that returned.
    Block agreed(const bool* off) const {
        Block b = *this;
        b.done = off;
        b.whole = true;
        return b;
    }
    // The block for a warp operation or barrier in a kernel whose threads may have returned.
    Block live(const bool* d, bool any) const {
        Block b = *this;
        b.done = any ? d : nullptr;
        return b;
    }
};

// The ends a misuse meets: the launch fails with the fiber runner's message (run_block records it).
template <class... KbA>
[[noreturn]] __attribute__((noinline, cold)) void fail(const char* fmt, KbA... a) {
    char m[480];
    std::snprintf(m, sizeof(m), fmt, a...);
    stop(m);
}

// One warp operation's lane arrays: lane t's operand at in[t] and its result at out[t], with room
// for reads at t - 31 .. t + 31, so that shfl_down/up/xor read two contiguous runs and blend
// (never a gather). The statements of a kernel reuse a few of them, one after the other.
constexpr unsigned PAD = 32;
constexpr unsigned HALF = (KB_FISSION_MAX_THREADS + 2 * PAD) * 8;
struct alignas(64) Lanes {
    unsigned char b[2 * HALF];
};
template <class KbT>
inline KbT* at(Lanes& l) {
    static_assert(sizeof(KbT) <= 8, "warp shuffles move values of at most 8 bytes");
    return reinterpret_cast<KbT*>(l.b) + PAD;
}
template <class KbT>
inline KbT* out(Lanes& l) {
    return reinterpret_cast<KbT*>(l.b + HALF) + PAD;
}
template <class KbT>
inline void put(Lanes& l, int t, const KbT& v) {
    at<KbT>(l)[t] = v;
}
template <class KbT>
inline KbT get(Lanes& l, int t) {
    return at<KbT>(l)[t];
}
template <class KbT>
inline KbT result(Lanes& l, int t) {
    return out<KbT>(l)[t];
}

// The threads a test of the thread's index may let through (fission_ranges.py), by the type of
// what it is compared with: a superset (the test still runs), every thread where the bound is a
// float or out of range (`threadIdx.x < n` with a negative int n compares as unsigned: true).
constexpr long long ALL = 1LL << 40;
template <class KbB>
inline bool names_index(KbB b, long long n) {  // an integer in [0, n)
    if constexpr (std::is_integral_v<KbB>)
        return !(b < (KbB)0) && (unsigned long long)b < (unsigned long long)n;
    else
        return false;
}
template <class KbB>
inline long long below(KbB b) {  // x < b
    return names_index(b, ALL) ? (long long)b : ALL;
}
template <class KbB>
inline long long upto(KbB b) {  // x <= b
    return names_index(b, ALL) ? (long long)b + 1 : ALL;
}
template <class KbB>
inline long long eq_lo(KbB b, long long n = ALL) {  // x == b (x % n == b): the first
    return names_index(b, n) ? (long long)b : 0;
}
template <class KbB>
inline long long eq_hi(KbB b) {
    return names_index(b, ALL) ? (long long)b + 1 : ALL;
}
template <class KbB>
inline long long lane_step(KbB b, long long n) {
    return names_index(b, n) ? n : 1;
}

// A block-strided loop `for (I i = threadIdx.x; i < e; i += s)` runs as chunks of s
// (KB_STRIDED_BEGIN) where s is a multiple of blockDim.x and e compares with an I as its value does: an integer
// that I holds, or a float (i < 10.5 is i < 11); else each thread's loop as written.
template <class KbI, class KbE, class KbS>
inline bool strided_fits(KbE e, KbS s, unsigned nx) {
    if constexpr (!std::is_integral_v<KbS>) {
        return false;
    } else {
        // a step of whole blocks: thread t at i = chunk + t, chunk after chunk of s (threads past
        // the block's own indices of a chunk visit none of it)
        if (s <= (KbS)0 || (unsigned long long)s % nx != 0 ||
            (unsigned long long)s > (unsigned long long)std::numeric_limits<KbI>::max() / 2)
            return false;
        if constexpr (std::is_floating_point_v<KbE>)
            return e == e && e < (KbE)1e9 && (std::is_signed_v<KbI> || e >= (KbE)0);
        else if constexpr (std::is_integral_v<KbE>)
            return (e < (KbE)0 ? std::is_signed_v<KbI> && std::is_signed_v<KbE> && (long long)e >= -(1LL << 31)
                               : (unsigned long long)e <= (unsigned long long)std::numeric_limits<KbI>::max() / 2);
        else
            return false;
    }
}
template <class KbI, class KbE>
inline KbI strided_end(KbE e) {
    if constexpr (std::is_floating_point_v<KbE>)
        return (KbI)std::ceil(e);
    else
        return (KbI)e;
}

// The lanes of thread t's tile of N threads, clipped to the lanes that exist (cooperative_groups.h).
template <unsigned KbN>
inline unsigned tile_mask(const Block& b, unsigned t) {
    const unsigned first = (t & 31u) & ~(KbN - 1);
    const unsigned m = KbN == 32 ? ~0u : ((1u << KbN) - 1) << first;
    return m & b.exist(t);
}

// A warp operation with an explicit mask, before any lane takes its result: the fiber runner's
// checks, thread by thread in thread order (kb_cpu_sync.h: warp_op). The full mask of full warps
// here; the rest in the runner object (kb_cpu_fission.cpp).
unsigned check_slow(const Block& b, int op, unsigned mask, int width, int line, const char* file);
inline unsigned check(const Block& b, int op, unsigned mask, int width, int line, const char* file = __builtin_FILE()) {
    if (mask == ~0u && b.full && (!b.done || b.whole) && width > 0 && width <= 32 && !(width & (width - 1))) return mask;
    return check_slow(b, op, mask, width, line, file);
}

// An `if (threadIdx.x < k)` (k a multiple of 32) around warp operations (fission_if.py): the
// same for every lane of a warp, except in a block of more than one dimension whose rows are
// longer than k and not whole warps, where a warp holds the end of one row (x >= k) and the
// start of the next (x < k): the warp operation is not reached by every lane it names.
inline void warp_if(const Block& b, long long k, int line, const char* file = __builtin_FILE()) {
    if ((b.dim.y == 1 && b.dim.z == 1) || b.dim.x % 32 == 0 || (long long)b.dim.x <= k) return;
    const unsigned w = (b.dim.x - 1) / 32;  // the warp of thread (blockDim.x - 1, 0, 0) and (0, 1, 0)
    fail("block (%u,%u,%u): the lanes of warp %u disagree on the test of threadIdx.x against %lld at %s:%d (blockDim "
         "(%u,%u,%u): rows of %u threads, not whole warps), so not every lane reaches the warp operation inside "
         "it (a GPU would hang or give wrong results)",
         b.idx.x, b.idx.y, b.idx.z, w, k, base_name(file), line, b.dim.x, b.dim.y, b.dim.z, b.dim.x);
}

// An `if` around warp operations of the whole warp (full masks, tiles of 32) whose test each
// thread decided (fission_if.py; off[t]: thread t fails it): the lanes of every warp must agree,
// else not every lane the operations name reaches them. The warps that fail the test then take
// no part in them, as the lanes of a warp that returned (Block::live).
inline void warps_agree(const Block& b, const bool* off, int line, const char* file = __builtin_FILE()) {
    for (unsigned base = 0; base < b.n; base += 32)
        for (unsigned k = 1; k < b.lanes(base); ++k)
            if (off[base + k] != off[base]) {
                const unsigned in = off[base] ? base + k : base, out = off[base] ? base : base + k;
                const uint3 i = b.tid(in), o = b.tid(out);
                fail("block (%u,%u,%u): thread (%u,%u,%u) passes the test of the if at %s:%d and thread (%u,%u,%u) "
                     "of its warp does not, but the if holds warp operations of the whole warp: not every lane "
                     "they name reaches them (a GPU would hang or give wrong results)",
                     b.idx.x, b.idx.y, b.idx.z, i.x, i.y, i.z, base_name(file), line, o.x, o.y, o.z);
            }
}

// Where threads have returned (b.done): a lane that reaches a warp operation whose group (`mask`,
// or its tile of `tile` threads) names a lane that has returned fails as on the fiber runner --
// "which has exited" where that lane comes before it in the warp (the fiber runner runs a warp's
// lanes in order), else the wait no lane ends. A barrier some threads reach after others returned
// fails likewise (kb_cpu_fiber.cpp: describe_deadlock).
void exited_slow(const Block& b, int op, unsigned mask, unsigned tile, int line, const char* file);
void barrier_slow(const Block& b, int line, const char* file);
inline void exited(const Block& b, int op, unsigned mask, unsigned tile, int line, const char* file = __builtin_FILE()) {
    if (b.done && !b.whole) exited_slow(b, op, mask, tile, line, file);
}
inline void barrier(const Block& b, int line, const char* file = __builtin_FILE()) {
    if (b.done) barrier_slow(b, line, file);
}
// The operands of lanes that have returned, zeroed: the passes read whole warps.
template <class KbT>
inline void clear_returned(const Block& b, Lanes& l) {
    KbT* v = at<KbT>(l);
    for (int t = b.first; t < b.last; ++t)
        if (b.done[t]) __builtin_memset((void*)&v[t], 0, sizeof(KbT));
}

// Lane src of thread t's warp where the group's mask m names it; else what the fiber runner gives
// (0: the lane is past the block, since every lane of the block is at this call) or, checked, an error.
template <class KbT>
__attribute__((noinline)) KbT read_slow(const Block& b, const KbT* v, unsigned t, unsigned m, int src, int op, int line,
                                      const char* file) {
    if (src >= 0 && src < 32 && (m >> src & 1)) return v[(t & ~31u) + (unsigned)src];
    if (checked()) {
        const uint3 me = b.tid(t);
        fail("block (%u,%u,%u): thread (%u,%u,%u) (lane %d) in %s at %s:%d reads lane %d, which mask "
             "0x%08x does not name (a GPU gives an undefined value; reported because KERNELBAY_CPU_CHECK "
             "is set); name every lane read in the mask, or read only lanes that take part",
             b.idx.x, b.idx.y, b.idx.z, me.x, me.y, me.z, (int)(t & 31u), op_name(op), base_name(file), line, src, m);
    }
    return from_bits<KbT>(0);
}

// A shuffle (W_SHFL, W_UP, W_DOWN, W_XOR) over the block's lane array: out[t] is what lane t
// reads, the source lane as the fiber runner computes it (kb_cpu_sync.h: warp_complete). `tile`:
// the mask is each lane's tile of `tile` threads (always the caller's own lanes); `args`: each
// lane's own offset or source where they differ, else null and `arg`. The common case -- full
// mask, full warps, one offset within the width -- is two contiguous loads and a blend per
// element: a vector loop.
template <class KbT>
inline void shuffle(const Block& b, Lanes& l, int op, unsigned mask, unsigned tile, int arg, const int* args, int w,
                    int line, const char* file = __builtin_FILE()) {
    if (b.done) {
        exited(b, op, mask, tile, line, file);
        clear_returned<KbT>(b, l);
    }
    const KbT* v = at<KbT>(l);
    KbT* o = out<KbT>(l);
    const int n = b.last;
    if (args == nullptr && b.full && (tile || mask == ~0u) && arg >= 0 && arg < w && w <= 32 && !(w & (w - 1))) {
        const int m = ~(w - 1);
        if (op == W_DOWN) {
            KB_SIMD for (int t = b.first; t < n; ++t) {
                const int lane = t & 31;
                const KbT hi = v[t + arg], me = v[t];
                o[t] = (lane - (lane & m)) + arg < w ? hi : me;
            }
        } else if (op == W_UP) {
            KB_SIMD for (int t = b.first; t < n; ++t) {
                const int lane = t & 31;
                const KbT lo = v[t - arg], me = v[t];
                o[t] = (lane - (lane & m)) >= arg ? lo : me;
            }
        } else if (op == W_XOR && !(arg & (arg - 1))) {  // a power of two: the partner is lane +- arg
            KB_SIMD for (int t = b.first; t < n; ++t) {
                const KbT hi = v[t + arg], lo = v[t - arg];
                o[t] = (t & arg) ? lo : hi;
            }
        } else if (op == W_XOR) {
            for (int t = b.first; t < n; ++t) o[t] = v[(t & ~31) + ((t & 31) ^ arg)];
        } else {
            for (int t = b.first; t < n; ++t) o[t] = v[(t & ~31) + ((t & 31) & m) + (arg & (w - 1))];
        }
        return;
    }
    for (int t = b.first; t < n; ++t) {
        if (b.done && b.done[t]) continue;
        const int a = args != nullptr ? args[t] : arg, lane = t & 31, seg = lane & ~(w - 1);
        int src = lane;
        switch (op) {
        case W_SHFL: src = seg + (a & (w - 1)); break;
        case W_UP: src = (lane - seg) >= a ? lane - a : lane; break;
        case W_DOWN: src = (lane - seg) + a < w ? lane + a : lane; break;
        default: src = (unsigned)a < 32u && ((lane ^ a) & ~(w - 1)) <= seg ? (lane ^ a) : lane; break;
        }
        const unsigned mt = tile == 32 ? b.exist((unsigned)t) : tile ? (((1u << tile) - 1) << (lane & ~(int)(tile - 1))) & b.exist((unsigned)t) : mask & b.exist((unsigned)t);
        o[t] = read_slow<KbT>(b, v, (unsigned)t, mt, src, op, line, file);
    }
}

// A vote's results, in place: lane t's operand (an int, the predicate) becomes the ballot of the
// group it belongs to (the mask's lanes of its warp, or its tile's), then what the call returns.
enum : int { V_BALLOT, V_ANY, V_ALL, V_TILE_BALLOT, V_TILE_ANY, V_TILE_ALL };
template <unsigned KbN>
inline void vote(const Block& b, Lanes& l, unsigned mask, int kind, int line = 0, const char* file = __builtin_FILE()) {
    if (b.done) {
        exited(b, W_BALLOT, mask, kind >= V_TILE_BALLOT ? KbN : 0u, line, file);
        clear_returned<int>(b, l);
    }
    int* v = at<int>(l);
    for (unsigned base = (unsigned)b.first; base < (unsigned)b.last; base += 32) {
        const unsigned nl = b.lanes(base);
        unsigned bits = 0;
        for (unsigned k = 0; k < nl; ++k) bits |= (unsigned)(v[base + k] != 0) << k;
        for (unsigned k = 0; k < nl; ++k) {
            const bool tile = kind >= V_TILE_BALLOT;
            const unsigned m = tile ? tile_mask<KbN>(b, base + k) : mask & b.exist(base + k);
            const unsigned bal = bits & m;
            unsigned r = bal;
            switch (kind) {
            case V_ANY: case V_TILE_ANY: r = bal != 0; break;
            case V_ALL: case V_TILE_ALL: r = bal == m; break;
            case V_TILE_BALLOT: r = bal >> __builtin_ctz(m); break;
            default: break;
            }
            v[base + k] = (int)r;
        }
    }
}

// One step of a reduction over the lane array (K: W_XOR, a butterfly, or W_DOWN, a tree toward
// lane 0 of each warp): lane t's operand combined with what lane t reads at offset `off`, from
// `v` to `o` (never in place: another lane reads t's operand after t). The source lanes and the
// values where CUDA leaves them undefined are the shuffle's (tile_mask<N>: the group's lanes).
template <unsigned KbN, int KbK, class KbT, class KbOp>
inline void pass(const Block& b, const KbT* v, KbT* o, int off, KbOp& op, int line, const char* file) {
    static_assert(KbK == W_XOR || KbK == W_DOWN, "a butterfly or a tree");
    const int n = b.last;
    if (b.full) {
        if constexpr (KbK == W_XOR) {
            KB_SIMD for (int t = b.first; t < n; ++t) {
                const KbT hi = v[t + off], lo = v[t - off];
                o[t] = op(v[t], (t & off) ? lo : hi);
            }
        } else {
            KB_SIMD for (int t = b.first; t < n; ++t) {
                const KbT hi = v[t + off], me = v[t];
                o[t] = op(me, (t & 31) + off < 32 ? hi : me);
            }
        }
    } else {
        for (int t = b.first; t < n; ++t) {
            if (b.done && b.done[t]) continue;
            const int lane = t & 31, src = KbK == W_XOR ? lane ^ off : lane + off < 32 ? lane + off : lane;
            o[t] = op(v[t], read_slow<KbT>(b, v, (unsigned)t, tile_mask<KbN>(b, (unsigned)t), src, KbK, line, file));
        }
    }
}

// The steps of a reduction at offsets first, first / 2, ..., 1, each one pass from one half of
// the lane array to the other, so that the last step writes where `result` reads.
template <unsigned KbN, int KbK, class KbT, class KbOp>
inline void steps(const Block& b, Lanes& l, int first, KbOp op, int line, const char* file = __builtin_FILE()) {
    if (b.done) {
        exited(b, KbK, ~0u, KbN, line, file);
        clear_returned<KbT>(b, l);
    }
    KbT* v = at<KbT>(l);
    KbT* o = out<KbT>(l);
    const int count = first > 0 ? __builtin_ctz((unsigned)first) + 1 : 0;
    int off = first;
    // Each step reads one half of the lane array and writes the other; an even number of steps
    // would end in `v`, so the first then reads and writes `o`. One pass in the loop, not one per
    // half: a single copy of its vector loops to compile (a warp-shuffle sum kernel's compile
    // took 0.06 s less compiler time).
    KbT* from = v;
    KbT* to = o;
    if (count % 2 == 0) {
        const int n = b.last;
        KB_SIMD for (int t = b.first; t < n; ++t) o[t] = v[t];
        if (count == 0) return;
        from = o;
        to = v;
    }
    for (; off > 0; off /= 2) {
        pass<KbN, KbK>(b, from, to, off, op, line, file);
        KbT* const t = from;
        from = to;
        to = t;
    }
}

// cooperative_groups::reduce over tiles of N <= 32 threads: the butterfly of shfl_xor that the
// fiber runner runs (cooperative_groups.h).
template <unsigned KbN, class KbT, class KbOp>
inline void reduce(const Block& b, Lanes& l, KbOp op, int line, const char* file = __builtin_FILE()) {
    static_assert(KbN >= 1 && KbN <= 32 && (KbN & (KbN - 1)) == 0, "a tile of at most 32 threads");
    steps<KbN, W_XOR, KbT>(b, l, (int)KbN / 2, op, line, file);
}

// cooperative_groups objects inside a loop region: the thread's rank from the region's index,
// not from ::kb_threadIdx (which the loop path does not set).
struct block {
    uint3 ti;
    dim3 bd;
    uint3 bi;
    unsigned thread_rank() const { return ti.x + bd.x * (ti.y + bd.y * ti.z); }
    unsigned size() const { return bd.x * bd.y * bd.z; }
    unsigned num_threads() const { return size(); }
    dim3 group_dim() const { return bd; }
    dim3 dim_threads() const { return bd; }
    uint3 group_index() const { return bi; }
    uint3 thread_index() const { return ti; }
};
template <unsigned KbN>
struct tile {
    uint3 ti;
    dim3 bd;
    uint3 bi;
    unsigned linear() const { return ti.x + bd.x * (ti.y + bd.y * ti.z); }
    static constexpr unsigned size() { return KbN; }
    static constexpr unsigned num_threads() { return KbN; }
    unsigned thread_rank() const { return linear() & (KbN - 1); }
    unsigned meta_group_rank() const { return linear() / KbN; }
    unsigned meta_group_size() const { return (bd.x * bd.y * bd.z + KbN - 1) / KbN; }
};

// Each thread's copy of a local array of a fissioned kernel (`float acc[TM * TN]`): the block's
// copies in one buffer per array (slot), kept by the OS thread and grown as needed -- not on the
// stack, where 1024 threads' copies of a larger array would not fit. A block runs to its end on
// its OS thread (the loop path never yields), so one buffer a slot serves every kernel there.
#define KB_FISSION_MAX_ARRAYS 8
struct Scratch {
    void* p[KB_FISSION_MAX_ARRAYS] = {};
    size_t n[KB_FISSION_MAX_ARRAYS] = {};
    ~Scratch() {
        for (void* q : p) free(q);
    }
};
inline void* scratch(unsigned slot, size_t bytes) {
    static thread_local Scratch s;
    if (s.n[slot] < bytes) {
        free(s.p[slot]);
        s.p[slot] = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
        if (s.p[slot] == nullptr) {
            fprintf(stderr, "kernelbay: out of memory for %zu bytes of a kernel's per-thread local arrays\n", bytes);
            abort();
        }
        s.n[slot] = bytes;
    }
    return s.p[slot];
}

}  // namespace fis
}  // namespace kb_cpu

#pragma GCC visibility pop
