"""Releasing CUDA modules on a real GPU: ``Kernel.close()`` unloads (after the queued work), the
bounded cache keeps loaded modules flat without it. Skips without a GPU; fails instead under
--kernelbay-require=cuda. (tests/cuda/test_module_release.py checks the logic with a fake driver.)
"""

from __future__ import annotations

import gc
import uuid

import kernelbay as kb
import numpy as np
import pytest
from kernelbay_cuda import compiler, modules

pytestmark = pytest.mark.kernelbay_device("cuda")

MiB = 1 << 20

SPIN = r"""
extern "C" __global__ void spin_write(long long cycles, float* out, float v, int n) {
    long long t0 = clock64();
    while (clock64() - t0 < cycles) {}
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = v;
}
"""


@pytest.fixture
def dev() -> kb.Device:
    return kb.device("cuda:0")


def _src(tag: str, i: int) -> kb.Source:
    return kb.Source(f'extern "C" __global__ void r{tag}_{i}(int* x) {{ x[0] = {i}; }}', "cuda", name=f"r{tag}_{i}")


def _unique(text: str) -> str:
    """The same kernel in a source no other test compiled (so this test's close is the last)."""
    return f"// {uuid.uuid4().hex}\n{text}"


def _settled() -> dict[str, int]:
    """Module counts once earlier tests' garbage is collected and unloaded."""
    gc.collect()
    modules.flush_pending()
    return compiler.module_stats()


def test_closing_distinct_kernels_keeps_modules_and_memory_flat(dev) -> None:
    tag = uuid.uuid4().hex[:8]
    x = kb.zeros(1, "int32", device=dev)
    for i in range(20):  # warm: allocator, caches
        with kb.compile(_src(tag + "w", i), dev) as k:
            k.launch(1, 1, (x,))
    dev.synchronize()
    base, free0, unloaded0 = _settled(), modules.gpu_free_bytes(0), modules._counts["unloaded"]
    for i in range(300):
        k = kb.compile(_src(tag, i), dev)
        k.launch(1, 1, (x,))
        k.close()
        assert compiler.module_stats()["modules_loaded"] <= base["modules_loaded"]
    assert int(x.numpy()[0]) == 299
    after = compiler.module_stats()
    assert modules._counts["unloaded"] - unloaded0 >= 300
    assert after["unload_failures"] == base["unload_failures"] and after["modules_pending_unload"] == 0
    assert modules.gpu_free_bytes(0) >= free0 - 8 * MiB, "device memory grew with closed kernels"


def test_the_bound_keeps_modules_flat_without_close(dev, monkeypatch) -> None:
    monkeypatch.setattr(compiler.cache, "bound", 8)
    tag = uuid.uuid4().hex[:8]
    x = kb.zeros(1, "int32", device=dev)
    base = _settled()["modules_loaded"]
    most = 0
    for i in range(200):
        kb.compile(_src(tag, i), dev).launch(1, 1, (x,))  # never closed
        most = max(most, compiler.module_stats()["modules_loaded"] - base)
    assert int(x.numpy()[0]) == 199
    assert most <= 8 + modules.COLLECT_EVERY + 1, f"{most} modules loaded at once"


def test_close_waits_for_launches_queued_on_any_stream(dev) -> None:
    k = kb.compile(kb.Source(_unique(SPIN), "cuda", name="spin_write"), dev)
    n = 1 << 16
    y = kb.zeros(n, device=dev)
    s = dev.stream()
    k.launch(n // 256, 256, (np.int64(dev.properties["clock_khz"] * 200), y, np.float32(7), np.int32(n)), stream=s)
    assert not s.query()  # queued, still running
    before = modules._counts["unloaded"]
    k.close()
    assert s.query(), "close() returned (and unloaded the module) before the queued launch finished"
    assert modules._counts["unloaded"] == before + 1
    np.testing.assert_array_equal(y.numpy(), np.full(n, 7, np.float32))


def test_a_shared_module_stays_until_the_last_kernel_closes(dev) -> None:
    src = kb.Source(_unique(SPIN), "cuda", name="spin_write")
    a, b = kb.compile(src, dev), kb.compile(src, dev)
    loaded = _settled()["modules_loaded"]
    a.close()
    with pytest.raises(kb.UseAfterFreeError, match="after close"):
        a.launch(1, 32, (np.int64(0), kb.zeros(32, device=dev), np.float32(1), np.int32(32)))
    y = kb.zeros(32, device=dev)
    b.launch(1, 32, (np.int64(0), y, np.float32(3), np.int32(32)))
    np.testing.assert_array_equal(y.numpy(), np.full(32, 3, np.float32))
    assert compiler.module_stats()["modules_loaded"] == loaded
    b.close()
    assert compiler.module_stats()["modules_loaded"] == loaded - 1


def test_a_graph_of_a_closed_kernel_is_refused(dev) -> None:
    k = kb.compile(kb.Source(_unique(SPIN), "cuda", name="spin_write"), dev)
    y = kb.zeros(256, device=dev)
    with dev.graph() as g:
        k.launch(1, 256, (np.int64(0), y, np.float32(5), np.int32(256)))
    g.replay()
    np.testing.assert_array_equal(y.numpy(), np.full(256, 5, np.float32))
    k.close()
    with pytest.raises(kb.UseAfterFreeError, match="kernel of step 0"):
        g.replay()
