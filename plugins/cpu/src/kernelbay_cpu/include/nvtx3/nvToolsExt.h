// kernelbay CPU backend: NVTX ranges (profiler annotations in host helpers of device files) do
// nothing on the cpu backend; kernelbay's own trace (KERNELBAY_TRACE) records launches.
#pragma once
inline int nvtxRangePushA(const char*) { return 0; }
inline int nvtxRangePush(const char*) { return 0; }
inline int nvtxRangePop() { return 0; }
inline void nvtxMarkA(const char*) {}
