"""A slow path is never silent: one SlowPathWarning a process, besides the log records."""

from __future__ import annotations

import os
import subprocess
import sys


def run(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code], env=dict(os.environ, **env), capture_output=True, text=True, check=False
    )


def test_unusable_cache_warns_once_per_process(tmp_path) -> None:
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("")
    code = (
        "import kernelbay as kb\n"
        "src = 'extern \"C\" void k(float* x) { x[0] = 1; }'\n"
        "for i in range(2):\n"
        "    kb.compile(kb.Source(src + f'// {i}', lang='c++', name='k'), device='cpu')\n"
    )
    proc = run(code, KERNELBAY_CACHE_DIR=str(not_a_dir), KERNELBAY_BACKENDS="cpu")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.count("SlowPathWarning") == 1, proc.stderr
    assert "compiling without the disk cache, so every process compiles its kernels anew" in proc.stderr
    assert str(not_a_dir) in proc.stderr  # the cause, with the path


def test_native_helper_unavailable_warns_once_unless_turned_off(tmp_path) -> None:
    code = (
        "from kernelbay import native\n"
        "for name in ('_kb_slow_a', '_kb_slow_b'):\n"
        "    try:\n"
        "        native.load_extension(name, 'int x = ;')\n"
        "    except native.NativeUnavailable:\n"
        "        pass\n"
    )
    env = {"KERNELBAY_CACHE_DIR": str(tmp_path / "cache"), "CC": str(tmp_path / "no-such-cc")}
    proc = run(code, **env, PATH="/nonexistent")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.count("SlowPathWarning") == 1, proc.stderr
    assert "native helper _kb_slow_a unavailable, so a slower pure-Python path runs: no C compiler found" in proc.stderr
    proc = run(code, **env, PATH="/nonexistent", KERNELBAY_NATIVE="0")
    assert proc.returncode == 0 and "SlowPathWarning" not in proc.stderr, proc.stderr


def test_slow_path_warning_is_public_and_filterable(tmp_path) -> None:
    import kernelbay as kb

    assert issubclass(kb.SlowPathWarning, RuntimeWarning)
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("")
    code = (
        "import warnings, kernelbay as kb\n"
        "warnings.filterwarnings('ignore', category=kb.SlowPathWarning)\n"
        "kb.compile(kb.Source('extern \"C\" void k() {}', lang='c++', name='k'), device='cpu')\n"
    )
    proc = run(code, KERNELBAY_CACHE_DIR=str(not_a_dir), KERNELBAY_BACKENDS="cpu")
    assert proc.returncode == 0 and "SlowPathWarning" not in proc.stderr, proc.stderr
