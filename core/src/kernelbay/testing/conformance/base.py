"""The suite's base: the settings and sources a backend overrides, the fixtures, test data."""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, ClassVar

import numpy as np
import pytest

import kernelbay as kb
from kernelbay import cache
from kernelbay.argrules import DTYPES, DType

from ..plugin import require_device
from .kernels import BAD_CUDA, SAXPY_CUDA, SCALAR_DTYPES, scalar_kernel_cuda

__all__ = ["ARRAY_DTYPES", "FUNCTION_LANGUAGES", "Suite", "make_rng", "refused", "rule", "sample"]


def _numpy_knows(name: str) -> bool:
    try:
        np.dtype(name)
    except TypeError:
        return False
    return True


#: The dtypes of the core's one table (:data:`kernelbay.argrules.DTYPES`) that numpy has: what
#: an array may hold, and so the round trips' default.
ARRAY_DTYPES: tuple[str, ...] = tuple(d.name for d in DTYPES if _numpy_knows(d.name))

#: The languages whose ``Source.code`` is a Python function in kernelbay's own backends and its
#: example: ``pallas`` (tpu), ``python`` (pyref), ``triton`` (cuda). A backend with a function
#: language of its own adds it to ``function_languages``.
FUNCTION_LANGUAGES: tuple[str, ...] = ("pallas", "python", "triton")


def rule(name: str, text: str) -> str:
    """A failure message that names the contract's rule: ``[rule: name] text``."""
    return f"[rule: {name}] {text} (see kernelbay.hookspecs and docs/authoring-a-backend.md)"


def compile_watching_cache(src: Any, device: kb.Device) -> tuple[kb.Kernel, list[bool]]:
    """``kb.compile(src)`` and the disk-cache lookups it made, in order (``True``: a hit)."""
    found: list[bool] = []
    before = cache.observer
    cache.observer = lambda _key, hit: found.append(hit)
    try:
        kernel = kb.compile(src, device=device)
    finally:
        cache.observer = before
    return kernel, found


@contextmanager
def refused(exc: type[BaseException], match: str, name: str = "scalar arguments, kernelbay.argrules") -> Iterator[None]:
    """``pytest.raises(exc, match=match)`` whose failure names the rule ``name``."""
    try:
        with pytest.raises(exc, match=match):
            yield
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as e:
        pytest.fail(
            rule(
                name,
                f"expected {exc.__name__} matching {match!r}; got {type(e).__name__}: {e}. kernelbay_launch "
                "passes each scalar argument through kernelbay.argrules.check_scalar(value, kind, size, where), "
                'with where = f"argument {pos} of kernel {kernel.name!r}" (pos from 0), before any native code',
            ),
            pytrace=False,
        )


def make_rng() -> np.random.Generator:
    return np.random.default_rng()


def sample(dtype: np.dtype, size: int, rng: np.random.Generator) -> np.ndarray:
    if dtype.kind == "f":
        return rng.standard_normal(size).astype(dtype)
    if dtype.kind == "c":
        return (rng.standard_normal(size) + 1j * rng.standard_normal(size)).astype(dtype)
    if dtype.kind == "b":
        return rng.integers(0, 2, size).astype(dtype)
    info = np.iinfo(dtype)
    return rng.integers(max(info.min, -1000), min(info.max, 1000), size, endpoint=True).astype(dtype)


class Suite:
    """What every part of the suite stands on: the settings and sources a backend overrides, and
    the ``device`` and ``saxpy`` fixtures."""

    backend: ClassVar[str] = ""
    #: The dtypes the copy round trips cover: by default every dtype of the core's table that
    #: numpy has (:data:`ARRAY_DTYPES`); a backend that holds fewer lists them.
    dtypes: ClassVar[Sequence[str]] = ARRAY_DTYPES
    #: Whether the kernel language has ``bool`` parameters. ``False`` (OpenCL, say): the scalar
    #: kernel has no bool parameter and the bool checks report so instead of running.
    scalar_bool: ClassVar[bool] = True
    #: Whether the scalar kernel stores 64-bit values as two 32-bit words. ``True`` (a language
    #: with no 64-bit arrays: JAX without x64, TPU Pallas): ``i``, ``u`` and ``f`` are uint32
    #: arrays of 16 elements, and each value the kernel stores takes two of them, the low word
    #: of its 64-bit pattern first (an integer's two's complement, a float's IEEE double).
    scalar_split64: ClassVar[bool] = False
    sizes: ClassVar[Sequence[int]] = (0, 1, 7, 4096, 1 << 20)
    validates_arg_count: ClassVar[bool] = True
    #: The languages whose sources are Python functions (:data:`FUNCTION_LANGUAGES`); the suite
    #: also counts the language of any function source this class gives (saxpy, scalar, bad).
    function_languages: ClassVar[Sequence[str]] = FUNCTION_LANGUAGES

    # --- what a backend may override ------------------------------------------------

    def saxpy_source(self) -> kb.Source | Sequence[kb.Source]:
        return kb.Source(SAXPY_CUDA, lang="cuda", name="saxpy")

    def saxpy_launch(self, n: int) -> dict[str, Any]:
        return {"grid": (max(1, -(-n // 256)),), "block": (256,)}

    def bad_source(self) -> kb.Source:
        return kb.Source(BAD_CUDA, lang="cuda", name="broken")

    def scalar_source(self) -> kb.Source | None:
        """The kernel of the scalar-rule checks, in the backend's own language (required).

        Its parameters, in order: ``i`` (int64 array), ``u`` (uint64 array), ``f`` (float64
        array), then one scalar parameter ``p<j>`` per dtype of :meth:`scalar_params`. Launched
        with ``grid=1, block=1`` (or :meth:`scalar_launch`); it stores the signed integer
        parameters into ``i``, the unsigned ones and bools into ``u``, the floats into ``f``,
        each array in parameter order. Default: the CUDA C++ kernel
        (:func:`~kernelbay.testing.conformance.scalar_kernel_cuda`) for a backend that compiles
        ``cuda``; any other backend must override this, or the scalar checks fail saying so.
        """
        rec = {b.name: b for b in kb.backends()}.get(self.backend)
        if rec is not None and rec.spec is not None and "cuda" in rec.spec.languages:
            return kb.Source(scalar_kernel_cuda(), lang="cuda", name="scalars")
        return None

    def scalar_launch(self) -> dict[str, Any]:
        """The geometry of the scalar kernel's launch: one thread is enough."""
        return {"grid": 1, "block": 1}

    def scalar_params(self) -> tuple[DType, ...]:
        """The scalar parameters of :meth:`scalar_source`, after its three arrays: each dtype
        of the core's table with a C spelling, in the table's order (bool left out when
        ``scalar_bool`` is False)."""
        return tuple(d for d in SCALAR_DTYPES if self.scalar_bool or d.kind != "b")

    def function_source(self) -> kb.Source | None:
        """A saxpy kernel whose code is a Python function, for the ``kernelbay_compile_to_cache``
        promise on function sources (:mod:`.tocache`): required of a backend that implements that
        hook and takes a function language; ``None`` (the default) otherwise.

        It computes what :meth:`saxpy_source` computes, with the same arguments, launched with
        :meth:`function_launch`. Its code is a module-level function that a spawned process finds
        by its module and name (the tuner passes it so), and no other check compiles it: the
        check compiles it first in another process and expects this one to find it on disk.
        """
        return None

    def function_launch(self, n: int) -> dict[str, Any]:
        """The launch geometry of :meth:`function_source` for ``n`` elements (default:
        :meth:`saxpy_launch`)."""
        return self.saxpy_launch(n)

    def implements(self, hook: str) -> bool:
        """Whether the backend's plugin object defines ``hook`` itself (else the core's
        fallback serves it)."""
        rec = {b.name: b for b in kb.backends()}[self.backend]
        module, _, attr = rec.target.partition(":")
        obj: Any = importlib.import_module(module)
        for part in filter(None, attr.split(".")):
            obj = getattr(obj, part)
        return hasattr(obj, hook)

    # --- fixtures -------------------------------------------------------------------

    @pytest.fixture
    def device(self) -> kb.Device:
        if not self.backend:
            pytest.fail("BackendConformance subclasses must set `backend`", pytrace=False)
        return require_device(self.backend, strict=True)

    @pytest.fixture
    def saxpy(self, device: kb.Device) -> kb.Kernel:
        return kb.compile(self.saxpy_source(), device=device)

    def _run_saxpy(
        self,
        kernel: kb.Kernel,
        device: kb.Device,
        a: float,
        xs: np.ndarray,
        ys: np.ndarray,
        geometry: dict[str, Any] | None = None,
    ) -> np.ndarray:
        n = xs.size
        x = kb.asarray(xs, device=device)
        y = kb.asarray(ys, device=device)
        kernel.launch(**(geometry or self.saxpy_launch(n)), args=(x, y, np.float32(a), np.int32(n)))
        device.synchronize()
        return np.array(y.numpy(), copy=True)
