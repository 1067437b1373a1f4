"""The files a build read outside its build directory: digests, stamps and ``-MMD`` depfiles, so a
changed header rebuilds a cached kernel."""

from __future__ import annotations

import hashlib
import os


def file_digest(path: str) -> str | None:
    h = hashlib.sha256()
    try:
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
    except OSError:
        return None
    return h.hexdigest()


def stamp(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size)


def deps_unchanged(deps: object) -> bool:
    if not isinstance(deps, dict):
        return False  # an entry without the list (older code): rebuild, to be safe
    return all(file_digest(p) == d for p, d in deps.items())


def parse_depfile(text: str) -> list[str]:
    """The prerequisites of a Make rule as ``-MD`` writes it (escaped spaces, continued lines)."""
    body = text.replace("\\\n", " ")
    _, _, rest = body.partition(": ")
    out: list[str] = []
    cur = ""
    i = 0
    while i < len(rest):
        c = rest[i]
        if c == "\\" and i + 1 < len(rest) and rest[i + 1] in " #":
            cur += rest[i + 1]
            i += 2
            continue
        if c == "$" and rest[i + 1 : i + 2] == "$":
            cur += "$"
            i += 2
            continue
        if c.isspace():
            if cur:
                out.append(cur)
            cur = ""
        else:
            cur += c
        i += 1
    if cur:
        out.append(cur)
    return out


def external_deps(depfile: str, build_dir: str) -> dict[str, str]:
    """``{path: sha256}`` of every file the compiler read outside the build directory (headers
    reached by ``-I`` or an absolute ``#include``); the build directory's files are in the key."""
    try:
        with open(depfile, encoding="utf-8", errors="surrogateescape") as f:
            names = parse_depfile(f.read())
    except OSError:
        return {}
    base = os.path.realpath(build_dir)
    out: dict[str, str] = {}
    for n in names:
        p = os.path.realpath(os.path.join(build_dir, n))
        if os.path.commonpath([p, base]) == base:
            continue
        d = file_digest(p)
        if d is not None:
            out[p] = d
    return out
