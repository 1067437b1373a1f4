"""The core's fallback of every optional hook passes the conformance suite.

``bare`` (tests/conformance/bare) is pyref's memory and launcher with the required hooks only:
no host view, memset, memory stats, cache, DLPack, foreign arrays, kernel close, streams, events,
graphs or timer of its own. The whole suite runs on it in a subprocess (a ``.dist-info`` folder
on ``sys.path`` announces it, as an install would), beside pyref, whose hooks give the same results.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def test_every_optional_hook_left_out_passes_the_suite(tmp_path: Path) -> None:
    site = tmp_path / "site"
    info = site / "kernelbay_bare-0.2.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: kernelbay-bare\nVersion: 0.2.0\n")
    (info / "entry_points.txt").write_text("[kernelbay.backends]\nbare = kernelbay_bare.plugin\n")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(site), str(HERE / "bare"), env.get("PYTHONPATH", "")])
    env.pop("KERNELBAY_BACKENDS", None)
    cmd = [sys.executable, "-m", "pytest", str(HERE / "bare" / "suite_bare.py"), "-q", "-p", "no:cacheprovider"]
    cmd += ["--kernelbay-require=bare", "-rs"]
    r = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    last = out.strip().splitlines()[-1]
    assert " passed" in last and "failed" not in last and "error" not in last, out
