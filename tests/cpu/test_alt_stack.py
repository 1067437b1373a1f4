"""The alternate signal stack of the thread that installs the cpu runtime's Ctrl-C handler: a
stack too small for this CPU's signal frames (8 KiB, SIGSTKSZ, as older code allocates; a frame
with AMX tile state is over 11 KiB) is replaced, so a Ctrl-C delivered there cannot overflow it
("overflowed sigaltstack", and the kernel kills the process). Run in a child process: it
changes the main thread's signal stack."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="sigaltstack sizes are checked on Linux")

CHILD = textwrap.dedent(
    """
    import ctypes, signal, sys
    libc = ctypes.CDLL(None, use_errno=True)

    class StackT(ctypes.Structure):
        _fields_ = [("ss_sp", ctypes.c_void_p), ("ss_flags", ctypes.c_int), ("ss_size", ctypes.c_size_t)]

    def current():
        st = StackT()
        assert libc.sigaltstack(None, ctypes.byref(st)) == 0
        return st

    small = ctypes.create_string_buffer(8192)
    st = StackT(ctypes.addressof(small), 0, 8192)
    assert libc.sigaltstack(ctypes.byref(st), None) == 0, ctypes.get_errno()
    assert current().ss_size == 8192
    import numpy as np
    import kernelbay as kb
    dev = kb.device("cpu")
    k = kb.compile(kb.Source('extern "C" __global__ void inc(float* y) { y[threadIdx.x] += 1.0f; }', "cuda"), dev)
    y = kb.zeros(4, "float32", device=dev)
    k.launch(1, 4, (y,))
    assert float(y.numpy()[0]) == 1.0
    got = current()
    print("size", got.ss_size, "flags", got.ss_flags)
    assert got.ss_size >= 64 * 1024 and not (got.ss_flags & 2), (got.ss_size, got.ss_flags)
    # and a real Ctrl-C, delivered on that stack, still reaches Python
    try:
        signal.raise_signal(signal.SIGINT)
    except KeyboardInterrupt:
        print("interrupted")
    """
)


def test_a_small_alt_stack_is_replaced_before_ctrl_c_can_use_it() -> None:
    proc = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert "interrupted" in proc.stdout
