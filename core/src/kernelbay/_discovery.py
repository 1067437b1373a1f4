"""Backend discovery and isolation.

* Discovery reads entry-point metadata only (group ``kernelbay.backends``); a backend module
  is imported the first time something needs more than its name.
* Each backend is loaded, registered with the runtime's pluggy ``PluginManager`` and checked on
  its own. Whatever goes wrong (import error, hook that does not match its spec, wrong API
  version, probe that raises) marks *that* backend broken, with the chained cause; the others
  go on.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import traceback
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING

import attrs

from . import _isolate, hookspecs
from ._binding import ALL_HOOKS, ENV_BACKENDS, REQUIRED_HOOKS, Binding, broken
from .device import BackendSpec, Device
from .errors import BackendBrokenError, BackendNotInstalledError, BackendUnavailableError

if TYPE_CHECKING:  # pragma: no cover
    from ._plugins import Runtime

ENTRY_POINT_GROUP = "kernelbay.backends"
_FIRST_PARTY = ("cpu", "cuda", "tpu")
log = logging.getLogger("kernelbay.plugins")
# (name, shadowing distributions) already warned about: warnings.warn once per process.
_warned: set[tuple[str, str]] = set()


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
    _load: Callable[[], object] = attrs.field(repr=False, alias="load")
    _binding: Binding | None = attrs.field(default=None, repr=False, init=False)
    _error: BaseException | None = attrs.field(default=None, repr=False, init=False)
    # The runtime that listed this record (kernelbay._plugins sets it): loads through it.
    _runtime: Runtime | None = attrs.field(default=None, repr=False, init=False)

    def _load_binding(self) -> Binding:
        if self._runtime is None:
            raise BackendBrokenError(f"backend {self.name!r} is not part of a kernelbay runtime")
        return self._runtime.load(self.name)

    @property
    def label(self) -> str:
        """The distribution that provides the backend (``kernelbay-cpu``), else its name: how messages name it."""
        return self.distribution or self.name

    @property
    def status(self) -> str:
        """``available``, ``unavailable`` (healthy, nothing to run on) or ``broken``."""
        try:
            self._load_binding().devices()
        except BackendUnavailableError:
            return "unavailable"
        except BackendBrokenError:
            return "broken"
        return "available"

    @property
    def error(self) -> BaseException | None:
        """Why the backend is unavailable or broken (with ``__cause__``), else ``None``."""
        try:
            self._load_binding().devices()
        except (BackendUnavailableError, BackendBrokenError) as exc:
            return exc
        return None

    @property
    def reason(self) -> str | None:
        """Why the backend is unavailable or broken, in words (the message of :attr:`error`), else ``None``."""
        err = self.error
        return None if err is None else str(err)

    @property
    def spec(self) -> BackendSpec | None:
        """The :class:`BackendSpec` the backend announced (name, priority, languages), or ``None`` when it is broken."""
        try:
            return self._load_binding().spec
        except BackendBrokenError:
            return None

    @property
    def priority(self) -> int | None:
        """The backend's priority (higher is picked first by ``kb.device()``), or ``None`` when it is broken."""
        s = self.spec
        return None if s is None else s.priority

    @property
    def languages(self) -> tuple[str, ...]:
        """The source languages the backend compiles (``Source.lang`` values); empty when it is broken."""
        s = self.spec
        return () if s is None else s.languages

    @property
    def devices(self) -> tuple[Device, ...]:
        """The devices the backend found (its probe's answer); empty when it is unavailable or broken."""
        try:
            return self._load_binding().devices()
        except (BackendUnavailableError, BackendBrokenError):
            return ()


def allowlist() -> set[str] | None:
    raw = os.environ.get(ENV_BACKENDS)
    if raw is None:
        return None
    return {p.strip() for p in raw.split(",") if p.strip()}


def installed_names(extra: dict[str, Backend]) -> list[str]:
    """Every installed backend's name, allowed or not."""
    from importlib.metadata import entry_points

    return sorted({ep.name for ep in entry_points(group=ENTRY_POINT_GROUP)} | set(extra))


def discover() -> dict[str, Backend]:
    """Installed backends allowed by KERNELBAY_BACKENDS, by name. Imports nothing.

    Two distributions claiming one name: where one of them is the first-party distribution of
    that name (``kernelbay-cpu`` for ``cpu``), it wins and the others are named in a warning
    (once per process) and a log line on ``kernelbay.plugins``; otherwise the name's record is
    broken, its reason naming every claimant, and none is imported (which one won would depend
    on ``sys.path``). Either way the device never changes silently.
    """
    from importlib.metadata import entry_points

    allowed = allowlist()
    found: dict[str, Backend] = {}
    claims: dict[str, list[tuple[str | None, str | None, str]]] = {}
    loads: dict[tuple[str, str | None, str], Callable[[], object]] = {}
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        if allowed is not None and ep.name not in allowed:
            continue
        dist = getattr(ep, "dist", None)
        dname = dist.metadata["Name"] if dist is not None else None
        version = dist.version if dist is not None else None
        seen = claims.setdefault(ep.name, [])
        if any(c[0] == dname and c[2] == ep.value for c in seen):
            continue  # the same distribution seen twice on sys.path
        seen.append((dname, version, ep.value))
        loads[ep.name, dname, ep.value] = ep.load
        if ep.name in found:
            continue
        found[ep.name] = Backend(name=ep.name, distribution=dname, version=version, target=ep.value, load=ep.load)
    for name, seen in claims.items():
        if len(seen) > 1:
            found[name] = _first_party_wins(name, seen, loads) or _conflict(name, seen)
    return found


def _dist_key(dist: str | None) -> str:
    return re.sub(r"[-_.]+", "-", dist or "").lower()


def _first_party_wins(
    name: str,
    seen: list[tuple[str | None, str | None, str]],
    loads: dict[tuple[str, str | None, str], Callable[[], object]],
) -> Backend | None:
    """The first-party claimant's record, with a warning naming the others; ``None`` where no
    single claimant is kernelbay's own distribution of that name."""
    if name not in _FIRST_PARTY:
        return None
    ours = [c for c in seen if _dist_key(c[0]) == f"kernelbay-{name}"]
    if len({(d, t) for d, _, t in ours}) != 1:
        return None
    dname, version, target = ours[0]
    others = ", ".join(sorted({f"{d or '?'} ({t})" for d, _, t in seen if _dist_key(d) != f"kernelbay-{name}"}))
    msg = (
        f"backend {name!r}: {others} also claims that name and is ignored; {dname} (the first-party "
        f"backend) is used. Uninstall the other distribution, or give its backend another entry-point name"
    )
    log.warning("%s", msg)
    if (name, others) not in _warned:
        _warned.add((name, others))
        warnings.warn(msg, RuntimeWarning, stacklevel=2)
    return Backend(name=name, distribution=dname, version=version, target=target, load=loads[name, dname, target])


def _conflict(name: str, seen: list[tuple[str | None, str | None, str]]) -> Backend:
    who = ", ".join(f"{d or '?'} {v or ''} ({t})".replace("  ", " ") for d, v, t in seen)
    msg = (
        f"backend {name!r} is broken: {len(seen)} installed distributions claim that name: {who}. "
        f"Uninstall all but one (`pip uninstall <name>`), or leave it out with {ENV_BACKENDS}"
    )

    def refuse() -> object:
        raise _Conflict(msg)

    return Backend(
        name=name,
        distribution=" + ".join(d or "?" for d, _, _ in seen),
        version=None,
        target=" | ".join(t for _, _, t in seen),
        load=refuse,
    )


class _Conflict(Exception):
    pass


def not_installed(name: str, installed: list[str]) -> BackendNotInstalledError:
    allowed = allowlist()
    if name in installed and allowed is not None:
        return BackendNotInstalledError(
            f"backend {name!r} is installed but {ENV_BACKENDS}={os.environ.get(ENV_BACKENDS)!r} "
            f"leaves it out; add it there or unset {ENV_BACKENDS}"
        )
    have = ", ".join(installed) or "none"
    how = f"`pip install 'kernelbay[{name}]'`" if name in _FIRST_PARTY else f"`pip install kernelbay-{name}`"
    return BackendNotInstalledError(
        f"backend {name!r} is not installed (installed: {have}); install it with {how}"
        + (" (in a kernelbay checkout: `make test`)" if name in _FIRST_PARTY else "")
        + ", "
        "or pick another with KERNELBAY_DEVICE"
    )


def load(rt: Runtime, rec: Backend) -> Binding:
    """Import, register and check one backend; returns its binding (not yet in ``rt.bindings``).

    :raises BackendBrokenError: whatever went wrong, the cause chained; nothing stays registered.
    """
    label = rec.label
    try:
        plugin = _isolate.call(rec._load)
    except _isolate.TimedOut as exc:
        raise BackendBrokenError(
            f"backend {rec.name!r} ({label}) is broken: importing {rec.target} did not answer within "
            f"{exc.seconds:g} s; fix or uninstall {label}, leave it out with {ENV_BACKENDS}, or raise "
            f"{_isolate.ENV_TIMEOUT}"
        ) from None
    except _Conflict as exc:
        raise BackendBrokenError(str(exc)) from None
    except Exception as exc:
        raise broken(rec.name, label, f"importing {rec.target} failed", exc) from exc
    pm = rt.pm
    name = f"backend:{rec.name}"
    try:
        pm.register(plugin, name=name)
    except Exception as exc:
        # older pluggy (1.5, 1.6) records the name before it checks the hooks, and leaves it there
        if pm.get_plugin(name) is plugin:
            with contextlib.suppress(Exception):
                pm.unregister(plugin, name=name)
        raise broken(rec.name, label, "its hooks do not match kernelbay's hookspecs", exc) from exc
    try:
        try:
            pm.check_pending()
        except Exception as exc:
            raise BackendBrokenError(
                f"backend {rec.name!r} ({label}{' ' + rec.version if rec.version else ''}) is broken: it implements a hook this "
                f"kernelbay does not define: {_detail(exc)}. The backend was most likely "
                f"built for a newer kernelbay: upgrade kernelbay (the core), or install a release of {label} "
                f"that this kernelbay supports; or leave it out with {ENV_BACKENDS}."
            ) from exc
        have = {h for h in ALL_HOOKS if any(i.plugin is plugin for i in getattr(pm.hook, h).get_hookimpls())}
        missing = [h for h in REQUIRED_HOOKS if h not in have]
        if missing:
            raise BackendBrokenError(
                f"backend {rec.name!r} ({label}) is broken: it lacks the required hooks "
                f"{', '.join(missing)}; report this to its authors"
            )
        b = Binding(rec.name, plugin, rec.distribution)
        rt.bind(b)
        try:
            spec = _isolate.call(b.backend)
        except _isolate.TimedOut as exc:
            raise BackendBrokenError(
                f"backend {rec.name!r} ({label}) is broken: kernelbay_backend() did not answer within "
                f"{exc.seconds:g} s; raise {_isolate.ENV_TIMEOUT} or leave it out with {ENV_BACKENDS}"
            ) from None
        except Exception as exc:
            raise broken(rec.name, label, "kernelbay_backend() raised", exc) from exc
        check_spec(rec, spec)
        b.spec = spec
    except BaseException:
        pm.unregister(plugin)
        raise
    return b


def _detail(exc: BaseException) -> str:
    return "".join(traceback.format_exception_only(type(exc), exc)).strip()


def check_spec(rec: Backend, spec: object) -> None:
    label = rec.label
    if not isinstance(spec, BackendSpec):
        raise BackendBrokenError(
            f"backend {rec.name!r} ({label}) is broken: kernelbay_backend() returned "
            f"{spec!r}, not a kernelbay.types.BackendSpec"
        )
    if spec.api_version != hookspecs.API_VERSION:
        ours = hookspecs.API_VERSION
        if isinstance(spec.api_version, int) and spec.api_version > ours:
            advice = f"upgrade kernelbay (the core) to a release that provides API version {spec.api_version}"
        else:
            advice = f"upgrade {label} to a release built for API version {ours}"
        raise BackendBrokenError(
            f"backend {rec.name!r} ({label}{' ' + rec.version if rec.version else ''}) is broken: it was built for kernelbay API "
            f"version {spec.api_version!r}, but this kernelbay provides version {ours}; "
            f"{advice}, or leave it out with {ENV_BACKENDS}"
        )
    if spec.name != rec.name:
        raise BackendBrokenError(
            f"backend {rec.name!r} ({label}) is broken: it calls itself {spec.name!r}; the "
            "entry-point name and BackendSpec.name must agree"
        )
