"""The suite's checks of scalar arguments: the core's one table of rules (:mod:`kernelbay.argrules`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

import kernelbay as kb
from kernelbay.argrules import int_range

from .base import Suite, refused, rule

_HOW = (
    "override scalar_source() in your BackendConformance subclass with a kernel in your language whose "
    "parameters are (i: int64 array, u: uint64 array, f: float64 array, then one scalar parameter per dtype of "
    "scalar_params(), in order) and which stores the signed integers into i, the unsigned ones and bools into u, "
    "the floats into f (docs/authoring-a-backend.md, 'The scalar kernel'); set scalar_bool = False if your "
    "language has no bool parameters"
)


class ScalarTests(Suite):
    """Every scalar dtype of the table: limits round-trip, out-of-range, wrong size and wrong kind are refused."""

    # --- scalar arguments: the core's one table (kernelbay.argrules) ---------------------

    @pytest.fixture
    def scalars(self, device: kb.Device) -> kb.Kernel:
        src = self.scalar_source()
        if src is None:
            pytest.fail(f"{self.backend} has no kernel for the scalar-rule checks: {_HOW}", pytrace=False)
        try:
            return kb.compile(src, device=device)
        except kb.InvalidArgumentError as exc:
            if "language" not in str(exc):
                raise
            pytest.fail(
                f"{self.backend} does not compile {src.lang}, the scalar kernel's language: {exc}. {_HOW}",
                pytrace=False,
            )

    def _scalar_run(self, kernel: kb.Kernel, device: kb.Device, **over: Any) -> tuple[list, list, list]:
        """Launch ``scalars`` with 1 (True) for every parameter but those in ``over`` (p<j>=value);
        return what the kernel stored: (signed ints, unsigned ints and bools, floats)."""
        i, u, f = self._scalar_arrays(device)
        vals = [np.dtype(d.name).type(1) for d in self.scalar_params()]
        for k, v in over.items():
            vals[int(k[1:])] = v
        kernel.launch(**self.scalar_launch(), args=(i, u, f, *vals))
        device.synchronize()
        return list(self._stored(i, "<i8")), list(self._stored(u, "<u8")), list(self._stored(f, "<f8"))

    def _scalar_arrays(self, device: kb.Device) -> tuple[kb.Array, kb.Array, kb.Array]:
        """The scalar kernel's ``i``, ``u`` and ``f`` (see ``scalar_split64``)."""
        if self.scalar_split64:
            return (
                kb.zeros(16, "uint32", device=device),
                kb.zeros(16, "uint32", device=device),
                kb.zeros(16, "uint32", device=device),
            )
        return (
            kb.zeros(8, "int64", device=device),
            kb.zeros(8, "uint64", device=device),
            kb.zeros(8, "float64", device=device),
        )

    def _stored(self, a: kb.Array, dtype: str) -> np.ndarray:
        """What the kernel stored in ``a``, as 8 values of ``dtype``."""
        host = np.asarray(a.numpy())
        if self.scalar_split64:
            return np.frombuffer(host.astype("<u4").tobytes(), dtype)
        return host

    def _expect(self, values: Sequence[Any]) -> tuple[list, list, list]:
        out: dict[str, list] = {"i": [], "u": [], "f": []}
        for d, v in zip(self.scalar_params(), values):
            out["u" if d.kind in "ub" else d.kind].append(v)
        pad = lambda xs: [*xs, *[0] * (8 - len(xs))]
        return pad([int(v) for v in out["i"]]), pad([int(v) for v in out["u"]]), pad([float(v) for v in out["f"]])

    @pytest.mark.parametrize("python", [False, True], ids=["numpy", "python"])
    @pytest.mark.parametrize("end", ["min", "max"])
    def test_scalar_limits_round_trip(self, device: kb.Device, scalars: kb.Kernel, end: str, python: bool) -> None:
        vals = []
        for d in self.scalar_params():
            if d.kind == "f":
                v = float(np.finfo(d.name).max) * (1 if end == "max" else -1)
            elif d.kind == "b":
                v = end == "max"
            else:
                v = int_range(d.kind, d.size)[end == "max"]
            vals.append(v if python else np.dtype(d.name).type(v))
        got = self._scalar_run(scalars, device, **{f"p{j}": v for j, v in enumerate(vals)})
        assert got == self._expect(vals), rule("scalar arguments, kernelbay.argrules", f"the kernel stored {got}")

    def test_scalar_out_of_range_is_rejected_on_every_launch(self, device: kb.Device, scalars: kb.Kernel) -> None:
        for j, d in enumerate(self.scalar_params()):
            if d.kind not in "iu":
                continue
            lo, hi = int_range(d.kind, d.size)
            self._scalar_run(scalars, device, **{f"p{j}": hi})  # the fast path is made for these types
            for bad in (hi + 1, lo - 1):
                with refused(kb.InvalidArgumentError, match=f"argument {3 + j}"):
                    scalars.launch(**self.scalar_launch(), args=self._scalar_args(device, j, bad))

    def _scalar_args(self, device: kb.Device, j: int, value: Any) -> tuple:
        vals: list[Any] = [np.dtype(d.name).type(1) for d in self.scalar_params()]
        vals[j] = value
        return (*self._scalar_arrays(device), *vals)

    def _position(self, name: str) -> int:
        for j, d in enumerate(self.scalar_params()):
            if d.name == name:
                return j
        assert name == "bool" and not self.scalar_bool
        pytest.skip(f"{self.backend} declares scalar_bool = False: its language has no bool parameters")

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
        with refused(kb.InvalidArgumentError, match="out of range"):
            scalars.launch(**self.scalar_launch(), args=self._scalar_args(device, j, value))

    def test_numpy_scalar_in_range_crosses_signedness(self, device: kb.Device, scalars: kb.Kernel) -> None:
        j, k = self._position("int32"), self._position("uint32")
        got = self._scalar_run(scalars, device, **{f"p{j}": np.uint32(7), f"p{k}": np.int32(9)})
        vals: list[Any] = [1] * len(self.scalar_params())
        vals[j], vals[k] = 7, 9
        assert got == self._expect(vals), rule("scalar arguments, kernelbay.argrules", f"the kernel stored {got}")

    @pytest.mark.parametrize("param", ["float32", "float64"])
    @pytest.mark.parametrize("value", [1 << 2000, -(10**400)], ids=["1<<2000", "-10**400"])
    def test_int_beyond_any_float_is_out_of_range(
        self, device: kb.Device, scalars: kb.Kernel, param: str, value: int
    ) -> None:
        """An int no float holds is an out-of-range argument, never a bare OverflowError."""
        j = self._position(param)
        with refused(kb.InvalidArgumentError, match=f"argument {3 + j} .*digits.*out of range"):
            scalars.launch(**self.scalar_launch(), args=self._scalar_args(device, j, value))

    @pytest.mark.parametrize("param", ["float32", "int32", "uint8", "bool", "float64"])
    def test_zero_d_array_is_never_a_scalar(self, device: kb.Device, scalars: kb.Kernel, param: str) -> None:
        """One rule for every kind: a 0-d array is refused with the way to pass its value."""
        j = self._position(param)
        arr = np.array(1, dtype=param)
        with refused(kb.ArgumentTypeError, match=rf"argument {3 + j} .*0-d array.*arr\.item\(\).*arr\[\(\)\]"):
            scalars.launch(**self.scalar_launch(), args=self._scalar_args(device, j, arr))
        vals: list[Any] = [1] * len(self.scalar_params())
        got = self._scalar_run(scalars, device, **{f"p{j}": arr[()]})
        assert got == self._expect(vals), rule("scalar arguments, kernelbay.argrules", f"the kernel stored {got}")

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
        with refused(kb.ArgumentTypeError, match=f"argument {3 + self._position(param)}"):
            scalars.launch(**self.scalar_launch(), args=self._scalar_args(device, self._position(param), value))

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
        with refused(kb.ArgumentTypeError, match=f"argument {3 + self._position(param)}"):
            scalars.launch(**self.scalar_launch(), args=self._scalar_args(device, self._position(param), value))

    def test_none_is_not_a_scalar(self, device: kb.Device, scalars: kb.Kernel) -> None:
        for j in range(len(self.scalar_params())):
            with refused(kb.ArgumentTypeError, match="None"):
                scalars.launch(**self.scalar_launch(), args=self._scalar_args(device, j, None))

    def test_bools(self, device: kb.Device, scalars: kb.Kernel) -> None:
        b, i = self._position("bool"), self._position("int32")
        for flag in (True, False, np.bool_(True), np.bool_(False)):
            got = self._scalar_run(scalars, device, **{f"p{b}": flag, f"p{i}": True})
            vals: list[Any] = [1] * len(self.scalar_params())
            vals[b] = bool(flag)
            assert got == self._expect(vals), rule("scalar arguments, kernelbay.argrules", f"the kernel stored {got}")

    def test_float_out_of_range_is_rejected(self, device: kb.Device, scalars: kb.Kernel) -> None:
        j = self._position("float32")
        self._scalar_run(scalars, device, **{f"p{j}": float("inf")})
        with refused(kb.InvalidArgumentError, match="out of range"):
            scalars.launch(**self.scalar_launch(), args=self._scalar_args(device, j, 1e39))
