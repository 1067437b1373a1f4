"""Misbehaving plugins installed for real (issue #17): a probe that hangs, one that raises
SystemExit, one that prints on import (from Python and from C), two distributions claiming one
name. ``kernelbay info --json`` stays valid and quick, and each is reported."""

from __future__ import annotations

import json
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from .conftest import ROOT, make_venv, write_package


def _pkg(dist: str, name: str, module: str, plugin: str) -> dict[str, str]:
    return {
        "pyproject.toml": f"""
            [build-system]
            requires = ["hatchling"]
            build-backend = "hatchling.build"
            [project]
            name = "{dist}"
            version = "0.0.1"
            [project.entry-points."kernelbay.backends"]
            {name} = "{module}.plugin"
            [tool.hatch.build.targets.wheel]
            packages = ["{module}"]
        """,
        f"{module}/__init__.py": "",
        f"{module}/plugin.py": plugin,
    }


def _backend(name: str, probe: str, top: str = "") -> str:
    return f"""
        import os, sys, time
        import kernelbay as kb
        from kernelbay import hookimpl
        {top}

        @hookimpl
        def kernelbay_backend():
            return kb.BackendSpec("{name}", 400, ("python",), kb.API_VERSION)

        @hookimpl
        def kernelbay_devices():
            {probe}
            return [kb.Device("{name}", 0)]

        @hookimpl
        def kernelbay_allocate(device, nbytes):
            return bytearray(nbytes)

        @hookimpl
        def kernelbay_free(device, handle):
            pass

        @hookimpl
        def kernelbay_copy(dst, src, nbytes, stream):
            pass

        @hookimpl
        def kernelbay_compile(device, source):
            return None

        @hookimpl
        def kernelbay_launch(kernel, grid, block, args, shared_mem, stream):
            pass

        @hookimpl
        def kernelbay_synchronize(device, stream):
            pass
    """


PACKAGES = {
    "hangs": _pkg("kernelbay-hangs", "hangs", "kb_hangs", _backend("hangs", "time.sleep(600)")),
    "quits": _pkg("kernelbay-quits", "quits", "kb_quits", _backend("quits", "raise SystemExit(7)")),
    "noisy": _pkg(
        "kernelbay-noisy",
        "noisy",
        "kb_noisy",
        _backend(
            "noisy",
            "print('probe says hi'); os.write(1, b'C-level hi\\\\n')",
            top="print('import says hi'); os.write(1, b'C-level import hi\\\\n')",
        ),
    ),
    "twin-a": _pkg("kernelbay-twin-a", "twin", "kb_twin_a", _backend("twin", "pass")),
    "twin-b": _pkg("kernelbay-twin-b", "twin", "kb_twin_b", _backend("twin", "pass")),
}


@pytest.fixture(scope="module")
def misbehaving(tmp_path_factory):
    src = tmp_path_factory.mktemp("bad-pkgs")
    paths = [str(write_package(src / n, files)) for n, files in PACKAGES.items()]
    return make_venv(
        tmp_path_factory.mktemp("misbehaving") / "venv",
        str(ROOT / "core"),
        str(ROOT / "examples" / "plugins" / "kernelbay-pyref"),
        *paths,
    )


def _timed(venv, *args: str, env: dict[str, str]) -> tuple[subprocess.CompletedProcess, float]:
    t0 = time.monotonic()
    r = venv.kernelbay(*args, env=env)
    return r, time.monotonic() - t0


@pytest.fixture(scope="module")
def beside_a_hang(misbehaving) -> dict[str, tuple[subprocess.CompletedProcess, float]]:
    """`kernelbay info --json` and `kernelbay demo` naming the hanging backend first, each with its
    time. Both wait out the hanging probe's deadline, so they run side by side: one wait, not two.
    The deadline leaves the quick backends' probes room on a loaded machine; the hang is 600 s."""
    quick = {"KERNELBAY_PLUGIN_TIMEOUT": "20"}
    with ThreadPoolExecutor(2) as pool:
        info = pool.submit(_timed, misbehaving, "info", "--json", env=quick)
        demo = pool.submit(_timed, misbehaving, "demo", env={"KERNELBAY_DEVICE": "hangs,pyref", **quick})
        return {"info": info.result(), "demo": demo.result()}


def test_info_json_stays_valid_quick_and_reports_each(beside_a_hang):
    r, took = beside_a_hang["info"]
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)  # nothing but the document on stdout
    by = {b["name"]: b for b in data["backends"]}
    assert by["hangs"]["status"] == "unavailable" and "did not answer within 20 s" in by["hangs"]["reason"]
    assert by["quits"]["status"] == "broken" and "SystemExit(7)" in by["quits"]["reason"]
    assert by["noisy"]["status"] == "available"
    assert by["twin"]["status"] == "broken"
    assert "kernelbay-twin-a" in by["twin"]["reason"] and "kernelbay-twin-b" in by["twin"]["reason"]
    assert data["default_device"] == "noisy:0"
    assert "import says hi" in r.stderr and "C-level import hi" in r.stderr and "probe says hi" in r.stderr
    assert took < 300  # the hanging probe costs its deadline (and the interpreter start), not its 600 s


def test_a_hanging_backend_does_not_hold_up_naming_another(beside_a_hang):
    r, took = beside_a_hang["demo"]
    assert r.returncode == 0, r.stderr
    assert "device: pyref:0" in r.stdout and took < 300  # not the hang's 600 s
