"""The ``KERNELBAY_DEVICE`` selector grammar.

A selector is an ordered, comma-separated list of terms::

    cuda:1,cpu      the first term that names an available device wins
    cuda            a backend's first device
    *               any device: the highest-priority available backend
    !tpu            exclusion; exclusions apply to the whole list (also !cuda:1)

A selector of only exclusions means ``*`` with those exclusions. Whitespace around terms is
ignored; an empty selector means "unset".
"""

from __future__ import annotations

import re

import attrs

from .errors import InvalidArgumentError

ENV_DEVICE = "KERNELBAY_DEVICE"

_TERM = re.compile(r"^(?P<neg>!)?\s*(?:(?P<star>\*)|(?P<name>[A-Za-z_][A-Za-z0-9_.-]*)(?::(?P<index>\d+))?)$")


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
                f"bad device selector term {part!r} in {raw!r}: use a backend name (cuda), a device "
                "(cuda:1), * for any, or !name to exclude, separated by commas (e.g. 'cuda:1,cpu')"
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
