"""Reading ``KERNELBAY_*`` settings: every value checked, every refusal naming the variable.

Backends read their own variables through these helpers too, so that a bad value gives the
same kind of error (:class:`~kernelbay.errors.SettingError`, an ``InvalidArgumentError``)
everywhere: what the variable holds, the form it accepts, and the range this machine allows.
"""

from __future__ import annotations

import math
import os
import re

from .errors import SettingError

__all__ = ["env_bytes", "env_int", "env_seconds"]

_MAX_DIGITS = 40  # longer numbers are refused before int() (which is slow on huge strings)


def env_int(name: str, *, default: int, minimum: int, maximum: int, what: str) -> int:
    """``name`` as an int in ``[minimum, maximum]``; unset or blank gives ``default``.

    :raises SettingError: for anything else, naming the variable and the accepted range.
    """
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    form = f"{name} must be {what}: a whole number from {minimum} to {maximum} (or unset)"
    if len(raw) > _MAX_DIGITS or not re.fullmatch(r"[+-]?\d+", raw):
        raise SettingError(f"{name}={_show(raw)} is not a whole number; {form}")
    n = int(raw)
    if not minimum <= n <= maximum:
        raise SettingError(f"{name}={n} is out of range; {form}")
    return n


_UNITS = {
    "": 1,
    "b": 1,
    "k": 1000,
    "kb": 1000,
    "kib": 1 << 10,
    "m": 1000**2,
    "mb": 1000**2,
    "mib": 1 << 20,
    "g": 1000**3,
    "gb": 1000**3,
    "gib": 1 << 30,
    "t": 1000**4,
    "tb": 1000**4,
    "tib": 1 << 40,
}


def env_bytes(name: str, *, default: int) -> int:
    """``name`` as a size in bytes: ``1073741824``, ``512MiB``, ``1GB``, ``1.5GiB`` (case-insensitive).

    :raises SettingError: for anything else, naming the variable and the accepted form.
    """
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    m = re.fullmatch(r"(\d{1,20}(?:\.\d{1,9})?)\s*([A-Za-z]{0,3})", raw)
    unit = m and _UNITS.get(m.group(2).lower())
    if not m or unit is None:
        raise SettingError(
            f"{name}={_show(raw)} is not a size; use a number of bytes with an optional unit "
            "(B, KB, MB, GB, TB in powers of 1000; KiB, MiB, GiB, TiB in powers of 1024), e.g. 1GiB"
        )
    return int(float(m.group(1)) * unit) if "." in m.group(1) else int(m.group(1)) * unit


def env_seconds(name: str, *, default: float, minimum: float = 0.0, maximum: float = 86400.0) -> float:
    """``name`` as a number of seconds in ``[minimum, maximum]``.

    :raises SettingError: for anything else, naming the variable and the accepted range.
    """
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        v = float(raw) if len(raw) <= _MAX_DIGITS else math.nan
    except ValueError:
        v = math.nan
    if not minimum <= v <= maximum:  # also false for nan
        raise SettingError(
            f"{name}={_show(raw)} must be a number of seconds from {minimum:g} to {maximum:g} (or unset)"
        )
    return v


def _show(raw: str) -> str:
    return repr(raw if len(raw) <= 60 else raw[:30] + "..." + raw[-10:])
