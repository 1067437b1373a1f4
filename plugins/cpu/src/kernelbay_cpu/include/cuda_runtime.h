// kernelbay CPU backend: device files often include the CUDA runtime's header for its types. On
// the cpu backend it brings the prelude, which has the runtime's plain types and error queries
// (as nvcc's implicit include of this header gives them to every .cu file), and the half types,
// so such an include never stops a compile. The rest of the host API (cudaMalloc, ...) has no cpu
// meaning and is not declared (kernelbay never runs host code of a kernel file).
#pragma once
#include "kb_cpu_cuda.h"
// As with nvcc, the runtime header brings the half types (llm.c's kernels use __nv_bfloat16
// after including only cuda_runtime.h).
#include "cuda_bf16.h"
#include "library_types.h"
