"""The suite's check of ``kernelbay_compile_to_cache`` on function sources fails a backend that
breaks the promise, and passes one that keeps it.

``bytecode`` (tests/conformance/bytecode) is pyref whose compile keeps its kernels' bytecode in
kernelbay's disk cache; a source's ``meta`` makes its ``kernelbay_compile_to_cache`` keep the
bytecode in the worker process, or compile nothing. The check runs in a subprocess (a
``.dist-info`` folder on ``sys.path`` announces the backend, as an install would, to the
subprocess and to the compile worker it spawns), one test class per case.
"""

from __future__ import annotations

import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
CHECK = "test_compile_to_cache_of_a_function_source"


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Each test class of suite_bytecode.py: ``"passed"``, or its failure message."""
    tmp = tmp_path_factory.mktemp("bytecode")
    info = tmp / "site" / "kernelbay_bytecode-0.2.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: kernelbay-bytecode\nVersion: 0.2.0\n")
    (info / "entry_points.txt").write_text("[kernelbay.backends]\nbytecode = kernelbay_bytecode.plugin\n")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(info.parent), str(HERE / "bytecode"), env.get("PYTHONPATH", "")])
    env.pop("KERNELBAY_BACKENDS", None)
    report = tmp / "report.xml"
    cmd = [sys.executable, "-m", "pytest", str(HERE / "bytecode" / "suite_bytecode.py"), "-q", "-p", "no:cacheprovider"]
    cmd += ["--kernelbay-require=bytecode", f"--junitxml={report}"]
    r = subprocess.run(cmd, cwd=tmp, env=env, capture_output=True, text=True, timeout=600)
    assert report.exists(), r.stdout + r.stderr
    got = {}
    for case in ET.parse(report).iter("testcase"):
        assert case.get("name") == CHECK, case.attrib
        bad = case.find("failure")
        if bad is None:
            bad = case.find("error")
        assert case.find("skipped") is None, r.stdout
        got[case.get("classname", "").rpartition(".")[2]] = "passed" if bad is None else bad.get("message", "")
    return got


def test_a_backend_that_keeps_the_promise_passes(outcomes: dict[str, str]) -> None:
    assert outcomes["TestKeeps"] == "passed", outcomes


@pytest.mark.parametrize(
    ("case", "why"),
    [
        ("TestKeepsInItsProcess", "kb.compile here missed the disk cache (1 of 1 lookups)"),
        ("TestCompilesNothing", "in a spawned compile worker gave 'memory': it looked nothing up"),
        ("TestGivesNoFunctionSource", "override function_source() in the test class"),
        ("TestGivesANestedFunction", "is not found by its module and name"),
    ],
)
def test_a_backend_that_breaks_it_fails_naming_the_rule(outcomes: dict[str, str], case: str, why: str) -> None:
    message = outcomes[case]
    assert "[rule: compile_to_cache of a function source" in message, message
    assert why in message, message
