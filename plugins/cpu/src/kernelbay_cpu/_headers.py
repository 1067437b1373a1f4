"""The texts of the package's own C/C++ headers and sources (``include/``), read from the files
beside this module: the compiler reads them there too (``-I``), so they are real files.

Not ``importlib.resources``: its readers cost 12-19 ms on the first call of a process (it
imports tempfile and zip support), most of a fresh process's disk-cache hit, whose cache key
holds these texts.
"""

from __future__ import annotations

from pathlib import Path

INCLUDE = Path(__file__).resolve().parent / "include"


def texts(names: tuple[str, ...] | list[str]) -> dict[str, str]:
    """``{name: text}`` of the files ``names`` in ``include/``."""
    return {n: (INCLUDE / n).read_text(encoding="utf-8") for n in names}
