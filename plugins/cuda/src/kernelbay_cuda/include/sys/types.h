// kernelbay shim for NVRTC (kernelbay_cuda/include; see plugins/cuda/README.md, "Headers"): the short unsigned names
// glibc's <sys/types.h> defines (and <stdlib.h> brings), which device code written under nvcc on Linux uses.
#ifndef KERNELBAY_SHIM_SYS_TYPES_H
#define KERNELBAY_SHIM_SYS_TYPES_H
typedef unsigned int uint;
typedef unsigned short ushort;
typedef unsigned long ulong;
#endif
