"""The suite's checks of compiling and launching, and of arrays of another backend."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import attrs
import numpy as np
import pytest

import kernelbay as kb

from .base import Suite, compile_watching_cache, make_rng, rule, sample


class LaunchTests(Suite):
    """Compile errors, saxpy against numpy, argument and geometry checks, closing kernels, traces, and copies and launches across backends."""

    # --- compile and launch ---------------------------------------------------------

    def test_compile_error_carries_the_log(self, device: kb.Device) -> None:
        with pytest.raises(kb.CompileError) as info:
            kb.compile(self.bad_source(), device=device)
        assert info.value.log.strip(), "CompileError.log must hold the compiler's output"

    def test_unsupported_language_is_named(self, device: kb.Device) -> None:
        with pytest.raises(kb.InvalidArgumentError, match="languages"):
            kb.compile(kb.Source("x", lang="no-such-language"), device=device)

    @pytest.mark.parametrize("n", [1, 1000, 100_003])
    def test_saxpy_matches_numpy(self, device: kb.Device, saxpy: kb.Kernel, n: int) -> None:
        rng = make_rng()
        xs, ys = sample(np.dtype("float32"), n, rng), sample(np.dtype("float32"), n, rng)
        got = self._run_saxpy(saxpy, device, 2.5, xs, ys)
        np.testing.assert_allclose(got, np.float32(2.5) * xs + ys, rtol=1e-6, atol=1e-6)

    def test_direct_hooks_behave_as_the_hooks(self, device: kb.Device, saxpy: kb.Kernel) -> None:
        """Rule (direct hooks, hookspecs *Direct*): where ``allocate``, ``free`` or ``launch``
        offers ``kernelbay_direct``, the core calls what it returns, and that gives what the hook
        gives: memory from either is freed by either, a launch through either computes the same.
        A backend without one passes (the hooks themselves run); ``profile_note``, where a kernel
        handle has one, is a string."""
        b = device.binding
        hooks = {h: getattr(b.plugin, f"kernelbay_{h}") for h in ("allocate", "free", "launch")}
        n = 1 << 12
        for alloc, free in ((b.allocate, hooks["free"]), (hooks["allocate"], b.free)):
            free(device, alloc(device, n))  # never raises, either way round
        x = kb.asarray(np.ones(n, np.float32), device=device)
        ys = [kb.zeros(n, "float32", device=device) for _ in range(2)]
        geo = self.saxpy_launch(n)
        for launch, y in zip((b.launch, hooks["launch"]), ys):
            launch(
                saxpy, geo["grid"], geo.get("block"), (x, y, np.float32(3), np.int32(n)), geo.get("shared_mem", 0), None
            )
        device.synchronize()
        np.testing.assert_array_equal(
            ys[0].numpy(),
            ys[1].numpy(),
            err_msg=rule("direct hooks", "a launch through the direct callable and through the hook differ"),
        )
        note = getattr(saxpy.handle, "profile_note", None)
        assert note is None or isinstance(note, str), rule(
            "profile_note", f"a kernel handle's profile_note is {note!r}: a string or absent"
        )

    def test_repeated_launches_see_new_arguments(self, device: kb.Device, saxpy: kb.Kernel) -> None:
        n = 4096
        x = kb.asarray(np.ones(n, np.float32), device=device)
        y = kb.zeros(n, "float32", device=device)
        geo = self.saxpy_launch(n)
        for a in (1.0, 2.0, 3.0):
            saxpy.launch(**geo, args=(x, y, np.float32(a), np.int32(n)))
        device.synchronize()
        np.testing.assert_array_equal(y.numpy(), np.full(n, 6.0, np.float32))

    def test_compile_twice_gives_a_working_kernel(self, device: kb.Device) -> None:
        k1 = kb.compile(self.saxpy_source(), device=device)
        k2 = kb.compile(self.saxpy_source(), device=device)
        rng = make_rng()
        xs, ys = sample(np.dtype("float32"), 300, rng), sample(np.dtype("float32"), 300, rng)
        np.testing.assert_allclose(self._run_saxpy(k2, device, -1.0, xs, ys), ys - xs, rtol=1e-6, atol=1e-6)
        assert k1.device == k2.device

    def test_compiles_from_several_threads(self, device: kb.Device) -> None:
        """``kb.compile`` from several threads at once (the hookspec allows it): the same source
        and variants of it, each a working kernel."""
        base = self.saxpy_source()
        sources: list[Any] = [base, base]
        if isinstance(base, kb.Source) and isinstance(base.code, str):
            sources += [attrs.evolve(base, code=f"{base.code}\n// conformance variant {i}\n") for i in range(4)]
        with ThreadPoolExecutor(len(sources)) as pool:
            kernels = list(pool.map(lambda s: kb.compile(s, device=device), sources))
        xs, ys = np.arange(64, dtype=np.float32), np.ones(64, np.float32)
        for k in kernels:
            got = self._run_saxpy(k, device, 3.0, xs, ys)
            np.testing.assert_allclose(
                got, 3.0 * xs + ys, rtol=1e-6, err_msg=rule("compile", "a kernel compiled in a thread")
            )

    def test_compile_to_cache_then_compile(self, device: kb.Device) -> None:
        """``kernelbay_compile_to_cache`` (or its fallback), as precompile's workers call it: a
        ``kb.compile`` of the same source afterwards reads the disk cache only (every lookup a
        hit, where the backend uses the disk cache) and gives a working kernel."""
        base = self.saxpy_source()
        langs = device.binding.spec.languages if device.binding.spec is not None else ()
        src = base if isinstance(base, kb.Source) else next(s for s in base if s.lang in langs)
        if isinstance(src.code, str):  # a new text: not in any cache yet
            src = attrs.evolve(src, code=f"{src.code}\n// compile_to_cache {time.time_ns()}\n")
        device.binding.compile_to_cache(device, src)
        kernel, found = compile_watching_cache(src, device)
        assert all(found), rule(
            "compile_to_cache", f"kb.compile after compile_to_cache missed the disk cache ({found.count(False)} misses)"
        )
        xs, ys = np.arange(64, dtype=np.float32), np.ones(64, np.float32)
        np.testing.assert_allclose(self._run_saxpy(kernel, device, 2.0, xs, ys), 2.0 * xs + ys, rtol=1e-6)

    def test_bad_geometry_is_rejected(self, device: kb.Device, saxpy: kb.Kernel) -> None:
        x = kb.zeros(4, "float32", device=device)
        y = kb.zeros(4, "float32", device=device)
        with pytest.raises(kb.InvalidArgumentError):
            saxpy.launch(grid=(0,), block=(1,), args=(x, y, np.float32(1), np.int32(4)))

    def test_wrong_argument_count_is_rejected(self, device: kb.Device, saxpy: kb.Kernel) -> None:
        if not self.validates_arg_count:
            pytest.skip(f"{self.backend} does not check argument counts")
        x = kb.zeros(4, "float32", device=device)
        with pytest.raises(kb.InvalidArgumentError):
            saxpy.launch(**self.saxpy_launch(4), args=(x, np.float32(1)))

    def test_closed_array_argument_is_rejected(self, device: kb.Device, saxpy: kb.Kernel) -> None:
        x = kb.zeros(4, "float32", device=device)
        y = kb.zeros(4, "float32", device=device)
        x.close()
        with pytest.raises(kb.UseAfterFreeError):
            saxpy.launch(**self.saxpy_launch(4), args=(x, y, np.float32(1), np.int32(4)))

    def test_closed_kernel_refuses_launches_and_compiles_again(self, device: kb.Device) -> None:
        """``Kernel.close()`` (the optional ``kernelbay_close_kernel`` hook, or its fallback)."""
        k = kb.compile(self.saxpy_source(), device=device)
        k.close()
        assert k.closed
        x, y = kb.zeros(4, "float32", device=device), kb.zeros(4, "float32", device=device)
        with pytest.raises(kb.UseAfterFreeError):
            k.launch(**self.saxpy_launch(4), args=(x, y, np.float32(1), np.int32(4)))
        k.close()  # twice is harmless
        again = kb.compile(self.saxpy_source(), device=device)
        xs, ys = np.arange(8, dtype=np.float32), np.ones(8, np.float32)
        np.testing.assert_allclose(self._run_saxpy(again, device, 2.0, xs, ys), 2.0 * xs + ys, rtol=1e-6)

    def test_close_lets_queued_launches_finish(self, device: kb.Device) -> None:
        """``kernelbay_close_kernel`` releases a kernel's code only after the launches already
        queued have run: launches queued on the default stream and on a user stream, closed at
        once, still give their results."""
        n = 1 << 16
        xs = np.arange(n, dtype=np.float32)
        k = kb.compile(self.saxpy_source(), device=device)
        x = kb.asarray(xs, device=device)
        y0, y1 = kb.zeros(n, "float32", device=device), kb.zeros(n, "float32", device=device)
        s = device.stream()
        for _ in range(4):
            k.launch(**self.saxpy_launch(n), args=(x, y0, np.float32(1), np.int32(n)))
            k.launch(**self.saxpy_launch(n), args=(x, y1, np.float32(1), np.int32(n)), stream=s)
        k.close()  # before any synchronize
        device.synchronize()
        why = rule(
            "close a kernel with launches queued",
            "launches queued before Kernel.close() did not all run: kernelbay_close_kernel must release the "
            "code only after they finish, and kernelbay_synchronize(device, None) must wait for every stream",
        )
        np.testing.assert_allclose(y0.numpy(), 4 * xs, rtol=1e-6, err_msg=why)
        np.testing.assert_allclose(y1.numpy(), 4 * xs, rtol=1e-6, err_msg=why)

    def test_trace_records_this_backends_work(self, device: kb.Device, saxpy: kb.Kernel, tmp_path: Any) -> None:
        """A trace (the core's tracer, and the optional ``kernelbay_device_timer`` hook, whose
        fallback is host spans only) has host spans for the launch and copies, and any device
        span belongs to one of them."""
        import json

        path = tmp_path / "trace.json"
        xs, ys = np.arange(8, dtype=np.float32), np.ones(8, np.float32)
        with kb.trace(path):
            self._run_saxpy(saxpy, device, 2.0, xs, ys)
        with open(path, encoding="utf-8") as f:
            events = [e for e in json.load(f)["traceEvents"] if e["ph"] == "X"]
        cats = [e.get("cat") for e in events]
        assert cats.count("launch") == 1, cats
        assert "copy" in cats, cats
        host = [e for e in events if e.get("cat") != "device"]
        flows = {e["args"].get("flow") for e in host if "flow" in e.get("args", {})}
        for d in (e for e in events if e.get("cat") == "device"):
            assert d["args"].get("flow") in flows, d

    def test_a_second_trace_after_the_timer_closed(self, device: kb.Device, saxpy: kb.Kernel, tmp_path: Any) -> None:
        """Rule (``kernelbay_device_timer``): the tracer calls the timer's optional ``close()`` when
        a trace ends; the next trace must time this backend's work as the first one did."""
        import json

        xs, ys = np.arange(8, dtype=np.float32), np.ones(8, np.float32)
        counts = []
        for i in range(2):
            path = tmp_path / f"trace{i}.json"
            with kb.trace(path):
                self._run_saxpy(saxpy, device, 2.0, xs, ys)
            with open(path, encoding="utf-8") as f:
                events = json.load(f)["traceEvents"]
            counts.append(sum(1 for e in events if e["ph"] == "X" and e.get("cat") == "device"))
        assert counts[1] == counts[0], (
            f"device spans: {counts[0]} in the first trace, {counts[1]} in the next; a device timer's close() "
            "must leave the backend able to time the next trace (kernelbay_device_timer)"
        )

    def test_synchronize(self, device: kb.Device) -> None:
        device.synchronize()
        kb.device(str(device)).synchronize()
