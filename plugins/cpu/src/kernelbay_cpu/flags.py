"""The g++ flags of a cpu build: kernelbay's defaults, each overridable by a Source option."""

from __future__ import annotations

import os
from collections.abc import Sequence

from . import _driver

#: ``0`` keeps CUDA math calls scalar (no libmvec): for comparisons.
ENV_VECMATH = "KERNELBAY_CPU_VECMATH"

DEFAULT_OPT = "-O3"
DEFAULT_STD = "-std=c++17"
DEFAULT_ARCH = "-march=native"
NO_EXCEPTIONS = "-fno-exceptions"


def libmvec(tc: _driver.Toolchain) -> bool:
    """Whether CUDA kernels may call glibc's vector math (libmvec): the toolchain probe's answer
    (:func:`_driver.has_libmvec`, kept with the probe under the C library's version).
    ``KERNELBAY_CPU_VECMATH=0`` turns it off."""
    if os.environ.get(ENV_VECMATH, "").strip().lower() in ("0", "off", "no", "false"):
        return False
    return tc.libmvec


def flags(options: Sequence[str], tc: _driver.Toolchain, lang: str = "c++", exceptions: bool = False) -> list[str]:
    """The compiler flags: defaults, each overridable by an option of the same family.

    ``-O*`` replaces ``-O3``; ``-march=``/``-mcpu=``/``-mtune=native`` families replace
    ``-march=native`` (``-mno-native`` drops it); ``-std=`` replaces ``-std=c++17``;
    ``-fno-openmp`` drops ``-fopenmp``; ``-ftrapping-math`` drops ``-fno-trapping-math`` and, for
    CUDA sources, ``-fmath-errno`` drops ``-fno-math-errno``. Other options are appended.
    ``-march=native`` on a CPU whose tuning g++ leaves generic adds ``-mtune-ctrl=use_gather``
    (:func:`_driver.wants_gathers`), unless an option names the tuning (``-mtune=``, ``-mtune-ctrl=``).
    A CUDA source that does not use C++ exceptions itself (``exceptions``: it does; see
    :func:`analysis.uses_exceptions`) gets ``-fno-exceptions``, unless an option says
    ``-fexceptions``: its module then links neither libstdc++ nor libgcc_s (:func:`libraries`),
    which saves a fresh process about 1 ms of loading them (docs/performance-cpu-speed.md).
    """
    opt, std, arch = DEFAULT_OPT, DEFAULT_STD, DEFAULT_ARCH
    openmp = tc.openmp
    extra: list[str] = []
    for o in options:
        if o.startswith("-O"):
            opt = o
        elif o.startswith("-std="):
            std = o
        elif o.startswith(("-march=", "-mcpu=")):
            arch = o
        elif o == "-mno-native":
            arch = ""
        elif o == "-fno-openmp":
            openmp = False
        elif o == "-fopenmp":
            openmp = True
        else:
            extra.append(o)
    out = [opt, std]
    if arch:
        out.append(arch)
    if arch == DEFAULT_ARCH and tc.gathers and not any(o.startswith("-mtune") for o in extra):
        out.append("-mtune-ctrl=use_gather")
    if openmp:
        out.append("-fopenmp")
    # A GPU raises no floating-point traps: without them the compiler may compute a guarded
    # `if (i < n) y[i] = a * x[i]` for every lane and mask the store, i.e. vectorise it.
    if "-ftrapping-math" not in extra:
        out.append("-fno-trapping-math")
    # CUDA's math functions set no errno: without -fno-math-errno, sqrtf may write errno (for a
    # negative argument), which stops the loop over a block's threads from being vectorised
    # (AdamW's update: 2.4x faster with it at 2^20 floats). Values are unchanged: sqrt is one
    # correctly rounded instruction either way. C++ sources keep C++'s errno.
    if lang == "cuda" and "-fmath-errno" not in extra:
        out.append("-fno-math-errno")
    if lang == "cuda" and openmp and libmvec(tc):
        out.append("-DKB_CPU_LIBMVEC=1")
    # The prelude's device-side stops need no exceptions (kb_cpu_launch.h: stop): only a source
    # that throws or catches keeps them. c++ sources keep g++'s default.
    if lang == "cuda" and not exceptions and not {"-fexceptions", "-fno-exceptions"} & set(extra):
        out.append(NO_EXCEPTIONS)
    return [*out, "-shared", "-fPIC", "-fvisibility=hidden", *extra]


def libraries(fl: Sequence[str]) -> list[str]:
    """What the link needs after the sources, for these flags. Without exceptions, the libraries
    after the sources (libmvec and those g++ adds: libstdc++, libm, libgcc_s) are linked only
    where the module uses them (``--as-needed``; the user's own ``-l`` options come before and
    are kept)."""
    out = ["-Wl,--as-needed"] if NO_EXCEPTIONS in fl else []
    return [*out, "-l:libmvec.so.1"] if "-DKB_CPU_LIBMVEC=1" in fl else out
