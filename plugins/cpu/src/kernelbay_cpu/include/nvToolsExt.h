// kernelbay CPU backend: see nvtx3/nvToolsExt.h.
#pragma once
#include "nvtx3/nvToolsExt.h"
