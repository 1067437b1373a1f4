"""A backend that is broken or not installed fails the conformance suite with its reason, flag or no flag.

Runs pytest in a subprocess against the deliberately broken example plugin
(examples/plugins/kernelbay-broken), made visible to ``importlib.metadata`` by a ``.dist-info``
folder on ``sys.path`` (what an install writes), without installing anything.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BROKEN_SRC = ROOT / "examples" / "plugins" / "kernelbay-broken" / "src"

SUITE = """
from kernelbay.testing import BackendConformance


class TestIt(BackendConformance):
    backend = {name!r}
"""


def _run(tmp_path: Path, name: str, *flags: str) -> subprocess.CompletedProcess[str]:
    site = tmp_path / "site"
    info = site / "kernelbay_broken-0.2.0.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: kernelbay-broken\nVersion: 0.2.0\n")
    (info / "entry_points.txt").write_text("[kernelbay.backends]\nbroken = kernelbay_broken.plugin\n")
    test = tmp_path / "test_suite.py"
    test.write_text(SUITE.format(name=name))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(site), str(BROKEN_SRC), env.get("PYTHONPATH", "")])
    env.pop("KERNELBAY_REQUIRE", None)
    env.pop("KERNELBAY_BACKENDS", None)
    cmd = [sys.executable, "-m", "pytest", str(test), "-q", "-p", "no:cacheprovider", "-x", *flags]
    return subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("flags", [(), ("--kernelbay-require=broken",)], ids=["no-flag", "require"])
def test_broken_backend_fails_the_suite_with_its_reason(tmp_path: Path, flags: tuple[str, ...]) -> None:
    r = _run(tmp_path, "broken", *flags)
    out = r.stdout + r.stderr
    assert r.returncode == 1, out
    assert "backend 'broken' cannot be tested" in out, out
    assert "ImportError: libkernelbay_broken.so: cannot open shared object file" in out, out
    assert " passed" not in out.splitlines()[-1] and " skipped" not in out.splitlines()[-1], out


def test_missing_backend_fails_the_suite(tmp_path: Path) -> None:
    r = _run(tmp_path, "nosuchbackend")
    out = r.stdout + r.stderr
    assert r.returncode == 1, out
    assert "backend 'nosuchbackend' cannot be tested" in out and "not installed" in out, out
