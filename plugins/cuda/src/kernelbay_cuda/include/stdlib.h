// kernelbay shim for NVRTC (kernelbay_cuda/include; see plugins/cuda/README.md, "Headers"): malloc/free are NVRTC's own (device
// heap). NVRTC compiles no host functions, so exit, getenv and the like are not declared.
#ifndef KERNELBAY_SHIM_STDLIB_H
#define KERNELBAY_SHIM_STDLIB_H
#include <sys/types.h>
#define EXIT_SUCCESS 0
#define EXIT_FAILURE 1
#endif
