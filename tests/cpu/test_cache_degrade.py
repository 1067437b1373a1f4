"""A cache directory that cannot be written (full disk, read-only, deleted mid-run) never stops
work: the process loads compiled kernels from a private directory of its own, with one warning
saying why; a message names the real cause, never "no C++ compiler" (issue #26)."""

from __future__ import annotations

import errno
import os
import shutil
import stat
import tempfile
import warnings

import kernelbay as kb
import numpy as np
import pytest
from kernelbay import native
from kernelbay_cpu import _driver

ROOT = hasattr(os, "getuid") and os.getuid() == 0
SRC = r"""
__global__ void fill(int* y, int v, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = v + %d;
}
"""


@pytest.fixture
def cache(tmp_path, monkeypatch):
    d = tmp_path / "cache"
    monkeypatch.setenv("KERNELBAY_CACHE_DIR", str(d))
    monkeypatch.setattr(native, "_fallback", None)  # the fallback is per process: a clean slate
    monkeypatch.setattr(native, "_load_dir", {})
    return d


def _run(cpu, n: int) -> list[int]:
    k = kb.compile(kb.Source(SRC % n, lang="cuda", name="fill", options=(f"-DKB_DEGRADE_TEST={n}",)), cpu)
    y = kb.zeros(3, "int32", device=cpu)
    k.launch(1, 4, (y, np.int32(40), np.int32(3)))
    return y.numpy().tolist()


def _failing_writes(monkeypatch, prefix: str, err: OSError) -> None:
    real = native._write_private

    def write(image, pfx, suffix, d):
        if d.startswith(prefix):
            raise err
        return real(image, pfx, suffix, d)

    monkeypatch.setattr(native, "_write_private", write)


def _in_fallback(cache) -> None:
    d = native.load_dir()
    assert not d.startswith(str(cache)) and os.path.dirname(d) == os.path.realpath(tempfile.gettempdir())
    assert stat.S_IMODE(os.stat(d).st_mode) == 0o700


def test_full_cache_disk_compiles_and_runs_with_one_warning(cpu, cache, monkeypatch, caplog):
    _failing_writes(monkeypatch, str(cache), OSError(errno.ENOSPC, "No space left on device"))
    with pytest.warns(RuntimeWarning, match="the disk is full") as got:
        assert _run(cpu, 101) == [141, 141, 141]
    assert len(got) == 1 and "the disk is full" in caplog.text
    _in_fallback(cache)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once per process
        assert _run(cpu, 102) == [142, 142, 142]


def test_full_everywhere_names_the_disk_not_the_compiler(cpu, cache, monkeypatch):
    _failing_writes(monkeypatch, "/", OSError(errno.ENOSPC, "No space left on device"))
    with pytest.warns(RuntimeWarning), pytest.raises(kb.CompileError, match="the disk is full") as info:
        _run(cpu, 103)
    assert "no C++ compiler" not in str(info.value)


def test_read_only_cache_simulated(cpu, cache, monkeypatch):
    _failing_writes(monkeypatch, str(cache), PermissionError(errno.EACCES, "Permission denied"))
    with pytest.warns(RuntimeWarning, match="permission denied"):
        assert _run(cpu, 104) == [144, 144, 144]
    _in_fallback(cache)


@pytest.mark.skipif(ROOT, reason="root ignores file modes: a 0500 directory is writable to it")
def test_read_only_cache_chmod(cpu, cache):
    assert _run(cpu, 105) == [145, 145, 145]  # the cache and its native-load exist
    for d in (cache / "native-load", cache):
        os.chmod(d, 0o500)
    try:
        with pytest.warns(RuntimeWarning, match="permission denied"):
            assert _run(cpu, 106) == [146, 146, 146]
        _in_fallback(cache)
    finally:
        for d in (cache, cache / "native-load"):
            os.chmod(d, 0o700)


def test_cache_deleted_between_two_compiles(cpu, cache):
    assert _run(cpu, 107) == [147, 147, 147]
    shutil.rmtree(cache)
    with pytest.warns(RuntimeWarning, match="the directory was deleted"):
        assert _run(cpu, 108) == [148, 148, 148]
    _in_fallback(cache)


def test_probe_on_a_full_cache_disk_builds_in_the_fallback(cpu, cache, monkeypatch):
    _failing_writes(monkeypatch, str(cache), OSError(errno.ENOSPC, "No space left on device"))
    real = _driver._works_in

    def works_in(argv, flags, where):
        if where.startswith(str(cache)):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(argv, flags, where)

    monkeypatch.setattr(_driver, "_works_in", works_in)
    with pytest.warns(RuntimeWarning, match="the disk is full"):
        assert _driver._works(_driver.plain_argv(_driver.toolchain()), []) is True


def test_probe_with_nowhere_to_build_says_why(cpu, cache, monkeypatch):
    def works_in(argv, flags, where):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(_driver, "_works_in", works_in)
    monkeypatch.setattr(_driver, "lookup", lambda key: (None, None))  # no cached probe result
    with pytest.warns(RuntimeWarning), pytest.raises(kb.BackendUnavailableError, match="the disk is full") as info:
        _driver._probe()
    assert "no C++ compiler" not in str(info.value)


def test_a_compiler_that_could_not_write_its_output_is_not_no_compiler(tmp_path):
    """A nearly full disk: the compiler starts, then fails writing; that is the disk's fault."""
    cc = tmp_path / "cc"
    cc.write_text(
        '#!/bin/sh\nwhile [ "$1" != "-o" ]; do shift; done\necho "ld: final link failed: $2: No space left on device" >&2\nexit 1\n'
    )
    cc.chmod(0o755)
    with pytest.raises(OSError, match="No space left on device") as info:
        _driver._works_in((str(cc),), [], str(tmp_path))
    assert info.value.errno == errno.ENOSPC
