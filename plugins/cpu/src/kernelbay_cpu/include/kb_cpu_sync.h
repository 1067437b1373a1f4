// kernelbay CPU backend: block barriers and warp operations for kernels run as fibers
// (kb_cpu_fiber.h). A barrier releases the block when its last thread arrives; a warp operation is
// a rendezvous of the lanes its mask names, completed by the last of them to arrive, which
// computes every participant's result. Misuse ends the block with a message naming the line.
#pragma once
#include <cstring>
#include <strings.h>

#include "kb_cpu_fiber.h"

#pragma GCC visibility push(hidden)

namespace kb_cpu {

// Checked mode (KERNELBAY_CPU_CHECK set, as for the sanitizers): what a GPU runs but CUDA leaves
// undefined -- threads of a block meeting at different __syncthreads, a shuffle reading a lane
// its mask does not name -- ends the block with an error naming the line, as compute-sanitizer
// would. Otherwise such kernels run as GPUs run them. Read when such a case arises, not before.
inline bool checked() {
    const char* e = std::getenv("KERNELBAY_CPU_CHECK");
    if (e == nullptr || *e == 0) return false;
    return std::strcmp(e, "0") != 0 && strcasecmp(e, "off") != 0 && strcasecmp(e, "no") != 0 &&
           strcasecmp(e, "false") != 0;
}

// --- block barrier ----------------------------------------------------------------------------

enum : int { BAR_SYNC, BAR_COUNT, BAR_AND, BAR_OR };

inline int barrier(int kind, int pred, int line, const char* file) {
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

inline void tile_barrier(unsigned n, int line, const char* file) {
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
inline void release_active(Sched& s, int w) {
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


inline void warp_complete(Sched& s, int base, unsigned mask, int op) {
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

inline std::uint64_t warp_op(int op, unsigned mask, std::uint64_t val, int arg, int width, int line,
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
