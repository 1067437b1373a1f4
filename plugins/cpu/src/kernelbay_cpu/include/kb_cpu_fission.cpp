// kernelbay CPU backend: the kernel-independent part of barrier loop fission (kb_cpu_fission.h),
// compiled once into the runner object (kernelbay_cpu/runners.py).
#include "kb_cpu_fission.h"

#pragma GCC visibility push(hidden)

namespace kb_cpu {
namespace fis {

// The checks of a warp operation whose mask is not the full one of full warps (kb_cpu_fission.h: check).
unsigned check_slow(const Block& b, int op, unsigned mask, int width, int line, const char* file) {
    const bool width_ok = width > 0 && width <= 32 && !(width & (width - 1));
    for (unsigned t = 0; t < b.n; ++t) {
        const unsigned lane = t & 31u, exist = b.exist(t);
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
    return mask;
}

}  // namespace fis
}  // namespace kb_cpu

#pragma GCC visibility pop
