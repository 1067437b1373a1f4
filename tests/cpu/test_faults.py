"""A kernel that faults is a LaunchError naming the kernel, block and thread, never a dead process
(issue #26): out-of-bounds (a guard
page after each buffer of a page or more), far out of bounds, a null pointer, integer division by
zero, a device assert and a stack overflow, on every runner (the loop path, barrier loop fission,
fibers) and in isolated mode; the process then runs other kernels correctly, many times over."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import kernelbay as kb
import numpy as np
import pytest
from kernelbay_cpu import analysis

FAULTS = r"""
extern "C" __global__ void oob(float* x, int n, long long far) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n + 64) x[i + far] = 1.0f;
}
extern "C" __global__ void null_write(float* x) {
    float* p = nullptr;
    if (threadIdx.x == 3) p[threadIdx.x] = 1.0f;
    x[threadIdx.x] = 0;
}
extern "C" __global__ void divide(int* x, int d) { x[threadIdx.x] = 100 / (d - (int)threadIdx.x); }
extern "C" __global__ void checked(int* x) {
    assert(threadIdx.x != 5);
    x[threadIdx.x] = 1;
}
__device__ int deep(int n) {
    volatile int pad[64];
    pad[n % 64] = n;
    return n <= 0 ? 0 : deep(n - 1) + pad[n % 64];
}
extern "C" __global__ void recurse(int* x, int n) { x[threadIdx.x] = deep(n); }
extern "C" __global__ void fine(float* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = 2.0f * i;
}
"""
NAMES = ["oob", "null_write", "divide", "checked", "recurse", "fine"]

# Barrier loop fission: a tree reduction whose last store goes `far` elements out.
FISSION = r"""
__global__ void k(const float* x, float* partial, int n, long long far) {
    __shared__ float s[256];
    const int t = threadIdx.x;
    int i = blockIdx.x * blockDim.x + t;
    s[t] = i < n ? x[i] : 0.0f;
    __syncthreads();
    for (unsigned w = blockDim.x / 2; w > 0; w >>= 1) {
        if (t < w) s[t] += s[t + w];
        __syncthreads();
    }
    if (t == 0) partial[blockIdx.x + far] = s[0];
}
"""

# Fibers (a warp shuffle after a barrier); thread 7 of block 1 dereferences a null pointer.
FIBERS = r"""
__global__ void k(int* y, int bad) {
    volatile int keep = 0; (void)keep;  // keeps it on fibers (fission.py takes the rest)
    int v = __shfl_sync(0xffffffffu, 1, 0);
    if (bad && blockIdx.x == 1 && threadIdx.x == 7) { int* p = nullptr; p[2] = v; }
    y[blockIdx.x * blockDim.x + threadIdx.x] = v;
}
"""

N = 4096
FAR = 1 << 45  # elements of 4 bytes: 2^47 bytes past the buffer


@pytest.fixture
def kernels(cpu):
    return {n: kb.compile(kb.Source(FAULTS, "cuda", name=n), cpu) for n in NAMES}  # one module, cached


def _fine_still_works(kernels, cpu) -> None:
    out = kb.zeros(N, "float32", device=cpu)
    kernels["fine"].launch(N // 256, 256, (out, np.int32(N)))
    np.testing.assert_array_equal(out.numpy(), 2.0 * np.arange(N, dtype=np.float32))


def test_a_small_overrun_hits_the_guard_page_not_the_next_buffer(kernels, cpu):
    a = kb.zeros(N, "float32", device=cpu)
    after = kb.zeros(N, "float32", device=cpu)  # allocated right after: must stay untouched
    with pytest.raises(kb.LaunchError) as e:
        kernels["oob"].launch(N // 256 + 1, 256, (a, np.int32(N), np.int64(0)))
    msg = str(e.value)
    assert "kernel 'oob' faulted" in msg and "block (16,0,0), thread (0,0,0)" in msg
    assert f"0 bytes past the end of a {4 * N}-byte kernelbay buffer" in msg
    assert not after.numpy().any()
    # The other blocks wrote 1 or nothing (with many cores, the faulting block may run before them
    # and the launch stops: what a faulting launch wrote is undefined, never another buffer's).
    assert set(np.unique(a.numpy()).tolist()) <= {0.0, 1.0}
    _fine_still_works(kernels, cpu)


@pytest.mark.parametrize(
    ("name", "grid", "block", "args", "expect"),
    [
        # far: 2^47 bytes on, an address no process maps (non-canonical on x86-64, past a 47-bit user
        # space elsewhere), so it faults wherever the buffer lies: a mapped one would be written
        ("oob", 1, 64, lambda a, i: (a, np.int32(0), np.int64(FAR)), "invalid memory access (SIGSEGV"),
        (
            "null_write",
            1,
            32,
            lambda a, i: (a,),
            "thread (3,0,0): invalid memory access (SIGSEGV: unmapped memory) "
            "at address 0xc (a null pointer plus 12 bytes)",
        ),
        ("divide", 1, 32, lambda a, i: (i, np.int32(7)), "thread (7,0,0): integer division by zero (SIGFPE)"),
        ("recurse", 1, 1, lambda a, i: (i, np.int32(10_000_000)), "thread (0,0,0): stack overflow"),
        (
            "checked",
            1,
            32,
            lambda a, i: (i,),
            "device assert `threadIdx.x != 5` failed at kernel.cu:13 (block (0,0,0), thread (5,0,0))",
        ),
    ],
)
def test_each_fault_is_a_launch_error_and_the_process_goes_on(kernels, cpu, name, grid, block, args, expect):
    a = kb.zeros(N, "float32", device=cpu)
    ints = kb.zeros(64, "int32", device=cpu)
    with pytest.raises(kb.LaunchError, match=f"kernel '{name}'") as e:
        kernels[name].launch(grid, block, args(a, ints))
    assert expect in str(e.value)
    assert "block (0,0,0)" in str(e.value)
    _fine_still_works(kernels, cpu)


def test_fifty_faults_in_a_row_leak_nothing(kernels, cpu):
    a = kb.zeros(64, "float32", device=cpu)

    def counts() -> tuple[int, int, int]:
        fds = len(os.listdir("/proc/self/fd"))
        with open("/proc/self/status") as f:
            threads = next(int(line.split()[1]) for line in f if line.startswith("Threads:"))
        with open("/proc/self/maps") as f:
            maps = sum(1 for _ in f)
        return fds, threads, maps

    big = kb.zeros(1 << 20, "float32", device=cpu)
    for _ in range(3):  # warm: OpenMP's pool (each of its threads sets up its signal stack once), the modules
        kernels["fine"].launch((1 << 20) // 256, 256, (big, np.int32(1 << 20)))
        with pytest.raises(kb.LaunchError):
            kernels["null_write"].launch(2, 32, (a,))
    before = counts()
    for _ in range(50):
        with pytest.raises(kb.LaunchError):
            kernels["null_write"].launch(2, 32, (a,))
        with pytest.raises(kb.LaunchError):
            kernels["divide"].launch(1, 32, (kb.zeros(32, "int32", device=cpu), np.int32(3)))
    after = counts()
    assert after[0] == before[0] and after[1] == before[1]
    # maps: flat, but for malloc's per-thread arenas (two maps each, made once per thread: a thread
    # that faults for the first time allocates while reporting) and a little heap
    assert after[2] <= before[2] + 2 * int(cpu.properties["threads"]) + 4
    _fine_still_works(kernels, cpu)


def test_a_fault_under_barrier_loop_fission(cpu):
    assert analysis.plan_cuda(kb.Source(FISSION, "cuda", name="k"), ["k"]).runners["k"] == "run_blocks"
    k = kb.compile(kb.Source(FISSION, "cuda", name="k"), cpu)
    assert not k.handle.fibers
    x = kb.asarray(np.ones(1024, np.float32), device=cpu)
    p = kb.zeros(4, "float32", device=cpu)
    with pytest.raises(kb.LaunchError, match=r"faulted on cpu: block \(\d,0,0\), thread \(0,0,0\)"):
        k.launch(4, 256, (x, p, np.int32(1024), np.int64(FAR)))
    k.launch(4, 256, (x, p, np.int32(1024), np.int64(0)))
    np.testing.assert_array_equal(p.numpy(), np.full(4, 256.0, np.float32))


def test_a_fault_on_a_fiber_names_the_thread(cpu):
    k = kb.compile(kb.Source(FIBERS, "cuda", name="k"), cpu)
    assert k.handle.fibers
    y = kb.zeros(4 * 128, "int32", device=cpu)
    with pytest.raises(kb.LaunchError) as e:
        k.launch(4, 128, (y, np.int32(1)))
    assert "block (1,0,0), thread (7,0,0)" in str(e.value) and "null pointer" in str(e.value)
    for _ in range(3):  # fibers and their stacks work on after the jump
        y = kb.zeros(4 * 128, "int32", device=cpu)
        k.launch(4, 128, (y, np.int32(0)))
        assert y.numpy().sum() == 4 * 128


def _child(code: str, **env: str) -> subprocess.CompletedProcess:
    full = {**os.environ, **env}
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=600, env=full
    )


def test_isolated_mode_reports_faults_too():
    r = _child(
        f"""
        import kernelbay as kb, numpy as np
        src = {FAULTS!r}
        dev = kb.device("cpu")
        k = kb.compile(kb.Source(src, "cuda", name="divide"), dev)
        ints = kb.zeros(64, "int32", device=dev)
        try:
            k.launch(1, 32, (ints, np.int32(7)))
        except kb.LaunchError as e:
            print("LaunchError:", e)
        f = kb.compile(kb.Source(src, "cuda", name="fine"), dev)
        out = kb.zeros(256, "float32", device=dev)
        f.launch(1, 256, (out, np.int32(256)))
        print("sum", out.numpy().sum())
        """,
        KERNELBAY_CPU_ISOLATE="1",
    )
    assert r.returncode == 0, r.stderr
    assert "LaunchError:" in r.stdout and "division by zero" in r.stdout
    assert "sum 65280.0" in r.stdout


def test_a_crash_outside_kernels_still_reaches_faulthandler():
    # The handler chains to the one before it for faults that are not a kernel's: Python's
    # faulthandler still prints the Python stack, and the process dies of the signal.
    r = _child(
        """
        import faulthandler, ctypes
        faulthandler.enable()
        import kernelbay as kb, numpy as np
        dev = kb.device("cpu")
        k = kb.compile(kb.Source('__global__ void k(int* y) { y[threadIdx.x] = 1; }', "cuda", name="k"), dev)
        k.launch(1, 32, (kb.zeros(32, "int32", device=dev),))
        ctypes.string_at(0)
        """
    )
    assert r.returncode != 0
    assert "Fatal Python error" in r.stderr and "string_at" in r.stderr


def test_a_fault_on_a_user_stream_and_in_a_graph(kernels, cpu):
    # Queued work reports the fault at the synchronize that covers it; a graph names the kernel.
    a = kb.zeros(N, "float32", device=cpu)
    s = cpu.stream()
    kernels["oob"].launch(1, 64, (a, np.int32(0), np.int64(FAR)), stream=s)
    with pytest.raises(kb.LaunchError, match="kernel 'oob' faulted on cpu"):
        s.synchronize()
    kernels["fine"].launch(N // 256, 256, (a, np.int32(N)), stream=s)
    s.synchronize()
    np.testing.assert_array_equal(a.numpy(), 2.0 * np.arange(N, dtype=np.float32))
    s.close()
    with cpu.graph() as g:
        kernels["fine"].launch(N // 256, 256, (a, np.int32(N)))
        kernels["divide"].launch(1, 32, (kb.zeros(32, "int32", device=cpu), np.int32(7)))
    with pytest.raises(kb.LaunchError, match=r"kernel 'divide' faulted on cpu: .*division by zero"):
        g.replay()
        cpu.synchronize()
    _fine_still_works(kernels, cpu)
