"""The precompiled prelude (pch.py): built once per compiler and flags into the cache, reused by
later cold compiles, and never a cause of a wrong or failed build."""

from __future__ import annotations

import os

import kernelbay as kb
import numpy as np
import pytest
from kernelbay_cpu import _driver, pch

SAXPY = r"""
__global__ void saxpy(const float* x, float* y, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] += a * x[i];
}
"""

pytestmark = pytest.mark.skipif(not pch._enabled(_driver.toolchain()), reason="precompiled headers are GCC's")


def _gch(cache: str) -> list[str]:
    d = os.path.join(cache, "pch")
    return sorted(f for f in os.listdir(d) if f.endswith(".gch")) if os.path.isdir(d) else []


def _run(cpu, text: str, options: tuple[str, ...] = ()) -> None:
    k = kb.compile(kb.Source(text, lang="cuda", name="saxpy", options=options), cpu)
    x = kb.asarray(np.arange(300, dtype=np.float32), device=cpu)
    y = kb.asarray(np.ones(300, np.float32), device=cpu)
    k.launch(2, 256, (x, y, np.float32(2.0), 300))
    np.testing.assert_array_equal(y.numpy(), 1 + 2 * np.arange(300, dtype=np.float32))


def test_one_precompiled_prelude_per_flags_reused_by_later_compiles(cpu, fresh_cache):
    _run(cpu, SAXPY)
    first = _gch(fresh_cache)
    assert len(first) == 1
    _run(cpu, SAXPY + "\n// another source, same flags\n")
    assert _gch(fresh_cache) == first
    _run(cpu, SAXPY, options=("-DKB_TEST_FLAG=1",))  # other flags: another prelude
    assert len(_gch(fresh_cache)) == 2


def test_a_damaged_precompiled_prelude_is_read_past(cpu, fresh_cache):
    _run(cpu, SAXPY + "\n// damaged: first\n")
    (name,) = _gch(fresh_cache)
    with open(os.path.join(fresh_cache, "pch", name), "r+b") as f:
        f.write(b"not a precompiled header at all")
    _run(cpu, SAXPY + "\n// compiled with the damaged file beside the prelude\n")


def test_kernelbay_cpu_pch_0_turns_it_off(cpu, fresh_cache, monkeypatch):
    monkeypatch.setenv("KERNELBAY_CPU_PCH", "0")
    _run(cpu, SAXPY + "\n// no pch\n")
    assert _gch(fresh_cache) == []
