"""Misuse of barriers and warp operations on the cpu backend: a LaunchError naming the block and the
line, never a hang or a wrong answer; fiber stack overflow is an error, not corruption."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import kernelbay as kb
import numpy as np
import pytest


def _run(cpu, src: str, grid=1, block=64, n=64, shared_mem=0, name="k"):
    k = kb.compile(kb.Source(src, lang="cuda", name=name), cpu)
    y = kb.asarray(np.zeros(n, np.int32), device=cpu)
    k.launch(grid, block, (y,), shared_mem=shared_mem)
    return y.numpy()


EARLY_EXIT = """
__global__ void k(int* y) {
    __shared__ int s[64];
    if (threadIdx.x >= 60 && blockIdx.x == 1) return;
    s[threadIdx.x] = threadIdx.x;
    __syncthreads();
    y[threadIdx.x] = s[63 - threadIdx.x];
}
"""


def test_barrier_not_reached_by_every_thread_is_a_launch_error(cpu):
    with pytest.raises(kb.LaunchError) as info:
        _run(cpu, EARLY_EXIT, grid=2)
    msg = str(info.value)
    assert "kernel 'k'" in msg and "block (1,0,0)" in msg
    assert "60 of 64 threads wait at the barrier at kernel.cu:6" in msg
    assert "thread (60,0,0)" in msg and "exited" in msg


def test_kernel_runs_again_after_a_deadlock(cpu):
    with pytest.raises(kb.LaunchError):
        _run(cpu, EARLY_EXIT, grid=2)
    assert _run(cpu, EARLY_EXIT, grid=1).tolist() == list(range(63, -1, -1))


DIVERGENT_BARRIERS = """
__global__ void k(int* y) {
    if (threadIdx.x < 32) {
        __syncthreads();
    } else {
        __syncthreads();
    }
    y[threadIdx.x] = 1;
}
"""


def test_threads_at_different_barriers_run_as_on_a_gpu(cpu):
    # bar.sync counts arrivals: a GPU releases both halves together, and so does the cpu backend.
    assert _run(cpu, DIVERGENT_BARRIERS).tolist() == [1] * 64


def test_threads_at_different_barriers_is_a_launch_error_when_checked(cpu, monkeypatch):
    monkeypatch.setenv("KERNELBAY_CPU_CHECK", "1")
    with pytest.raises(
        kb.LaunchError,
        match=r"block \(0,0,0\): thread \(32,0,0\) reached the barrier at "
        r"kernel.cu:6 while 32 other threads wait at the barrier at kernel.cu:4",
    ):
        _run(cpu, DIVERGENT_BARRIERS)


def test_mask_naming_an_exited_lane_is_a_launch_error(cpu):
    src = """
__global__ void k(int* y) {
    if (threadIdx.x == 5) return;
    y[threadIdx.x] = __shfl_down_sync(0xffffffffu, (int)threadIdx.x, 1);
}
"""
    with pytest.raises(
        kb.LaunchError,
        match=r"__shfl_down_sync at kernel.cu:4 has mask 0xffffffff naming lane 5 "
        r"\(thread \(5,0,0\)\), which has exited",
    ):
        _run(cpu, src, block=32, n=32)


def test_mask_without_the_calling_lane_is_a_launch_error(cpu):
    src = "__global__ void k(int* y) { y[threadIdx.x] = __ballot_sync(0x1u, 1); }"
    with pytest.raises(
        kb.LaunchError,
        match=r"thread \(1,0,0\) \(lane 1\) calls __ballot_sync.* mask 0x00000001, "
        "which does not name the calling lane",
    ):
        _run(cpu, src, block=32, n=32)


def test_mask_naming_lanes_past_the_block_runs_and_is_a_launch_error_when_checked(cpu, monkeypatch):
    src = "__global__ void k(int* y) { y[threadIdx.x] = __reduce_add_sync(0xffffffffu, 1u); }"
    # A GPU runs a full mask in a partial warp, the missing lanes taking no part; checked mode says.
    assert _run(cpu, src, block=20, n=20).tolist() == [20] * 20
    monkeypatch.setenv("KERNELBAY_CPU_CHECK", "1")
    with pytest.raises(kb.LaunchError, match="warp 0 has only 20 lanes"):
        _run(cpu, src, block=20, n=20)
    src_ok = "__global__ void k(int* y) { y[threadIdx.x] = __reduce_add_sync(__activemask(), 1u); }"
    assert _run(cpu, src_ok, block=20, n=20).tolist() == [20] * 20


def test_warp_operation_some_lanes_never_reach_is_a_launch_error(cpu):
    src = """
__global__ void k(int* y) {
    if (threadIdx.x < 8) y[threadIdx.x] = __shfl_sync(0xffu, 1, 0);  // two groups: legal
    else __syncwarp(0xffffff00u);
    __syncthreads();
    if (threadIdx.x < 16) y[threadIdx.x] += __shfl_sync(0xffffffffu, 2, 0);  // names lanes 16..31
    __syncthreads();
}
"""
    with pytest.raises(
        kb.LaunchError,
        match=r"block \(0,0,0\): 16 of 32 threads wait at the barrier at kernel.cu:7, "
        r"but thread \(0,0,0\) waits in __shfl_sync at kernel.cu:6",
    ):
        _run(cpu, src, block=32, n=32)


def test_exception_in_a_fiber_is_a_launch_error(cpu):
    src = """
#include <stdexcept>
__global__ void k(int* y) {
    __syncthreads();
    if (threadIdx.x == 3) throw std::runtime_error("thread three gave up");
    y[threadIdx.x] = 1;
}
"""
    with pytest.raises(kb.LaunchError, match="thread three gave up"):
        _run(cpu, src, block=8, n=8)


def test_properties_report_the_shared_memory_limit(cpu):
    assert cpu.properties["max_shared_memory_per_block"] == 48 * 1024
    assert cpu.properties["warp_size"] == 32


def test_dynamic_shared_memory_is_what_the_launch_asks_for(cpu):
    src = """
extern __shared__ int dyn[];
__global__ void k(int* y) {
    int n = blockDim.x * 96;  // the whole 96 ints per thread the launch gave
    for (int i = threadIdx.x; i < n; i += blockDim.x) dyn[i] = i;
    __syncthreads();
    int s = 0;
    for (int i = threadIdx.x; i < n; i += blockDim.x) s += dyn[n - 1 - i];
    y[blockIdx.x * blockDim.x + threadIdx.x] = s;
}
"""
    block = 128
    got = _run(cpu, src, grid=2, block=block, n=2 * block, shared_mem=block * 96 * 4)
    n = block * 96
    want = [sum(n - 1 - i for i in range(t, n, block)) for t in range(block)] * 2
    assert got.tolist() == want
    with pytest.raises(kb.InvalidArgumentError, match="dynamic shared memory"):
        _run(cpu, src, grid=2, block=block, n=2 * block, shared_mem=48 * 1024 + 4)


OVERFLOW = r"""
import numpy as np, kernelbay as kb
src = '''
__device__ int deep(int d, int* y) {
    volatile char pad[4096];
    pad[d % 4096] = (char)d;
    return d == 0 ? pad[0] : deep(d - 1, y) + pad[d % 4096] % 2;
}
__global__ void k(int* y, int d) {
    __syncthreads();
    volatile int keep = 0;  // keeps it on fibers: a barrier alone is a loop boundary (fission.py)
    (void)keep;
    y[threadIdx.x] = deep(d, y);
}
'''
k = kb.compile(kb.Source(src, lang="cuda", name="k"), "cpu")
y = kb.asarray(np.zeros(4, np.int32), device="cpu")
k.launch(1, 4, (y, np.int32(4)))
print("shallow ok")
try:
    k.launch(1, 4, (y, np.int32(100)))
except kb.LaunchError as e:
    print("ERR", e)
k.launch(1, 4, (y, np.int32(4)))
print("after ok")
"""


@pytest.mark.parametrize("stack", ["64k"])
def test_fiber_stack_overflow_is_a_launch_error(stack, tmp_path):
    # In a subprocess: a SIGSEGV handler is involved, and the stack size is read at module load.
    env = {"KERNELBAY_CPU_FIBER_STACK": stack, "KERNELBAY_CACHE_DIR": str(tmp_path)}
    import os

    r = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(OVERFLOW)],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        timeout=600,
    )
    assert r.returncode == 0, r.stderr
    assert "shallow ok" in r.stdout and "after ok" in r.stdout
    assert "overflowed its fiber stack of 65536 bytes" in r.stdout
    assert "KERNELBAY_CPU_FIBER_STACK" in r.stdout


HANDLER_HOME = r"""
import ctypes, gc, numpy as np, kernelbay as kb

class Sigaction(ctypes.Structure):  # glibc's struct sigaction on Linux (handler first)
    _fields_ = [("handler", ctypes.c_void_p), ("mask", ctypes.c_ulong * 16), ("flags", ctypes.c_int),
                ("restorer", ctypes.c_void_p)]

libc = ctypes.CDLL(None)

def handler_file():
    sa = Sigaction()
    assert libc.sigaction(11, None, ctypes.byref(sa)) == 0
    for line in open("/proc/self/maps"):
        lo, hi = (int(x, 16) for x in line.split()[0].split("-"))
        if lo <= (sa.handler or 0) < hi:
            return line.split()[4]  # the inode of the file the handler's code is in
    return None

y = kb.asarray(np.zeros(4, np.int32), device="cpu")
first = kb.compile(kb.Source('__global__ void a(int* y) { __syncthreads(); __syncwarp(0xfu); y[threadIdx.x] = 1; }',
                             lang="cuda", name="a"), "cpu")
home = handler_file()  # the cpu runtime's, loaded with the first kernel
first.launch(1, 4, (y,))  # a block with fibers
print("same" if handler_file() == home else "moved")
first.close()  # its module is unloaded (dlclose)
del first
gc.collect()
k = kb.compile(kb.Source(SRC, lang="cuda", name="k"), "cpu")
try:  # an overflow in another kernel is still the LaunchError
    k.launch(1, 4, (y, np.int32(100)))
except kb.LaunchError as e:
    print("ERR", e)
k.launch(1, 4, (y, np.int32(4)))
print("after ok")
"""


def test_the_guard_page_handler_is_not_in_a_kernel_module(tmp_path):
    # A SIGSEGV handler installed by a kernel module dangles once that module is unloaded: the
    # next fault (a fiber stack overflow in another kernel) jumped into unmapped or foreign code,
    # and the process died ("overflowed sigaltstack") instead of raising. The handler lives in
    # the process-wide runtime, which is never unloaded.
    import os

    src = OVERFLOW.split("src = '''")[1].split("'''")[0]
    code = "SRC = " + repr(src) + "\n" + textwrap.dedent(HANDLER_HOME)
    env = {"KERNELBAY_CPU_FIBER_STACK": "64k", "KERNELBAY_CACHE_DIR": str(tmp_path)}
    r = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env={**os.environ, **env}, timeout=600
    )
    assert r.returncode == 0, (r.returncode, r.stderr[-2000:])
    assert "same" in r.stdout.split()  # a fiber launch did not move SIGSEGV into its module
    assert "overflowed its fiber stack of 65536 bytes" in r.stdout and "after ok" in r.stdout


def test_bad_fiber_stack_setting(monkeypatch):
    from kernelbay_cpu import _driver

    monkeypatch.setenv("KERNELBAY_CPU_FIBER_STACK", "1M")
    assert _driver.fiber_stack() == 1024 * 1024
    monkeypatch.setenv("KERNELBAY_CPU_FIBER_STACK", "lots")
    with pytest.raises(kb.InvalidArgumentError, match="KERNELBAY_CPU_FIBER_STACK"):
        _driver.fiber_stack()
