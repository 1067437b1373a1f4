"""Why CUDA is unavailable is said specifically, and probing creates no context: no GPU needed."""

from __future__ import annotations

import ctypes
import subprocess
import sys

import kernelbay as kb
import pytest
from kernelbay.errors import BackendUnavailableError
from kernelbay_cuda import _driver


@pytest.fixture
def fresh_probe(monkeypatch):
    monkeypatch.setattr(_driver, "_probe_result", None)
    monkeypatch.setattr(_driver, "_libcuda", None)


def test_no_driver_library(fresh_probe, monkeypatch) -> None:
    def missing(*_a, **_k):
        raise OSError("libcuda.so.1: cannot open shared object file")

    monkeypatch.setattr(_driver.ctypes, "CDLL", missing)
    with pytest.raises(BackendUnavailableError, match=r"no NVIDIA driver found \(libcuda.so.1"):
        _driver.probe()


class _FakeLib:
    def __init__(self, version: int, init: int = 0, count: int = 0) -> None:
        self.version, self.init, self.count = version, init, count

    def cuDriverGetVersion(self, ref) -> int:
        ctypes.cast(ref, ctypes.POINTER(ctypes.c_int))[0] = self.version
        return 0

    def cuDeviceGetCount(self, ref) -> int:
        return 3  # not initialised: the probe must go to a child process


def test_driver_too_old_for_the_bindings(fresh_probe, monkeypatch) -> None:
    monkeypatch.setattr(_driver, "_libcuda", _FakeLib(11080))
    monkeypatch.setattr(_driver, "_bindings_major", lambda: (13, "13.5.0"))
    with pytest.raises(
        BackendUnavailableError, match=r"driver is too old: it supports CUDA 11.8.*cuda-bindings 13.5.0"
    ):
        _driver.probe()


def test_cuda12_driver_with_cuda13_bindings_names_the_cu12_extra(fresh_probe, monkeypatch) -> None:
    monkeypatch.setattr(_driver, "_libcuda", _FakeLib(12040))
    monkeypatch.setattr(_driver, "_bindings_major", lambda: (13, "13.5.0"))
    with pytest.raises(BackendUnavailableError, match=r"supports CUDA 12.4.*pip install 'kernelbay-cuda\[cu12\]'"):
        _driver.probe()


def test_base_install_without_bindings_names_the_extra(fresh_probe, monkeypatch) -> None:
    monkeypatch.setattr(_driver, "_libcuda", _FakeLib(13000))
    monkeypatch.setattr(_driver, "_bindings_major", lambda: (0, "unknown"))
    with pytest.raises(BackendUnavailableError, match=r"cuda-bindings is not installed.*kernelbay-cuda\[cu13\]"):
        _driver.probe()


def test_nvrtc_hint_names_the_wheel_of_the_bindings_major(fresh_probe, monkeypatch) -> None:
    monkeypatch.setattr(_driver, "_libcuda", _FakeLib(12080))
    monkeypatch.setattr(_driver, "_bindings_major", lambda: (12, "12.9.0"))

    def no_nvrtc():
        raise ImportError("libnvrtc.so.12 not found")

    monkeypatch.setattr(_driver, "nvrtc", no_nvrtc)
    with pytest.raises(BackendUnavailableError, match=r"install nvidia-cuda-nvrtc-cu12 .*kernelbay-cuda\[cu12\]"):
        _driver.probe()


def test_nvrtc_missing(fresh_probe, monkeypatch) -> None:
    monkeypatch.setattr(_driver, "_libcuda", _FakeLib(13000))
    monkeypatch.setattr(_driver, "_bindings_major", lambda: (13, "13.5.0"))

    def no_nvrtc():
        raise ImportError("libnvrtc.so.13 not found")

    monkeypatch.setattr(_driver, "nvrtc", no_nvrtc)
    with pytest.raises(BackendUnavailableError, match="NVRTC .* is missing.*nvidia-cuda-nvrtc"):
        _driver.probe()


def test_no_device(fresh_probe, monkeypatch) -> None:
    monkeypatch.setattr(_driver, "_libcuda", _FakeLib(13000))
    monkeypatch.setattr(_driver, "_bindings_major", lambda: (13, "13.5.0"))

    class Done:
        returncode, stdout, stderr = 0, '{"error": 100}', ""

    monkeypatch.setattr(_driver.subprocess, "run", lambda *a, **k: Done())
    with pytest.raises(BackendUnavailableError, match="found no CUDA device"):
        _driver.probe()


def test_probe_runs_in_a_child_process(fresh_probe, monkeypatch) -> None:
    monkeypatch.setattr(_driver, "_libcuda", _FakeLib(13000))
    monkeypatch.setattr(_driver, "_bindings_major", lambda: (13, "13.5.0"))
    seen = {}

    class Done:
        returncode, stderr = 0, ""
        stdout = '{"devices": [{"name": "Fake GPU", "cc_major": 9, "cc_minor": 0, "total_memory": 1, "multiprocessor_count": 132}]}'

    def run(cmd, **kw):
        seen["cmd"] = cmd
        return Done()

    monkeypatch.setattr(_driver.subprocess, "run", run)
    devs = _driver.probe()
    assert seen["cmd"][0] == sys.executable and "cuInit" in seen["cmd"][-1]
    assert devs[0]["name"] == "Fake GPU" and devs[0]["driver_version"] == "13.0"


def test_import_is_light() -> None:
    code = (
        "import sys, kernelbay_cuda.plugin as p; p.kernelbay_backend(); "
        "print([m for m in sys.modules if m.startswith(('cuda.bindings', 'numpy'))])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_backend_reports_a_reason_here() -> None:
    rec = {b.name: b for b in kb.backends()}.get("cuda")
    assert rec is not None and rec.priority == 300
    assert rec.languages == ("cuda", "ptx", "cubin", "fatbin", "triton")
    if rec.status != "available":
        assert rec.status == "unavailable" and rec.reason and "kernelbay-cuda" in rec.reason
