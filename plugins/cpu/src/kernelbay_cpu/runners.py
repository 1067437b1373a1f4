"""The runner object: the kernel-independent part of the runtime (include/kb_cpu_launch.cpp, and
for cuda kb_cpu_fiber.cpp) compiled once per compiler and flags, and linked into every module.

Before, every kernel module compiled the grid loop, fault reports, Ctrl-C handling, the fiber
scheduler and the warp operations again, as templates instantiated for its kernel: more than half
of a cold compile's compiler time (a gelu kernel's compile took 0.38 s of compiler time, 0.13 s
without the launcher that instantiated them).
Now the per-kernel code is a thunk per entry that unpacks the arguments and calls the kernel
(kb_cpu_launch.h); the rest is this object, kept beside the precompiled prelude (the cache's
``pch`` directory) under the same key parts: the compiler's identity, the exact flags, the CPU
and the prelude's text (which includes these sources).

The object's first build also probes, once per compiler and flags, whether GNU gold links it
(``-fuse-ld=gold``): it links a module in about a third of the default linker's time (25-30 ms
against 70-100 ms of compiler time on the development box). A compiler
or system without gold links as before. Where no object can be kept (no usable cache), or the
link with it fails, the module compiles the runner sources itself, in one translation unit with
the kernel, as it always did.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from typing import NamedTuple

from kernelbay.cache import default_cache, locked, make_key
from kernelbay.errors import CacheError

from . import _driver
from .flags import libraries
from .pch import run_build, write_tree, write_whole

log = logging.getLogger("kernelbay.cpu")

#: The runner sources of each prelude (the c++ prelude has no fibers).
SOURCES = {
    "kb_cpu_cuda.h": ("kb_cpu_launch.cpp", "kb_cpu_fiber.cpp", "kb_cpu_fission.cpp"),
    "kb_cpu_cxx.h": ("kb_cpu_launch.cpp",),
}
_GOLD = "-fuse-ld=gold"
_NOT_FOR_OBJECTS = ("-shared",)


class Runners(NamedTuple):
    """A runner object to link into a module, and the options its link takes."""

    path: str
    link_flags: list[str]
    #: where the probe's answer is kept (rewritten when a link with the object fails)
    probe_path: str


def includes(prelude: str) -> str:
    """The ``#include`` lines of the runner sources of ``prelude``."""
    return "".join(f'#include "{s}"\n' for s in SOURCES[prelude])


def source(prelude: str) -> str:
    """The object's translation unit: the prelude first (so the precompiled prelude serves it)."""
    return f'#include "{prelude}"\n' + includes(prelude)


def runner_object(
    tc: _driver.Toolchain,
    argv: Sequence[str],
    fl: Sequence[str],
    prelude: str,
    pre: dict[str, str],
    gch: str | None,
) -> Runners | None:
    """The runner object for this compiler, flags and prelude (built now if missing), or None
    where none can be kept (no usable cache, or the build failed: logged)."""
    obj_flags = [f for f in fl if f not in _NOT_FOR_OBJECTS]
    key = make_key(
        backend="cpu-runners",
        compiler=" ".join(argv),
        compiler_version=tc.version,
        arch=tc.cpu_id,
        options=obj_flags,
        source=source(prelude),
        entries=[prelude],
        extra={f"prelude:{k}": v for k, v in pre.items()},
    )
    try:
        cache = default_cache()
        base = os.path.join(cache.subdir("pch"), key)
        path, probe = base + ".o", base + ".ld"
        if not os.path.exists(path) or not os.path.exists(probe):
            with locked(cache, key):
                if not os.path.exists(path) or not os.path.exists(probe):
                    built = _build(argv, obj_flags, fl, prelude, pre, gch, probe_needed=not os.path.exists(probe))
                    if built is None:
                        return None
                    image, linker = built
                    if linker is not None:
                        write_whole(probe, linker.encode())
                    write_whole(path, image)
        with open(probe, encoding="utf-8") as f:
            linker = f.read().strip()
        return Runners(path, [_GOLD] if linker == "gold" else [], probe)
    except (CacheError, OSError) as exc:
        log.warning("the runner object cannot be kept (%s): each compile builds the runners itself", exc)
        return None


def discard(r: Runners) -> None:
    """A link with ``r`` failed where one without it succeeded: the object is built again, and
    modules link with the default linker, from the next compile on."""
    log.warning("linking with the runner object %s failed: it is rebuilt, with the default linker", r.path)
    for p, body in ((r.path, None), (r.probe_path, b"default")):
        try:
            if body is None:
                os.remove(p)
            else:
                write_whole(p, body)
        except OSError:
            pass


def _build(
    argv: Sequence[str],
    obj_flags: list[str],
    fl: Sequence[str],
    prelude: str,
    pre: dict[str, str],
    gch: str | None,
    probe_needed: bool,
) -> tuple[bytes, str | None] | None:
    """The object's bytes and, when asked, which linker links it ("gold" or "default")."""
    import subprocess  # only where a compiler runs: importing the plugin stays light
    import tempfile

    with tempfile.TemporaryDirectory(prefix="kernelbay-cpu-runners-") as d:
        write_tree(d, pre)
        if gch is not None:
            os.symlink(gch, os.path.join(d, prelude + ".gch"))
        with open(os.path.join(d, "kb_runners.cpp"), "w", encoding="utf-8") as f:
            f.write(source(prelude))
        out = os.path.join(d, "kb_runners.o")
        cmd = [*argv, *obj_flags, "-I", d, "-c", "kb_runners.cpp", "-o", out]
        if not run_build(cmd, d, out, "the runner object", "each compile builds the runners itself"):
            return None
        linker = None
        if probe_needed:
            linker = "default"
            # A user's own -fuse-ld= wins; else gold, where it links this object into a module.
            if not any(f.startswith("-fuse-ld=") for f in fl):
                probe = [*argv, *fl, _GOLD, out, *libraries(fl), "-o", os.path.join(d, "probe.so")]
                try:
                    probed = subprocess.run(probe, cwd=d, capture_output=True, text=True, timeout=120)
                    linker = "gold" if probed.returncode == 0 else "default"
                except (OSError, subprocess.SubprocessError):
                    pass
            log.info("cpu modules link with the %s linker", linker)
        with open(out, "rb") as fo:
            return fo.read(), linker
