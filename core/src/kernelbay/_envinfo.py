"""The environment report behind ``kernelbay info``: what ``python -m torch.utils.collect_env``,
``jax.print_environment_info()`` and ``cupy.show_config()`` report, for kernelbay.

Versions come from package metadata (nothing heavy is imported); the NVIDIA driver is read
from ``/proc/driver/nvidia/version`` and ``libcuda``'s ``cuDriverGetVersion`` (through ctypes,
guarded), so it is reported even where the CUDA backend is unavailable.
"""

from __future__ import annotations

import os
import platform
import sys
from typing import Any

#: Bump when a key of ``kernelbay info --json`` changes meaning or disappears (adding keys is not a change).
SCHEMA_VERSION = 1

#: Distributions reported besides kernelbay's own and their declared requirements: the peers.
PEERS = ("numpy", "cupy-cuda12x", "cupy-cuda13x", "torch", "jax", "jaxlib", "libtpu", "triton", "cuda-python")


def _dist_version(name: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def _requirement_names(dist: str) -> list[str]:
    """The names of ``dist``'s requirements (extras' too), from its metadata."""
    import re
    from importlib import metadata

    try:
        reqs = metadata.requires(dist) or []
    except metadata.PackageNotFoundError:
        return []
    names = []
    for r in reqs:
        m = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", r)
        if m and m.group(1) not in names:
            names.append(m.group(1))
    return names


def packages(backend_dists: list[str]) -> dict[str, str | None]:
    """``{distribution: version or None}``: kernelbay, each backend, what they require, the peers."""
    names = ["kernelbay", *backend_dists]
    for d in ["kernelbay", *backend_dists]:
        names += [n for n in _requirement_names(d) if not n.startswith("kernelbay")]
    names += PEERS
    out: dict[str, str | None] = {}
    for n in names:
        if n not in out:
            out[n] = _dist_version(n)
    return {n: v for n, v in out.items() if v is not None or n in ("kernelbay", *backend_dists)}


def nvidia_driver() -> dict[str, Any]:
    """The driver release (``/proc``) and the CUDA version it supports (``cuDriverGetVersion``)."""
    out: dict[str, Any] = {"release": None, "cuda": None, "error": None}
    try:
        with open("/proc/driver/nvidia/version", encoding="utf-8", errors="replace") as f:
            first = f.readline()
        parts = first.split()
        for i, w in enumerate(parts):
            if w.count(".") >= 1 and w.replace(".", "").isdigit() and i > 0:
                out["release"] = w
                break
    except OSError:
        pass
    try:
        import ctypes

        lib = ctypes.CDLL("libcuda.so.1")
        v = ctypes.c_int(0)
        rc = lib.cuDriverGetVersion(ctypes.byref(v))
        if rc == 0 and v.value:
            out["cuda"] = f"{v.value // 1000}.{(v.value % 1000) // 10}"
        else:
            out["error"] = f"cuDriverGetVersion returned {rc}"
    except (OSError, AttributeError) as exc:
        out["error"] = f"no NVIDIA driver library (libcuda.so.1): {exc}"
    return out


def cache() -> dict[str, Any]:
    from .cache import DiskCache
    from .errors import KernelbayError

    try:
        return DiskCache().info()
    except KernelbayError as exc:  # a malformed setting: reported, not raised, in a report
        return {"usable": False, "problem": str(exc)}


def system() -> dict[str, Any]:
    libc = " ".join(platform.libc_ver()).strip() or None
    return {
        "os": platform.platform(),
        "machine": platform.machine(),
        "libc": libc,
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
        "python_implementation": platform.python_implementation(),
        "python_executable": sys.executable,
    }


#: The first-party backends and the extra of ``kernelbay`` that installs each.
FIRST_PARTY = {"cpu": "cpu", "cuda": "cuda", "tpu": "tpu"}


def checkout_root() -> str | None:
    """The kernelbay checkout this kernelbay runs from (an editable install), or None (installed)."""
    here = os.path.dirname(os.path.abspath(__file__))  # <root>/core/src/kernelbay
    root = os.path.dirname(os.path.dirname(os.path.dirname(here)))
    try:
        with open(os.path.join(root, "pyproject.toml"), encoding="utf-8") as f:
            workspace = 'name = "kernelbay-workspace"' in f.read()
    except OSError:
        return None
    return root if workspace and os.path.exists(os.path.join(root, "uv.lock")) else None


def fix_command(backends: list[dict[str, Any]], driver: dict[str, Any], root: str | None) -> str | None:
    """The one command that installs what this report shows missing, or None when nothing is.

    In a checkout that is `make test` (every backend, from uv.lock); installed, it is the
    ``pip install 'kernelbay[...]'`` of the missing first-party backends (``[cuda]`` only where
    an NVIDIA driver is present). A backend that is installed but broken or unavailable for
    another reason is not an install problem: its own reason says what to do.
    """
    by = {b["name"]: b for b in backends}
    gpu = bool(driver.get("release") or driver.get("cuda"))
    missing = [name for name in ("cpu", "cuda", "tpu") if name not in by and (name != "cuda" or gpu)]
    cuda = by.get("cuda")
    if cuda is not None and "cuda-bindings is not installed" in str(cuda.get("reason") or ""):
        missing.append("cuda")
    if root is not None:
        if not by or missing:
            return f"make test (in {root}: installs every backend from uv.lock; or `uv sync --locked`)"
        return None
    if not by:
        missing = ["cpu", *missing]
    if not missing:
        return None
    extras = ",".join(FIRST_PARTY[m] for m in dict.fromkeys(missing))
    return f"pip install 'kernelbay[{extras}]'"
