"""A forked child of a process that initialised CUDA gets a clear LaunchError, as PyTorch's
"Cannot re-initialize CUDA in forked subprocess" (checked without a GPU: the parent's state is
faked, which is exactly what the child inherits)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent(
    """
    import os
    from kernelbay.errors import LaunchError
    from kernelbay_cuda import _driver
    # what the parent holds after its first CUDA use: the pid that called cuInit, a context
    _driver._init_pid = os.getpid()
    _driver._ctx[0] = object()
    _driver._tls.dev = 0
    assert _driver.context(0) is _driver._ctx[0]  # the parent keeps using its context
    pid = os.fork()
    if pid == 0:
        assert _driver._tls.dev == -1, "the child must not believe a context is current"
        try:
            _driver.context(0)
        except LaunchError as e:
            print("child:", e, flush=True)
            os._exit(0)
        os._exit(3)
    _, st = os.waitpid(pid, 0)
    print("child exit", os.waitstatus_to_exitcode(st), flush=True)
    """
)


def test_forked_child_refuses_cuda_with_a_clear_error() -> None:
    r = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    assert "child exit 0" in r.stdout
    assert "initialised in this process's parent before fork()" in r.stdout
    assert "'spawn' or 'forkserver'" in r.stdout


GPU_FORK = textwrap.dedent(
    """
    import os
    import numpy as np
    import kernelbay as kb
    dev = kb.device("cuda:0")
    x = kb.asarray(np.arange(8, dtype=np.float32), device=dev)  # the parent initialises CUDA
    pid = os.fork()
    if pid == 0:
        try:
            kb.zeros(4, device=kb.device("cuda:0"))
        except kb.KernelbayError as e:
            print("child:", type(e).__name__, e, flush=True)
            os._exit(0)
        os._exit(3)
    _, st = os.waitpid(pid, 0)
    print("child exit", os.waitstatus_to_exitcode(st), flush=True)
    print("parent still works:", x.numpy().sum(), flush=True)
    """
)


@pytest.mark.kernelbay_device("cuda")
def test_a_forked_child_on_a_real_gpu_gets_a_clear_error_and_the_parent_goes_on() -> None:
    r = subprocess.run([sys.executable, "-c", GPU_FORK], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "child exit 0" in r.stdout, r.stdout + r.stderr
    assert "before fork()" in r.stdout
    assert "parent still works: 28.0" in r.stdout


TWO = textwrap.dedent(
    """
    import sys
    import numpy as np
    import kernelbay as kb
    SRC = r'''
    extern "C" __global__ void saxpy(float a, const float* x, float* y, int n) {
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i < n) y[i] = a * x[i] + y[i];
    }'''
    seed = int(sys.argv[1])
    dev = kb.device("cuda:0")
    k = kb.compile(kb.Source(SRC, "cuda"), dev)
    rng = np.random.default_rng(seed)
    n = 1 << 20
    for _ in range(50):
        hx, hy = rng.random(n, np.float32), rng.random(n, np.float32)
        x, y = kb.asarray(hx, device=dev), kb.asarray(hy, device=dev)
        k.launch((n + 255) // 256, 256, (np.float32(seed), x, y, np.int32(n)))
        np.testing.assert_allclose(y.numpy(), seed * hx + hy, rtol=1e-6)
    print("ok", seed, flush=True)
    """
)


@pytest.mark.kernelbay_device("cuda")
def test_two_processes_share_one_gpu_with_correct_results(tmp_path) -> None:
    env = {**os.environ, "KERNELBAY_CACHE_DIR": str(tmp_path / "cache")}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", TWO, str(s)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
        )
        for s in (2, 3)
    ]
    outs = [p.communicate(timeout=600) for p in procs]
    for p, (_out, err) in zip(procs, outs):
        assert p.returncode == 0, err
    assert sorted(o.strip() for o, _ in outs) == ["ok 2", "ok 3"]
