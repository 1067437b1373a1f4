"""The runner object (runners.py): the kernel-independent runtime compiled once per compiler and
flags into the cache, linked into each module, and never a cause of a wrong or failed build."""

from __future__ import annotations

import os
import shutil

import kernelbay as kb
import numpy as np
import pytest
from kernelbay.errors import CompileError
from kernelbay_cpu import _driver, runners

SAXPY = r"""
__global__ void saxpy(const float* x, float* y, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] += a * x[i];
}
"""

# On fibers (a barrier outside the loop path's reach: a `volatile` local keeps it there), with a
# warp shuffle: the scheduler, the barrier and the warp operations all live in the object.
FIBERS = r"""
__global__ void wsum(const float* x, float* out, int n) {
    volatile int keep = 0; (void)keep;
    __shared__ float s[32];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float v = i < n ? x[i] : 0.0f;
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
    if ((threadIdx.x & 31) == 0) s[threadIdx.x / 32] = v;
    __syncthreads();
    if (threadIdx.x == 0) {
        float t = 0.0f;
        for (int w = 0; w < blockDim.x / 32; ++w) t += s[w];
        out[blockIdx.x] = t;
    }
}
"""


def _objects(cache: str) -> list[str]:
    d = os.path.join(cache, "pch")
    return sorted(f for f in os.listdir(d) if f.endswith(".o")) if os.path.isdir(d) else []


def _saxpy(cpu, text: str, options: tuple[str, ...] = ()) -> None:
    k = kb.compile(kb.Source(text, lang="cuda", name="saxpy", options=options), cpu)
    x = kb.asarray(np.arange(300, dtype=np.float32), device=cpu)
    y = kb.asarray(np.ones(300, np.float32), device=cpu)
    k.launch(2, 256, (x, y, np.float32(2.0), 300))
    np.testing.assert_array_equal(y.numpy(), 1 + 2 * np.arange(300, dtype=np.float32))


# Each test's sources carry their own comment: the process keeps modules by source, across caches.
def _wsum(cpu, tag: str) -> None:
    k = kb.compile(kb.Source(FIBERS + f"\n// test_runners: {tag}\n", lang="cuda", name="wsum"), cpu)
    assert k.handle.fibers
    xs = np.arange(512, dtype=np.float32)
    x, out = kb.asarray(xs, device=cpu), kb.zeros(4, "float32", device=cpu)
    k.launch(4, 128, (x, out, 500))
    want = np.where(np.arange(512) < 500, xs, 0).reshape(4, 128).sum(1)
    np.testing.assert_array_equal(out.numpy(), want)


def test_one_object_per_flags_reused_by_later_compiles(cpu, fresh_cache):
    _saxpy(cpu, SAXPY + "\n// test_runners: first\n")
    first = _objects(fresh_cache)
    assert len(first) == 1
    _wsum(cpu, "same flags, another kernel")
    assert _objects(fresh_cache) == first
    _saxpy(cpu, SAXPY + "\n// test_runners: first\n", options=("-DKB_TEST_FLAG=1",))  # other flags: another object
    assert len(_objects(fresh_cache)) == 2


def test_a_c_plus_plus_module_links_its_own_object(cpu, fresh_cache):
    src = r"""
void fill(float* y, int n) {
    for (unsigned t = 0; t < kb::blockDim().x; ++t) {
        int i = kb::blockIdx().x * kb::blockDim().x + t;
        if (i < n) y[i] = 2.0f * i;
    }
}
"""
    k = kb.compile(kb.Source(src, lang="c++", name="fill"), cpu)
    y = kb.zeros(300, "float32", device=cpu)
    k.launch(3, 128, (y, 300))
    np.testing.assert_array_equal(y.numpy(), 2 * np.arange(300, dtype=np.float32))
    _saxpy(cpu, SAXPY + "\n// test_runners: beside a c++ module\n")
    assert len(_objects(fresh_cache)) == 2  # the c++ prelude's and the cuda prelude's


def test_a_damaged_object_is_built_again(cpu, fresh_cache):
    _saxpy(cpu, SAXPY + "\n// test_runners: damaged: first\n")
    (name,) = _objects(fresh_cache)
    path = os.path.join(fresh_cache, "pch", name)
    with open(path, "wb") as f:
        f.write(b"not an object file at all")
    _wsum(cpu, "linked past the damaged object")
    assert not os.path.exists(path)  # dropped: the next compile builds it again
    _saxpy(cpu, SAXPY + "\n// test_runners: after the damage\n")
    assert _objects(fresh_cache) == [name]
    with open(path, "rb") as f:
        assert f.read(4) == b"\x7fELF"


def test_without_an_object_the_module_compiles_the_runners_itself(cpu, fresh_cache, monkeypatch):
    monkeypatch.setattr("kernelbay_cpu.build.runner_object", lambda *a: None)
    _saxpy(cpu, SAXPY + "\n// test_runners: no object\n")
    _wsum(cpu, "no object")
    assert _objects(fresh_cache) == []


def test_a_kernel_error_is_reported_once_with_its_line(cpu, fresh_cache):
    with pytest.raises(CompileError) as e:
        kb.compile(kb.Source("__global__ void bad(float* y) {\n  y[0] = undefined_name;\n}\n", lang="cuda"), cpu)
    assert e.value.lines == {2}
    assert len(_objects(fresh_cache)) == 1  # the object is not blamed for the kernel's error


def test_the_linker_is_probed_once_and_kept(cpu, fresh_cache, monkeypatch):
    _saxpy(cpu, SAXPY + "\n// test_runners: probe\n")
    (name,) = _objects(fresh_cache)
    with open(os.path.join(fresh_cache, "pch", name[:-2] + ".ld"), encoding="utf-8") as f:
        linker = f.read()
    assert linker in ("gold", "default")
    if shutil.which("ld.gold") and "clang" not in _driver.toolchain().version.lower():
        assert linker == "gold"
    # kept: a later compile with these flags runs no probe (nor object build) again
    monkeypatch.setattr(runners, "_build", lambda *a, **k: pytest.fail("built again"))
    _saxpy(cpu, SAXPY + "\n// test_runners: no second probe\n")


def test_a_users_own_linker_choice_is_kept(cpu, fresh_cache):
    _saxpy(cpu, SAXPY + "\n// test_runners: bfd\n", options=("-fuse-ld=bfd",))
    (name,) = _objects(fresh_cache)
    with open(os.path.join(fresh_cache, "pch", name[:-2] + ".ld"), encoding="utf-8") as f:
        assert f.read() == "default"  # no gold added next to the user's -fuse-ld=
