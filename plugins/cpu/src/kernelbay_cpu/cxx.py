"""Running the C++ compiler on a build directory, and turning its diagnostics into a CompileError."""

from __future__ import annotations

import logging
import os
import re
import time
from collections.abc import Sequence

from kernelbay.errors import CompileError, InvalidArgumentError
from kernelbay.types import Source

from .analysis import entries
from .deps import external_deps
from .flags import libraries

log = logging.getLogger("kernelbay.cpu")

_DIAG_RE = re.compile(r"^(?P<file>[^:\n]+):(?P<line>\d+):(?:\d+:)?\s*(?:fatal )?error\b", re.M)


def run_compiler(
    argv: tuple[str, ...],
    fl: list[str],
    source: Source,
    text: str,
    fname: str,
    main: str,
    pre: dict[str, str],
    links: dict[str, str] | None = None,
    objects: Sequence[str] = (),
    link_flags: Sequence[str] = (),
) -> tuple[bytes, dict[str, str]]:
    """The shared object's bytes, and ``{path: sha256}`` of the files it was built from outside
    the build directory (from the compiler's ``-MMD`` dependency output). ``links``: names in
    the build directory linked to files elsewhere (the precompiled prelude, pch.py);
    ``objects``: objects linked in after the kernel (the runner object, runners.py), and
    ``link_flags`` the options their link takes."""
    import subprocess  # only where a compiler runs: importing the plugin stays light
    import tempfile

    with tempfile.TemporaryDirectory(prefix="kernelbay-cpu-build-") as d:
        files = {**pre, **dict(source.headers), fname: text, "kb_main.cpp": main}
        base = os.path.realpath(d)
        for n, body in files.items():
            p = os.path.realpath(os.path.join(d, n))
            if os.path.commonpath([p, base]) != base:  # Source refuses such names; never write outside
                raise InvalidArgumentError(f"Source header name {n!r} leads outside the build directory")
            os.makedirs(os.path.dirname(p), exist_ok=True)
            with open(p, "w", encoding="utf-8") as f:
                f.write(body)
        for n, target in (links or {}).items():
            os.symlink(target, os.path.join(d, n))
        out = os.path.join(d, "kernel.so")
        depfile = os.path.join(d, "kernel.d")
        cmd = [*argv, *fl, *link_flags, "-I", d, "-MMD", "-MF", depfile, "kb_main.cpp", *objects, *libraries(fl)]
        cmd += ["-o", out]
        t0 = time.perf_counter()
        try:
            r = subprocess.run(cmd, cwd=d, capture_output=True, text=True, timeout=600)
        except (OSError, subprocess.SubprocessError) as exc:
            raise CompileError(f"running the C++ compiler ({' '.join(cmd)}) failed: {exc}", source=source.text) from exc
        if r.returncode != 0:
            raise _compile_error(r.stdout + r.stderr, source, fname, cmd)
        log.info("compiled %s in %.0f ms: %s", source.name or "kernel", (time.perf_counter() - t0) * 1e3, " ".join(cmd))
        with open(out, "rb") as f:
            image = f.read()
        return image, external_deps(depfile, d)


def _compile_error(log: str, source: Source, fname: str, cmd: list[str]) -> CompileError:
    import tempfile  # only where a compiler runs: importing the plugin stays light

    lines: set[int] = set()
    in_launcher = False
    for m in _DIAG_RE.finditer(log):
        f = os.path.basename(m.group("file"))
        if f == fname:
            lines.add(int(m.group("line")))
        elif f == "kb_main.cpp":
            in_launcher = True
    msg = f"compiling {source.lang} kernel {source.name or '<unnamed>'!r} for cpu failed"
    if lines:
        msg += f" at line{'s' if len(lines) > 1 else ''} {', '.join(map(str, sorted(lines)))} of {fname}"
    if in_launcher:
        names = ", ".join(entries(source))
        msg += (
            f"; the generated launcher could not call {names}: check that the name (and template arguments) "
            "match a function in the source, that it returns void and is not overloaded"
        )
    if "No space left on device" in log or "Disk quota exceeded" in log:
        msg += f"; the disk is full: free space in {tempfile.gettempdir()} or set TMPDIR (the compiler said so)"
    return CompileError(msg + f" (command: {' '.join(cmd)})", log=log, source=source.text, lines=lines)
