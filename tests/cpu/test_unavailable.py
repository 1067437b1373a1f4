"""Without a C++ compiler the backend is unavailable, and says why."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

CHILD = textwrap.dedent(
    """
    import kernelbay as kb
    rec = {b.name: b for b in kb.backends()}["cpu"]
    print(rec.status)
    print(rec.reason)
    try:
        kb.device("cpu")
    except kb.BackendUnavailableError as exc:
        print("raised:", str(exc).splitlines()[0])
    """
)


def _run(tmp_path, **env):
    e = dict(os.environ, KERNELBAY_CACHE_DIR=str(tmp_path / "cache"), **env)
    r = subprocess.run([sys.executable, "-c", CHILD], env=e, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    return r.stdout.splitlines()


def test_cxx_that_does_not_exist(tmp_path):
    out = _run(tmp_path, CXX="/nonexistent/c++")
    assert out[0] == "unavailable"
    assert "no C++ compiler: install g++ or set CXX" in out[1]
    assert "/nonexistent/c++" in out[1]
    assert out[2].startswith("raised:") and "no C++ compiler" in out[2]


def test_no_compiler_on_path(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "CXX"}
    e = dict(env, KERNELBAY_CACHE_DIR=str(tmp_path / "cache"), PATH=str(tmp_path))
    r = subprocess.run([sys.executable, "-c", CHILD], env=e, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    out = r.stdout.splitlines()
    assert out[0] == "unavailable"
    assert "no C++ compiler: install g++ or set CXX" in out[1]


def test_compiler_that_cannot_build(tmp_path):
    fake = tmp_path / "broken-c++"
    fake.write_text("#!/bin/sh\necho 'broken-c++ 1.0'\necho 'cannot do that' >&2\nexit 1\n")
    fake.chmod(0o755)
    out = _run(tmp_path, CXX=str(fake))
    assert out[0] == "unavailable"
    assert "cannot build a shared library" in out[1]
