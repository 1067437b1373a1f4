"""kernelbay-cuda's wheels: the platform wheel carries the compiled native helpers, the pure one
builds them at first use. No GPU is needed: the helpers load without a driver."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow

STATUS = """
import json
from kernelbay_cuda import native
print(json.dumps({"status": native.status(), "origin": native.origin(), "file": native.module().__file__
                  if native.module() is not None else None}))
"""


def _wheel(out: Path, pure: bool) -> Path:
    # From a copy of the plugin's tree: setuptools builds in the source tree's build/, and the
    # two tests run at once under pytest -n collided there ("File exists: build/bdist...").
    src = out.parent / "cuda-src"
    ignore = shutil.ignore_patterns("build", "*.egg-info", "*.so", "__pycache__")
    shutil.copytree(ROOT / "plugins" / "cuda", src, ignore=ignore)
    env = {**os.environ, "KERNELBAY_CUDA_PURE": "1" if pure else "0"}
    r = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", str(src), "-w", str(out)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr
    (whl,) = out.glob("kernelbay_cuda-*.whl")
    return whl


def _no_compiler_env(venv, cache: Path) -> dict[str, str]:
    # Only the venv's bin on PATH and a CC that does not exist: any compiler run would fail.
    return {"PATH": str(venv.bin), "CC": "/nonexistent/cc", "KERNELBAY_CACHE_DIR": str(cache)}


def test_platform_wheel_loads_the_prebuilt_helpers_without_a_compiler(venv_factory, tmp_path) -> None:
    whl = _wheel(tmp_path / "whl", pure=False)
    tag = f"cp{sys.version_info.major}{sys.version_info.minor}"
    assert whl.name.endswith(f"-{tag}-{tag}-linux_x86_64.whl"), whl.name
    venv = venv_factory("cuda-wheel", str(ROOT / "core"), str(whl))
    cache = tmp_path / "cache"
    r = venv.py(STATUS, env=_no_compiler_env(venv, cache))
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    assert got["status"] == "native" and got["origin"] == "prebuilt", got
    assert "site-packages/kernelbay_cuda/_kbcuda_native" in got["file"]
    assert not list(cache.rglob("*.kbc"))  # nothing was built or cached
    info = venv.kernelbay("info", "--json", env=_no_compiler_env(venv, cache))
    assert info.returncode == 0, info.stderr
    assert json.loads(info.stdout)["native_helpers"]["cuda"] == "native (prebuilt)"


def test_pure_wheel_builds_at_first_use_or_says_why_not(venv_factory, tmp_path) -> None:
    whl = _wheel(tmp_path / "whl", pure=True)
    assert whl.name.endswith("-py3-none-any.whl"), whl.name
    venv = venv_factory("cuda-pure", str(ROOT / "core"), str(whl))
    r = venv.py(STATUS, env=_no_compiler_env(venv, tmp_path / "c1"))
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    assert got["status"].startswith("python (no prebuilt module") and "no C compiler found" in got["status"], got
    if not any(os.path.exists(os.path.join(p, "cc")) for p in os.environ.get("PATH", "").split(os.pathsep)):
        pytest.skip("no C compiler here for the first-use build")
    cache = tmp_path / "c2"
    r = venv.py(STATUS, env={"KERNELBAY_CACHE_DIR": str(cache)})
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    assert got["status"] == "native" and got["origin"] == "built at first use", got
    assert got["file"].startswith(str(cache / "native-load"))  # loaded from the cache, not TMPDIR
