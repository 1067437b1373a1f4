"""The suite's check of the ``kernelbay_compile_to_cache`` promise for function sources.

A backend that implements the hook promises that a compile of a *function* source
(``Source.code`` a Python function: Triton, Pallas...) lands on disk where another process finds
it; the tuner then compiles such sources in its pool of spawned workers, the function passed by
module and name. The check does exactly that, with the tuner's own pieces, and then asks this
process for the kernel: every disk-cache lookup must hit, and the kernel must compute saxpy.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

import kernelbay as kb

from .base import Suite, compile_watching_cache, rule

RULE = "compile_to_cache of a function source, kernelbay.hookspecs.kernelbay_compile_to_cache"


def _given(source: Any) -> Iterator[kb.Source]:
    if isinstance(source, kb.Source):
        yield source
    elif source is not None:
        yield from (s for s in source if isinstance(s, kb.Source))


class FunctionSourceTests(Suite):
    """``kernelbay_compile_to_cache`` of a function source in a spawned worker, found on disk here."""

    def _function_languages(self, langs: tuple[str, ...]) -> list[str]:
        """The backend's languages whose sources are functions: those declared in
        ``function_languages``, and those of the function sources this class gives."""
        named = set(self.function_languages)
        for src in (*_given(self.saxpy_source()), *_given(self.scalar_source()), *_given(self.bad_source())):
            if not isinstance(src.code, (str, bytes)):
                named.add(src.lang)
        return [lang for lang in langs if lang in named]

    def test_compile_to_cache_of_a_function_source(
        self, device: kb.Device, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Rule (``kernelbay_compile_to_cache``): where the backend implements the hook and takes
        function sources, :meth:`function_source`, passed by module and name to a spawned compile
        worker (the tuner's ``compile_call`` in precompile's pool), is compiled there into a
        private disk cache; ``kb.compile`` here then finds every lookup on disk, and the kernel
        computes saxpy. A backend on the core's fallback, or with no function language, makes no
        such promise: the check says so and skips."""
        # Deferred: the tuner and the worker pool load only when this check runs; the suite itself
        # is loaded by the pytest plugin of every project that installs kernelbay.
        from kernelbay import _precompile
        from kernelbay.tune.phases import compile_call, compiles_to_disk
        from kernelbay.tune.worker import portable

        spec = device.binding.spec
        langs = spec.languages if spec is not None else ()
        functions = self._function_languages(langs)
        if not functions:
            pytest.skip(
                f"{self.backend} takes no function sources (its languages: {', '.join(langs)}; function languages: "
                f"{', '.join(self.function_languages)}): kernelbay_compile_to_cache promises nothing more for it"
            )
        if not compiles_to_disk(device):
            pytest.skip(
                f"{self.backend} keeps the core's fallback of kernelbay_compile_to_cache: the tuner compiles its "
                f"function sources ({', '.join(functions)}) in its timing workers, and no disk promise is made"
            )
        src = self.function_source()
        if src is None:
            pytest.fail(
                rule(
                    RULE,
                    f"{self.backend} implements kernelbay_compile_to_cache and takes function sources "
                    f"({', '.join(functions)}), so it promises that their compiles land on disk for other processes; "
                    "override function_source() in the test class to return a kb.Source in one of those languages "
                    "computing saxpy as saxpy_source() does, whose code is a module-level function no other check "
                    "compiles",
                ),
                pytrace=False,
            )
        if not isinstance(src, kb.Source) or isinstance(src.code, (str, bytes)) or src.lang not in functions:
            pytest.fail(
                rule(
                    RULE,
                    f"function_source() gave {src!r}: it must be a kb.Source whose code is a Python function, in one "
                    f"of {self.backend}'s function languages ({', '.join(functions)})",
                ),
                pytrace=False,
            )
        ref = portable(src)
        if isinstance(ref, kb.Source):
            where = f"{getattr(src.code, '__module__', '?')}.{getattr(src.code, '__qualname__', '?')}"
            pytest.fail(
                rule(
                    RULE,
                    f"function_source()'s code is not found by its module and name ({where} does not name it), "
                    "so the tuner cannot pass it to a compile worker: define it at module level",
                ),
                pytrace=False,
            )
        # What this process builds once at first use (native helpers, kept in the disk cache too)
        # is built now, in the cache in force: kb.compile's lookups below are the kernel's alone.
        saxpy = kb.compile(self.saxpy_source(), device=device)
        self._run_saxpy(saxpy, device, 1.0, np.ones(8, np.float32), np.ones(8, np.float32))
        # A cache of this check's own (inherited by the worker), so that the worker's compile is the
        # only way the source can be on disk, whatever earlier runs left.
        monkeypatch.setenv("KERNELBAY_CACHE_DIR", str(tmp_path / "cache"))
        [(outcome, detail)] = _precompile.run_pool(
            compile_call, [(ref, str(device))], 1, "conformance", False, timeout=_precompile.COMPILE_TIMEOUT
        )
        if outcome not in ("compiled", "disk"):
            why = (
                detail or "it looked nothing up in kernelbay's disk cache (kernelbay.cache), so it stored nothing there"
            )
            pytest.fail(
                rule(RULE, f"kernelbay_compile_to_cache in a spawned compile worker gave {outcome!r}: {why}"),
                pytrace=False,
            )
        kernel, found = compile_watching_cache(src, device)
        assert found, rule(
            RULE,
            "kb.compile here looked nothing up in kernelbay's disk cache after a worker compiled the source: "
            f"either {self.backend} keeps function compiles out of kernelbay.cache, where the tuner cannot find them, "
            "or this process had compiled function_source() before (it must be a kernel no other check compiles)",
        )
        assert all(found), rule(
            RULE,
            f"kb.compile here missed the disk cache ({found.count(False)} of {len(found)} lookups) after a spawned "
            "worker's kernelbay_compile_to_cache compiled the same source: the compile stayed in that process",
        )
        n = 1000
        xs, ys = np.arange(n, dtype=np.float32), np.ones(n, np.float32)
        got = self._run_saxpy(kernel, device, 2.0, xs, ys, self.function_launch(n))
        np.testing.assert_allclose(
            got, 2.0 * xs + ys, rtol=1e-6, err_msg=rule(RULE, "the kernel compiled from disk computes saxpy wrongly")
        )
