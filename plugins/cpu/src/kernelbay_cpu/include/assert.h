// kernelbay CPU backend: assert() in CUDA device code reports and stops the block, as a GPU does
// (the launch fails with "device assert ... failed"; CUDA's own message names the same), instead
// of abort()ing the process. No include guard: <assert.h> may be included again, after NDEBUG
// changes, and each time ends with the definition that applies.
#include_next <assert.h>
#if defined(KB_CPU_DEVICE_ASSERT) && !defined(NDEBUG)
#undef assert
#define assert(e) (static_cast<bool>(e) ? void(0) : ::kb_cpu::assert_fail(#e, __FILE__, __LINE__, __func__))
#endif
