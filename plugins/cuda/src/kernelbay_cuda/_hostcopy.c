/* kernelbay-cuda's native helpers, part six: host memory for the staged copies (_stage.c).
 *
 * host_copy: memcpy, with streaming stores where asked and the CPU has them (SSE2);
 * host_resident: whether every page of a range is in memory (mincore);
 * host_fault_in: every page of a range written once, its value kept, so that the kernel makes
 * (and zeroes) them now, on the calling thread.
 */
#include <string.h>
#include <stdint.h>
#include <unistd.h>
#include <sys/mman.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

/* memcpy with non-temporal (streaming) stores where the CPU has them: the destination is not
 * read first (no read-for-ownership), which a pinned staging buffer about to be read by the DMA
 * engine, or a large destination about to leave the cache anyway, does not need. */
static void host_copy(void *dst, const void *src, size_t n, int nt) {
#if defined(__SSE2__)
    if (nt && n >= 4096) {
        char *d = (char *)dst;
        const char *s = (const char *)src;
        size_t head = (16 - ((uintptr_t)d & 15)) & 15;
        memcpy(d, s, head);
        d += head, s += head, n -= head;
        for (; n >= 64; d += 64, s += 64, n -= 64) {
            __m128i a = _mm_loadu_si128((const __m128i *)s), b = _mm_loadu_si128((const __m128i *)(s + 16));
            __m128i c = _mm_loadu_si128((const __m128i *)(s + 32)), e = _mm_loadu_si128((const __m128i *)(s + 48));
            _mm_stream_si128((__m128i *)d, a);
            _mm_stream_si128((__m128i *)(d + 16), b);
            _mm_stream_si128((__m128i *)(d + 32), c);
            _mm_stream_si128((__m128i *)(d + 48), e);
        }
        memcpy(d, s, n);
        _mm_sfence(); /* the stores are visible before the DMA that reads them is queued */
        return;
    }
#else
    (void)nt;
#endif
    memcpy(dst, src, n);
}

/* Whether every page of [p, p + n) is resident (mincore; 1 where it cannot tell). */
static int host_resident(const char *p, long long n) {
    long pg = sysconf(_SC_PAGESIZE);
    if (pg <= 0) return 1;
    uintptr_t a = (uintptr_t)p & ~(uintptr_t)(pg - 1), e = (uintptr_t)p + (uintptr_t)n;
    size_t pages = (e - a + (uintptr_t)pg - 1) / (uintptr_t)pg;
    unsigned char vec[4096];
    for (size_t done = 0; done < pages;) {
        size_t k = pages - done < sizeof vec ? pages - done : sizeof vec;
        if (mincore((void *)(a + done * (uintptr_t)pg), k * (size_t)pg, vec) != 0) return 1;
        for (size_t i = 0; i < k; i++)
            if (!(vec[i] & 1)) return 0;
        done += k;
    }
    return 1;
}

/* One byte a page of [lo, hi) written with its own value (an atomic OR of 0: a write fault, the
 * bytes unchanged even if another thread writes them at the same time). */
static void host_fault_in(uintptr_t lo, uintptr_t hi) {
    for (uintptr_t q = lo; q < hi; q = (q | 4095) + 1) __atomic_fetch_or((unsigned char *)q, 0, __ATOMIC_RELAXED);
}
