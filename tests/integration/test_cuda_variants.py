"""kernelbay-cuda's CUDA-major extras: each installs the bindings and NVRTC of its major.

No GPU is needed: NVRTC compiles without a driver, and the base install (no extra) must say
which extra to add rather than fail on an import.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow

COMPILE = """
import json, sys
import cuda.bindings
import kernelbay as kb
from kernelbay_cuda import nvrtc
img = nvrtc.compile_image(kb.Source(
    'extern "C" __global__ void k(float* x) { x[threadIdx.x] += 1.0f; }', "cuda", name="k"), (8, 0),
    use_cache=False)
print(json.dumps({"bindings": cuda.bindings.__version__, "nvrtc": list(nvrtc.nvrtc_version()),
                  "kind": img.kind, "size": len(img.data)}))
"""


@pytest.mark.parametrize("major", [12, 13])
def test_cuda_major_extra_installs_and_compiles(venv_factory, major) -> None:
    venv = venv_factory(f"cu{major}", str(ROOT / "core"), f"{ROOT / 'plugins' / 'cuda'}[cu{major}]")
    r = venv.py(COMPILE)
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert int(got["bindings"].split(".")[0]) == major
    assert got["nvrtc"][0] == major
    assert got["size"] > 100


def test_base_install_imports_and_names_the_extra(venv_factory) -> None:
    venv = venv_factory("cu-base", str(ROOT / "core"), str(ROOT / "plugins" / "cuda"))
    r = venv.py(
        """
        import ctypes
        import kernelbay_cuda._driver as d
        from kernelbay.errors import BackendUnavailableError

        class Lib:  # stands in for a CUDA 12.8 driver, so the probe gets as far as the bindings
            def cuDriverGetVersion(self, ref):
                ctypes.cast(ref, ctypes.POINTER(ctypes.c_int))[0] = 12080
                return 0

        d._libcuda = Lib()
        try:
            d.probe()
        except BackendUnavailableError as e:
            print(e)
        """
    )
    assert r.returncode == 0, r.stderr
    assert "cuda-bindings is not installed" in r.stdout
    assert "pip install 'kernelbay-cuda[cu12]'" in r.stdout
