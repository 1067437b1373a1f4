"""Releasing CUDA modules (``Kernel.close()``, the bounded in-process cache), without a GPU.

NVRTC compiles for real; the driver's module calls are a fake that records what happens, so
the order (synchronise, then unload), the reference counting and the bound are checked here.
tests/cuda/test_module_release_gpu.py checks the same on a GPU.
"""

from __future__ import annotations

import collections
import gc
import types

import kernelbay as kb
import pytest
from kernelbay_cuda import _driver, compiler, modules


class FakeDriver:
    """The driver calls of modules and kernels: loaded modules, and a log of syncs and unloads."""

    def __init__(self) -> None:
        self.live: set[int] = set()
        self.next = 0x1000
        self.log: list[str] = []
        self.sync_rc = 0  # what cuCtxSynchronize returns (900: a stream capture is in progress)

    def cuModuleLoadDataEx(self, ref, data, n, opts, vals) -> int:
        self.next += 16
        ref._obj.value = self.next
        self.live.add(self.next)
        return 0

    def cuModuleGetFunction(self, ref, mod, name) -> int:
        assert mod.value in self.live, "a function looked up in an unloaded module"
        ref._obj.value = mod.value + 1
        return 0

    def cuFuncGetAttribute(self, ref, attr, fn) -> int:
        return 1  # not known: the device's limits are used

    def cuCtxSynchronize(self) -> int:
        self.log.append(f"sync:{self.sync_rc}")
        return self.sync_rc

    def cuModuleUnload(self, mod) -> int:
        if self.sync_rc:
            return self.sync_rc
        assert mod.value in self.live, "a module unloaded twice"
        assert self.log and self.log[-1] == "sync:0", "a module unloaded without synchronising first"
        self.live.remove(mod.value)
        self.log.append("unload")
        return 0


class FakeDevice:
    index = 0
    properties = {"compute_capability": (8, 0), "max_threads_per_block": 1024}

    def __str__(self) -> str:
        return "cuda:0"


@pytest.fixture
def drv(monkeypatch, cache_dir):
    fake = FakeDriver()
    monkeypatch.setattr(_driver, "libcuda", lambda: fake)
    monkeypatch.setattr(_driver, "ensure_current", lambda index: None)
    monkeypatch.setattr(_driver, "check_alive", lambda index: None)
    monkeypatch.setattr(_driver, "dead_reason", lambda index: None)
    monkeypatch.setattr(compiler, "cache", modules.KernelCache())
    monkeypatch.setattr(modules, "_pending", collections.deque())
    yield fake
    # every fake module released under the fake driver, before the real one is back
    fake.sync_rc = 0
    compiler.cache.kernels.clear()
    gc.collect()
    modules.flush_pending()


DEV = FakeDevice()


def src(i: int) -> kb.Source:
    return kb.Source(f'extern "C" __global__ void k{i}(int* x) {{ x[0] = {i}; }}', "cuda", name=f"k{i}")


def compile(source: kb.Source) -> types.SimpleNamespace:
    """What the core's kb.compile does: wrap the hook's result (close() passes the wrapper)."""
    return types.SimpleNamespace(handle=compiler.compile_kernel(DEV, source))


def close(kernel: types.SimpleNamespace) -> None:
    compiler.close_kernel(kernel)


def test_the_last_close_synchronises_then_unloads(drv) -> None:
    a, b = compile(src(1)), compile(src(1))
    assert a.handle is b.handle and len(drv.live) == 1  # one kernel, one module, two users
    close(a)
    assert len(drv.live) == 1 and drv.log == [], "unloaded while another kernel of it is open"
    close(b)
    assert drv.live == set() and drv.log == ["sync:0", "unload"]
    with pytest.raises(kb.UseAfterFreeError, match="after close"):
        b.handle.entry(1, 1, (), 0, None)  # whatever reaches the backend's entry is refused
    assert isinstance(kb.UseAfterFreeError("x"), kb.InvalidArgumentError)
    again = compile(src(1))  # out of the cache: compiled (here: read from the disk cache) anew
    assert again.handle is not b.handle and len(drv.live) == 1
    assert compiler.module_stats()["kernel_cache"] == 1


def test_kernels_sharing_a_module_keep_it_until_both_close(drv) -> None:
    text = 'extern "C" __global__ void a(int* x) { x[0] = 1; }\nextern "C" __global__ void b(int* x) { x[0] = 2; }'
    ka = compile(kb.Source(text, "cuda", name="a", name_expressions=("a", "b")))
    kb_ = compile(kb.Source(text, "cuda", name="b", name_expressions=("a", "b")))
    assert ka.handle is not kb_.handle and ka.handle.module is kb_.handle.module and len(drv.live) == 1
    close(kb_)
    assert len(drv.live) == 1
    assert kb_.handle.module.handle is not None  # its module: still loaded for ka
    close(ka)
    assert drv.live == set() and drv.log == ["sync:0", "unload"]


def test_the_bound_keeps_loaded_modules_flat_without_close(drv, monkeypatch) -> None:
    monkeypatch.setattr(compiler.cache, "bound", 4)
    monkeypatch.setattr(modules, "COLLECT_EVERY", 8)
    held = compile(src(0))  # left the cache early, but held: stays loaded and usable
    most = 0
    for i in range(1, 60):
        compile(src(i))  # never closed; the wrapper is dropped at once
        most = max(most, len(drv.live))
        assert len(compiler.cache) <= 4
    assert most <= 1 + 4 + 8, f"{most} modules loaded at once"
    assert drv.log.count("unload") >= 59 - 4 - 8
    assert all(e == "sync:0" for e in drv.log[::2]), "every unload comes after a synchronisation"
    assert held.handle.module.handle in drv.live
    close(held)
    assert held.handle.module.handle is None


def test_a_stream_capture_postpones_the_unload(drv) -> None:
    k = compile(src(7))
    drv.sync_rc = 900  # CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED: cuCtxSynchronize is forbidden now
    close(k)
    assert len(drv.live) == 1 and compiler.module_stats()["modules_pending_unload"] == 1
    with pytest.raises(kb.UseAfterFreeError):
        k.handle.entry(1, 1, (), 0, None)  # refused at once, though not yet unloaded
    drv.sync_rc = 0
    compile(src(8))  # the next compile (or close) tries again
    assert len(drv.live) == 1 and compiler.module_stats()["modules_pending_unload"] == 0


def test_the_bound_is_validated() -> None:
    with pytest.raises(kb.InvalidArgumentError, match="bound"):
        compiler.set_max_kernels(0)
