// kernelbay CPU backend: block barriers and warp operations for kernels run as fibers
// (kb_cpu_fiber.h). A barrier releases the block when its last thread arrives; a warp operation is
// a rendezvous of the lanes its mask names, completed by the last of them to arrive, which
// computes every participant's result. Misuse ends the block with a message naming the line.
//
// Defined in kb_cpu_fiber.cpp (the runner object); kernel code calls these.
#pragma once
#include <cstdint>

#include "kb_cpu_fiber.h"

#pragma GCC visibility push(hidden)

namespace kb_cpu {

// Checked mode (KERNELBAY_CPU_CHECK set, as for the sanitizers): what a GPU runs but CUDA leaves
// undefined -- threads of a block meeting at different __syncthreads, a shuffle reading a lane
// its mask does not name -- ends the block with an error naming the line, as compute-sanitizer
// would. Otherwise such kernels run as GPUs run them. Read when such a case arises, not before.
bool checked();

enum : int { BAR_SYNC, BAR_COUNT, BAR_AND, BAR_OR };

// A block barrier (__syncthreads and its _count/_and/_or kinds) at file:line.
int barrier(int kind, int pred, int line, const char* file);
// The sync of a cooperative_groups tile of n > 32 threads (n a power of two).
void tile_barrier(unsigned n, int line, const char* file);
// A warp operation: a rendezvous of the lanes `mask` names; this lane's result.
std::uint64_t warp_op(int op, unsigned mask, std::uint64_t val, int arg, int width, int line, const char* file);

}  // namespace kb_cpu

#pragma GCC visibility pop
