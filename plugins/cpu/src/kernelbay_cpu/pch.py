"""The precompiled prelude: kb_cpu_cuda.h (or kb_cpu_cxx.h) parsed once per compiler and flags.

Parsing the prelude and the standard headers it brings in was two thirds of a cold compile
(``-ftime-report``: 0.67 s of 1.17 s user time for a gelu kernel). GCC reads a precompiled
header ``kb_cpu_cuda.h.gch`` lying next to the header in place of the header itself, when it was
built by the same compiler with the same options; otherwise it reads the header, so a stale or
foreign file costs time, never correctness. The ``.gch`` is kept in the disk cache under the
compiler's identity, the exact flags, the CPU (for ``-march=native``) and the prelude's text.

The first cold compile with a new compiler or new flags builds it (once: about one compile's
time); later cold compiles of any kernel with those flags reuse it. Not for clang (and kin): it
reads precompiled headers only when told to, in its own format.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Sequence

from kernelbay.cache import default_cache, locked, make_key
from kernelbay.errors import CacheError

from . import _driver

log = logging.getLogger("kernelbay.cpu")

ENV_PCH = "KERNELBAY_CPU_PCH"
#: Options that make no sense for a header (or are the link step's).
_NOT_FOR_HEADERS = ("-shared",)


def _enabled(tc: _driver.Toolchain) -> bool:
    if os.environ.get(ENV_PCH, "").strip().lower() in ("0", "off", "no", "false"):
        return False
    v = tc.version.lower()
    return not any(w in v for w in ("clang", "intel", "icpx", "nvc++"))


def prelude_pch(
    tc: _driver.Toolchain, argv: Sequence[str], fl: Sequence[str], prelude: str, pre: dict[str, str]
) -> str | None:
    """The path of the ``.gch`` of ``prelude`` for this compiler and flags (in the cache's
    ``pch`` directory, built now if missing), or None where there is none to use (not GCC,
    ``KERNELBAY_CPU_PCH=0``, no usable cache, or the build failed: logged)."""
    if not _enabled(tc):
        return None
    header_flags = [f for f in fl if f not in _NOT_FOR_HEADERS]
    key = make_key(
        backend="cpu-pch",
        compiler=" ".join(argv),
        compiler_version=tc.version,
        arch=tc.cpu_id,
        options=header_flags,
        source=pre[prelude],
        entries=[prelude],
        extra={f"prelude:{k}": v for k, v in pre.items()},
    )
    # A plain file, not a cache entry: the compiler reads it where it lies (a link from the
    # build directory), so a cold compile copies and hashes none of its tens of megabytes.
    try:
        cache = default_cache()
        path = os.path.join(cache.subdir("pch"), key + ".gch")
        if os.path.exists(path):
            return path
        with locked(cache, key):
            if not os.path.exists(path):
                image = _build(argv, header_flags, prelude, pre)
                if image is None:
                    return None
                write_whole(path, image)
        return path
    except (CacheError, OSError) as exc:
        log.warning("the precompiled prelude cannot be kept (%s): compiles parse the prelude instead", exc)
        return None


def write_whole(path: str, data: bytes) -> None:
    """Write ``data`` to ``path`` so that a reader sees the whole file or none of it."""
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def write_tree(d: str, files: dict[str, str]) -> None:
    """The prelude's files (name -> text) under the build directory ``d``."""
    for n, body in files.items():
        p = os.path.join(d, n)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "w", encoding="utf-8") as f:
            f.write(body)


def run_build(cmd: list[str], d: str, out: str, what: str, instead: str) -> bool:
    """Run a one-time build (``what``: the precompiled prelude, the runner object) in ``d``;
    whether ``out`` was made. A failure is logged with what happens ``instead``."""
    import subprocess  # only where a compiler runs: importing the plugin stays light

    t0 = time.perf_counter()
    try:
        r = subprocess.run(cmd, cwd=d, capture_output=True, text=True, timeout=600)
    except (OSError, subprocess.SubprocessError) as exc:
        log.warning("%s could not be built (%s): %s", what, exc, instead)
        return False
    if r.returncode != 0 or not os.path.exists(out):
        log.warning("%s could not be built: %s (%s)", what, instead, (r.stdout + r.stderr).strip()[-400:])
        return False
    log.info("built %s in %.0f ms: %s", what, (time.perf_counter() - t0) * 1e3, cmd)
    return True


def _build(argv: Sequence[str], fl: list[str], prelude: str, pre: dict[str, str]) -> bytes | None:
    import tempfile

    with tempfile.TemporaryDirectory(prefix="kernelbay-cpu-pch-") as d:
        write_tree(d, pre)
        out = os.path.join(d, prelude + ".gch")
        cmd = [*argv, *fl, "-I", d, "-x", "c++-header", prelude, "-o", out]
        if not run_build(cmd, d, out, f"the precompiled prelude {prelude}", "compiles parse the prelude instead"):
            return None
        with open(out, "rb") as f:
            return f.read()
