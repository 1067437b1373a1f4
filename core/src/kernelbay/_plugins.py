"""Backend discovery, isolation and fast-path binding.

* Discovery reads entry-point metadata only (group ``kernelbay.backends``); a backend module
  is imported the first time something needs more than its name.
* Each backend is loaded, registered with one pluggy ``PluginManager`` and checked on its own.
  Whatever goes wrong (import error, hook that does not match its spec, wrong API version,
  probe that raises) marks *that* backend broken, with the chained cause; the others go on.
* For each backend the core resolves every hook once into a :class:`Binding`: when the backend
  is the only implementation and no extension wraps the hook, the binding holds the backend's
  plain function, so a launch costs one Python call. While an extension wraps a hook, the
  binding calls through pluggy so the wrapper runs. Bindings are rebuilt on every register or
  unregister.
"""

from __future__ import annotations

import os
import threading
import traceback
from collections.abc import Callable
from typing import Any

import attrs
import pluggy

from . import hookspecs
from .errors import (
    BackendBrokenError,
    BackendNotInstalledError,
    BackendUnavailableError,
    UnsupportedError,
)
from .types import BackendSpec, Device

ENTRY_POINT_GROUP = "kernelbay.backends"
ENV_BACKENDS = "KERNELBAY_BACKENDS"

#: Hooks every backend must implement.
REQUIRED_HOOKS = (
    "kernelbay_backend",
    "kernelbay_devices",
    "kernelbay_allocate",
    "kernelbay_free",
    "kernelbay_copy",
    "kernelbay_compile",
    "kernelbay_launch",
    "kernelbay_synchronize",
)
#: Every hook, in the order of hookspecs.py.
ALL_HOOKS = tuple(n for n in vars(hookspecs) if n.startswith("kernelbay_"))

_FIRST_PARTY = ("cpu", "cuda", "tpu")


def _hook_attr(hook: str) -> str:
    attr = hook.removeprefix("kernelbay_")
    # Binding.devices() is the cached probe; the raw hook is kept as devices_hook.
    return "devices_hook" if attr == "devices" else attr


class Binding:
    """A backend's hooks resolved for direct calls: ``binding.launch(kernel, grid, ...)``.

    Attribute names are the hook names without the ``kernelbay_`` prefix; the arguments are
    the spec's, positionally.
    """

    __slots__ = ("name", "plugin", "spec", "distribution", "_devices", "_devices_error", "_lock", "wrapped") + tuple(
        _hook_attr(n) for n in ALL_HOOKS
    )

    def __init__(self, name: str, plugin: object, distribution: str | None) -> None:
        self.name = name
        self.plugin = plugin
        self.distribution = distribution
        self.spec: BackendSpec | None = None
        self._devices: tuple[Device, ...] | None = None
        self._devices_error: BaseException | None = None
        self._lock = threading.Lock()
        self.wrapped = False

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

    def _probe(self) -> None:
        label = self.distribution or self.name
        try:
            found = self.devices_hook()
        except BackendUnavailableError as exc:
            err = BackendUnavailableError(f"{label}: {exc}")
            err.__cause__ = exc
            self._devices_error = err
            return
        except Exception as exc:
            self._devices_error = _broken(self.name, label, "its device probe failed", exc)
            return
        devices = tuple(found or ())
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
        self._devices = devices


def _broken(name: str, label: str, what: str, exc: BaseException) -> BackendBrokenError:
    detail = "".join(traceback.format_exception_only(type(exc), exc)).strip()
    err = BackendBrokenError(
        f"backend {name!r} ({label}) is broken: {what}: {detail}. "
        f"Reinstall or upgrade {label}, or leave it out with {ENV_BACKENDS}."
    )
    err.__cause__ = exc
    return err


@attrs.define(eq=False)
class Backend:
    """An installed backend as ``kb.backends()`` lists it.

    Listing reads metadata only; ``status``, ``reason``, ``priority``, ``languages`` and
    ``devices`` load and probe the backend on first access.

    :ivar name: the backend's name (``cuda``).
    :ivar distribution: the distribution that provides it (``kernelbay-cuda``), if known.
    :ivar version: that distribution's version, if known.
    :ivar target: the entry point's object reference (``kernelbay_cuda.plugin``).
    """

    name: str
    distribution: str | None
    version: str | None
    target: str
    _load: Callable[[], object] = attrs.field(repr=False)
    _binding: Binding | None = attrs.field(default=None, repr=False, init=False)
    _error: BaseException | None = attrs.field(default=None, repr=False, init=False)

    @property
    def label(self) -> str:
        return self.distribution or self.name

    @property
    def status(self) -> str:
        """``available``, ``unavailable`` (healthy, nothing to run on) or ``broken``."""
        try:
            runtime.load(self.name).devices()
        except BackendUnavailableError:
            return "unavailable"
        except BackendBrokenError:
            return "broken"
        return "available"

    @property
    def error(self) -> BaseException | None:
        """Why the backend is unavailable or broken (with ``__cause__``), else ``None``."""
        try:
            runtime.load(self.name).devices()
        except (BackendUnavailableError, BackendBrokenError) as exc:
            return exc
        return None

    @property
    def reason(self) -> str | None:
        err = self.error
        return None if err is None else str(err)

    @property
    def spec(self) -> BackendSpec | None:
        try:
            return runtime.load(self.name).spec
        except BackendBrokenError:
            return None

    @property
    def priority(self) -> int | None:
        s = self.spec
        return None if s is None else s.priority

    @property
    def languages(self) -> tuple[str, ...]:
        s = self.spec
        return () if s is None else s.languages

    @property
    def devices(self) -> tuple[Device, ...]:
        try:
            return runtime.load(self.name).devices()
        except (BackendUnavailableError, BackendBrokenError):
            return ()


class Runtime:
    """The process-wide registry: one PluginManager, the installed backends, their bindings."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self.reset()

    def reset(self) -> None:
        """Forget everything loaded; the next request re-reads entry points."""
        with getattr(self, "_lock", threading.RLock()):
            self.pm = pluggy.PluginManager("kernelbay")
            self.pm.add_hookspecs(hookspecs)
            self._argnames = {h: tuple(getattr(self.pm.hook, h).spec.argnames) for h in ALL_HOOKS}
            self._records: dict[str, Backend] | None = None
            self._extra: dict[str, Backend] = {}
            self.bindings: dict[str, Binding] = {}
            self.extensions: list[object] = []

    # --- discovery --------------------------------------------------------------------

    def records(self) -> dict[str, Backend]:
        """Installed backends allowed by KERNELBAY_BACKENDS, by name. Imports nothing."""
        if self._records is None:
            with self._lock:
                if self._records is None:
                    self._records = self._discover()
        recs = dict(self._records)
        recs.update(self._extra)
        return recs

    def allowlist(self) -> set[str] | None:
        raw = os.environ.get(ENV_BACKENDS)
        if raw is None:
            return None
        return {p.strip() for p in raw.split(",") if p.strip()}

    def installed_names(self) -> list[str]:
        """Every installed backend's name, allowed or not."""
        from importlib.metadata import entry_points

        return sorted({ep.name for ep in entry_points(group=ENTRY_POINT_GROUP)} | set(self._extra))

    def _discover(self) -> dict[str, Backend]:
        from importlib.metadata import entry_points

        allowed = self.allowlist()
        found: dict[str, Backend] = {}
        for ep in entry_points(group=ENTRY_POINT_GROUP):
            if allowed is not None and ep.name not in allowed:
                continue
            if ep.name in found:  # two distributions claim one name: the first wins, visibly
                continue
            dist = getattr(ep, "dist", None)
            found[ep.name] = Backend(
                name=ep.name,
                distribution=dist.metadata["Name"] if dist is not None else None,
                version=dist.version if dist is not None else None,
                target=ep.value,
                load=ep.load,
            )
        return found

    def add_backend(self, plugin: object, name: str, distribution: str | None = None) -> Backend:
        """Install a backend object in process, as if found by entry point (tests, notebooks)."""
        with self._lock:
            rec = Backend(name=name, distribution=distribution, version=None, target=repr(plugin), load=lambda: plugin)
            self._extra[name] = rec
            return rec

    def remove_backend(self, name: str) -> None:
        with self._lock:
            rec = self._extra.pop(name, None)
            b = self.bindings.pop(name, None)
            if b is not None and self.pm.is_registered(b.plugin):
                self.pm.unregister(b.plugin)
            if rec is not None:
                rec._binding = None
                rec._error = None
            self._rebind_all()

    # --- loading ----------------------------------------------------------------------

    def load(self, name: str) -> Binding:
        """The backend's binding, loading it on first use.

        :raises BackendNotInstalledError: no such backend (or not allowed).
        :raises BackendBrokenError: it failed to load; the cause is chained.
        """
        b = self.bindings.get(name)
        if b is not None:
            return b
        recs = self.records()
        rec = recs.get(name)
        if rec is None:
            raise self.not_installed(name)
        with self._lock:
            if rec._binding is not None:
                return rec._binding
            if rec._error is not None:
                raise rec._error
            try:
                rec._binding = self._load(rec)
            except BackendBrokenError as exc:
                rec._error = exc
                raise
            return rec._binding

    def not_installed(self, name: str) -> BackendNotInstalledError:
        allowed = self.allowlist()
        installed = self.installed_names()
        if name in installed and allowed is not None:
            return BackendNotInstalledError(
                f"backend {name!r} is installed but {ENV_BACKENDS}={os.environ.get(ENV_BACKENDS)!r} "
                f"leaves it out; add it there or unset {ENV_BACKENDS}"
            )
        have = ", ".join(installed) or "none"
        how = f"`pip install 'kernelbay[{name}]'`" if name in _FIRST_PARTY else f"`pip install kernelbay-{name}`"
        return BackendNotInstalledError(
            f"backend {name!r} is not installed (installed: {have}); install it with {how}, "
            "or pick another with KERNELBAY_DEVICE"
        )

    def _load(self, rec: Backend) -> Binding:
        label = rec.label
        try:
            plugin = rec._load()
        except BaseException as exc:
            if isinstance(exc, KeyboardInterrupt):
                raise
            raise _broken(rec.name, label, f"importing {rec.target} failed", exc) from exc
        try:
            self.pm.register(plugin, name=f"backend:{rec.name}")
        except Exception as exc:
            raise _broken(rec.name, label, "its hooks do not match kernelbay's hookspecs", exc) from exc
        try:
            try:
                self.pm.check_pending()
            except Exception as exc:
                raise _broken(rec.name, label, "it implements a hook kernelbay does not define", exc) from exc
            have = {impl_name for impl_name in ALL_HOOKS if self._own_impls(plugin, impl_name)}
            missing = [h for h in REQUIRED_HOOKS if h not in have]
            if missing:
                raise BackendBrokenError(
                    f"backend {rec.name!r} ({label}) is broken: it lacks the required hooks "
                    f"{', '.join(missing)}; report this to its authors"
                )
            b = Binding(rec.name, plugin, rec.distribution)
            self._bind(b)
            try:
                spec = b.backend()
            except Exception as exc:
                raise _broken(rec.name, label, "kernelbay_backend() raised", exc) from exc
            if not isinstance(spec, BackendSpec):
                raise BackendBrokenError(
                    f"backend {rec.name!r} ({label}) is broken: kernelbay_backend() returned "
                    f"{spec!r}, not a kernelbay.types.BackendSpec"
                )
            if spec.api_version != hookspecs.API_VERSION:
                raise BackendBrokenError(
                    f"backend {rec.name!r} ({label} {rec.version or ''}) was built for kernelbay API "
                    f"version {spec.api_version}, but this kernelbay provides version "
                    f"{hookspecs.API_VERSION}; install versions of kernelbay and {label} that match"
                )
            if spec.name != rec.name:
                raise BackendBrokenError(
                    f"backend {rec.name!r} ({label}) is broken: it calls itself {spec.name!r}; the "
                    "entry-point name and BackendSpec.name must agree"
                )
            b.spec = spec
        except BaseException:
            self.pm.unregister(plugin)
            raise
        self.bindings[rec.name] = b
        self._rebind_all()
        return b

    def _own_impls(self, plugin: object, hook: str) -> list[pluggy.HookImpl]:
        return [i for i in getattr(self.pm.hook, hook).get_hookimpls() if i.plugin is plugin]

    # --- binding ----------------------------------------------------------------------

    def _bind(self, b: Binding) -> None:
        others = [o.plugin for o in self.bindings.values() if o is not b]
        wrapped = False
        for hook in ALL_HOOKS:
            argnames = self._argnames[hook]
            caller = self.pm.subset_hook_caller(hook, remove_plugins=others)
            impls = caller.get_hookimpls()
            own = [i for i in impls if i.plugin is b.plugin]
            attr = _hook_attr(hook)
            if not own:
                fn: Callable[..., Any] = _unsupported(b.name, hook)
            elif (
                len(impls) == 1
                and not (impls[0].wrapper or impls[0].hookwrapper)
                and tuple(impls[0].argnames) == argnames
            ):
                fn = impls[0].function
            else:
                fn = _chain(b, impls, argnames) or _through_pluggy(caller, argnames)
                wrapped = wrapped or len(impls) > 1
            setattr(b, attr, fn)
        b.wrapped = wrapped

    def _rebind_all(self) -> None:
        for b in self.bindings.values():
            self._bind(b)

    def register(self, plugin: object, name: str | None = None) -> None:
        """Register an extension plugin (wrappers, tracers) for every backend."""
        with self._lock:
            self.pm.register(plugin, name=name)
            try:
                self.pm.check_pending()
            except Exception:
                self.pm.unregister(plugin)
                raise
            self.extensions.append(plugin)
            self._rebind_all()

    def reprobe(self, name: str) -> None:
        """Forget a backend's probe result, so the next request probes again.

        For tests and long-lived processes whose environment changed (a driver installed, an
        interpret-mode flag set); devices already handed out stay valid.
        """
        from . import _api

        with self._lock:
            b = self.bindings.get(name)
            if b is not None:
                with b._lock:
                    b._devices = None
                    b._devices_error = None
            for sel, dev in list(_api._default_cache.items()):
                if dev.backend == name:
                    del _api._default_cache[sel]

    def unregister(self, plugin: object) -> None:
        with self._lock:
            self.pm.unregister(plugin)
            self.extensions = [p for p in self.extensions if p is not plugin]
            self._rebind_all()


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


_OPTIONAL_DEFAULTS: dict[str, Callable[..., Any]] = {
    # No host view: the core copies instead.
    "kernelbay_host_view": lambda array: None,
    # No external adoption: asarray falls back to numpy.
    "kernelbay_from_external": lambda obj, device: None,
    # No device timer: a trace has host spans only.
    "kernelbay_device_timer": lambda: None,
}


def _unsupported(backend: str, hook: str) -> Callable[..., Any]:
    if hook in _OPTIONAL_DEFAULTS:
        return _OPTIONAL_DEFAULTS[hook]
    what = hook.removeprefix("kernelbay_").replace("_", " ")

    def unsupported(*_args: Any) -> Any:
        raise UnsupportedError(f"backend {backend!r} does not support {what}; use another device for this")

    return unsupported


runtime = Runtime()


def binding(name: str) -> Binding:
    """The binding of a loaded backend (fast path for objects that already exist)."""
    b = runtime.bindings.get(name)
    return b if b is not None else runtime.load(name)
