"""kernelbay's logging: stdlib ``logging`` under ``kernelbay.*``, switched on by ``KERNELBAY_LOG``.

Every module logs to a child of the ``kernelbay`` logger (``kernelbay.cache``,
``kernelbay.plugins``, ``kernelbay.cpu``...). A library leaves output to the application, so by
default nothing is printed (a :class:`logging.NullHandler`); an application that configures
logging itself sees kernelbay's records like any other. ``KERNELBAY_LOG`` is the quick switch::

    KERNELBAY_LOG=info                       # every kernelbay logger at INFO, to stderr
    KERNELBAY_LOG=warning,cache=debug,cpu=debug   # a default level, then per-logger levels

Levels: ``debug``, ``info``, ``warning``, ``error``, ``critical``, ``off``. Logger names are
relative to ``kernelbay`` (``cache`` is ``kernelbay.cache``).

A slow path is never silent, though: the first time a process takes one (the disk cache cannot
be used, so every process compiles anew; native helpers unavailable, so the pure-Python path
runs), :func:`slow_path` issues one :class:`SlowPathWarning` through :mod:`warnings`, which
Python shows by default, besides the log record. ``warnings.filterwarnings("ignore",
category=kernelbay.SlowPathWarning)`` silences it.
"""

from __future__ import annotations

import logging
import os
import threading
import warnings

from .errors import InvalidArgumentError

__all__ = ["ENV_LOG", "LEVELS", "SlowPathWarning", "configure", "configure_from_env", "check", "get", "slow_path"]

ENV_LOG = "KERNELBAY_LOG"
LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
    "critical": logging.CRITICAL,
    "off": logging.CRITICAL + 10,
}
_FORMAT = "%(asctime)s %(name)s %(levelname)s: %(message)s"
_root = logging.getLogger("kernelbay")
_root.addHandler(logging.NullHandler())
_handler: logging.Handler | None = None
_error: list[str] = []  # a malformed KERNELBAY_LOG, raised by check()


def get(name: str) -> logging.Logger:
    """The logger ``kernelbay.<name>``."""
    return logging.getLogger(f"kernelbay.{name}")


def parse(value: str) -> dict[str, int]:
    """``{"": default level, "cache": level, ...}`` from a ``KERNELBAY_LOG`` value.

    :raises ValueError: with the accepted form, for anything else.
    """
    out: dict[str, int] = {}
    for term in filter(None, (t.strip() for t in value.split(","))):
        name, _, level = term.rpartition("=")
        lvl = LEVELS.get(level.strip().lower())
        name = name.strip().removeprefix("kernelbay.").removeprefix("kernelbay")
        if lvl is None or (not name and "=" in term) or not all(p.isidentifier() for p in name.split(".") if name):
            raise ValueError(
                f"{ENV_LOG}={value!r}: {term!r} is not a level or name=level; use one of "
                f"{', '.join(LEVELS)}, optionally per logger, e.g. {ENV_LOG}=info,cache=debug"
            )
        out[name] = lvl
    return out


def configure(levels: dict[str, int]) -> None:
    """Send kernelbay's records at these levels to stderr (what ``KERNELBAY_LOG`` does)."""
    global _handler
    if _handler is None:
        _handler = logging.StreamHandler()
        _handler.setFormatter(logging.Formatter(_FORMAT))
        _root.addHandler(_handler)
    _root.setLevel(levels.get("", logging.WARNING))
    for name, lvl in levels.items():
        if name:
            get(name).setLevel(lvl)


def configure_from_env() -> None:
    """Apply ``KERNELBAY_LOG`` at import. A malformed value is kept for :func:`check` to raise,
    so that ``import kernelbay`` itself never fails and the CLI can report it cleanly."""
    raw = os.environ.get(ENV_LOG, "").strip()
    if not raw:
        return
    try:
        configure(parse(raw))
    except ValueError as exc:
        _error[:] = [str(exc)]


def check() -> None:
    """Raise :class:`~kernelbay.errors.InvalidArgumentError` for a malformed ``KERNELBAY_LOG``."""
    if _error:
        raise InvalidArgumentError(_error[0])


class SlowPathWarning(RuntimeWarning):
    """kernelbay took a slower path than it should (no disk cache, pure-Python helpers); the
    message says why and what to do. Issued once per kind per process."""


_slow_seen: set[str] = set()
_slow_lock = threading.Lock()


def slow_path(kind: str | None, msg: str, logger: logging.Logger, *, stacklevel: int = 3) -> bool:
    """Log ``msg`` as a warning on ``logger``; the first time this process takes the slow path
    ``kind`` (``"cache"``, ``"native"``...), also ``warnings.warn`` it as a :class:`SlowPathWarning`.
    ``kind=None``: the caller takes that path once a process by itself; warn every call.

    Returns whether this call warned (the first of its kind).
    """
    logger.warning("%s", msg)
    with _slow_lock:
        if kind in _slow_seen:
            return False
        if kind is not None:
            _slow_seen.add(kind)
    warnings.warn(msg, SlowPathWarning, stacklevel=stacklevel)
    return True


def warned(kind: str) -> bool:
    """Whether this process has already warned about the slow path ``kind``."""
    return kind in _slow_seen
