// kernelbay CPU backend: see cuda_runtime.h.
#pragma once
#include "kb_cpu_cuda.h"
