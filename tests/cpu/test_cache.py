"""The in-process module cache and the disk cache, seen from a fresh process."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import textwrap

import kernelbay as kb
import numpy as np

SRC = r"""
__global__ void fill(int* y, int v, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = v + %d;
}
"""


def test_second_compile_reuses_the_module(cpu, fresh_cache):
    src = kb.Source(SRC % 1, lang="cuda", name="fill")
    k1 = kb.compile(src, cpu)
    k2 = kb.compile(kb.Source(SRC % 1, lang="cuda", name="fill"), cpu)
    assert k1.handle is k2.handle


def _wrapper(tmp_path) -> str:
    """A compiler that logs each run, so a test can tell whether the compiler ran."""
    import shutil

    real = shutil.which("c++") or shutil.which("g++") or shutil.which("clang++")
    log = tmp_path / "compiler-runs.log"
    w = tmp_path / "logging-c++"
    w.write_text(f'#!/bin/sh\necho "$@" >> "{log}"\nexec "{real}" "$@"\n')
    w.chmod(w.stat().st_mode | stat.S_IEXEC)
    return str(w)


CHILD = textwrap.dedent(
    """
    import sys, numpy as np, kernelbay as kb
    src = kb.Source(sys.argv[1], lang="cuda", name="fill")
    k = kb.compile(src, "cpu")
    y = kb.zeros(5, "int32", device="cpu")
    k.launch(1, 8, (y, np.int32(40), np.int32(5)))
    print(y.numpy().tolist())
    """
)


def test_disk_cache_hit_in_a_fresh_process_runs_no_compiler(tmp_path):
    env = dict(os.environ, KERNELBAY_CACHE_DIR=str(tmp_path / "cache"), CXX=_wrapper(tmp_path))
    log = tmp_path / "compiler-runs.log"
    run = [sys.executable, "-c", CHILD, SRC % 2]
    first = subprocess.run(run, env=env, capture_output=True, text=True, timeout=600)
    assert first.returncode == 0, first.stderr
    assert first.stdout.strip() == "[42, 42, 42, 42, 42]"
    runs = log.read_text().splitlines()
    assert any("kb_main.cpp" in r for r in runs)
    log.unlink()
    second = subprocess.run(run, env=env, capture_output=True, text=True, timeout=600)
    assert second.returncode == 0, second.stderr
    assert second.stdout.strip() == "[42, 42, 42, 42, 42]"
    assert not log.exists(), "the compiler ran although the disk cache held the module"


def test_changed_options_or_source_miss_the_cache(tmp_path):
    env = dict(os.environ, KERNELBAY_CACHE_DIR=str(tmp_path / "cache"), CXX=_wrapper(tmp_path))
    log = tmp_path / "compiler-runs.log"
    for code in (SRC % 3, SRC % 4):
        r = subprocess.run([sys.executable, "-c", CHILD, code], env=env, capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, r.stderr
    assert sum("kb_main.cpp" in line for line in log.read_text().splitlines()) == 2


def test_options_override_defaults(cpu, fresh_cache, monkeypatch, tmp_path):
    monkeypatch.setenv("CXX", _wrapper(tmp_path))  # the probe is per process: CXX is read from it
    from kernelbay_cpu import _driver, flags

    fl = flags.flags(["-O1", "-march=x86-64", "-fno-openmp", "-DVALUE=3"], _driver.toolchain())
    assert "-O1" in fl and "-O3" not in fl
    assert "-march=x86-64" in fl and "-march=native" not in fl
    assert "-fopenmp" not in fl and "-DVALUE=3" in fl
    src = kb.Source("__global__ void k(int* y) { y[0] = VALUE; }", lang="cuda", name="k", options=("-DVALUE=3", "-O1"))
    y = kb.zeros(1, "int32", device=cpu)
    kb.compile(src, cpu).launch(1, 1, (y,))
    assert y.numpy()[0] == 3


def test_headers_are_includable(cpu, fresh_cache):
    src = kb.Source(
        '#include "helpers/twice.cuh"\n__global__ void k(int* y) { y[0] = twice(21); }',
        lang="cuda",
        name="k",
        headers={"helpers/twice.cuh": "__device__ int twice(int v) { return 2 * v; }"},
    )
    y = kb.zeros(1, "int32", device=cpu)
    kb.compile(src, cpu).launch(1, 1, (y,))
    assert y.numpy()[0] == 42
    assert np.asarray(y).dtype == np.int32
