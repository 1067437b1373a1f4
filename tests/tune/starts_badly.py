"""A launch function whose module misbehaves when a tuning worker imports it (KB_TUNE_TEST_WORKER:
``exit`` ends the worker after a line on stderr, ``kill`` kills it by SIGKILL, ``import`` fails to
import a module, ``hang`` never returns), for tests/tune/test_tune.py."""

from __future__ import annotations

import os
import signal
import sys
import time

_how = os.environ.get("KB_TUNE_TEST_WORKER", "")
if _how == "exit":
    sys.stderr.write("starts_badly: giving up now\n")
    sys.stderr.flush()
    os._exit(3)
elif _how == "kill":
    os.kill(os.getpid(), signal.SIGKILL)
elif _how == "import":
    import kernelbay_no_such_module  # noqa: F401
elif _how == "hang":
    time.sleep(3600)


def launch(k, config, args):
    k.launch(1, 32, args)
