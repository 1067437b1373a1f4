"""kernelbay: one runtime for kernels on CUDA GPUs, TPUs and CPUs, with backends as plugins.

>>> import numpy as np, kernelbay as kb
>>> dev = kb.device()                      # KERNELBAY_DEVICE, or the best available device
>>> x = kb.asarray(np.arange(4, dtype=np.float32), device=dev)
"""

from __future__ import annotations

import os as _os
from typing import TYPE_CHECKING, Any

from . import _fronts, _log
from ._api import asarray, backends, buffer, compile, copy, device, devices, empty, register, unregister, zeros
from ._log import SlowPathWarning
from ._plugins import Backend
from .errors import (
    ArgumentTypeError,
    BackendBrokenError,
    BackendError,
    BackendNotInstalledError,
    BackendUnavailableError,
    CompileError,
    InvalidArgumentError,
    KernelbayError,
    LaunchError,
    NoDeviceError,
    OutOfMemoryError,
    SettingError,
    TuneError,
    UnsupportedError,
    UseAfterFreeError,
)
from .graphs import Graph
from .hookspecs import API_VERSION, hookimpl
from .streams import Event, Stream
from .types import Array, BackendSpec, Buffer, Device, Kernel, LaunchConfig, MemoryStats, Source

_fronts.offer(globals())  # kb.buffer and kb.empty: the C fronts replace them here when they go in

__version__ = "0.2.0"

_log.configure_from_env()  # KERNELBAY_LOG, before a trace or anything else logs

if TYPE_CHECKING:
    from . import tune
    from .tracing.tracer import trace


def __getattr__(name: str) -> Any:
    # kb.trace loads the tracing extension (kernelbay.tracing) when first asked for, so that
    # import kernelbay and a plain launch load none of it.
    if name == "trace":
        from .tracing.tracer import trace

        globals()["trace"] = trace
        return trace
    if name == "tune":  # kb.tune: the tuner (kernelbay.tune), loaded when first asked for, likewise
        import importlib  # not `from . import tune`: that asks this __getattr__ again, endlessly

        mod = importlib.import_module(f"{__name__}.tune")  # a callable module: kb.tune(...) sweeps

        globals()["tune"] = mod
        return mod
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


if _os.environ.get("KERNELBAY_TRACE") or _os.environ.get("KERNELBAY_NVTX", "0") not in ("", "0"):
    from .tracing import tracer as _t  # asked for: KERNELBAY_TRACE / KERNELBAY_NVTX start at import

    _t.start_from_env()
    del _t

__all__ = [
    "API_VERSION",
    "Array",
    "ArgumentTypeError",
    "Backend",
    "BackendBrokenError",
    "BackendError",
    "BackendNotInstalledError",
    "BackendSpec",
    "BackendUnavailableError",
    "Buffer",
    "CompileError",
    "Device",
    "Event",
    "Graph",
    "InvalidArgumentError",
    "Kernel",
    "KernelbayError",
    "LaunchConfig",
    "LaunchError",
    "MemoryStats",
    "NoDeviceError",
    "OutOfMemoryError",
    "SettingError",
    "SlowPathWarning",
    "Source",
    "Stream",
    "TuneError",
    "UnsupportedError",
    "UseAfterFreeError",
    "__version__",
    "asarray",
    "backends",
    "buffer",
    "compile",
    "copy",
    "device",
    "devices",
    "empty",
    "hookimpl",
    "register",
    "trace",
    "tune",
    "unregister",
    "zeros",
]
