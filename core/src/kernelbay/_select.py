"""Device selection: the ``KERNELBAY_DEVICE`` selector grammar and its resolution to a device.

A selector is an ordered, comma-separated list of terms::

    cuda:1,cpu      the first term that names an available device wins
    cuda            a backend's first device
    *               any device: the highest-priority available backend
    !tpu            exclusion; exclusions apply to the whole list (also !cuda:1)

A selector of only exclusions means ``*`` with those exclusions. Whitespace around terms is
ignored; an empty selector means "unset".
"""

from __future__ import annotations

import logging
import os
import re
from typing import Any

import attrs

from ._plugins import Binding, runtime
from .device import Device
from .errors import (
    ArgumentTypeError,
    BackendBrokenError,
    BackendError,
    InvalidArgumentError,
    NoDeviceError,
    SettingError,
)

ENV_DEVICE = "KERNELBAY_DEVICE"
log = logging.getLogger("kernelbay.select")

_TERM = re.compile(r"^(?P<neg>!)?\s*(?:(?P<star>\*)|(?P<name>[A-Za-z_][A-Za-z0-9_.-]*)(?::(?P<index>[0-9]{1,9}))?)$")


@attrs.frozen
class Term:
    """One term: a backend name (``None`` for ``*``), an optional device index, negation."""

    backend: str | None
    index: int | None = None
    exclude: bool = False

    def __str__(self) -> str:
        body = "*" if self.backend is None else self.backend + ("" if self.index is None else f":{self.index}")
        return ("!" if self.exclude else "") + body

    def matches(self, backend: str, index: int) -> bool:
        return (self.backend is None or self.backend == backend) and (self.index is None or self.index == index)


@attrs.frozen
class Selector:
    """A parsed selector: positive terms in order, and the exclusions."""

    text: str
    terms: tuple[Term, ...]
    exclusions: tuple[Term, ...]

    def excluded(self, backend: str, index: int | None = None) -> bool:
        """True if the exclusions rule out this device (or, with no index, the whole backend)."""
        for t in self.exclusions:
            if t.backend is None or (t.backend == backend and (t.index is None or t.index == index)):
                return True
        return False


def _short(s: str) -> str:
    return repr(s if len(s) <= 60 else s[:40] + "..." + s[-10:])


def parse(text: str | None) -> Selector:
    """Parse a selector; ``None`` or blank means ``*``.

    :raises InvalidArgumentError: for a term that is not ``name``, ``name:N``, ``*`` or ``!term``.
    """
    raw = (text or "").strip()
    terms: list[Term] = []
    excl: list[Term] = []
    for part in raw.split(",") if raw else []:
        part = part.strip()
        m = _TERM.match(part)
        if not m:
            raise InvalidArgumentError(
                f"bad device selector term {_short(part)} in {_short(raw)}: use a backend name (cuda), a device "
                "(cuda:1, an index of at most 9 digits), * for any, or !name to exclude, separated by commas "
                "(e.g. 'cuda:1,cpu')"
            )
        term = Term(
            backend=None if m["star"] else m["name"].lower(),
            index=None if m["index"] is None else int(m["index"]),
            exclude=bool(m["neg"]),
        )
        (excl if term.exclude else terms).append(term)
    if not terms:
        terms.append(Term(None))
    return Selector(raw, tuple(terms), tuple(excl))


# --- resolution ---------------------------------------------------------------------------


def _by_priority() -> list[Binding | BackendBrokenError]:
    out: list[Any] = []
    for name in sorted(runtime.records()):
        try:
            out.append(runtime.load(name))
        except BackendBrokenError as exc:
            out.append(exc)
    return sorted(out, key=lambda b: -(b.spec.priority) if isinstance(b, Binding) and b.spec is not None else 0)


def devices() -> list[Device]:
    """Every device of every available backend, highest-priority backend first."""
    out: list[Device] = []
    for b in _by_priority():
        if isinstance(b, Binding):
            try:
                out.extend(b.devices())
            except BackendError:
                pass
    return out


def device(selector: str | Device | None = None) -> Device:
    """Pick a device.

    :param selector: a selector (``"cuda:1,cpu"``, ``"!tpu"``, ``"*"``...) that overrides
        ``KERNELBAY_DEVICE``; a :class:`Device` is returned as is. ``None``: the variable, or
        the best available device when it is unset.
    :raises NoDeviceError: (or a more specific :class:`BackendError`) saying what is installed,
        what is available and why each other backend is not.
    """
    if isinstance(selector, Device):
        return selector
    if selector is not None and not isinstance(selector, str):
        raise ArgumentTypeError(
            f"device must be a kb.Device, a selector string such as 'cuda:1' or 'cpu', or None, not {selector!r}"
        )
    text = os.environ.get(ENV_DEVICE) if selector is None else selector
    cache = runtime.default_devices
    dev = cache.get(text)
    if dev is not None and dev.backend in runtime.bindings:
        return dev
    dev = select(parse(text), source="kb.device()" if selector is not None else ENV_DEVICE)
    log.info("device %s (%s) chosen for selector %r", dev, dev.name, text)
    if len(cache) < 64:  # a process uses a few selectors; a generated stream of them is not kept
        cache[text] = dev
    return dev


def select(sel: Selector, source: str = ENV_DEVICE) -> Device:
    """Resolve a parsed selector to a device."""
    records = runtime.records()
    failures: list[tuple[str, BackendError | str]] = []
    for term in sel.terms:
        if term.backend is None:
            reference: list[str] = []  # backends never chosen unless named
            for b in _by_priority():
                if isinstance(b, BackendBrokenError):
                    continue
                if sel.excluded(b.name):
                    continue
                if b.spec is not None and not b.spec.chosen_by_default:
                    reference.append(b.name)
                    continue
                try:
                    devs = b.devices()
                except BackendError as exc:
                    if isinstance(exc.__cause__, SettingError):
                        raise exc.__cause__ from None  # a setting of the user's is wrong: say so, do not fall back
                    continue
                for d in devs:
                    if not sel.excluded(d.backend, d.index):
                        return d
            why = "no available device" + (" outside the exclusions" if sel.exclusions else "")
            if reference:
                named = ", ".join(reference)
                why += (
                    f"; {named} {'is a reference backend' if len(reference) == 1 else 'are reference backends'}"
                    f" (slow, for checking results), never chosen unless named: set KERNELBAY_DEVICE={reference[0]}"
                    " to use it"
                )
            failures.append((str(term), why))
            continue
        if term.backend not in records:
            failures.append((str(term), runtime.not_installed(term.backend)))
            continue
        if sel.excluded(term.backend, term.index):
            failures.append((str(term), f"excluded by {', '.join(map(str, sel.exclusions))}"))
            continue
        try:
            devs = runtime.load(term.backend).devices()
        except BackendError as exc:
            failures.append((str(term), exc))
            continue
        for d in devs:
            if term.matches(d.backend, d.index) and not sel.excluded(d.backend, d.index):
                return d
        have = ", ".join(str(d) for d in devs)
        failures.append((str(term), f"no such device; {term.backend} has {len(devs)}: {have}"))
    raise _no_device(sel, source, failures)


def _no_device(sel: Selector, source: str, failures: list[tuple[str, BackendError | str]]) -> BackendError:
    records = runtime.records()
    what = f"{source}={sel.text!r}" if sel.text else "the default selection"
    if not records:
        installed = runtime.installed_names()
        if installed:
            return NoDeviceError(
                f"no kernelbay backend is allowed: KERNELBAY_BACKENDS={os.environ.get('KERNELBAY_BACKENDS')!r} "
                f"leaves out every installed one ({', '.join(installed)}); unset it or name one"
            )
        return NoDeviceError(f"no kernelbay backend is installed; {_install_hint()}")
    # One explicit term: raise its own error, cause chained, so callers can catch the kind.
    if len(failures) == 1 and isinstance(failures[0][1], BackendError) and len(sel.terms) == 1:
        exc = failures[0][1]
        err = type(exc)(f"{exc}\n{_summary()}")
        err.__cause__ = exc.__cause__ or exc
        return err
    lines = [f"no device matches {what}:"]
    for term, why in failures:
        lines.append(f"  {term}: {why}")
    lines.append(_summary())
    return NoDeviceError("\n".join(lines))


def _install_hint() -> str:
    return (
        "install one, e.g. `pip install 'kernelbay[cpu]'` (or [cuda], [tpu]; in a kernelbay checkout, "
        "`make test`); `kernelbay info` names the command for this machine"
    )


def _summary() -> str:
    """What is installed and available, one backend a line, and a suggestion."""
    lines = ["installed backends:"]
    available: list[str] = []
    recs = runtime.records()
    for rec in (recs[n] for n in sorted(recs)):
        status = rec.status
        if status == "available":
            devs = ", ".join(str(d) for d in rec.devices)
            spec = rec.spec
            if spec is not None and not spec.chosen_by_default:
                lines.append(
                    f"  {rec.name} ({rec.label}): available: {devs} (a reference backend: used only when named)"
                )
                continue
            available.append(devs.split(",")[0])
            lines.append(f"  {rec.name} ({rec.label}): available: {devs}")
        else:
            first, *rest = (rec.reason or "").splitlines() or [""]
            lines.append(f"  {rec.name} ({rec.label}): {status}: {first}")
            lines.extend(f"      {line}" for line in rest)  # the whole reason: the exception line included
    if available:
        lines.append(f"set KERNELBAY_DEVICE to one of the available devices, e.g. KERNELBAY_DEVICE={available[0]}")
    else:
        lines.append("no backend is available here; " + _install_hint())
    return "\n".join(lines)
