"""``kb.tune``: autotuning and sweeps for every backend and language.

Loaded when first used (``kb.tune``), never by ``import kernelbay``. One call compiles every
config of a space in parallel (``kernelbay precompile``'s worker pool), checks each one's output
against a reference, times those that pass in killable worker processes (one per device,
repeats interleaved across configs, on the device's own timer), and keeps every outcome, faults
included, in a results file that the next sweep reuses; ``executor="ray"`` does the same across the
hosts of a Ray cluster. See docs/tuning.md.
"""

from __future__ import annotations

import sys
import types
from typing import Any

from ..errors import TuneError
from .autotune import Tuned, autotune
from .rayexec import RayExecutor
from .results import export as export_results
from .results import import_ as import_results
from .space import STRATEGIES, Space
from .sweep import Result, tune

__all__ = [
    "STRATEGIES",
    "RayExecutor",
    "Result",
    "Space",
    "TuneError",
    "Tuned",
    "autotune",
    "export_results",
    "import_results",
    "tune",
]


class _CallableModule(types.ModuleType):
    """``kb.tune`` is this package, callable: ``kb.tune(...)`` is :func:`tune`, and its other
    names (``kb.tune.Space``, ``kb.tune.autotune``...) are the rest of the API."""

    def __call__(self, *args: Any, **kwargs: Any) -> Result:
        return tune(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
