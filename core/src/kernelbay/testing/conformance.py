"""The backend conformance suite: what every kernelbay backend must do, as pytest tests.

Subclass :class:`BackendConformance` in a test module and set ``backend``. The class's tests
skip (or fail, under ``--kernelbay-require``) when the backend has no device here.

What a subclass may override:

* :meth:`saxpy_source` -- a kernel computing ``y[i] = a * x[i] + y[i]`` for ``i < n``, launched
  with ``args=(x, y, np.float32(a), np.int32(n))`` where x and y are float32 arrays of length n.
  Default: CUDA C++ (:data:`SAXPY_CUDA`), which the cuda and cpu backends accept.
* :meth:`saxpy_launch` -- the launch geometry for ``n`` elements (default: blocks of 256).
* :meth:`bad_source` -- a source that must fail to compile with a ``CompileError``.
* :meth:`scalar_source` -- the kernel of the scalar-rule tests (:mod:`kernelbay.argrules`), or
  ``None`` to skip them. Default: CUDA C++ generated from the table (:func:`scalar_kernel_cuda`);
  a backend without the ``cuda`` language skips them.
* capability flags: ``validates_arg_count`` (a launch with a missing argument raises
  ``InvalidArgumentError`` before running), ``dtypes`` and ``sizes`` for the copy round trips.

Streams, events and graphs are checked for every backend: through its own hooks where it
declares them (``kernelbay_stream_*``, ``kernelbay_event_*``, ``kernelbay_graph_*``), else
through the core's fallback, which must give the same results.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np
import pytest

import kernelbay as kb
from kernelbay.argrules import DTYPES, int_range
from kernelbay.hookspecs import API_VERSION

from .plugin import require_device

SAXPY_CUDA = r"""
extern "C" __global__ void saxpy(const float* x, float* y, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}
"""

BAD_CUDA = r"""
extern "C" __global__ void broken(float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x
    if (i < n) y[i] = undeclared_name;
}
"""


#: The scalar parameters the scalar-rule tests cover: every dtype of the table with a C spelling.
SCALAR_DTYPES = tuple(d for d in DTYPES if d.param and d.c)


def scalar_kernel_cuda() -> str:
    """``scalars(long long* i, unsigned long long* u, double* f, <one parameter per dtype>)``:
    stores each parameter, signed integers into ``i``, unsigned ones and bools into ``u``,
    floats into ``f``, in the table's order."""
    params, stores, n = [], [], {"i": 0, "u": 0, "f": 0}
    for j, d in enumerate(SCALAR_DTYPES):
        params.append(f"{d.c} p{j}")
        slot = "u" if d.kind in "ub" else d.kind
        stores.append(f"{slot}[{n[slot]}] = p{j};")
        n[slot] += 1
    return (
        'extern "C" __global__ void scalars(long long* i, unsigned long long* u, double* f, '
        + ", ".join(params)
        + ") {\n    if (blockIdx.x == 0 && threadIdx.x == 0) {\n        "
        + "\n        ".join(stores)
        + "\n    }\n}\n"
    )


def _rng() -> np.random.Generator:
    return np.random.default_rng()


def _sample(dtype: np.dtype, size: int, rng: np.random.Generator) -> np.ndarray:
    if dtype.kind == "f":
        return rng.standard_normal(size).astype(dtype)
    if dtype.kind == "b":
        return rng.integers(0, 2, size).astype(dtype)
    info = np.iinfo(dtype)
    return rng.integers(max(info.min, -1000), min(info.max, 1000), size, endpoint=True).astype(dtype)


class BackendConformance:
    """The conformance suite. Set ``backend`` in a subclass."""

    backend: ClassVar[str] = ""
    dtypes: ClassVar[Sequence[str]] = ("float32", "float64", "int32", "int64", "uint8", "int16", "float16")
    sizes: ClassVar[Sequence[int]] = (0, 1, 7, 4096, 1 << 20)
    validates_arg_count: ClassVar[bool] = True

    # --- what a backend may override ------------------------------------------------

    def saxpy_source(self) -> kb.Source | Sequence[kb.Source]:
        return kb.Source(SAXPY_CUDA, lang="cuda", name="saxpy")

    def saxpy_launch(self, n: int) -> dict[str, Any]:
        return {"grid": (max(1, -(-n // 256)),), "block": (256,)}

    def bad_source(self) -> kb.Source:
        return kb.Source(BAD_CUDA, lang="cuda", name="broken")

    def scalar_source(self) -> kb.Source | None:
        return kb.Source(scalar_kernel_cuda(), lang="cuda", name="scalars")

    # --- fixtures -------------------------------------------------------------------

    @pytest.fixture
    def device(self) -> kb.Device:
        if not self.backend:
            pytest.fail("BackendConformance subclasses must set `backend`", pytrace=False)
        return require_device(self.backend)

    @pytest.fixture
    def saxpy(self, device: kb.Device) -> kb.Kernel:
        return kb.compile(self.saxpy_source(), device=device)

    def _run_saxpy(self, kernel: kb.Kernel, device: kb.Device, a: float, xs: np.ndarray, ys: np.ndarray) -> np.ndarray:
        n = xs.size
        x = kb.asarray(xs, device=device)
        y = kb.asarray(ys, device=device)
        kernel.launch(**self.saxpy_launch(n), args=(x, y, np.float32(a), np.int32(n)))
        device.synchronize()
        return np.array(y.numpy(), copy=True)

    # --- identity -------------------------------------------------------------------

    def test_backend_declares_itself(self, device: kb.Device) -> None:
        rec = {b.name: b for b in kb.backends()}[self.backend]
        assert rec.status == "available"
        assert rec.reason is None
        spec = rec.spec
        assert spec is not None and spec.name == self.backend
        assert spec.api_version == API_VERSION
        assert spec.languages, "a backend must accept at least one language"
        assert isinstance(spec.priority, int)

    def test_devices_are_numbered_and_selectable(self, device: kb.Device) -> None:
        devs = [d for d in kb.devices() if d.backend == self.backend]
        assert [d.index for d in devs] == list(range(len(devs)))
        assert device == devs[0]
        assert kb.device(str(devs[-1])) == devs[-1]
        assert str(device) == f"{self.backend}:0"

    # --- memory ---------------------------------------------------------------------

    @pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int64", "uint8", "int16", "float16"])
    def test_round_trip_dtypes(self, device: kb.Device, dtype: str) -> None:
        if dtype not in self.dtypes:
            pytest.skip(f"{self.backend} does not take {dtype}")
        host = _sample(np.dtype(dtype), 1000, _rng())
        arr = kb.asarray(host, device=device)
        assert arr.device == device and arr.shape == host.shape and arr.dtype == host.dtype
        assert arr.nbytes == host.nbytes
        np.testing.assert_array_equal(arr.numpy(), host)

    def test_round_trip_sizes(self, device: kb.Device) -> None:
        rng = _rng()
        for n in self.sizes:
            host = _sample(np.dtype("float32"), n, rng)
            arr = kb.empty(n, "float32", device=device)
            kb.copy(arr, host)
            back = np.full(n, np.nan, np.float32)
            kb.copy(back, arr)
            np.testing.assert_array_equal(back, host)

    def test_multidimensional_shape(self, device: kb.Device) -> None:
        host = _sample(np.dtype("int32"), 60, _rng()).reshape(3, 4, 5)
        arr = kb.asarray(host, device=device)
        assert arr.shape == (3, 4, 5) and arr.ndim == 3 and arr.size == 60
        np.testing.assert_array_equal(arr.numpy(), host)

    def test_device_to_device_copy(self, device: kb.Device) -> None:
        host = _sample(np.dtype("float32"), 5000, _rng())
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

    def test_memory_stats_or_unsupported(self, device: kb.Device) -> None:
        try:
            stats = device.memory_stats()
        except kb.UnsupportedError:
            return
        assert isinstance(stats, kb.MemoryStats)
        assert 0 <= stats.active <= stats.peak

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
        rng = _rng()
        xs, ys = _sample(np.dtype("float32"), n, rng), _sample(np.dtype("float32"), n, rng)
        got = self._run_saxpy(saxpy, device, 2.5, xs, ys)
        np.testing.assert_allclose(got, np.float32(2.5) * xs + ys, rtol=1e-6, atol=1e-6)

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
        rng = _rng()
        xs, ys = _sample(np.dtype("float32"), 300, rng), _sample(np.dtype("float32"), 300, rng)
        np.testing.assert_allclose(self._run_saxpy(k2, device, -1.0, xs, ys), ys - xs, rtol=1e-6, atol=1e-6)
        assert k1.device == k2.device

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
        np.testing.assert_allclose(y0.numpy(), 4 * xs, rtol=1e-6)
        np.testing.assert_allclose(y1.numpy(), 4 * xs, rtol=1e-6)

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

    def test_synchronize(self, device: kb.Device) -> None:
        device.synchronize()
        kb.device(str(device)).synchronize()

    # --- across backends (needs the cpu backend as the other side) -------------------

    def _other(self) -> kb.Device:
        if self.backend == "cpu":
            pytest.skip("needs a second backend besides cpu")
        try:
            return kb.device("cpu")
        except kb.BackendError:
            pytest.skip("needs the cpu backend as a second backend")

    def test_copy_across_backends(self, device: kb.Device) -> None:
        other = self._other()
        host = _sample(np.dtype("float32"), 1000, _rng())
        src = kb.asarray(host, device=other)
        dst = kb.empty(host.shape, host.dtype, device=device)
        kb.copy(dst, src)
        np.testing.assert_array_equal(dst.numpy(), host)
        moved = kb.asarray(dst, device=other)
        assert moved.device == other
        np.testing.assert_array_equal(moved.numpy(), host)

    def test_array_of_another_device_is_rejected(self, device: kb.Device, saxpy: kb.Kernel) -> None:
        other = self._other()
        x = kb.zeros(4, "float32", device=other)
        y = kb.zeros(4, "float32", device=device)
        with pytest.raises(kb.InvalidArgumentError, match=str(other)):
            saxpy.launch(**self.saxpy_launch(4), args=(x, y, np.float32(1), np.int32(4)))

    # --- scalar arguments: the core's one table (kernelbay.argrules) ---------------------

    @pytest.fixture
    def scalars(self, device: kb.Device) -> kb.Kernel:
        src = self.scalar_source()
        if src is None:
            pytest.skip(f"{self.backend} has no kernel for the scalar-rule tests")
        try:
            return kb.compile(src, device=device)
        except kb.InvalidArgumentError as exc:
            if "language" not in str(exc):
                raise
            pytest.skip(f"{self.backend} does not compile {src.lang}: {exc}")

    def _scalar_run(self, kernel: kb.Kernel, device: kb.Device, **over: Any) -> tuple[list, list, list]:
        """Launch ``scalars`` with 1 (True) for every parameter but those in ``over`` (p<j>=value);
        return what the kernel stored: (signed ints, unsigned ints and bools, floats)."""
        i = kb.zeros(8, "int64", device=device)
        u = kb.zeros(8, "uint64", device=device)
        f = kb.zeros(8, "float64", device=device)
        vals = [np.dtype(d.name).type(1) for d in SCALAR_DTYPES]
        for k, v in over.items():
            vals[int(k[1:])] = v
        kernel.launch(grid=1, block=1, args=(i, u, f, *vals))
        device.synchronize()
        return list(i.numpy()), list(u.numpy()), list(f.numpy())

    def _expect(self, values: Sequence[Any]) -> tuple[list, list, list]:
        out: dict[str, list] = {"i": [], "u": [], "f": []}
        for d, v in zip(SCALAR_DTYPES, values):
            out["u" if d.kind in "ub" else d.kind].append(v)
        pad = lambda xs: [*xs, *[0] * (8 - len(xs))]
        return pad([int(v) for v in out["i"]]), pad([int(v) for v in out["u"]]), pad([float(v) for v in out["f"]])

    @pytest.mark.parametrize("python", [False, True], ids=["numpy", "python"])
    @pytest.mark.parametrize("end", ["min", "max"])
    def test_scalar_limits_round_trip(self, device: kb.Device, scalars: kb.Kernel, end: str, python: bool) -> None:
        vals = []
        for d in SCALAR_DTYPES:
            if d.kind == "f":
                v = float(np.finfo(d.name).max) * (1 if end == "max" else -1)
            elif d.kind == "b":
                v = end == "max"
            else:
                v = int_range(d.kind, d.size)[end == "max"]
            vals.append(v if python else np.dtype(d.name).type(v))
        got = self._scalar_run(scalars, device, **{f"p{j}": v for j, v in enumerate(vals)})
        assert got == self._expect(vals)

    def test_scalar_out_of_range_is_rejected_on_every_launch(self, device: kb.Device, scalars: kb.Kernel) -> None:
        for j, d in enumerate(SCALAR_DTYPES):
            if d.kind not in "iu":
                continue
            lo, hi = int_range(d.kind, d.size)
            self._scalar_run(scalars, device, **{f"p{j}": hi})  # the fast path is made for these types
            for bad in (hi + 1, lo - 1):
                with pytest.raises(kb.InvalidArgumentError, match=f"argument {3 + j}"):
                    scalars.launch(grid=1, block=1, args=self._scalar_args(device, j, bad))

    def _scalar_args(self, device: kb.Device, j: int, value: Any) -> tuple:
        vals: list[Any] = [np.dtype(d.name).type(1) for d in SCALAR_DTYPES]
        vals[j] = value
        bufs = (
            kb.zeros(8, "int64", device=device),
            kb.zeros(8, "uint64", device=device),
            kb.zeros(8, "float64", device=device),
        )
        return (*bufs, *vals)

    def _position(self, name: str) -> int:
        return next(j for j, d in enumerate(SCALAR_DTYPES) if d.name == name)

    @pytest.mark.parametrize(
        ("param", "value"),
        [
            ("int32", np.uint32(4_000_000_000)),
            ("uint32", np.int32(-1)),
            ("int64", np.uint64(2**63)),
            ("uint8", np.int8(-1)),
        ],
    )
    def test_numpy_scalar_value_out_of_range(
        self, device: kb.Device, scalars: kb.Kernel, param: str, value: Any
    ) -> None:
        j = self._position(param)
        with pytest.raises(kb.InvalidArgumentError, match="out of range"):
            scalars.launch(grid=1, block=1, args=self._scalar_args(device, j, value))

    def test_numpy_scalar_in_range_crosses_signedness(self, device: kb.Device, scalars: kb.Kernel) -> None:
        j, k = self._position("int32"), self._position("uint32")
        got = self._scalar_run(scalars, device, **{f"p{j}": np.uint32(7), f"p{k}": np.int32(9)})
        vals: list[Any] = [1] * len(SCALAR_DTYPES)
        vals[j], vals[k] = 7, 9
        assert got == self._expect(vals)

    @pytest.mark.parametrize(
        ("param", "value"),
        [
            ("int32", np.int64(1)),
            ("int32", np.int16(1)),
            ("float32", np.float64(1)),
            ("float64", np.float32(1)),
            ("uint16", np.uint32(1)),
        ],
    )
    def test_scalar_of_the_wrong_size_is_rejected(
        self, device: kb.Device, scalars: kb.Kernel, param: str, value: Any
    ) -> None:
        with pytest.raises(kb.ArgumentTypeError, match=f"argument {3 + self._position(param)}"):
            scalars.launch(grid=1, block=1, args=self._scalar_args(device, self._position(param), value))

    @pytest.mark.parametrize(
        ("param", "value"),
        [
            ("int32", np.float32(1)),
            ("int32", 1.0),
            ("float32", np.int32(1)),
            ("bool", 1),
            ("bool", np.uint8(1)),
            ("int32", "1"),
            ("float64", 1j),
        ],
    )
    def test_scalar_of_the_wrong_kind_is_rejected(
        self, device: kb.Device, scalars: kb.Kernel, param: str, value: Any
    ) -> None:
        with pytest.raises(kb.ArgumentTypeError, match=f"argument {3 + self._position(param)}"):
            scalars.launch(grid=1, block=1, args=self._scalar_args(device, self._position(param), value))

    def test_none_is_not_a_scalar(self, device: kb.Device, scalars: kb.Kernel) -> None:
        for j in range(len(SCALAR_DTYPES)):
            with pytest.raises(kb.ArgumentTypeError, match="None"):
                scalars.launch(grid=1, block=1, args=self._scalar_args(device, j, None))

    def test_bools(self, device: kb.Device, scalars: kb.Kernel) -> None:
        b, i = self._position("bool"), self._position("int32")
        for flag in (True, False, np.bool_(True), np.bool_(False)):
            got = self._scalar_run(scalars, device, **{f"p{b}": flag, f"p{i}": True})
            vals: list[Any] = [1] * len(SCALAR_DTYPES)
            vals[b] = bool(flag)
            assert got == self._expect(vals)

    def test_float_out_of_range_is_rejected(self, device: kb.Device, scalars: kb.Kernel) -> None:
        j = self._position("float32")
        self._scalar_run(scalars, device, **{f"p{j}": float("inf")})
        with pytest.raises(kb.InvalidArgumentError, match="out of range"):
            scalars.launch(grid=1, block=1, args=self._scalar_args(device, j, 1e39))

    # --- streams, events and graphs (a backend without the hooks runs the core's fallback,
    # which must pass these too: one in-order stream, list replay) ----------------------------

    def _saxpy_on(self, saxpy: kb.Kernel, x: kb.Array, y: kb.Array, a: float, stream: Any = None, **kw: Any) -> Any:
        n = y.size
        return saxpy.launch(**self.saxpy_launch(n), args=(x, y, np.float32(a), np.int32(n)), stream=stream, **kw)

    def test_stream_runs_its_work_in_order(self, device: kb.Device, saxpy: kb.Kernel) -> None:
        n = 4096
        x = kb.asarray(np.ones(n, np.float32), device=device)
        y = kb.zeros(n, "float32", device=device)
        s = device.stream()
        for _ in range(10):
            self._saxpy_on(saxpy, x, y, 1.0, stream=s)
        with s:  # the current stream takes stream=None work
            for _ in range(10):
                self._saxpy_on(saxpy, x, y, 1.0)
        s.synchronize()
        assert s.query()
        np.testing.assert_array_equal(y.numpy(), np.full(n, 20.0, np.float32))

    def test_event_orders_two_streams(self, device: kb.Device, saxpy: kb.Kernel) -> None:
        n = 4096
        x = kb.asarray(np.ones(n, np.float32), device=device)
        y = kb.zeros(n, "float32", device=device)
        z = kb.zeros(n, "float32", device=device)
        s1, s2 = device.stream(), device.stream()
        for _ in range(10):
            self._saxpy_on(saxpy, x, y, 1.0, stream=s1)
        ev = s1.record()
        s2.wait(ev)
        self._saxpy_on(saxpy, y, z, 1.0, stream=s2)  # z = y, once s1's work is done
        s2.synchronize()
        assert ev.query()
        np.testing.assert_array_equal(z.numpy(), np.full(n, 10.0, np.float32))
        assert ev.elapsed(ev) == pytest.approx(0.0, abs=1e-3)

    def test_host_reads_see_every_stream(self, device: kb.Device, saxpy: kb.Kernel) -> None:
        n = 4096
        x = kb.asarray(np.ones(n, np.float32), device=device)
        ys = [kb.zeros(n, "float32", device=device) for _ in range(3)]
        streams = [device.stream() for _ in range(3)]
        for i, (y, s) in enumerate(zip(ys, streams)):
            for _ in range(i + 3):
                self._saxpy_on(saxpy, x, y, 1.0, stream=s)
        # No synchronize: each read must wait for the writes queued before it, on any stream.
        np.testing.assert_array_equal(ys[0].numpy(), np.full(n, 3.0, np.float32))
        out = kb.copy(np.empty(n, np.float32), ys[1])
        np.testing.assert_array_equal(out, np.full(n, 4.0, np.float32))
        device.synchronize()
        np.testing.assert_array_equal(np.array(ys[2].numpy()), np.full(n, 5.0, np.float32))

    def test_graph_records_then_replays(self, device: kb.Device, saxpy: kb.Kernel) -> None:
        n = 4096
        x = kb.asarray(np.ones(n, np.float32), device=device)
        y = kb.zeros(n, "float32", device=device)
        with device.graph() as g:
            self._saxpy_on(saxpy, x, y, 1.0)
            self._saxpy_on(saxpy, x, y, 2.0)
        assert len(g) == 2 and g.steps[1].deps == (0,)  # both write y
        device.synchronize()
        np.testing.assert_array_equal(y.numpy(), np.zeros(n, np.float32))  # recorded, not run
        for _ in range(3):
            g.replay()
        s = device.stream()
        g.replay(stream=s)
        s.synchronize()
        np.testing.assert_array_equal(y.numpy(), np.full(n, 12.0, np.float32))
        g.update(1, args=(x, y, np.float32(10.0), np.int32(n)))
        g.replay()
        device.synchronize()
        np.testing.assert_array_equal(y.numpy(), np.full(n, 23.0, np.float32))

    def test_graph_dependencies_follow_buffers(self, device: kb.Device, saxpy: kb.Kernel) -> None:
        n = 1024
        x = kb.asarray(np.ones(n, np.float32), device=device)
        y, z, w = (kb.zeros(n, "float32", device=device) for _ in range(3))
        with device.graph() as g:
            self._saxpy_on(saxpy, x, y, 1.0, reads=(x, y), writes=(y,))
            self._saxpy_on(saxpy, x, z, 1.0, reads=(x, z), writes=(z,))
            self._saxpy_on(saxpy, y, w, 1.0, reads=(y, w), writes=(w,))
            self._saxpy_on(saxpy, x, y, 1.0, reads=(x, y), writes=(y,))  # after step 2 read y
        assert [s.deps for s in g.steps] == [(), (), (0,), (0, 2)]
        g.replay()
        device.synchronize()
        np.testing.assert_array_equal(w.numpy(), np.full(n, 1.0, np.float32))
        np.testing.assert_array_equal(y.numpy(), np.full(n, 2.0, np.float32))
        with pytest.raises(kb.InvalidArgumentError, match="cycle"):
            g.add_dependency(0, on=3)
        y.close()
        with pytest.raises(kb.UseAfterFreeError, match="closed"):
            g.replay()

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
