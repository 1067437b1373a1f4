"""A forked child of a process that initialised CUDA gets a clear LaunchError, as PyTorch's
"Cannot re-initialize CUDA in forked subprocess" (checked without a GPU: the parent's state is
faked, which is exactly what the child inherits)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

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
