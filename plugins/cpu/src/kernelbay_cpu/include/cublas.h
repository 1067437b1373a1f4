// kernelbay CPU backend: see cublas_v2.h.
#pragma once
#include "cublas_v2.h"
