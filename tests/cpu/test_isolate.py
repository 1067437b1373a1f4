"""Isolated mode (KERNELBAY_CPU_ISOLATE=1) and checked mode (KERNELBAY_CPU_CHECK=address): a
fault in a kernel is a LaunchError and the caller goes on. The settings are read at import, so
each mode runs in a subprocess."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="isolated mode uses Linux's memfd")

SCRIPT = textwrap.dedent(
    r'''
    import sys, numpy as np, kernelbay as kb
    SRC = """
    #include <cassert>
    __device__ int deep(int n) { volatile char pad[4096]; pad[n % 4096] = (char)n; return deep(n + 1) + pad[0]; }
    __global__ void fill(float* y, float v, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = v; }
    __global__ void past_end(float* y, int n) {
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i <= n) y[i] = 2.0f;
    }
    __global__ void far_away(float* y, int n) { if (blockIdx.x == 3) y[(1L << 40) + n] = 1.0f; }
    __global__ void null_deref(float* y, int n) { float* volatile p = nullptr; if (blockIdx.x == 2) y[0] = *p; }
    __global__ void div_zero(float* y, int n) {
        volatile int zero = 0;
        if (blockIdx.x == 1) y[0] = n / zero;
    }
    __global__ void asserts(float* y, int n) { assert(blockIdx.x != 2); }
    __global__ void fine(float* y, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = 3.0f; }
    __global__ void recurse(float* y, int n) { if (blockIdx.x == 1) y[0] = deep(n); }
    __global__ void aborts(float* y, int n) { if (blockIdx.x == 2) abort(); }
    """
    n = 1000
    fill = kb.compile(kb.Source(SRC, "cuda", name="fill"), device="cpu")
    y = kb.asarray(np.zeros(n, np.float32), device="cpu")
    for name in sys.argv[1:]:
        k = kb.compile(kb.Source(SRC, "cuda", name=name), device="cpu")
        try:
            k.launch(4, 256, (y, np.int32(n)))
            print(f"{name}: no error", flush=True)
        except kb.errors.LaunchError as e:
            print(f"{name}: LaunchError: {e}".replace("\n", " | "), flush=True)
        fill.launch(4, 256, (y, np.float32(1), np.int32(n)))
        print(f"{name}: then", float(y.numpy().sum()), flush=True)
    '''
)


def _run(env: dict[str, str], *names: str) -> dict[str, str]:
    r = subprocess.run([sys.executable, "-c", SCRIPT, *names], env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    out: dict[str, str] = {}
    for line in r.stdout.splitlines():
        name, _, rest = line.partition(": ")
        out[name] = out.get(name, "") + rest + "\n"
    return out


@pytest.fixture(scope="module")
def base_env(tmp_path_factory) -> dict[str, str]:
    e = dict(os.environ, KERNELBAY_CACHE_DIR=str(tmp_path_factory.mktemp("cache")))
    for k in ("KERNELBAY_CPU_ISOLATE", "KERNELBAY_CPU_CHECK", "CXX"):
        e.pop(k, None)
    return e


def test_isolated_mode_turns_each_fault_into_a_launch_error(base_env) -> None:
    names = ("far_away", "null_deref", "div_zero", "asserts", "recurse", "aborts")
    out = _run(dict(base_env, KERNELBAY_CPU_ISOLATE="1"), *names)
    # The worker's runtime stops a faulting block as the default mode does: the worker lives on.
    for name, what, block in [
        ("far_away", "invalid memory access (SIGSEGV", "(3,0,0)"),
        ("null_deref", "invalid memory access (SIGSEGV", "(2,0,0)"),
        ("div_zero", "integer division by zero (SIGFPE)", "(1,0,0)"),
        ("recurse", "stack overflow", "(1,0,0)"),
    ]:
        assert f"LaunchError: kernel '{name}' faulted on cpu (isolated worker): block {block}" in out[name], out[name]
        assert what in out[name], out[name]
        assert "then 1000.0" in out[name], out[name]  # the caller goes on
    assert "device assert `blockIdx.x != 2` failed" in out["asserts"] and "block (2,0,0)" in out["asserts"]
    # abort() is not a fault kernelbay can stop: the worker dies of it, and a new one takes over.
    assert "LaunchError: kernel 'aborts' crashed the isolated cpu worker with SIGABRT" in out["aborts"], out["aborts"]
    assert "in blockIdx (2, 0, 0)" in out["aborts"], out["aborts"]
    assert "then 1000.0" in out["aborts"], out["aborts"]


def test_checked_mode_names_the_source_line(base_env) -> None:
    out = _run(dict(base_env, KERNELBAY_CPU_CHECK="address"), "past_end", "div_zero", "fine")
    assert "AddressSanitizer: use-after-poison kernel.cu:7 in past_end" in out["past_end"], out["past_end"]
    assert "just past the end of a kernelbay buffer" in out["past_end"]
    assert "kernel.cu:13" in out["div_zero"] and "division by zero" in out["div_zero"], out["div_zero"]
    assert "no error" in out["fine"], out["fine"]
    assert "then 1000.0" in out["past_end"] and "then 1000.0" in out["div_zero"]


def test_a_sanitizer_cxx_survives_the_probe_and_checks(base_env) -> None:
    out = _run(dict(base_env, CXX="g++ -fsanitize=address"), "past_end")
    assert "AddressSanitizer: use-after-poison kernel.cu:7" in out["past_end"], out["past_end"]


FORK = textwrap.dedent(
    """
    import os, numpy as np, kernelbay as kb
    src = "__global__ void fill(float* y, float v, int n) { int i = blockIdx.x * 256 + threadIdx.x; if (i < n) y[i] = v; }"
    k = kb.compile(kb.Source(src, "cuda", name="fill"), device="cpu")
    y = kb.asarray(np.zeros(1000, np.float32), device="cpu")
    k.launch(4, 256, (y, np.float32(1), np.int32(1000)))
    pid = os.fork()
    if pid == 0:  # a worker of its own, not the parent's
        z = kb.asarray(np.zeros(1000, np.float32), device="cpu")
        k.launch(4, 256, (z, np.float32(2), np.int32(1000)))
        os._exit(0 if z.numpy().sum() == 2000 else 3)
    print("child", os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
    k.launch(4, 256, (y, np.float32(3), np.int32(1000)))
    print("parent", y.numpy().sum())
    """
)


def test_isolated_mode_in_a_forked_child(base_env) -> None:
    env = dict(base_env, KERNELBAY_CPU_ISOLATE="1")
    r = subprocess.run([sys.executable, "-c", FORK], env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    assert "child 0" in r.stdout and "parent 3000.0" in r.stdout
