"""Functions the worker-pool tests run in spawned workers (module level: passed by name)."""

from __future__ import annotations

import os
import subprocess
import sys
import time


def square(x: int) -> int:
    return x * x


def fails(x: int) -> int:
    raise ValueError(f"bad {x}")


def dies(code: int) -> int:
    os._exit(code)


def hangs_with_a_child(pidfile: str) -> int:
    """Starts a child process (as a compiler would), writes its pid, then waits forever."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])
    with open(pidfile, "w") as f:
        f.write(str(child.pid))
    while True:
        time.sleep(1)
