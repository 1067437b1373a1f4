// kernelbay CPU backend: the prelude of `c++` kernels. A c++ kernel is a function
// `void name(params...)` called once per block; it reads the launch geometry from
// kb::blockIdx(), kb::blockDim() and kb::gridDim() and runs the block's threads itself.
#pragma once
#include "kb_cpu_launch.h"

namespace kb {
using kb_cpu::dim3;
using kb_cpu::uint3;
inline const uint3& blockIdx() { return ::kb_blockIdx; }
inline const dim3& blockDim() { return ::kb_blockDim; }
inline const dim3& gridDim() { return ::kb_gridDim; }
}  // namespace kb
