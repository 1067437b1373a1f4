"""The suite's checks of exchange with other libraries and other backends: DLPack both ways,
``from_external``, ``__cuda_array_interface__``, and copies across backends."""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np
import pytest

import kernelbay as kb

from .base import Suite, make_rng, rule, sample


class _Foreign:
    """A foreign array as another library would hand it over: DLPack only, not a numpy array."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def __dlpack__(self, **kw: Any) -> Any:
        return self.inner.__dlpack__(**kw)

    def __dlpack_device__(self) -> tuple[int, int]:
        return self.inner.__dlpack_device__()


def _capsule_name(capsule: Any) -> str:
    get = ctypes.pythonapi.PyCapsule_GetName
    get.restype, get.argtypes = ctypes.c_char_p, [ctypes.py_object]
    return (get(capsule) or b"").decode()


class InteropTests(Suite):
    """DLPack export and import, foreign arrays, the CUDA array interface, and copies between
    this backend and any other one installed here."""

    def _to_host(self, arr: kb.Array) -> np.ndarray:
        if arr.__dlpack_device__()[0] == 1:  # kDLCPU: numpy reads it in place
            return np.from_dlpack(arr)
        return np.from_dlpack(arr, device="cpu")

    def test_dlpack_export_or_its_fallback(self, device: kb.Device) -> None:
        """``kernelbay_to_dlpack`` / ``kernelbay_dlpack_device`` (optional; fallback
        ``UnsupportedError``): numpy reads the exported array; ``max_version=None`` gets the
        legacy capsule and ``max_version=(1, 0)`` a capsule numpy accepts."""
        host = sample(np.dtype("float32"), 257, make_rng())
        arr = kb.asarray(host, device=device)
        if not self.implements("kernelbay_to_dlpack"):
            with pytest.raises(kb.UnsupportedError):
                arr.__dlpack__()
            return
        assert self.implements("kernelbay_dlpack_device"), rule(
            "dlpack", "a backend with kernelbay_to_dlpack must implement kernelbay_dlpack_device too"
        )
        np.testing.assert_array_equal(self._to_host(arr), host, err_msg=rule("dlpack", "export lost the values"))
        legacy = arr.__dlpack__(max_version=None)
        assert _capsule_name(legacy) == "dltensor", rule(
            "dlpack", f"max_version=None must give the legacy capsule 'dltensor', got {_capsule_name(legacy)!r}"
        )
        versioned = arr.__dlpack__(max_version=(1, 0))
        assert _capsule_name(versioned) in ("dltensor", "dltensor_versioned"), rule(
            "dlpack", f"max_version=(1, 0) gave a capsule named {_capsule_name(versioned)!r}"
        )

    def test_dlpack_import_and_from_external(self, device: kb.Device) -> None:
        """``kb.asarray`` of a foreign DLPack array (through ``kernelbay_from_external`` where the
        backend has it, else the core's copy through the host) gives the values on this device."""
        host = sample(np.dtype("int32"), 100, make_rng()).reshape(4, 25)
        got = kb.asarray(_Foreign(host), device=device)
        assert got.device == device and got.shape == host.shape and got.dtype == host.dtype
        np.testing.assert_array_equal(got.numpy(), host, err_msg=rule("from_external", "imported values differ"))
        if self.implements("kernelbay_to_dlpack"):
            ours = kb.asarray(host, device=device)
            again = kb.asarray(_Foreign(ours), device=device)
            np.testing.assert_array_equal(
                again.numpy(), host, err_msg=rule("from_external", "a DLPack round trip through this backend differs")
            )

    def test_cuda_array_interface_where_declared(self, device: kb.Device) -> None:
        """``kernelbay_cuda_array_interface`` (optional; fallback: no attribute)."""
        arr = kb.asarray(np.arange(12, dtype=np.float32).reshape(3, 4), device=device)
        if not self.implements("kernelbay_cuda_array_interface"):
            assert not hasattr(arr, "__cuda_array_interface__"), rule(
                "cuda_array_interface", "a backend without the hook must have no such attribute"
            )
            return
        try:
            cai = arr.__cuda_array_interface__
        except AttributeError:
            return  # the hook raised UnsupportedError: this memory is not CUDA memory
        assert cai["shape"] == (3, 4) and np.dtype(cai["typestr"]) == np.float32, rule("cuda_array_interface", str(cai))
        assert cai["version"] == 3 and isinstance(cai["data"][0], int) and cai["data"][0] != 0, rule(
            "cuda_array_interface", str(cai)
        )

    # --- across backends: with whichever other backend has a device here ---------------

    def _other(self) -> kb.Device:
        for d in kb.devices():
            if d.backend != self.backend:
                return d
        pytest.skip(f"no backend but {self.backend} has a device here: nothing to copy across to")

    def test_copy_across_backends(self, device: kb.Device) -> None:
        other = self._other()
        host = sample(np.dtype("float32"), 1000, make_rng())
        src = kb.asarray(host, device=other)
        dst = kb.empty(host.shape, host.dtype, device=device)
        kb.copy(dst, src)
        np.testing.assert_array_equal(dst.numpy(), host, err_msg=f"copy from {other} to {device}")
        moved = kb.asarray(dst, device=other)
        assert moved.device == other
        np.testing.assert_array_equal(moved.numpy(), host, err_msg=f"copy from {device} to {other}")

    def test_array_of_another_device_is_rejected(self, device: kb.Device, saxpy: kb.Kernel) -> None:
        other = self._other()
        x = kb.zeros(4, "float32", device=other)
        y = kb.zeros(4, "float32", device=device)
        with pytest.raises(kb.InvalidArgumentError, match=str(other)):
            saxpy.launch(**self.saxpy_launch(4), args=(x, y, np.float32(1), np.int32(4)))
