"""Test support: the tpu backend in interpret mode inside one pytest process.

kernelbay probes a backend once per process and keeps the answer; a test suite that turns
``KERNELBAY_TPU_INTERPRET`` on (or off) for some tests must make the core forget that answer,
and restore both afterwards so the other tests of the run see the machine as it is.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

from ._driver import ENV_INTERPRET


def forget_probe() -> None:
    """Make the core probe the tpu backend again on next use."""
    from kernelbay.testing import reprobe

    reprobe("tpu")


@contextmanager
def interpret_mode(on: bool | str = True) -> Iterator[None]:
    """Within the block the tpu backend runs in interpret mode (``on``: True or ``"1"`` for
    ``interpret=True``, ``"tpu"`` for JAX's TPU interpreter) or sees no TPU flag (False)."""
    old = os.environ.get(ENV_INTERPRET)
    if on:
        os.environ[ENV_INTERPRET] = "tpu" if on == "tpu" else "1"
    else:
        os.environ.pop(ENV_INTERPRET, None)
    forget_probe()
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(ENV_INTERPRET, None)
        else:
            os.environ[ENV_INTERPRET] = old
        forget_probe()
