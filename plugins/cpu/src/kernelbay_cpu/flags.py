"""The g++ flags of a cpu build: kernelbay's defaults, each overridable by a Source option."""

from __future__ import annotations

from collections.abc import Sequence

from . import _driver

DEFAULT_OPT = "-O3"
DEFAULT_STD = "-std=c++17"
DEFAULT_ARCH = "-march=native"


def flags(options: Sequence[str], tc: _driver.Toolchain) -> list[str]:
    """The compiler flags: defaults, each overridable by an option of the same family.

    ``-O*`` replaces ``-O3``; ``-march=``/``-mcpu=``/``-mtune=native`` families replace
    ``-march=native`` (``-mno-native`` drops it); ``-std=`` replaces ``-std=c++17``;
    ``-fno-openmp`` drops ``-fopenmp``. Other options are appended.
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
    if openmp:
        out.append("-fopenmp")
    # A GPU raises no floating-point traps: without them the compiler may compute a guarded
    # `if (i < n) y[i] = a * x[i]` for every lane and mask the store, i.e. vectorise it.
    if "-ftrapping-math" not in extra:
        out.append("-fno-trapping-math")
    return [*out, "-shared", "-fPIC", "-fvisibility=hidden", *extra]
