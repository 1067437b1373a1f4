"""The runtime state: one pluggy ``PluginManager``, the installed backends, their bindings,
the registered extensions and the default-device choices made so far.

Discovery and isolation live in :mod:`kernelbay._discovery`, hook binding in
:mod:`kernelbay._binding`, device selection in :mod:`kernelbay._select`. :meth:`Runtime.reset`
forgets all of it at once.
"""

from __future__ import annotations

import threading
from typing import Any

import pluggy

from . import _discovery, _log, hookspecs
from ._binding import ALL_HOOKS, ENV_BACKENDS, REQUIRED_HOOKS, Binding, bind
from ._discovery import ENTRY_POINT_GROUP, Backend
from .device import Device
from .errors import BackendBrokenError, BackendNotInstalledError

__all__ = [
    "ALL_HOOKS",
    "ENTRY_POINT_GROUP",
    "ENV_BACKENDS",
    "REQUIRED_HOOKS",
    "Backend",
    "Binding",
    "Runtime",
    "binding",
    "runtime",
]


class Runtime:
    """The process-wide registry: one PluginManager, the installed backends, their bindings."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self.reset()

    def reset(self) -> None:
        """Forget everything loaded; the next request re-reads entry points.

        Nothing survives: bindings are retired (devices handed out before re-resolve by name, and
        their default streams, kept by the old binding, go with it), records, extensions and
        default-device choices are dropped.
        """
        with self._lock:
            for old in getattr(self, "bindings", {}).values():
                old.retired = True
            self.pm = pluggy.PluginManager("kernelbay")
            self.pm.add_hookspecs(hookspecs)
            self._argnames = {h: tuple(getattr(self.pm.hook, h).spec.argnames) for h in ALL_HOOKS}
            self._records: dict[str, Backend] | None = None
            self._extra: dict[str, Backend] = {}
            self.bindings: dict[str, Binding] = {}
            self.extensions: list[object] = []
            #: selector text (None: unset) -> the device it chose; see kernelbay._select.device.
            self.default_devices: dict[str | None, Device] = {}

    # --- discovery --------------------------------------------------------------------

    def records(self) -> dict[str, Backend]:
        """Installed backends allowed by KERNELBAY_BACKENDS, by name. Imports nothing."""
        if self._records is None:
            with self._lock:
                if self._records is None:
                    _log.check()  # a malformed KERNELBAY_LOG is an error at first use, not ignored
                    self._records = _discovery.discover()
        recs = dict(self._records)
        recs.update(self._extra)
        for rec in recs.values():  # a record loads through the runtime that lists it
            if rec._runtime is None:
                rec._runtime = self
        return recs

    def allowlist(self) -> set[str] | None:
        return _discovery.allowlist()

    def installed_names(self) -> list[str]:
        """Every installed backend's name, allowed or not."""
        return _discovery.installed_names(self._extra)

    def not_installed(self, name: str) -> BackendNotInstalledError:
        return _discovery.not_installed(name, self.installed_names())

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
            if b is not None:
                b.retired = True
                if self.pm.is_registered(b.plugin):
                    self.pm.unregister(b.plugin)
            if rec is not None:
                rec._binding = None
                rec._error = None
            self.forget_default(name)
            self.rebind_all()

    # --- loading ----------------------------------------------------------------------

    def load(self, name: str) -> Binding:
        """The backend's binding, loading it on first use.

        :raises BackendNotInstalledError: no such backend (or not allowed).
        :raises BackendBrokenError: it failed to load; the cause is chained.
        """
        b = self.bindings.get(name)
        if b is not None:
            return b
        rec = self.records().get(name)
        if rec is None:
            raise self.not_installed(name)
        with self._lock:
            if rec._binding is not None:
                return rec._binding
            if rec._error is not None:
                raise rec._error
            try:
                b = _discovery.load(self, rec)
            except BackendBrokenError as exc:
                rec._error = exc
                raise
            self.bindings[rec.name] = b
            self.rebind_all()
            rec._binding = b
            return b

    # --- binding ----------------------------------------------------------------------

    def bind(self, b: Binding) -> None:
        bind(self.pm, b, [o.plugin for o in self.bindings.values() if o is not b], self._argnames)

    def rebind_all(self) -> None:
        for b in self.bindings.values():
            self.bind(b)

    def own_impls(self, plugin: object, hook: str) -> list[Any]:
        """``plugin``'s own implementations of ``hook`` (no wrapper of another plugin)."""
        return [i for i in getattr(self.pm.hook, hook).get_hookimpls() if i.plugin is plugin]

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
            self.rebind_all()

    def unregister(self, plugin: object) -> None:
        with self._lock:
            self.pm.unregister(plugin)
            self.extensions = [p for p in self.extensions if p is not plugin]
            self.rebind_all()

    # --- runtime state ----------------------------------------------------------------

    def reprobe(self, name: str) -> None:
        """Forget a backend's probe result, so the next request probes again.

        For tests and long-lived processes whose environment changed (a driver installed, an
        interpret-mode flag set); devices already handed out stay valid.
        """
        with self._lock:
            b = self.bindings.get(name)
            if b is not None:
                b.forget_probe()
            self.forget_default(name)

    def forget_default(self, backend: str) -> None:
        """Drop the default-device choices that picked a device of ``backend``."""
        for sel, dev in list(self.default_devices.items()):
            if dev.backend == backend:
                self.default_devices.pop(sel, None)


runtime = Runtime()


def binding(name: str) -> Binding:
    """The binding of a loaded backend (fast path for objects that already exist)."""
    b = runtime.bindings.get(name)
    return b if b is not None else runtime.load(name)
