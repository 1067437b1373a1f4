"""The core's fronts: ``Kernel.launch`` / ``__call__``, ``kb.buffer``, ``kb.empty``,
``Buffer.close`` and ``Graph.replay`` as C functions (``_fronts.c``), for backends whose hooks
are C callables.

A backend that offers its ``allocate``, ``free`` and ``launch`` as direct callables
(:mod:`kernelbay.hookspecs`, *Direct*) runs no Python frame of its own per call; what is left is
the core's frame around it. The first binding that gets a direct callable (``apply_direct``)
calls :func:`enable`: the fronts are built with :mod:`kernelbay.native` (at first use, then
loaded from the disk cache in about a millisecond; importing kernelbay never builds anything)
and put in place of the Python functions, which stay as their twins. Each front serves the
common case and hands every other call, unchanged, to its twin, so errors are the Python
code's; it serves a binding only for the hooks whose direct callable is in place (the binding's
``fronts`` bits), so while an extension wraps a hook (a tracer, a pluggy wrapper) the Python
path runs and the wrapper sees every call, as before.

``KERNELBAY_FRONTS=0`` keeps the Python functions (as ``KERNELBAY_NATIVE=0`` does, with every
other native helper); without a compiler they stay too, said once on the ``kernelbay.native``
logger and as a warning. ``kernelbay info`` shows the state (``native helpers: core fronts``).
"""

from __future__ import annotations

import logging
import os
import threading
from typing import Any

from . import kernel as _kernel
from . import memory as _memory
from . import native
from . import streams as _streams
from .device import Device
from .graphs import Graph
from .kernel import Kernel, LaunchConfig
from .memory import Array, Buffer
from .streams import Stream

__all__ = ["ENV_FRONTS", "ALLOCATE", "FREE", "LAUNCH", "BITS", "enable", "use", "active", "twins", "status", "offer"]

ENV_FRONTS = "KERNELBAY_FRONTS"
#: ``Binding.fronts`` bits: which of its hooks are the backend's direct callables.
ALLOCATE, FREE, LAUNCH = 1, 2, 4
BITS = {"allocate": ALLOCATE, "free": FREE, "launch": LAUNCH}
log = logging.getLogger("kernelbay.native")

_lock = threading.Lock()
_offered: dict[str, Any] = {}  # what the API layer offers: its functions, the runtime, the dtype memo
_homes: list[dict[str, Any]] = []  # module namespaces that hold kb.buffer and kb.empty
_state: dict[str, Any] = {}  # "fronts": the C fronts by name; "twins": the Python functions; "why": unavailable


def offer(namespace: dict[str, Any], **parts: Any) -> None:
    """Called by the modules above this one at import: ``namespace`` holds ``buffer`` and
    ``empty`` (rebound when the fronts go in); ``parts`` (from ``kernelbay._api``): ``buffer``,
    ``empty``, ``runtime``, ``dtypes``, ``max_nbytes``, ``binding_class``."""
    _homes.append(namespace)
    _offered.update(parts)
    if _state.get("on"):  # the fronts went in before this namespace was offered
        _put(namespace, _state["fronts"])


def _off_by_env() -> str | None:
    v = os.environ.get(ENV_FRONTS, "").strip().lower()
    return f"turned off by {ENV_FRONTS}={os.environ[ENV_FRONTS]!r}" if v in ("0", "false", "no", "off") else None


def enable() -> bool:
    """Build (or load) the fronts and put them in place, once per process; ``False`` where
    they cannot be used here (the reason is in :func:`status`)."""
    if "fronts" in _state or "why" in _state:
        return "fronts" in _state and _state.get("on", False)
    with _lock:
        if "fronts" not in _state and "why" not in _state:
            _build()
        if "fronts" in _state:
            use(True)
            return True
    return False


def _build() -> None:
    why = _off_by_env()
    if why is None and not {"buffer", "empty", "runtime", "dtypes", "max_nbytes", "binding_class"} <= set(_offered):
        why = "the API layer did not offer its functions"
    if why is None:
        from importlib import resources  # here, not at import: it costs kernelbay's import 10+ ms

        try:
            src = resources.files("kernelbay").joinpath("_fronts.c").read_text(encoding="utf-8")
            mod = native.load_extension("_kb_fronts", src)
            twins = {
                "launch": Kernel.launch,
                "close": Buffer.close,
                "buffer": _offered["buffer"],
                "empty": _offered["empty"],
                "__del__": Buffer.__del__,
                "replay": Graph.replay,
            }
            cfg = {
                "Kernel": Kernel,
                "Buffer": Buffer,
                "Array": Array,
                "Device": Device,
                "Binding": _offered["binding_class"],
                "Stream": Stream,
                "LaunchConfig": LaunchConfig,
                "Graph": Graph,
                **twins,
                "streams": vars(_streams),
                "memory": vars(_memory),
                "kernel": vars(_kernel),
                "runtime": vars(_offered["runtime"]),
                "dtypes": _offered["dtypes"],
                "max_nbytes": _offered["max_nbytes"],
            }
            fronts = dict(zip(("launch", "close", "buffer", "empty", "__del__", "replay"), mod.init(cfg)))
            for name, front in fronts.items():  # what help(), inspect.signature and tracebacks read
                twin = twins[name]
                front.__doc__, front.__name__, front.__qualname__ = twin.__doc__, twin.__name__, twin.__qualname__
                front.__module__, front.__wrapped__ = twin.__module__, twin
        except (native.NativeUnavailable, OSError) as exc:  # load_extension said so once already
            why = str(exc).splitlines()[0]
        except Exception as exc:  # a bug here must not take the backend's probe down with it
            why = f"the fronts did not start ({type(exc).__name__}: {exc}); please report it"
            log.warning("kernelbay: the core's C fronts are not used, the Python functions run: %s", why)
        else:
            _state["twins"] = twins
            _state["fronts"] = fronts
            log.debug("the core's fronts are built and loaded")
            return
    _state["why"] = why
    log.info("the core's fronts are not used, the Python functions run: %s", why)


def _put(namespace: dict[str, Any], fns: dict[str, Any]) -> None:
    namespace["buffer"] = fns["buffer"]
    namespace["empty"] = fns["empty"]


def use(on: bool) -> None:
    """Put the fronts in place (``True``, where :func:`enable` built them) or the Python
    functions back (``False``): the tests run both paths with this."""
    fns = _state.get("fronts") if on else _state.get("twins")
    if fns is None:
        return
    Kernel.launch = Kernel.__call__ = fns["launch"]  # type: ignore[method-assign]
    Buffer.close = fns["close"]  # type: ignore[method-assign]
    Buffer.__del__ = fns["__del__"]  # type: ignore[method-assign]
    Graph.replay = fns["replay"]  # type: ignore[method-assign]
    for ns in _homes:
        _put(ns, fns)
    _state["on"] = on


def twins() -> dict[str, Any]:
    """The Python functions the fronts stand for, by name (empty until :func:`enable` built them)."""
    return dict(_state.get("twins", {}))


def active() -> bool:
    """Whether the C fronts are in place now."""
    return bool(_state.get("on"))


def status() -> str:
    """``"native"`` (in place), ``"native (not in use)"``, ``"python (<reason>)"``, or
    ``"not built (...)"`` (no backend has offered direct callables in this process yet)."""
    if _state.get("on"):
        return "native"
    if "fronts" in _state:
        return "native (not in use)"
    if "why" in _state:
        return f"python ({_state['why']})"
    return "not built (no backend with direct callables has been probed in this process)"


native.register_status("core fronts", status)  # `kernelbay info` lists it beside the backends' helpers
