"""Device-side stops without C++ exceptions (issue #25): a CUDA source that does not throw or
catch is built with -fno-exceptions, so its module links neither libstdc++ nor libgcc_s, and its
__trap, __brkpt, failed device asserts and the misuses the fission and fiber runners find end the
block by a jump instead of a throw. Each reports exactly what the same kernel built with
exceptions (``-fexceptions``: the runners' try/catch, as before) reports, on the loop path, the
per-thread runner, barrier loop fission and fibers. A source that throws keeps its exceptions."""

from __future__ import annotations

import kernelbay as kb
import numpy as np
import pytest
from kernelbay_cpu import _loader, analysis, flags

# block 1, thread 5 (i == 37 with 32-thread blocks) stops, on each runner
STOPS = r"""
#include <cassert>
__global__ void trap_loop(int* y) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i == 37) __trap();
    y[i] = 1;
}
__global__ void brkpt_loop(int* y) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i == 37) __brkpt();
    y[i] = 1;
}
__global__ void assert_loop(int* y) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    assert(i != 37);
    y[i] = 1;
}
__device__ int my_index() { return blockIdx.x * blockDim.x + threadIdx.x; }
__device__ void check(int i) { assert(i != 37); }
__global__ void assert_threads(int* y) {
    check(my_index());
    y[my_index()] = 1;
}
__global__ void trap_threads(int* y) {
    if (my_index() == 37) __trap();
    y[my_index()] = 1;
}
__global__ void trap_fibers(int* y) {
    volatile int keep = 0; (void)keep;  // keeps it on fibers
    int v = __shfl_sync(0xffffffffu, (int)threadIdx.x, 0);
    if (blockIdx.x * blockDim.x + threadIdx.x == 37) __trap();
    y[blockIdx.x * blockDim.x + threadIdx.x] = v;
}
__global__ void assert_fibers(int* y) {
    volatile int keep = 0; (void)keep;
    int v = __shfl_sync(0xffffffffu, (int)threadIdx.x, 0);
    assert(blockIdx.x * blockDim.x + threadIdx.x != 37);
    y[blockIdx.x * blockDim.x + threadIdx.x] = v;
}
// blockDim (48, 2): warp 1 holds x 32..47 of row 0 and x 0..15 of row 1, which disagree on the test
__global__ void fission_misuse(int* y) {
    __shared__ int s[96];
    int t = threadIdx.y * blockDim.x + threadIdx.x;
    s[t] = t;
    __syncthreads();
    int v = s[95 - t];
    if (threadIdx.x < 32) {
        v += __shfl_xor_sync(0xffffffffu, v, 1);
    }
    y[t] = v;
}
"""
RUNNERS = {
    "trap_loop": "run_blocks",
    "brkpt_loop": "run_blocks",
    "assert_loop": "run_blocks",
    "assert_threads": "run_threads",
    "trap_threads": "run_threads",
    "trap_fibers": "run_fibers",
    "assert_fibers": "run_fibers",
    "fission_misuse": "run_blocks",
}
EXPECT = {
    "trap_loop": "the kernel called __trap()",
    "brkpt_loop": "the kernel called __brkpt()",
    "assert_loop": "device assert `i != 37` failed at kernel.cu:15 (block (1,0,0), thread (5,0,0))",
    "assert_threads": "device assert `i != 37` failed at kernel.cu:19 in check (block (1,0,0), thread (5,0,0))",
    "trap_threads": "the kernel called __trap()",
    "trap_fibers": "the kernel called __trap()",
    "assert_fibers": "failed at kernel.cu:37 in assert_fibers (block (1,0,0), thread (5,0,0))",
    "fission_misuse": "the lanes of warp 1 disagree on the test of threadIdx.x against 32",
}

THROWS = r"""
#include <stdexcept>
__device__ void bad(int i) {
    if (i == 37) throw std::runtime_error("value 37 is out of range");
    if (i == 38) throw 38;
}
__global__ void throws_loop(int* y, int from) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= from) bad(i);
    y[i] = 1;
}
__global__ void throws_fibers(int* y, int from) {
    volatile int keep = 0; (void)keep;
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int v = __shfl_sync(0xffffffffu, i, 0);
    if (i >= from) bad(i);
    y[i] = v;
}
__global__ void traps(int* y) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i == 37) __trap();
    y[i] = 1;
}
"""


@pytest.fixture
def images(fresh_cache, monkeypatch) -> list[bytes]:
    """The kernel modules loaded from now on (a fresh cache: each is compiled)."""
    got: list[bytes] = []
    load = _loader.load_library

    def keep(image: bytes, kernel: bool = True):
        if kernel:
            got.append(image)
        return load(image, kernel)

    monkeypatch.setattr(_loader, "load_library", keep)
    return got


def _links_libstdcxx(images: list[bytes]) -> bool:
    """Whether each module (one per entry here) has C++ exceptions: exception tables
    (``.gcc_except_table``) and the C++ runtime, NEEDed (libstdc++) or linked in by a toolchain
    that links it statically (its personality routine is then defined inside: a GPU host's g++
    wrapper does that)."""
    return bool(images) and all(
        b".gcc_except_table" in i and (b"libstdc++.so" in i or b"__gxx_personality_v0" in i) for i in images
    )


def _links_neither(images: list[bytes]) -> bool:
    """Whether no module has exception tables or NEEDs libstdc++ or libgcc_s."""
    return bool(images) and not any(
        b"libstdc++.so" in i or b"libgcc_s.so" in i or b".gcc_except_table" in i for i in images
    )


def _message(k: kb.Kernel, cpu: kb.Device, block=32, *args) -> str:
    y = kb.zeros(256, "int32", device=cpu)
    with pytest.raises(kb.LaunchError) as e:
        k.launch(4 if block == 32 else 1, block, (y, *args))
    return str(e.value)


def test_a_source_without_exceptions_is_built_without_them():
    src = kb.Source(STOPS, "cuda", name="trap_loop")
    assert not analysis.uses_exceptions(src)
    assert analysis.uses_exceptions(kb.Source(THROWS, "cuda", name="traps"))
    # in a comment or a string, or a longer word, they do not count
    text = '// try it\n__global__ void k(int* y) { const char* s = "throw"; int retry = 1; y[0] = retry + s[0]; }'
    assert not analysis.uses_exceptions(kb.Source(text, "cuda", name="k"))
    assert analysis.uses_exceptions(
        kb.Source(text, "cuda", name="k", headers={"h.h": "void f() { try {} catch (...) {} }"})
    )
    from kernelbay_cpu import _driver

    tc = _driver.toolchain()
    assert "-fno-exceptions" in flags.flags([], tc, "cuda")
    assert "-Wl,--as-needed" in flags.libraries(flags.flags([], tc, "cuda"))
    assert "-fno-exceptions" not in flags.flags([], tc, "cuda", exceptions=True)
    assert "-fno-exceptions" not in flags.flags(["-fexceptions"], tc, "cuda")
    assert "-fno-exceptions" not in flags.flags([], tc, "c++")  # c++ sources keep g++'s default


def test_each_stop_reports_as_it_does_with_exceptions(cpu, images):
    plan = analysis.plan_cuda(kb.Source(STOPS, "cuda", name="trap_loop"), list(RUNNERS)).runners
    assert plan == RUNNERS
    without = {n: kb.compile(kb.Source(STOPS, "cuda", name=n), cpu) for n in RUNNERS}
    assert _links_neither(images)
    images.clear()
    with_ = {n: kb.compile(kb.Source(STOPS, "cuda", name=n, options=["-fexceptions"]), cpu) for n in RUNNERS}
    assert _links_libstdcxx(images)
    for n in RUNNERS:
        block = (48, 2) if n == "fission_misuse" else 32
        for _ in range(3):  # again and again: each stop leaves the thread ready for the next launch
            a, b = _message(without[n], cpu, block), _message(with_[n], cpu, block)
            assert a == b, n
            assert EXPECT[n] in a, (n, a)
    # the module runs on after its stops
    y = kb.zeros(128, "int32", device=cpu)
    without["trap_loop"].launch(1, 32, (y,))
    assert y.numpy()[:32].tolist() == [1] * 32


def test_a_kernel_that_throws_still_reports_its_exception(cpu, images):
    ks = {n: kb.compile(kb.Source(THROWS, "cuda", name=n), cpu) for n in ("throws_loop", "throws_fibers", "traps")}
    assert _links_libstdcxx(images)
    assert ks["throws_fibers"].handle.fibers and not ks["throws_loop"].handle.fibers
    for n in ("throws_loop", "throws_fibers"):
        assert "value 37 is out of range" in _message(ks[n], cpu, 32, np.int32(37))
        assert "a kernel threw a C++ exception that is not a std::exception" in _message(ks[n], cpu, 32, np.int32(38))
    assert "the kernel called __trap()" in _message(ks["traps"], cpu)


def test_a_header_from_elsewhere_that_throws_gets_exceptions(cpu, images, tmp_path):
    # uses_exceptions reads only the Source: the build that g++ refuses runs again with exceptions
    (tmp_path / "checks.h").write_text(
        '#include <stdexcept>\ninline void check(int i) { if (i == 37) throw std::runtime_error("no 37"); }\n'
    )
    text = '#include "checks.h"\n__global__ void k(int* y) { int i = blockIdx.x * blockDim.x + threadIdx.x; check(i); y[i] = 1; }'
    k = kb.compile(kb.Source(text, "cuda", name="k", options=[f"-I{tmp_path}"]), cpu)
    assert _links_libstdcxx(images)
    assert "no 37" in _message(k, cpu)
