"""Fast-path binding: a backend's hooks resolved once for direct calls.

For each backend the core resolves every hook once into a :class:`Binding`: when the backend
is the only implementation and no extension wraps the hook, the binding holds the backend's
plain function, so a launch costs one Python call. While an extension wraps a hook, the
binding calls through pluggy so the wrapper runs. Bindings are rebuilt on every register or
unregister (:meth:`kernelbay._plugins.Runtime.rebind_all`).
"""

from __future__ import annotations

import logging
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import pluggy

from . import _fronts, _isolate, hookspecs
from .device import BackendSpec, Device
from .errors import BackendBrokenError, BackendUnavailableError, InvalidArgumentError
from .fallbacks import fallback
from .graphs import Graph

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np

    from .graphs import Step
    from .streams import Event, Stream
    from .types import Array, Buffer, Kernel, MemoryStats, Source

ENV_BACKENDS = "KERNELBAY_BACKENDS"
log = logging.getLogger("kernelbay.plugins")

#: Hooks every backend must implement (the contract says which: hookspecs.py).
REQUIRED_HOOKS = hookspecs.REQUIRED_HOOKS
#: Every hook, in the order of hookspecs.py.
ALL_HOOKS = tuple(n for n in vars(hookspecs) if n.startswith("kernelbay_"))


def _hook_attr(hook: str) -> str:
    attr = hook.removeprefix("kernelbay_")
    # Binding.devices() is the cached probe; the raw hook is kept as devices_hook.
    return "devices_hook" if attr == "devices" else attr


class Binding:
    """A backend's hooks resolved for direct calls: ``binding.launch(kernel, grid, ...)``.

    Attribute names are the hook names without the ``kernelbay_`` prefix; the arguments are
    the spec's, positionally.
    """

    __slots__ = (
        "name",
        "plugin",
        "spec",
        "distribution",
        "_devices",
        "_devices_error",
        "_lock",
        "wrapped",
        "retired",
        "default_streams",
        "fronts",
    ) + tuple(_hook_attr(n) for n in ALL_HOOKS)

    # The hooks as bound by bind(), typed as their specs in hookspecs.py (same order; a test
    # checks that every hook has one).
    backend: Callable[[], BackendSpec]
    devices_hook: Callable[[], Sequence[Device]]
    allocate: Callable[[Device, int], Any]
    free: Callable[[Device, Any], None]
    copy: Callable[[Buffer | np.ndarray, Buffer | np.ndarray, int, Any], None]
    memset: Callable[[Buffer, int, int, Any], None]
    compile: Callable[[Device, Source], Any]
    launch: Callable[[Kernel, Any, Any, Sequence[Any], int, Any], Any]
    synchronize: Callable[[Device, Any], None]
    host_view: Callable[[Array], np.ndarray | None]
    host_empty: Callable[[Device, int], np.ndarray | None]
    compile_to_cache: Callable[[Device, Source], None]
    close_kernel: Callable[[Kernel], None]
    memory_stats: Callable[[Device], MemoryStats]
    clear_cache: Callable[[Device], None]
    from_external: Callable[[Any, Device | None], tuple[Any, tuple[int, ...], Any] | None]
    to_dlpack: Callable[[Array, Any, tuple[int, int] | None], Any]
    dlpack_device: Callable[[Array], tuple[int, int]]
    cuda_array_interface: Callable[[Array], dict[str, Any]]
    default_stream: Callable[[Device], Any]
    stream_create: Callable[[Device, int], Any]
    stream_destroy: Callable[[Device, Any], None]
    stream_query: Callable[[Device, Stream], bool]
    stream_wait: Callable[[Device, Stream, Event], None]
    event_record: Callable[[Device, Stream], Any]
    event_synchronize: Callable[[Device, Event], None]
    event_query: Callable[[Device, Event], bool]
    event_elapsed: Callable[[Device, Event, Event], float]
    kernel_access: Callable[[Kernel], Sequence[str | None] | None]
    graph_build: Callable[[Device, Sequence[Step]], Any]
    graph_replay: Callable[[Device, Any, Any], None]
    graph_update: Callable[[Device, Any, Step], bool]
    graph_destroy: Callable[[Device, Any], None]
    module_global: Callable[[Kernel, str, np.ndarray | None, bool], int | None]
    device_timer: Callable[[], Any]

    def __init__(self, name: str, plugin: object, distribution: str | None) -> None:
        self.name = name
        self.plugin = plugin
        self.distribution = distribution
        self.spec: BackendSpec | None = None
        self._devices: tuple[Device, ...] | None = None
        self._devices_error: BaseException | None = None
        self._lock = threading.Lock()
        self.wrapped = False
        #: Set when the runtime that made this binding is reset: devices re-resolve by name.
        self.retired = False
        #: Each device's default kb.Stream, made on first use (kernelbay.streams.Stream.default).
        self.default_streams: dict[Device, Stream] = {}
        #: Which hooks are the backend's direct callables (kernelbay._fronts bits): the core's
        #: C fronts serve those hooks of this binding, the Python functions the others.
        self.fronts = 0

    def new_graph(self, device: Device, serial: bool = False) -> Graph:
        """A :class:`kernelbay.Graph` recording ``device``'s work (``dev.graph()``)."""
        return Graph(device, self, serial)

    def devices(self) -> tuple[Device, ...]:
        """Probe once; the result (or the reason there are none) is kept for the process."""
        if self._devices is None and self._devices_error is None:
            with self._lock:
                if self._devices is None and self._devices_error is None:
                    self._probe()
        if self._devices_error is not None:
            raise self._devices_error
        assert self._devices is not None
        return self._devices

    def forget_probe(self) -> None:
        with self._lock:
            self._devices = None
            self._devices_error = None

    def _probe(self) -> None:
        label = self.distribution or self.name
        t0 = time.perf_counter()
        try:
            self._probe_once(label)
            if self._devices is not None:
                apply_direct(self)
        finally:
            ms = (time.perf_counter() - t0) * 1e3
            if self._devices is not None:
                log.info("%s: probe found %d device(s) in %.0f ms", self.name, len(self._devices), ms)
            elif isinstance(self._devices_error, BackendBrokenError):
                log.warning("%s: probe failed (%.0f ms): %s", self.name, ms, self._devices_error)
            else:
                log.info("%s: unavailable (probe %.0f ms): %s", self.name, ms, self._devices_error)

    def _probe_once(self, label: str) -> None:
        try:
            found = _isolate.call(self.devices_hook)
        except _isolate.TimedOut as exc:
            self._devices_error = BackendUnavailableError(
                f"{label}: its probe did not answer within {exc.seconds:g} s; it is left out. Raise "
                f"{_isolate.ENV_TIMEOUT} if it is only slow, or leave it out with {ENV_BACKENDS}"
            )
            return
        except BackendUnavailableError as exc:
            err = BackendUnavailableError(f"{label}: {exc}")
            err.__cause__ = exc
            self._devices_error = err
            return
        except InvalidArgumentError as exc:  # a setting of the user's (KERNELBAY_CPU_THREADS=abc): not a broken install
            err = BackendUnavailableError(f"{label}: {exc}")
            err.__cause__ = exc
            self._devices_error = err
            return
        except Exception as exc:
            self._devices_error = broken(self.name, label, "its device probe failed", exc)
            return
        devices: tuple[Device, ...] = tuple(found or ())
        bad = [d for d in devices if not isinstance(d, Device) or d.backend != self.name]
        idx = [d.index for d in devices if isinstance(d, Device)]
        if bad or idx != list(range(len(devices))):
            self._devices_error = BackendBrokenError(
                f"backend {self.name!r} ({label}) announced invalid devices {devices!r}: expected "
                f"Device(backend={self.name!r}, index=0..n-1); report this to its authors"
            )
            return
        if not devices:
            self._devices_error = BackendUnavailableError(f"{label}: the backend found no device")
            return
        for d in devices:  # a device calls its own backend's hooks (Device.binding)
            object.__setattr__(d, "_binding", self)
        self._devices = devices


def broken(name: str, label: str, what: str, exc: BaseException) -> BackendBrokenError:
    """A :class:`BackendBrokenError` for ``what`` went wrong, ``exc`` chained."""
    detail = "".join(traceback.format_exception_only(type(exc), exc)).strip()
    err = BackendBrokenError(
        f"backend {name!r} ({label}) is broken: {what}: {detail}. "
        f"Reinstall or upgrade {label}, or leave it out with {ENV_BACKENDS}."
    )
    err.__cause__ = exc
    return err


def bind(pm: pluggy.PluginManager, b: Binding, others: list[object], argnames: dict[str, tuple[str, ...]]) -> None:
    """Resolve every hook of ``b`` (plain function where possible, else through pluggy)."""
    wrapped = False
    for hook in ALL_HOOKS:
        names = argnames[hook]
        caller = pm.subset_hook_caller(hook, remove_plugins=others)
        impls = caller.get_hookimpls()
        own = [i for i in impls if i.plugin is b.plugin]
        attr = _hook_attr(hook)
        if not own:
            fn: Callable[..., Any] = fallback(hook, b)
        elif len(impls) == 1 and not (impls[0].wrapper or impls[0].hookwrapper) and tuple(impls[0].argnames) == names:
            fn = impls[0].function
        else:
            fn = _chain(b, impls, names) or _through_pluggy(caller, names)
            wrapped = wrapped or len(impls) > 1
        setattr(b, attr, fn)
    b.wrapped = wrapped
    b.fronts = 0
    if b._devices is not None:
        apply_direct(b)


#: Hot-path hooks whose implementation may offer a direct callable (hookspecs: *Direct*).
DIRECT_HOOKS = ("allocate", "free", "launch", "graph_replay")


def apply_direct(b: Binding) -> None:
    """Put each hot-path hook's direct callable (``fn.kernelbay_direct()``) in its place, where
    the backend offers one and no extension wraps the hook (a chained wrapper has no such attribute);
    then the core's C fronts for those hooks (:mod:`kernelbay._fronts`)."""
    bits = 0
    for attr in DIRECT_HOOKS:
        make = getattr(getattr(b, attr, None), "kernelbay_direct", None)
        if make is None:
            continue
        try:
            direct = make()
        except Exception as exc:
            log.warning("%s: its direct %s could not be made, the hook runs instead: %r", b.name, attr, exc)
            continue
        if direct is None:
            continue
        if not callable(direct):
            log.warning(
                "%s: its kernelbay_direct for %s returned %r, not a callable; the hook runs", b.name, attr, direct
            )
            continue
        setattr(b, attr, direct)
        bits |= _fronts.BITS.get(attr, 0)
    b.fronts = bits
    if bits:
        _fronts.enable()


def _chain(b: Binding, impls: list[pluggy.HookImpl], argnames: tuple[str, ...]) -> Callable[..., Any] | None:
    """Direct calls instead of pluggy's (about 5 us a call, more than a tracer may add) when the
    backend's implementation is plain and every other one is a wrapper offering a positional
    form: ``function.kernelbay_positional(plugin, inner, binding) -> callable`` taking the spec's
    parameters in order. Chained in pluggy's order (the last registered wrapper outermost)."""
    inner = [i for i in impls if i.plugin is b.plugin]
    if len(inner) != 1 or inner[0].wrapper or inner[0].hookwrapper or tuple(inner[0].argnames) != argnames:
        return None
    fn: Callable[..., Any] = inner[0].function
    for i in impls:
        if i.plugin is b.plugin:
            continue
        make = getattr(i.function, "kernelbay_positional", None)
        if make is None or not i.wrapper:
            return None
        fn = make(i.plugin, fn, b)
    return fn


def _through_pluggy(caller: Any, argnames: tuple[str, ...]) -> Callable[..., Any]:
    def call(*args: Any) -> Any:
        return caller(**dict(zip(argnames, args)))

    return call
