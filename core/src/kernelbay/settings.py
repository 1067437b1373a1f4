"""Reading ``KERNELBAY_*`` settings and ``kernelbay.toml``: every value checked, every refusal naming it.

Backends read their own variables through these helpers too, so that a bad value gives the
same kind of error (:class:`~kernelbay.errors.SettingError`, an ``InvalidArgumentError``)
everywhere: what the variable holds, the form it accepts, and the range this machine allows.
"""

from __future__ import annotations

import math
import os
import re
import shlex
from typing import Any

from .errors import SettingError

__all__ = ["env_bytes", "env_int", "env_seconds", "read_manifest"]

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


#: The tables and keys a ``kernelbay.toml`` manifest may hold (``kernelbay precompile``).
MANIFEST_KEYS: dict[str, frozenset[str]] = {
    "defaults": frozenset({"options"}),
    "source": frozenset({"name", "options", "headers", "skip"}),
}


def read_manifest(path: str) -> dict[str, Any]:
    """A ``kernelbay.toml`` manifest, checked: ``{"defaults": {...}, "sources": {rel: {...}}}``.

    ``options`` is a list of strings or one string split as a shell would (:func:`shlex.split`:
    ``"-O3 -DN=4"`` is two options, ``"-DMSG='a b'"`` one). ``headers`` is a list of strings or one
    string, ``name`` a string, ``skip`` a boolean.

    :raises SettingError: unreadable or invalid TOML, an unknown table or key (named, with the
        keys allowed there), or a value of the wrong type.
    """
    import tomllib

    try:
        with open(path, "rb") as f:
            data = tomllib.load(f)
    except OSError as exc:
        raise SettingError(f"cannot read the manifest {path!r}: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise SettingError(f"the manifest {path!r} is not valid TOML: {exc}") from None
    unknown = sorted(set(data) - {"defaults", "sources"})
    if unknown:
        raise SettingError(
            f"the manifest {path!r} has an unknown table [{unknown[0]}]; the tables are [defaults] and "
            '[sources."FILE"] (a misspelt name would be ignored otherwise)'
        )
    out: dict[str, Any] = {"defaults": _manifest_table(path, "defaults", data.get("defaults", {}), "defaults")}
    sources = data.get("sources", {})
    if not isinstance(sources, dict):
        raise SettingError(f'the manifest {path!r}: [sources] must hold tables, e.g. [sources."saxpy.cu"]')
    out["sources"] = {rel: _manifest_table(path, f'sources."{rel}"', entry, "source") for rel, entry in sources.items()}
    return out


def _manifest_table(path: str, where: str, table: Any, kind: str) -> dict[str, Any]:
    allowed = MANIFEST_KEYS[kind]
    if not isinstance(table, dict):
        raise SettingError(f"the manifest {path!r}: [{where}] must be a table of {', '.join(sorted(allowed))}")
    for key in table:
        if key not in allowed:
            raise SettingError(
                f"the manifest {path!r}: unknown key {key!r} in [{where}]; the keys there are "
                f"{', '.join(sorted(allowed))}"
            )
    out = dict(table)
    for key in ("options", "headers"):
        if key in out:
            out[key] = _string_list(path, where, key, out[key])
    if "name" in out and not isinstance(out["name"], str):
        raise SettingError(f"the manifest {path!r}: name in [{where}] must be a string, not {out['name']!r}")
    if "skip" in out and not isinstance(out["skip"], bool):
        raise SettingError(f"the manifest {path!r}: skip in [{where}] must be true or false, not {out['skip']!r}")
    return out


def _string_list(path: str, where: str, key: str, value: Any) -> list[str]:
    if isinstance(value, str):
        try:
            return shlex.split(value)
        except ValueError as exc:  # an unclosed quote
            raise SettingError(f"the manifest {path!r}: {key} = {value!r} in [{where}]: {exc}") from None
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return list(value)
    raise SettingError(
        f"the manifest {path!r}: {key} in [{where}] must be a string or a list of strings, not {value!r}"
    )
