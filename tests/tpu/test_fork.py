"""A forked child of a process that used the tpu backend (JAX) fails clearly instead of hanging."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent(
    """
    import os, numpy as np, kernelbay as kb
    from kernelbay.errors import LaunchError
    x = kb.asarray(np.ones(8, np.float32), device="tpu")  # JAX is now running in this process
    pid = os.fork()
    if pid == 0:
        try:
            kb.asarray(np.ones(8, np.float32), device="tpu")
        except LaunchError as e:
            print("child:", e, flush=True)
            os._exit(0)
        os._exit(3)
    _, st = os.waitpid(pid, 0)
    print("child exit", os.waitstatus_to_exitcode(st), flush=True)
    print("parent still works", float(np.asarray(x.numpy()).sum()), flush=True)
    """
)


def test_forked_child_gets_a_clear_error() -> None:
    env = dict(os.environ, KERNELBAY_TPU_INTERPRET="1", KERNELBAY_DEVICE="tpu")
    r = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    assert "child exit 0" in r.stdout
    assert "initialised in this process's parent before fork()" in r.stdout
    assert "'spawn'" in r.stdout
    assert "parent still works 8.0" in r.stdout


LAUNCH_SCRIPT = textwrap.dedent(
    """
    import os, numpy as np, kernelbay as kb
    from kernelbay.errors import LaunchError

    def add_one(x_ref, o_ref):
        o_ref[...] = x_ref[...] + 1.0

    dev = kb.device("tpu")
    k = kb.compile(kb.Source(add_one, "pallas", meta={"outputs": ["o_ref"]}), device=dev)
    x, o = kb.asarray(np.ones(8, np.float32), device=dev), kb.empty(8, "float32", device=dev)
    for _ in range(3):  # the third launch runs on the generated fast path
        k.launch(grid=(), args=(x, o))
    dev.synchronize()
    pid = os.fork()
    if pid == 0:
        try:
            k.launch(grid=(), args=(x, o))  # compiled and specialised before the fork
        except LaunchError as e:
            print("child:", e, flush=True)
            os._exit(0)
        os._exit(3)
    _, st = os.waitpid(pid, 0)
    print("child exit", os.waitstatus_to_exitcode(st), flush=True)
    """
)


def test_a_launch_on_the_fast_path_is_refused_in_a_forked_child() -> None:
    env = dict(os.environ, KERNELBAY_TPU_INTERPRET="1", KERNELBAY_DEVICE="tpu")
    r = subprocess.run([sys.executable, "-c", LAUNCH_SCRIPT], env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    assert "child exit 0" in r.stdout, r.stdout + r.stderr
    assert "initialised in this process's parent before fork()" in r.stdout
