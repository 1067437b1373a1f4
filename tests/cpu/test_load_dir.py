"""The cpu backend loads kernel objects from the cache's private directory, not from TMPDIR
(a noexec /tmp must not break it, nor read as "no C++ compiler")."""

from __future__ import annotations

import ctypes
import os

import kernelbay as kb
import numpy as np
from kernelbay_cpu import _driver, _loader


def test_kernels_are_loaded_from_the_cache_directory(tmp_path, monkeypatch) -> None:
    cache = tmp_path / "kbcache"
    monkeypatch.setenv("KERNELBAY_CACHE_DIR", str(cache))
    seen: list[str] = []
    real = ctypes.CDLL

    def spy(path, *a, **k):
        seen.append(str(path))
        return real(path, *a, **k)

    monkeypatch.setattr(_driver.ctypes, "CDLL", spy)
    src = 'extern "C" __global__ void inc(float* x) { x[threadIdx.x] += 1.0f; }'
    k = kb.compile(kb.Source(src, "cuda", name="inc", options=("-DKB_LOAD_DIR_TEST=1",)), device=kb.device("cpu"))
    x = kb.asarray(np.zeros(4, np.float32), device=kb.device("cpu"))
    k.launch(grid=1, block=4, args=(x,))
    assert np.array_equal(x.numpy(), np.ones(4, np.float32))
    # Files loaded by path; bare names are system libraries: the OpenMP runtime where a module
    # cannot pin its own (RTLD_NOLOAD), libmvec (the toolchain probe's question, where it runs).
    files = [p for p in seen if os.sep in p]
    assert files and all(p.startswith(str(cache / "native-load") + os.sep) for p in files), seen
    assert all(p in (*_loader._THREAD_LIBRARIES, "libmvec.so.1") for p in seen if os.sep not in p), seen
