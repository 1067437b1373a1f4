"""A SIGINT handler installed after the cpu runtime's that chains back to it (as LLVM's and
other libraries' handlers chain to the one they found), with the runtime's put in front of it
again at the next compile: one Ctrl-C must reach Python once, not make the two handlers call
each other until the signal stack overflows (the kernel then kills the process: "overflowed
sigaltstack", seen on an H100 host after a test suite had loaded such a library). In a child
process: it changes the process's SIGINT handler."""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux") or shutil.which("cc") is None, reason="needs Linux and a C compiler (cc)"
)

CHAINER = r"""
#include <signal.h>
#include <string.h>
static struct sigaction prev;
static void on(int sig, siginfo_t *info, void *uc) {
    if (prev.sa_flags & SA_SIGINFO) { if (prev.sa_sigaction) prev.sa_sigaction(sig, info, uc); }
    else if (prev.sa_handler != SIG_IGN && prev.sa_handler != SIG_DFL) prev.sa_handler(sig);
}
int install(void) {
    struct sigaction sa; memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on; sa.sa_flags = SA_SIGINFO | SA_ONSTACK; sigemptyset(&sa.sa_mask);
    return sigaction(SIGINT, &sa, &prev);
}
"""

CHILD = textwrap.dedent(
    """
    import ctypes, signal, sys

    libc = ctypes.CDLL(None)

    class Dl(ctypes.Structure):
        _fields_ = [("fname", ctypes.c_char_p), ("fbase", ctypes.c_void_p), ("sname", ctypes.c_char_p), ("saddr", ctypes.c_void_p)]

    def front():
        # which object the process's SIGINT handler lives in
        buf = ctypes.create_string_buffer(256)  # struct sigaction: the handler is its first field
        libc.sigaction(signal.SIGINT, None, buf)
        fn = ctypes.c_void_p.from_buffer(buf).value
        info = Dl()
        libc.dladdr(ctypes.c_void_p(fn), ctypes.byref(info))
        name = (info.fname or b"?").decode()
        return "chainer" if "chainer" in name else "kernelbay" if "kernelbay" in name else "python"

    def interrupts():
        seen = []
        for _ in range(3):
            try:
                signal.raise_signal(signal.SIGINT)
                seen.append("missed")
            except KeyboardInterrupt:
                seen.append("interrupted")
        return "/".join(seen)

    import kernelbay as kb
    dev = kb.device("cpu")
    src = 'extern "C" __global__ void inc(float* y) {{ y[threadIdx.x] += {}.0f; }}'
    order = []
    if sys.argv[2] == "after":  # the library's handler goes in after ours, chaining to it
        kb.compile(kb.Source(src.format(1), "cuda"), dev)
        order.append(front())
        assert ctypes.CDLL(sys.argv[1]).install() == 0
    else:  # it was there before ours
        assert ctypes.CDLL(sys.argv[1]).install() == 0
        kb.compile(kb.Source(src.format(1), "cuda"), dev)
    order.append(front())
    k2 = kb.compile(kb.Source(src.format(2), "cuda"), dev)  # ours goes in front only of Python's
    order.append(front())
    y = kb.zeros(4, "float32", device=dev)
    k2.launch(1, 4, (y,))
    order.append(interrupts())
    signal.signal(signal.SIGINT, signal.default_int_handler)  # Python's own replaces everything
    kb.compile(kb.Source(src.format(3), "cuda"), dev)  # and ours goes back in front of it
    order.append(front())
    order.append(interrupts())
    print(" ".join(order))
    """
)


@pytest.mark.parametrize(
    ("when", "expected"),
    [
        # ours first, the library's after it (chaining to ours) stays in front
        (
            "after",
            "kernelbay chainer chainer interrupted/interrupted/interrupted kernelbay interrupted/interrupted/interrupted",
        ),
        # the library's first: ours in front of it
        (
            "before",
            "kernelbay kernelbay interrupted/interrupted/interrupted kernelbay interrupted/interrupted/interrupted",
        ),
    ],
)
def test_a_handler_that_chains_back_does_not_recurse(tmp_path, when: str, expected: str) -> None:
    (tmp_path / "chainer.c").write_text(CHAINER)
    so = tmp_path / "libchainer.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(so), str(tmp_path / "chainer.c")], check=True)
    proc = subprocess.run([sys.executable, "-c", CHILD, str(so), when], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"rc {proc.returncode}: {proc.stderr[-2000:]}"
    assert proc.stdout.strip() == expected
