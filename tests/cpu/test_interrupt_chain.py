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
    import kernelbay as kb
    dev = kb.device("cpu")
    src = 'extern "C" __global__ void inc(float* y) {{ y[threadIdx.x] += {}.0f; }}'
    k1 = kb.compile(kb.Source(src.format(1), "cuda"), dev)  # the runtime's handler goes in front
    assert ctypes.CDLL(sys.argv[1]).install() == 0  # another library's, chaining to ours
    k2 = kb.compile(kb.Source(src.format(2), "cuda"), dev)  # a compile again: ours must not go in front of it
    y = kb.zeros(4, "float32", device=dev)
    k2.launch(1, 4, (y,))
    seen = []
    for i in range(3):
        try:
            signal.raise_signal(signal.SIGINT)
            seen.append("no interrupt")
        except KeyboardInterrupt:
            seen.append("interrupted")
    print(" ".join(seen))
    """
)


def test_a_handler_that_chains_back_does_not_recurse(tmp_path) -> None:
    (tmp_path / "chainer.c").write_text(CHAINER)
    so = tmp_path / "libchainer.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(so), str(tmp_path / "chainer.c")], check=True)
    proc = subprocess.run([sys.executable, "-c", CHILD, str(so)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"rc {proc.returncode}: {proc.stderr[-2000:]}"
    assert proc.stdout.split() == ["interrupted"] * 3
