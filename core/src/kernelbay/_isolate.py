"""Running plugin code (imports, probes) so that it cannot hang, exit or corrupt the caller.

* Under a deadline: the call runs in a daemon thread; the caller waits at most
  ``KERNELBAY_PLUGIN_TIMEOUT`` seconds and then goes on without it. A real Ctrl-C still reaches
  the caller, which is the thread waiting. Unset, the deadline is generous and adapts to the
  machine's load (:func:`deadline`): a cold JAX import alone takes over 10 s on a busy 2-core
  machine, and a backend left out for being slow is worse than a hang reported late.
* Whatever the plugin raises, ``SystemExit`` and ``KeyboardInterrupt`` included, comes back as
  an exception to report, never as the end of the process.
* What the plugin writes to ``sys.stdout`` meanwhile goes to ``sys.stderr``, so machine-readable
  output (``kernelbay info --json``) stays intact; other threads keep their stdout.
"""

from __future__ import annotations

import math
import os
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, TextIO

from .cpus import affinity_cpus
from .settings import env_seconds

ENV_TIMEOUT = "KERNELBAY_PLUGIN_TIMEOUT"
DEFAULT_TIMEOUT = 30.0  # on an idle machine; scaled up by the load (default_deadline)
MAX_DEFAULT_TIMEOUT = 300.0


class TimedOut(Exception):
    """The call did not return within the deadline (it may still be running)."""

    def __init__(self, seconds: float) -> None:
        super().__init__(f"did not answer within {seconds:g} s")
        self.seconds = seconds


def deadline() -> float:
    """``KERNELBAY_PLUGIN_TIMEOUT`` in seconds (0 turns the deadline off); unset, :func:`default_deadline`."""
    if not os.environ.get(ENV_TIMEOUT, "").strip():
        return default_deadline()
    return env_seconds(ENV_TIMEOUT, default=DEFAULT_TIMEOUT, minimum=0.0, maximum=3600.0)


def default_deadline() -> float:
    """``DEFAULT_TIMEOUT`` times the load per CPU where that exceeds 1 (runnable processes per
    core over the last minute), at most ``MAX_DEFAULT_TIMEOUT``: on a machine twice as busy as it
    has cores, a probe gets twice as long."""
    try:
        load = os.getloadavg()[0] / affinity_cpus()
    except OSError:  # no load average here: the idle machine's deadline
        load = 1.0
    return round(min(MAX_DEFAULT_TIMEOUT, DEFAULT_TIMEOUT * max(1.0, load)), 1)


class _Routed:
    """``sys.stdout`` while plugin code runs: writes from the plugin's threads go to stderr."""

    def __init__(self, real: TextIO) -> None:
        self.real = real
        self.diverted: set[int] = set()

    def _target(self) -> TextIO:
        return sys.stderr if threading.get_ident() in self.diverted else self.real

    def write(self, s: str) -> int:
        return self._target().write(s)

    def flush(self) -> None:
        self._target().flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._target(), name)


_route_lock = threading.Lock()


def _divert(ident: int) -> None:
    with _route_lock:
        out = sys.stdout
        if not isinstance(out, _Routed):
            out = sys.stdout = _Routed(out)
        out.diverted.add(ident)


def _undivert(ident: int) -> None:
    with _route_lock:
        out = sys.stdout
        if isinstance(out, _Routed):
            out.diverted.discard(ident)
            if not out.diverted:
                sys.stdout = out.real


def call(fn: Callable[[], Any], seconds: float | None = None) -> Any:
    """``fn()`` run as plugin code: its result, or the exception it raised (any kind).

    :raises TimedOut: when it did not return within ``seconds`` (default: :func:`deadline`).
    :raises BaseException: what ``fn`` raised, ``SystemExit``/``KeyboardInterrupt`` included,
        wrapped in :class:`PluginExit` for those two so that callers can report them.
    """
    limit = deadline() if seconds is None else seconds
    box: dict[str, Any] = {}

    def run() -> None:
        ident = threading.get_ident()
        _divert(ident)
        try:
            box["value"] = fn()
        except BaseException as exc:
            box["error"] = exc
        finally:
            _undivert(ident)

    t = threading.Thread(target=run, name="kernelbay-plugin", daemon=True)
    t.start()
    end = time.monotonic() + limit if limit > 0 else math.inf
    while t.is_alive() and time.monotonic() < end:
        t.join(min(0.05, max(end - time.monotonic(), 0.0)))  # short waits: Ctrl-C is seen at once
    if t.is_alive():
        raise TimedOut(limit)
    err = box.get("error")
    if err is not None:
        if isinstance(err, (SystemExit, KeyboardInterrupt)):
            raise PluginExit(err) from err
        raise err
    return box.get("value")


class PluginExit(Exception):
    """Plugin code raised ``SystemExit`` or ``KeyboardInterrupt``: reported, not obeyed."""

    def __init__(self, exc: BaseException) -> None:
        super().__init__(f"it raised {type(exc).__name__}({', '.join(map(repr, exc.args))})")
        self.original = exc
