"""A launch function whose module misbehaves when a tuning worker imports it (KB_TUNE_TEST_WORKER:
``exit`` ends the worker, ``hang`` never returns), for tests/tune/test_tune.py."""

from __future__ import annotations

import os
import time

_how = os.environ.get("KB_TUNE_TEST_WORKER", "")
if _how == "exit":
    os._exit(3)
elif _how == "hang":
    time.sleep(3600)


def launch(k, config, args):
    k.launch(1, 32, args)
