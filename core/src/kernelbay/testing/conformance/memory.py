"""The suite's checks of a backend's identity, memory and copies, and the NumPy protocol."""

from __future__ import annotations

import re
from collections.abc import Mapping

import numpy as np
import pytest

import kernelbay as kb
from kernelbay.hookspecs import API_VERSION

from .base import Suite, make_rng, rule, sample


class MemoryTests(Suite):
    """The backend declares itself and numbers its devices; memory round-trips, is freed, and refuses use after free."""

    # --- identity -------------------------------------------------------------------

    def test_backend_declares_itself(self, device: kb.Device) -> None:
        rec = {b.name: b for b in kb.backends()}[self.backend]
        assert rec.status == "available"
        assert rec.reason is None
        spec = rec.spec
        assert spec is not None and spec.name == self.backend
        assert spec.api_version == API_VERSION, rule(
            "api_version",
            f"BackendSpec.api_version is {spec.api_version}; a backend writes the literal version of the "
            f"contract it was built for, and this kernelbay provides {API_VERSION}",
        )
        assert spec.languages, "a backend must accept at least one language"
        assert isinstance(spec.priority, int)

    def test_devices_are_numbered_and_selectable(self, device: kb.Device) -> None:
        devs = [d for d in kb.devices() if d.backend == self.backend]
        assert [d.index for d in devs] == list(range(len(devs)))
        assert device == devs[0]
        assert kb.device(str(devs[-1])) == devs[-1]
        assert str(device) == f"{self.backend}:0"

    # --- memory ---------------------------------------------------------------------

    def test_round_trip_dtypes(self, device: kb.Device, dtype: str) -> None:
        """One test per dtype of ``dtypes`` (default: every dtype of the core's table numpy has)."""
        host = sample(np.dtype(dtype), 1000, make_rng())
        arr = kb.asarray(host, device=device)
        assert arr.device == device and arr.shape == host.shape and arr.dtype == host.dtype
        assert arr.nbytes == host.nbytes
        np.testing.assert_array_equal(arr.numpy(), host)

    def test_round_trip_sizes(self, device: kb.Device) -> None:
        rng = make_rng()
        for n in self.sizes:
            host = sample(np.dtype("float32"), n, rng)
            arr = kb.empty(n, "float32", device=device)
            kb.copy(arr, host)
            back = np.full(n, np.nan, np.float32)
            kb.copy(back, arr)
            np.testing.assert_array_equal(back, host)

    def test_multidimensional_shape(self, device: kb.Device) -> None:
        host = sample(np.dtype("int32"), 60, make_rng()).reshape(3, 4, 5)
        arr = kb.asarray(host, device=device)
        assert arr.shape == (3, 4, 5) and arr.ndim == 3 and arr.size == 60
        np.testing.assert_array_equal(arr.numpy(), host)

    def test_device_to_device_copy(self, device: kb.Device) -> None:
        host = sample(np.dtype("float32"), 5000, make_rng())
        a = kb.asarray(host, device=device)
        b = kb.empty(host.shape, host.dtype, device=device)
        assert kb.copy(b, a) is b
        device.synchronize()
        np.testing.assert_array_equal(b.numpy(), host)

    def test_zeros(self, device: kb.Device) -> None:
        z = kb.zeros((17, 3), "float64", device=device)
        np.testing.assert_array_equal(z.numpy(), np.zeros((17, 3)))

    def test_copy_rejects_size_and_dtype_mismatch(self, device: kb.Device) -> None:
        a = kb.empty(8, "float32", device=device)
        with pytest.raises(kb.InvalidArgumentError, match="size"):
            kb.copy(a, np.zeros(9, np.float32))
        with pytest.raises(kb.InvalidArgumentError, match="dtype"):
            kb.copy(a, np.zeros(8, np.int32))

    def test_use_after_free_raises(self, device: kb.Device) -> None:
        a = kb.asarray(np.arange(4, dtype=np.float32), device=device)
        a.close()
        a.close()  # twice is harmless
        assert a.closed
        with pytest.raises(kb.UseAfterFreeError):
            a.numpy()
        with pytest.raises(kb.UseAfterFreeError):
            kb.copy(a, np.zeros(4, np.float32))

    def test_context_manager_frees(self, device: kb.Device) -> None:
        with kb.empty(16, "uint8", device=device) as buf:
            assert not buf.closed
        assert buf.closed

    def test_many_allocations_are_released(self, device: kb.Device) -> None:
        for _ in range(200):
            a = kb.empty(1 << 16, "uint8", device=device)
            a.close()
        for _ in range(200):
            kb.empty(1 << 16, "uint8", device=device)  # freed when collected

    def test_freed_memory_is_reused_or_kept_aside(self, device: kb.Device) -> None:
        """Rule (``kernelbay_free``): a freed buffer's memory is released or kept aside for
        reuse, so a loop that allocates and frees more than fits at once runs; a driver that
        defers its releases must still let the next allocation succeed."""
        n = 1 << 22
        for i in range(64):  # 256 MiB in all, 4 MiB alive at a time
            try:
                a = kb.empty(n, "uint8", device=device)
            except kb.OutOfMemoryError as exc:
                pytest.fail(
                    rule("freed memory", f"allocation {i} of 4 MiB failed after freeing the earlier ones: {exc}")
                )
            a.close()

    def test_memory_stats_or_unsupported(self, device: kb.Device) -> None:
        try:
            stats = device.memory_stats()
        except kb.UnsupportedError:
            return
        assert isinstance(stats, kb.MemoryStats)
        assert 0 <= stats.active <= stats.peak

    def test_memory_stats_counters(self, device: kb.Device) -> None:
        """``MemoryStats.counters``: ``snake_case`` names, non-negative ints that never decrease
        (an empty mapping, or no ``kernelbay_memory_stats`` at all, passes)."""
        try:
            before = device.memory_stats()
        except kb.UnsupportedError:
            return  # no stats, so no counters: nothing a user could read
        check_counters(before.counters)
        for _ in range(4):  # work a backend may count: allocations, frees, copies, a fill
            a = kb.zeros(1 << 16, "uint8", device=device)
            a.numpy()
            a.close()
        device.synchronize()
        after = device.memory_stats()
        check_counters(after.counters, before.counters)


#: A counter's name: ``snake_case``.
_COUNTER_NAME = re.compile(r"[a-z][a-z0-9_]*")


def check_counters(counters: Mapping[str, int], earlier: Mapping[str, int] | None = None) -> None:
    """Fail naming the rule unless ``counters`` holds ``snake_case`` names of non-negative
    ints, none below its value in ``earlier`` (and none of ``earlier`` gone)."""
    name = "memory_stats counters"
    if not isinstance(counters, Mapping):
        pytest.fail(rule(name, f"MemoryStats.counters is a {type(counters).__name__}, not a mapping"), pytrace=False)
    for key, value in counters.items():
        if not isinstance(key, str) or not _COUNTER_NAME.fullmatch(key):
            pytest.fail(rule(name, f"counter name {key!r} is not snake_case ([a-z][a-z0-9_]*)"), pytrace=False)
        if type(value) is not int or value < 0:
            pytest.fail(
                rule(name, f"counter {key!r} is {type(value).__name__} {value!r}; a counter is a non-negative int"),
                pytrace=False,
            )
    for key, value in (earlier or {}).items():
        if key not in counters:
            pytest.fail(
                rule(name, f"counter {key!r} ({value}) disappeared; a counter stays once reported"), pytrace=False
            )
        if counters[key] < value:
            pytest.fail(
                rule(name, f"counter {key!r} went down from {value} to {counters[key]}; counters never decrease"),
                pytrace=False,
            )

    def test_clear_cache_or_its_fallback(self, device: kb.Device) -> None:
        """``kernelbay_clear_cache`` (optional; fallback ``UnsupportedError``): live buffers
        keep their contents, and memory stats (where there are any) show less cached after."""
        host = np.arange(1000, dtype=np.float32)
        keep = kb.asarray(host, device=device)
        kb.empty(1 << 20, "uint8", device=device).close()
        if not self.implements("kernelbay_clear_cache"):
            with pytest.raises(kb.UnsupportedError):
                device.clear_cache()
            return
        try:
            before: kb.MemoryStats | None = device.memory_stats()
        except kb.UnsupportedError:
            before = None
        device.clear_cache()
        device.clear_cache()  # twice is harmless
        np.testing.assert_array_equal(
            keep.numpy(), host, err_msg=rule("clear_cache", "clear_cache changed a live buffer")
        )
        if before is None:
            return
        after = device.memory_stats()
        assert after.cached == 0 or after.cached < before.cached, rule(
            "clear_cache", f"memory_stats().cached is {after.cached} bytes after clear_cache(), {before.cached} before"
        )


class NumpyProtocolTests(Suite):
    """The NumPy protocol (issue #17): the same results on every backend."""

    # --- the NumPy protocol (issue #17): same results on every backend ------------------------

    def test_numpy_copies_never_alias(self, device: kb.Device) -> None:
        a = kb.asarray(np.arange(6, dtype=np.float32), device=device)
        for make in (np.array, np.copy, lambda x: np.asarray(x, copy=True), lambda x: np.array(x, copy=True)):
            c = make(a)
            c[0] = 99.0
            assert a.numpy()[0] == 0.0, "a NumPy copy of a kernelbay array wrote through to it"
        np.testing.assert_array_equal(np.asarray(a), np.arange(6, dtype=np.float32))

    def test_numpy_copy_false_is_a_view_or_refused(self, device: kb.Device) -> None:
        a = kb.asarray(np.arange(4, dtype=np.float32), device=device)
        try:
            v = np.asarray(a, copy=False)
        except ValueError:
            return  # memory the host cannot address: refusing is the protocol's answer
        v[1] = 7.0
        assert a.numpy()[1] == 7.0, "copy=False returned a copy instead of a view"

    def test_numpy_dtype_conversion(self, device: kb.Device) -> None:
        a = kb.asarray(np.arange(4, dtype=np.int32), device=device)
        d = np.asarray(a, dtype=np.float64)
        assert d.dtype == np.float64
        np.testing.assert_array_equal(d, [0.0, 1.0, 2.0, 3.0])
        with pytest.raises(ValueError):
            np.asarray(a, dtype=np.float64, copy=False)

    def test_zero_dimensional_arrays_keep_their_shape(self, device: kb.Device) -> None:
        a = kb.asarray(np.float32(2.5), device=device)
        assert a.shape == () and a.size == 1
        assert np.asarray(a).shape == () and float(np.asarray(a)) == 2.5

    @pytest.mark.parametrize("dtype", ["object", "U3", "S2", "V8", "M8[s]"])
    def test_non_numeric_dtypes_are_refused(self, device: kb.Device, dtype: str) -> None:
        with pytest.raises(kb.InvalidArgumentError, match="not numeric"):
            kb.empty(3, dtype, device=device)
        with pytest.raises(kb.InvalidArgumentError, match="not numeric"):
            kb.asarray(np.zeros(3, dtype), device=device)

    def test_arrays_pickle_by_value_and_deepcopy(self, device: kb.Device) -> None:
        import copy
        import pickle

        a = kb.asarray(np.arange(5, dtype=np.float32), device=device)
        b = pickle.loads(pickle.dumps(a))
        assert b.device == a.device and b.shape == a.shape and b.dtype == a.dtype
        np.testing.assert_array_equal(b.numpy(), a.numpy())
        c = copy.deepcopy(a)
        kb.copy(c, np.zeros(5, np.float32))
        np.testing.assert_array_equal(a.numpy(), np.arange(5, dtype=np.float32))
        assert pickle.loads(pickle.dumps(device)) == device

    def test_large_numpy_results_are_independent_arrays(self, device: kb.Device) -> None:
        """Host copies (``np.array(a)``: always a new array; ``.numpy()`` where the host cannot
        address the memory) of arrays large enough for a backend's own host memory
        (``kernelbay_host_empty``): each is an ordinary array of its own, kept intact while it
        lives, and one dropped right after an asynchronous upload from it loses nothing."""
        n = 3 << 18  # 3 MiB of float32: above the sizes a backend keeps to np.empty
        x = np.arange(n, dtype=np.float32)
        a = kb.asarray(x, device=device)
        raw = a._binding.host_empty(device, a.nbytes)  # the hook as the core calls it
        if raw is not None:
            ok = type(raw) is np.ndarray and raw.dtype == np.uint8 and raw.shape == (a.nbytes,)
            assert ok and raw.flags.writeable and raw.flags.c_contiguous, rule(
                "host_empty", f"returned {type(raw).__name__} {getattr(raw, 'dtype', '')} {getattr(raw, 'shape', '')}"
            )
            del raw
        kept = [np.array(a) for _ in range(4)]  # a repeated request: where a pool starts serving
        for r in kept:
            assert r.dtype == np.float32 and r.shape == (n,) and r.flags.writeable and r.flags.c_contiguous
        kept[0][:] = -1.0
        for r in kept[1:]:
            np.testing.assert_array_equal(r, x, err_msg=rule("host_empty", "two results share memory"))
        np.testing.assert_array_equal(a.numpy(), x, err_msg="writing a result wrote to the device array")
        b = kb.asarray(x[::-1].copy(), device=device)
        for _ in range(6):  # more results while the first ones live: none may reuse their memory
            np.testing.assert_array_equal(np.array(b), x[::-1])
        for r in kept[1:]:
            np.testing.assert_array_equal(r, x, err_msg=rule("host_empty", "a live result was overwritten"))
        del kept
        c = kb.empty(n, "float32", device=device)
        with device.stream() as s:
            src = np.array(b)
            kb.copy(c, src, stream=s)  # may still be reading src when it is dropped next
            del src
            for _ in range(6):
                np.array(a)
            s.synchronize()
        np.testing.assert_array_equal(
            c.numpy(), x[::-1], err_msg=rule("host_empty", "a result reused before an upload from it had read it")
        )
