"""Build the native helpers into the wheel (the metadata is in pyproject.toml).

The platform wheel carries ``kernelbay_cuda._kbcuda_native``, compiled from ``_native.c``
(which includes ``_pool.c``, ``_graphentry.c``, ``_direct.c``, ``_launch.c``, ``_timer.c``,
``_cupti.c``, ``_hostcopy.c``, ``_stage.c`` and ``_stagerun.c``). The extension is optional: where no compiler is
found (an sdist installed on a slim image) the wheel is made without it and the helpers are built at
first use instead (``kernelbay.native``). ``KERNELBAY_CUDA_PURE=1`` makes a pure
``py3-none-any`` wheel on purpose, for a Python this platform wheel does not fit.
"""

import hashlib
import os

from setuptools import Extension, setup

HERE = os.path.dirname(os.path.abspath(__file__))
PKG = "src/kernelbay_cuda"
SOURCES = (
    "_pool.c",
    "_graphentry.c",
    "_direct.c",
    "_launch.c",
    "_timer.c",
    "_cupti.c",
    "_hostcopy.c",
    "_stage.c",
    "_stagerun.c",
)  # the order kernelbay_cuda/native.py joins them in


def _source_sha256() -> str:
    texts = []
    for name in SOURCES:
        with open(os.path.join(HERE, PKG, name), encoding="utf-8") as f:
            texts.append(f.read())
    return hashlib.sha256("\n".join(texts).encode()).hexdigest()


ext_modules = []
if os.environ.get("KERNELBAY_CUDA_PURE", "").strip() in ("", "0"):
    ext_modules.append(
        Extension(
            "kernelbay_cuda._kbcuda_native",
            sources=[f"{PKG}/_native.c"],
            depends=[f"{PKG}/{name}" for name in SOURCES],
            define_macros=[("KB_SOURCE_SHA256", f'"{_source_sha256()}"')],
            extra_compile_args=["-O2"],
            optional=True,
        )
    )

setup(ext_modules=ext_modules)
