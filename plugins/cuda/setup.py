"""Build the native helpers into the wheel (the metadata is in pyproject.toml).

The platform wheel carries ``kernelbay_cuda._kbcuda_native``, compiled from ``_native.c``
(which includes the sources ``kernelbay_cuda/native.py`` lists in ``SOURCES``, read from there).
The extension is optional: where no compiler is found (an sdist installed on a slim image) the
wheel is made without it and the helpers are built at first use instead (``kernelbay.native``). ``KERNELBAY_CUDA_PURE=1`` makes a pure
``py3-none-any`` wheel on purpose, for a Python this platform wheel does not fit.
"""

import ast
import hashlib
import os

from setuptools import Extension, setup

HERE = os.path.dirname(os.path.abspath(__file__))
PKG = "src/kernelbay_cuda"


def _native_sources() -> tuple[str, ...]:
    """``SOURCES`` of kernelbay_cuda/native.py (read, not imported: the build has no kernelbay),
    in the order the first-use build joins them: one list for both builds."""
    with open(os.path.join(HERE, PKG, "native.py"), encoding="utf-8") as f:
        tree = ast.parse(f.read())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "SOURCES" for t in node.targets):
            return tuple(ast.literal_eval(node.value))
    raise RuntimeError("kernelbay_cuda/native.py has no SOURCES")


SOURCES = _native_sources()


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
