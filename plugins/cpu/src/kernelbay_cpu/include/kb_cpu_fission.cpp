// kernelbay CPU backend: the kernel-independent part of barrier loop fission (kb_cpu_fission.h),
// compiled once into the runner object (kernelbay_cpu/runners.py).
#include "kb_cpu_fission.h"

#pragma GCC visibility push(hidden)

namespace kb_cpu {
namespace fis {

// The checks of a warp operation whose mask is not the full one of full warps (kb_cpu_fission.h: check).
unsigned check_slow(const Block& b, int op, unsigned mask, int width, int line, const char* file) {
    const bool width_ok = width > 0 && width <= 32 && !(width & (width - 1));
    for (unsigned t = (unsigned)b.first; t < (unsigned)b.last; ++t) {  // (the warps that reach it: only())
        const unsigned lane = t & 31u, exist = b.exist(t);
        if (b.done && b.done[t]) continue;  // a returned thread does not call it
        if (!(mask >> lane & 1)) {
            const uint3 me = b.tid(t);
            fail("block (%u,%u,%u): thread (%u,%u,%u) (lane %d) calls %s at %s:%d with mask 0x%08x, which does not "
                 "name the calling lane",
                 b.idx.x, b.idx.y, b.idx.z, me.x, me.y, me.z, (int)lane, op_name(op), base_name(file), line, mask);
        }
        if ((mask & ~exist) && checked())
            fail("block (%u,%u,%u): %s at %s:%d has mask 0x%08x, but warp %d has only %d lanes (blockDim has %d "
                 "threads): lanes past the block do not exist (reported because KERNELBAY_CPU_CHECK is set)",
                 b.idx.x, b.idx.y, b.idx.z, op_name(op), base_name(file), line, mask, (int)(t >> 5),
                 (int)b.lanes(t), (int)b.n);
        if (!width_ok)
            fail("%s at %s:%d: width %d must be a power of two from 1 to 32", op_name(op), base_name(file), line,
                 width);
    }
    if (b.done && !b.whole) exited_slow(b, op, mask, 0u, line, file);
    return mask;
}

// The lanes thread t's group names: `mask`'s (clipped to the lanes that exist), or its tile's of `tile` threads.
static unsigned group_of(const Block& b, unsigned t, unsigned mask, unsigned tile) {
    if (!tile) return mask & b.exist(t);
    const unsigned first = (t & 31u) & ~(tile - 1);
    return (tile >= 32 ? ~0u : ((1u << tile) - 1) << first) & b.exist(t);
}

void exited_slow(const Block& b, int op, unsigned mask, unsigned tile, int line, const char* file) {
    const bool* d = b.done;
    for (unsigned t = 0; t < b.n; ++t) {
        if (d[t]) continue;
        const unsigned m = group_of(b, t, mask, tile), base = t & ~31u;
        for (unsigned l = 0; base + l < t; ++l)
            if ((m >> l & 1) && d[base + l]) {
                const uint3 o = b.tid(base + l);
                fail("block (%u,%u,%u): %s at %s:%d has mask 0x%08x naming lane %d (thread (%u,%u,%u)), which has "
                     "exited; a warp operation's mask may name only lanes that reach it",
                     b.idx.x, b.idx.y, b.idx.z, op_name(op), base_name(file), line, m, (int)l, o.x, o.y, o.z);
            }
    }
    for (unsigned t = 0; t < b.n; ++t) {
        if (d[t]) continue;
        const unsigned m = group_of(b, t, mask, tile), base = t & ~31u;
        for (unsigned l = 0; l < 32; ++l)
            if ((m >> l & 1) && d[base + l]) {
                const uint3 me = b.tid(t);
                fail("block (%u,%u,%u): thread (%u,%u,%u) waits in %s at %s:%d with mask 0x%08x, but not every lane "
                     "the mask names reaches it (a GPU would hang or give wrong results)",
                     b.idx.x, b.idx.y, b.idx.z, me.x, me.y, me.z, op_name(op), base_name(file), line, m);
            }
    }
}

void barrier_slow(const Block& b, int line, const char* file) {
    unsigned waiting = 0, first_done = b.n;
    for (unsigned t = 0; t < b.n; ++t) {
        if (!b.done[t]) ++waiting;
        else if (first_done == b.n) first_done = t;
    }
    if (waiting == 0 || first_done == b.n) return;  // every thread returned, or none
    const uint3 o = b.tid(first_done);
    fail("block (%u,%u,%u): %d of %d threads wait at the barrier at %s:%d, but thread (%u,%u,%u) exited without "
         "reaching it; every thread of a block must reach each __syncthreads (a GPU would hang)",
         b.idx.x, b.idx.y, b.idx.z, (int)waiting, (int)b.n, base_name(file), line, o.x, o.y, o.z);
}

}  // namespace fis
}  // namespace kb_cpu

#pragma GCC visibility pop
