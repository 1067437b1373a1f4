"""The cpu runtime: fault reports naming the kernel, Ctrl-C during a launch, fork()ed children.

Each case runs in a subprocess (a fault ends it; Ctrl-C is a signal sent to it), over one
shared disk cache, so the kernels are compiled once.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the cpu runtime's signal handling is Linux's")

KERNELS = r"""
#include <cassert>
__device__ int deep(int n) { volatile char pad[4096]; pad[n % 4096] = (char)n; return deep(n + 1) + pad[0]; }
__global__ void oob(float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (blockIdx.x == 3 && threadIdx.x == 0) y[i + (1L << 40)] = 1.0f;
    if (i < n) y[i] = 1.0f;
}
__global__ void null_deref(float* y, int n) {
    float* volatile p = nullptr;
    if (blockIdx.x == 2) y[0] = *p;
}
__global__ void div_zero(int* y, int n) { volatile int zero = 0; if (blockIdx.x == 5) y[0] = n / zero; }
__global__ void asserts(int* y, int n) { assert(blockIdx.x != 6); }
__global__ void recurse(int* y, int n) { if (blockIdx.x == 1) y[0] = deep(n); }
__global__ void aborts(int* y, int n) { if (blockIdx.x == 4) abort(); }
__global__ void spin(float* y, long iters, int forever) {
    ((volatile float*)y)[blockIdx.x] = -1.0f;  // "started", read from outside (_wait_inside); volatile: kept
    volatile float acc = 0;
    for (long i = 0; i < iters || forever; ++i) acc = acc + 1.0f;
    y[blockIdx.x] = acc;
}
__global__ void fill(float* y, float v, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = v; }
"""

PRELUDE = textwrap.dedent(
    f"""
    import os, sys, time, numpy as np, kernelbay as kb
    SRC = {KERNELS!r}
    def kernel(name):
        return kb.compile(kb.Source(SRC, "cuda", name=name), device="cpu")
    """
)

FAULT = PRELUDE + textwrap.dedent(
    """
    name = sys.argv[1]
    k = kernel(name)
    y = kb.asarray(np.zeros(1024, np.float32), device="cpu")
    try:
        k.launch(8, 128, (y, np.int32(1024)))
    except kb.LaunchError as e:
        print("LaunchError:", e)
    print("survived")
    """
)


@pytest.fixture(scope="module")
def env(tmp_path_factory) -> dict[str, str]:
    e = dict(os.environ, KERNELBAY_CACHE_DIR=str(tmp_path_factory.mktemp("cache")), PYTHONFAULTHANDLER="")
    e.pop("KERNELBAY_CPU_ISOLATE", None)
    e.pop("KERNELBAY_CPU_CHECK", None)
    # compile every entry once, so each case below is a cache hit
    warm = (
        PRELUDE + "\nfor n in ('oob','null_deref','div_zero','asserts','recurse','aborts','spin','fill'): kernel(n)\n"
    )
    subprocess.run([sys.executable, "-c", warm], env=e, check=True, timeout=600)
    return e


@pytest.mark.parametrize(
    ("name", "what", "block"),
    [
        ("oob", "invalid memory access (SIGSEGV", "(3,0,0)"),
        ("null_deref", "(a null pointer)", "(2,0,0)"),
        ("div_zero", "integer division by zero (SIGFPE)", "(5,0,0)"),
        ("asserts", "device assert `blockIdx.x != 6` failed at kernel.cu:14", "(6,0,0)"),
        ("recurse", "stack overflow", "(1,0,0)"),
    ],
)
def test_a_fault_is_a_launch_error_naming_kernel_and_block(env, name, what, block) -> None:
    r = subprocess.run([sys.executable, "-c", FAULT, name], env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    assert f"LaunchError: kernel '{name}' " in r.stdout and f"block {block}" in r.stdout, r.stdout
    assert what in r.stdout, r.stdout
    assert "survived" in r.stdout


def test_abort_is_reported_naming_kernel_grid_and_block(env) -> None:
    # abort() is not a fault kernelbay can stop: the report names the kernel, as before, and the
    # process ends with the signal.
    r = subprocess.run([sys.executable, "-c", FAULT, "aborts"], env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == -signal.SIGABRT, (r.returncode, r.stderr)
    assert "survived" not in r.stdout
    assert "while cpu kernel 'aborts' ran, grid (8, 1, 1), block (128, 1, 1), in blockIdx (4, 0, 0)" in r.stderr
    assert f"fatal signal {int(signal.SIGABRT)}" in r.stderr


def test_abort_report_then_python_faulthandler(env) -> None:
    """An enabled faulthandler still runs after the report: the Python stack is printed too."""
    r = subprocess.run(
        [sys.executable, "-X", "faulthandler", "-c", FAULT, "aborts"],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == -signal.SIGABRT
    assert "while cpu kernel 'aborts' ran" in r.stderr
    assert "Fatal Python error: Aborted" in r.stderr


SPIN = PRELUDE + textwrap.dedent(
    """
    k = kernel("spin")
    y = kb.asarray(np.zeros(100000, np.float32), device="cpu")
    forever = int(sys.argv[1])
    k.launch(2, 1, (y, np.int64(10), np.int32(0)))
    print("ready", y.handle.ptr, flush=True)
    t = time.perf_counter()
    try:
        k.launch(100000, 1, (y, np.int64(5_000_000), np.int32(forever)))
        print("finished", flush=True)
    except KeyboardInterrupt:
        print("interrupted", flush=True)
    k.launch(4, 1, (y, np.int64(10), np.int32(0)))
    print("next launch", y.numpy()[:4].tolist(), flush=True)
    """
)


def _wait_inside(p: subprocess.Popen[str], ptr: int, n: int = 100000) -> None:
    """Until the child's long launch has started: each block writes -1 into its y[i], then its
    result, where y held 10 (y[0], y[1]: the warm-up launch's) or 0 before.

    Read through /proc/PID/mem, so no sleep guesses how long a loaded machine takes to get there;
    where that cannot be read (no permission), a generous wait stands in."""
    import numpy as np

    try:
        with open(f"/proc/{p.pid}/mem", "rb", buffering=0) as mem:
            while p.poll() is None:
                mem.seek(ptr)
                y = np.frombuffer(mem.read(4 * n), np.float32)
                if ((y != 0.0) & (y != 10.0)).any():
                    return
                time.sleep(0.02)
    except OSError:
        time.sleep(5.0)


def _spin(env: dict[str, str], forever: int, interrupts: int) -> tuple[int, str, str]:
    p = subprocess.Popen(
        [sys.executable, "-c", SPIN, str(forever)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    seen = []
    try:
        assert p.stdout is not None and p.stderr is not None
        word, ptr = p.stdout.readline().split()
        assert word == "ready"
        _wait_inside(p, int(ptr))
        for i in range(interrupts):
            p.send_signal(signal.SIGINT)
            if i + 1 < interrupts:
                # Signals do not queue: the next Ctrl-C waits until the child has taken this one
                # (it says so on stderr), however long a loaded machine makes that.
                while (line := p.stderr.readline()) and "cancelling the blocks" not in line:
                    seen.append(line)
                seen.append(line)
        out, err = p.communicate(timeout=600)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    return p.returncode, out, "".join(seen) + err


def test_ctrl_c_cancels_a_launch_and_raises_keyboard_interrupt(env) -> None:
    rc, out, err = _spin(env, forever=0, interrupts=1)
    assert rc == 0, err
    assert "interrupted" in out and "finished" not in out
    assert "next launch [10.0, 10.0, 10.0, 10.0]" in out
    assert "cancelling the blocks of cpu kernel 'spin'" in err


def test_one_ctrl_c_stops_a_block_that_never_returns(env) -> None:
    # The running blocks get the runtime's stop signal: a loop with no barrier and no end stops
    # too, the launch raises KeyboardInterrupt, and the next launch runs normally.
    rc, out, err = _spin(env, forever=1, interrupts=1)
    assert rc == 0, err
    assert "interrupted" in out and "finished" not in out
    assert "next launch [10.0, 10.0, 10.0, 10.0]" in out
    assert "stopping the running ones" in err


def test_a_deadline_stops_a_block_that_never_returns(env) -> None:
    r = subprocess.run(
        [sys.executable, "-c", DEADLINE],
        env=dict(env, KERNELBAY_CPU_TIMEOUT="1"),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr
    assert "LaunchError: kernel 'spin' ran past its deadline on cpu (KERNELBAY_CPU_TIMEOUT=1 s)" in r.stdout, r.stdout
    assert "next launch [10.0, 10.0, 10.0, 10.0]" in r.stdout
    assert "short launches: fine" in r.stdout


DEADLINE = PRELUDE + textwrap.dedent(
    """
    k = kernel("spin")
    y = kb.asarray(np.zeros(64, np.float32), device="cpu")
    for _ in range(20):  # launches well inside the deadline are never stopped
        k.launch(4, 1, (y, np.int64(10), np.int32(0)))
    print("short launches: fine", flush=True)
    try:
        k.launch(64, 1, (y, np.int64(10), np.int32(1)))
    except kb.LaunchError as e:
        print("LaunchError:", e, flush=True)
    k.launch(4, 1, (y, np.int64(10), np.int32(0)))
    print("next launch", y.numpy()[:4].tolist(), flush=True)
    """
)


FORK = PRELUDE + textwrap.dedent(
    """
    import multiprocessing as mp
    k = kernel("fill")
    n = 1 << 16
    def child(v):
        z = kb.asarray(np.zeros(n, np.float32), device="cpu")
        for _ in range(3):
            k.launch(n // 256, 256, (z, np.float32(v), np.int32(n)))
        return float(z.numpy().sum())
    assert child(1) == n  # a parallel launch in the parent first: its OpenMP pool exists
    pid = os.fork()
    if pid == 0:
        ok = child(2) == 2 * n
        gpid = os.fork()  # a child of the child: the same again
        if gpid == 0:
            os._exit(0 if child(6) == 6 * n else 3)
        _, gst = os.waitpid(gpid, 0)
        os._exit(0 if ok and os.waitstatus_to_exitcode(gst) == 0 else 3)
    _, st = os.waitpid(pid, 0)
    print("fork", os.waitstatus_to_exitcode(st), flush=True)
    with mp.get_context("fork").Pool(2) as p:
        print("pool", p.map(child, [3, 4]), flush=True)
    print("parent", child(5) == 5 * n, flush=True)
    """
)


def test_launches_work_in_forked_children(env) -> None:
    r = subprocess.run(
        [sys.executable, "-c", FORK],
        env=dict(env, KERNELBAY_CPU_THREADS="2"),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr
    n = 1 << 16
    assert "fork 0" in r.stdout
    assert f"pool [{3.0 * n}, {4.0 * n}]" in r.stdout
    assert "parent True" in r.stdout


def test_ctrl_c_in_isolated_mode_stops_even_a_block_that_never_returns(env) -> None:
    rc, out, err = _spin(dict(env, KERNELBAY_CPU_ISOLATE="1"), forever=1, interrupts=1)
    assert rc == 0, err
    assert "interrupted" in out
    assert "next launch [10.0, 10.0, 10.0, 10.0]" in out  # a new worker


OPENMP_AFTER_CLOSE = r"""
import gc, threading, numpy as np, kernelbay as kb

def openmp_mapped():
    return any("libgomp" in line or "libomp" in line or "libiomp" in line for line in open("/proc/self/maps"))

y = kb.asarray(np.zeros(4096, np.int32), device="cpu")
for i in range(3):
    k = kb.compile(kb.Source('__global__ void a(int* y) { y[blockIdx.x * blockDim.x + threadIdx.x] = %d; }' % i,
                             lang="cuda", name="a"), "cpu")
    k.launch(16, 256, (y,))  # a parallel launch: OpenMP's workers now wait inside its library
    assert openmp_mapped()
    k.close()  # the last kernel module goes (dlclose) ...
    del k
    for _ in range(3):
        gc.collect()
    print("mapped after close:", openmp_mapped(), "threads:", threading.active_count())
print("alive")
"""


def test_openmp_stays_loaded_after_the_last_kernel_is_closed(tmp_path):
    # Closing the last kernel unloaded its module and, with it, the OpenMP runtime whose worker
    # threads were parked inside: the next time they ran, the process died with SIGSEGV (seen
    # in a fresh-clone test run). The backend pins the OpenMP runtime once a module has loaded
    # it. Run twice: the second process loads the kernels from the warm disk cache, so nothing
    # but the kernel modules (no compiler probe) has brought the OpenMP runtime in.
    env = {**os.environ, "KERNELBAY_CACHE_DIR": str(tmp_path), "KERNELBAY_CPU_THREADS": "2"}
    for _ in range(2):
        r = subprocess.run(
            [sys.executable, "-c", textwrap.dedent(OPENMP_AFTER_CLOSE)],
            capture_output=True,
            text=True,
            env=env,
            timeout=600,
        )
        assert r.returncode == 0, (r.returncode, r.stderr[-2000:])
    assert "mapped after close: False" not in r.stdout, r.stdout
    assert "alive" in r.stdout


def test_a_kernel_module_pins_its_own_openmp_runtime() -> None:
    # Found by the address of an OpenMP function: no search of the library path by name (each
    # name not loaded cost ~0.1 ms of a fresh process's disk-cache hit).
    import kernelbay as kb
    from kernelbay_cpu import _driver, _loader

    code = "__global__ void pin_probe(int* y) { y[threadIdx.x] = 1; }"
    k = kb.compile(kb.Source(code, lang="cuda", name="pin_probe"), "cpu")
    if _driver.toolchain().openmp:
        assert k.handle.lib.kb_pin_openmp() == 1
        assert "kb_pin_openmp" in _loader._pinned
    plain = kb.compile(kb.Source(code, lang="cuda", name="pin_probe", options=("-fno-openmp",)), "cpu")
    assert plain.handle.lib.kb_pin_openmp() == 0  # no OpenMP in it: nothing to pin


FIBER_MAPS = textwrap.dedent(
    r'''
    import numpy as np, kernelbay as kb
    from kernelbay_cpu import _runtime
    # A kernel kept on fibers (a goto across a barrier: fission leaves it to them), in 8 modules.
    SRC = """
    __global__ void k(float* x) {
        __shared__ float s[1024];
        s[threadIdx.x] = x[threadIdx.x];
        if (x[0] > 1e30f) goto out;
        __syncthreads();
    out:
        x[threadIdx.x] = s[1023 - threadIdx.x] + %d;
    }
    """
    def maps():
        with open("/proc/self/maps") as f:
            return sum(1 for _ in f)
    x = kb.zeros(1024, "float32", device="cpu")
    grew = []
    for i in range(8):
        k = kb.compile(kb.Source(SRC % i, "cuda", name="k"), "cpu")
        assert k.handle.fibers
        before = maps()
        k.launch(4, 1024, (x,))
        kb.device("cpu").synchronize()
        grew.append(maps() - before)
        assert float(x.numpy()[0]) >= i
    print("runtime", _runtime.api() is not None, "grew", grew)
    '''
)


def test_fiber_stacks_are_one_set_per_thread_not_per_module(env) -> None:
    """1024 fiber stacks, each above its guard page, are 2048 memory mappings; a process may have
    about 65,000. Each module once mapped its own set on every thread that ran its blocks, so a
    process that ran a dozen fiber kernels of 1024 threads ran out of mappings (threads could no
    longer start). The runtime now keeps one set per thread for every module."""
    e = dict(env, KERNELBAY_CPU_THREADS="2")
    r = subprocess.run([sys.executable, "-c", FIBER_MAPS], env=e, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    line = r.stdout.strip().splitlines()[-1]
    assert line.startswith("runtime True"), line
    grew = [int(v) for v in line.split("grew ", 1)[1].strip("[]").split(",")]
    # Each thread that runs a block maps its set once (2048 mappings); at most the two launch
    # threads and one more (a fallback) do. One set per module and thread was >= 8 x 2048.
    assert sum(grew) <= 3 * 2048 + 500, grew
