// kernelbay CPU backend: the cooperative_groups subset a block can run on the CPU: the thread
// block, tiles of 1..32 threads (powers of two) with their shuffles, votes, reduce and scans, and
// tiles of 64..1024 threads (block_tile_memory) with sync, reduce and scans.
// Grid-wide groups (this_grid) are refused by the compiler.
#pragma once
#include "kb_cpu_cuda.h"

namespace cooperative_groups {

namespace details {
inline unsigned linear_tid() {
    const auto& t = ::kb_threadIdx;
    const auto& d = ::kb_blockDim;
    return t.x + d.x * (t.y + d.y * t.z);
}
inline unsigned block_size() {
    const auto& d = ::kb_blockDim;
    return d.x * d.y * d.z;
}
// The lanes of the calling thread's tile of `n` threads, clipped to the lanes that exist.
inline unsigned tile_mask(unsigned n) {
    const unsigned t = linear_tid(), lane = t & 31, first = lane & ~(n - 1);
    unsigned m = n == 32 ? ~0u : ((1u << n) - 1) << first;
    const unsigned warp_base = t & ~31u, nb = block_size();
    if (nb - warp_base < 32) m &= (1u << (nb - warp_base)) - 1;
    return m;
}
}  // namespace details

// The shared memory a GPU gives tiles of more than 32 threads: the cpu needs none. Both the
// CUDA 11 form <TileCommunicationSize, MaxBlockSize> and the CUDA 12 form <MaxBlockSize> work.
template <unsigned A = 0, unsigned B = 0>
struct block_tile_memory {};

class thread_block {
public:
    void sync(int line = __builtin_LINE(), const char* file = __builtin_FILE()) const { __syncthreads(line, file); }
    unsigned thread_rank() const { return details::linear_tid(); }
    unsigned size() const { return details::block_size(); }
    unsigned num_threads() const { return details::block_size(); }
    dim3 group_dim() const { return ::kb_blockDim; }
    dim3 dim_threads() const { return ::kb_blockDim; }
    uint3 group_index() const { return ::kb_blockIdx; }
    uint3 thread_index() const { return ::kb_threadIdx; }
};

inline thread_block this_thread_block() { return thread_block(); }
template <unsigned A, unsigned B>
inline thread_block this_thread_block(block_tile_memory<A, B>&) { return thread_block(); }

// A tile whose size is known at run time (tiled_partition(g, n)).
class thread_group {
public:
    explicit thread_group(unsigned n) : n_(n) {}
    void sync(int line = __builtin_LINE(), const char* file = __builtin_FILE()) const {
        if (n_ > 32) ::kb_cpu::tile_barrier(n_, line, file);
        else __syncwarp(details::tile_mask(n_), line, file);
    }
    unsigned thread_rank() const { return details::linear_tid() % n_; }
    unsigned size() const { return n_; }
    unsigned num_threads() const { return n_; }
    unsigned meta_group_rank() const { return details::linear_tid() / n_; }
    unsigned meta_group_size() const { return (details::block_size() + n_ - 1) / n_; }

private:
    unsigned n_;
};

template <unsigned N, class Parent = void>
class thread_block_tile;

template <unsigned N>
class thread_block_tile<N, void> {
    static_assert(N >= 1 && N <= 1024 && (N & (N - 1)) == 0,
                  "tiled_partition<N> needs N a power of two from 1 to 1024");
    static constexpr bool small = N <= 32;

public:
    static constexpr unsigned num_threads() { return N; }
    static constexpr unsigned size() { return N; }
    unsigned thread_rank() const { return details::linear_tid() & (N - 1); }
    unsigned meta_group_rank() const { return details::linear_tid() / N; }
    unsigned meta_group_size() const { return (details::block_size() + N - 1) / N; }
    unsigned mask() const {
        static_assert(small, "a tile of more than 32 threads has no warp mask, shuffles or votes");
        return details::tile_mask(N);
    }
    void sync(int line = __builtin_LINE(), const char* file = __builtin_FILE()) const {
        if constexpr (small) __syncwarp(mask(), line, file);
        else ::kb_cpu::tile_barrier(N, line, file);
    }
    template <class T>
    T shfl(T v, int src, int line = __builtin_LINE(), const char* file = __builtin_FILE()) const {
        return ::kb_cpu::shfl_any(::kb_cpu::W_SHFL, mask(), v, src, N, line, file);
    }
    template <class T>
    T shfl_down(T v, unsigned d, int line = __builtin_LINE(), const char* file = __builtin_FILE()) const {
        return ::kb_cpu::shfl_any(::kb_cpu::W_DOWN, mask(), v, (int)d, N, line, file);
    }
    template <class T>
    T shfl_up(T v, unsigned d, int line = __builtin_LINE(), const char* file = __builtin_FILE()) const {
        return ::kb_cpu::shfl_any(::kb_cpu::W_UP, mask(), v, (int)d, N, line, file);
    }
    template <class T>
    T shfl_xor(T v, unsigned m, int line = __builtin_LINE(), const char* file = __builtin_FILE()) const {
        return ::kb_cpu::shfl_any(::kb_cpu::W_XOR, mask(), v, (int)m, N, line, file);
    }
    // Votes answer in tile lanes: bit k is the tile's thread k.
    unsigned ballot(int p, int line = __builtin_LINE(), const char* file = __builtin_FILE()) const {
        const unsigned m = mask();
        return (__ballot_sync(m, p, line, file) & m) >> __builtin_ctz(m);
    }
    bool any(int p, int line = __builtin_LINE(), const char* file = __builtin_FILE()) const {
        return __ballot_sync(mask(), p, line, file) != 0;
    }
    bool all(int p, int line = __builtin_LINE(), const char* file = __builtin_FILE()) const {
        const unsigned m = mask();
        return __ballot_sync(m, p, line, file) == m;
    }
    template <class T>
    unsigned match_any(T v, int line = __builtin_LINE(), const char* file = __builtin_FILE()) const {
        const unsigned m = mask();
        return __match_any_sync(m, v, line, file) >> __builtin_ctz(m);
    }
    operator thread_group() const { return thread_group(N); }
};

template <unsigned N, class Parent>
class thread_block_tile : public thread_block_tile<N, void> {};

template <unsigned N, class P>
inline thread_block_tile<N, P> tiled_partition(const P&) {
    return thread_block_tile<N, P>();
}

inline thread_group tiled_partition(const thread_block&, unsigned n) { return thread_group(n); }
inline thread_group tiled_partition(const thread_group&, unsigned n) { return thread_group(n); }

template <class G>
inline void sync(const G& g, int line = __builtin_LINE(), const char* file = __builtin_FILE()) {
    g.sync(line, file);
}

template <class T>
struct plus {
    T operator()(const T& a, const T& b) const { return a + b; }
};
template <class T>
struct less {
    T operator()(const T& a, const T& b) const { return b < a ? b : a; }
};
template <class T>
struct greater {
    T operator()(const T& a, const T& b) const { return a < b ? b : a; }
};
template <class T>
struct bit_and {
    T operator()(const T& a, const T& b) const { return a & b; }
};
template <class T>
struct bit_or {
    T operator()(const T& a, const T& b) const { return a | b; }
};
template <class T>
struct bit_xor {
    T operator()(const T& a, const T& b) const { return a ^ b; }
};

namespace details {
// Tiles of more than 32 threads exchange values through a per-block scratch (the blocks of an
// OS thread run one after another; a GPU uses the block_tile_memory for this).
template <class T>
inline T* scratch() {
    static thread_local T buf[1024];
    return buf;
}
template <unsigned N, class P, class T, class Op>
inline T big_scan(const thread_block_tile<N, P>& g, T v, Op op, bool inclusive, bool all, int line, const char* file) {
    T* buf = scratch<T>();
    const unsigned me = linear_tid(), first = me - g.thread_rank();
    const unsigned last = first + N < block_size() ? first + N : block_size();
    buf[me] = v;
    g.sync(line, file);
    const unsigned upto = all ? last : inclusive ? me + 1 : me;
    T acc = upto > first ? buf[first] : T();
    for (unsigned i = first + 1; i < upto; ++i) acc = op(acc, buf[i]);
    g.sync(line, file);
    return acc;
}
}  // namespace details

// Every thread of the tile gets the reduction of the tile's values (a butterfly of shfl_xor).
template <unsigned N, class P, class T, class Op>
inline T reduce(const thread_block_tile<N, P>& g, T v, Op op, int line = __builtin_LINE(),
                const char* file = __builtin_FILE()) {
    if constexpr (N > 32) {
        return details::big_scan(g, v, op, true, true, line, file);
    } else {
        for (unsigned off = N / 2; off > 0; off /= 2) v = op(v, g.shfl_xor(v, off, line, file));
        return v;
    }
}
// Each thread gets the scan of the values of the tile's threads up to it (inclusive_scan) or
// before it (exclusive_scan; the first thread gets T()). Hillis-Steele over shfl_up.
template <unsigned N, class P, class T, class Op>
inline T inclusive_scan(const thread_block_tile<N, P>& g, T v, Op op, int line = __builtin_LINE(),
                        const char* file = __builtin_FILE()) {
    if constexpr (N > 32) {
        return details::big_scan(g, v, op, true, false, line, file);
    } else {
        const unsigned r = g.thread_rank();
        for (unsigned d = 1; d < N; d *= 2) {
            const T o = g.shfl_up(v, d, line, file);
            if (r >= d) v = op(o, v);
        }
        return v;
    }
}
template <unsigned N, class P, class T>
inline T inclusive_scan(const thread_block_tile<N, P>& g, T v, int line = __builtin_LINE(),
                        const char* file = __builtin_FILE()) {
    return inclusive_scan(g, v, plus<T>(), line, file);
}
template <unsigned N, class P, class T, class Op>
inline T exclusive_scan(const thread_block_tile<N, P>& g, T v, Op op, int line = __builtin_LINE(),
                        const char* file = __builtin_FILE()) {
    if constexpr (N > 32) {
        return details::big_scan(g, v, op, false, false, line, file);
    } else {
        const T inc = inclusive_scan(g, v, op, line, file);
        const T prev = g.shfl_up(inc, 1, line, file);
        return g.thread_rank() == 0 ? T() : prev;
    }
}
template <unsigned N, class P, class T>
inline T exclusive_scan(const thread_block_tile<N, P>& g, T v, int line = __builtin_LINE(),
                        const char* file = __builtin_FILE()) {
    return exclusive_scan(g, v, plus<T>(), line, file);
}

}  // namespace cooperative_groups
