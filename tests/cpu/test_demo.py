"""`kernelbay demo` (what `make demo` runs) on the cpu backend, through the installed command."""

import os
import subprocess
import sys


def test_kernelbay_demo_on_cpu() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KERNELBAY_")}
    env["KERNELBAY_DEVICE"] = "cpu"
    r = subprocess.run([sys.executable, "-m", "kernelbay.cli", "demo"], capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    assert "device: cpu:0" in r.stdout and "saxpy (cuda)" in r.stdout and "matches numpy: OK" in r.stdout
