"""A fresh process's short way to a module it built before: the disk-cache key of the module's
image, with its runners and notes, kept under a key of the build's raw inputs.

The image's own key (build.py) holds what the build makes of the source -- the planned text
(fission), the launcher, every prelude header's text -- so computing it means planning the
source and reading the package's headers: 5-6 ms of a fresh process's ~8 ms disk-cache hit. The
memo's key holds only the raw inputs (the source and its headers as given, the entry names, the
compiler, its flags) and a stamp of this package's files (each one's name, size and mtime), so
it is computed without either; a memo hit then looks the image up by its stored key. Anything
the plan reads beyond the source is a file the compiler read too, so a changed one fails the
image's own dependency check and the build takes the long way.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from typing import Any

from kernelbay.cache import DiskCache, lookup, make_key, store
from kernelbay.types import Source

from . import _driver

_stamp: str | None = None


def package_stamp() -> str:
    """Name, size and mtime of every file of this package and its ``include/`` (once a process):
    an edited or reinstalled backend never reads a memo of another one's plans."""
    global _stamp
    if _stamp is None:
        here = os.path.dirname(os.path.abspath(__file__))
        parts = []
        for sub in ("", "include/"):
            for name, st in _files(os.path.join(here, sub)):
                if not name.endswith((".pyc", ".so")):
                    parts.append(f"{sub}{name}:{st.st_size}:{st.st_mtime_ns}")
        _stamp = "\n".join(sorted(parts))
    return _stamp


def _files(path: str) -> list[tuple[str, os.stat_result]]:
    """The regular files in ``path`` with their stats; listed through a descriptor where the
    platform can, so each stat resolves the name alone, not the whole path again (~70 us)."""
    if os.scandir not in os.supports_fd:
        with os.scandir(path) as it:
            return [(e.name, e.stat()) for e in it if e.is_file()]
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        with os.scandir(fd) as it:
            return [(e.name, e.stat()) for e in it if e.is_file()]
    finally:
        os.close(fd)


def build_key(
    space: str,
    tc: _driver.Toolchain,
    argv: Sequence[str],
    fl: list[str],
    source: Source,
    names: list[str],
    extra: dict[str, Any],
) -> str:
    """A cache key over one build's compiler, flags, target, source, its headers and entries,
    and ``extra`` (the memo's and the image's keys both: they differ in ``space`` and ``extra``)."""
    return make_key(
        backend=space,
        compiler=" ".join(argv),
        compiler_version=tc.version,
        arch=tc.arch(fl),
        options=fl,
        source=source.text,
        entries=names,
        extra={"lang": source.lang, **extra, **{f"header:{k}": v for k, v in source.headers.items()}},
    )


def key(tc: _driver.Toolchain, argv: Sequence[str], fl: list[str], source: Source, names: list[str]) -> str:
    """The memo's key: the build's raw inputs and the backend's own files."""
    return build_key("cpu-memo", tc, argv, fl, source, names, {"package": package_stamp()})


def recall(memo: str) -> tuple[DiskCache | None, dict[str, Any] | None]:
    """The cache and ``{"key", "runners", "notes"}`` stored under ``memo`` (None: no memo)."""
    cache, hit = lookup(memo)
    if hit is None:
        return cache, None
    try:
        got = json.loads(hit.payload)
    except ValueError:
        return cache, None
    if not isinstance(got, dict) or not {"key", "runners", "notes"} <= got.keys():
        return cache, None
    return cache, got


def remember(
    cache: DiskCache | None, memo: str, image_key: str, runners: dict[str, str], notes: dict[str, str]
) -> None:
    """Keep ``image_key`` (and the runners and notes of its build) under ``memo``."""
    body = json.dumps({"key": image_key, "runners": runners, "notes": notes}).encode()
    store(cache, memo, body, {"backend": "cpu", "memo": True})
