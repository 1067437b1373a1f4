"""uv.lock for `make` with or without uv: check it against the pyprojects, or print its pins.

    python tools/uvlock.py check         # exit 1, naming each difference, when uv.lock is stale
    python tools/uvlock.py constraints   # `name==version` for this interpreter, for pip -c

`make` installs with `uv sync --locked` where it has uv (uv refuses a stale lock itself); where
it has only pip, it runs `check`, then `pip install -c` with these pins, so both install what
uv.lock says. Standard library only: it runs before anything is installed.

`check` compares what uv recorded of each workspace member (``[package.metadata]``: its
dependencies, extras, and the root's dependency groups) with the pyprojects; a version bump of
a dependency, a new extra or a removed requirement each show. `uv lock --check` is the full
check (it also re-resolves); this one needs neither uv nor the network.
"""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path
from typing import Any

_REQ = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[([^\]]*)\])?\s*([^;]*?)\s*(?:;\s*(.*))?$")


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _spec(s: str) -> str:
    return ",".join(sorted(p.strip() for p in s.split(",") if p.strip()))


def _from_pep508(req: str, extra: str | None, members: set[str]) -> tuple[str, ...]:
    m = _REQ.match(req)
    if m is None:
        raise SystemExit(f"uvlock: cannot read the requirement {req!r}")
    name, extras, spec, marker = m.groups()
    name = _norm(name)
    markers = [f"extra == '{extra}'"] if extra else []
    if marker:
        markers.append(marker.strip())
    return (
        name,
        ",".join(sorted(_norm(e) for e in (extras or "").split(",") if e.strip())),
        "" if name in members else _spec(spec),  # uv records a member's source, not its range
        " and ".join(markers),
    )


def _from_lock(req: dict[str, Any], members: set[str]) -> tuple[str, ...]:
    name = _norm(req["name"])
    return (
        name,
        ",".join(sorted(_norm(e) for e in req.get("extras", []))),
        "" if name in members else _spec(req.get("specifier", "")),
        req.get("marker", ""),
    )


def _show(t: tuple[str, ...]) -> str:
    name, extras, spec, marker = t
    return f"{name}{f'[{extras}]' if extras else ''}{spec}{f'; {marker}' if marker else ''}"


def check(root: Path) -> list[str]:
    """Each way uv.lock disagrees with the workspace's pyprojects (empty when it agrees)."""
    lock = tomllib.loads((root / "uv.lock").read_text(encoding="utf-8"))
    rootp = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))
    ws = rootp["tool"]["uv"]["workspace"]
    globs, skip = ws["members"], ws.get("exclude", [])
    excluded = {p.parent for g in skip for p in root.glob(f"{g}/pyproject.toml")}
    paths = [root] + sorted({p.parent for g in globs for p in root.glob(f"{g}/pyproject.toml")} - excluded)
    projects = {p: tomllib.loads((p / "pyproject.toml").read_text(encoding="utf-8"))["project"] for p in paths}
    members = {_norm(pr["name"]) for pr in projects.values()}
    locked = {_norm(p["name"]): p for p in lock["package"] if "editable" in p["source"] or "virtual" in p["source"]}
    problems = []
    if set(locked) != members:
        problems.append(f"workspace members {sorted(members)}, uv.lock has {sorted(locked)}")
    if lock.get("requires-python") != rootp["project"].get("requires-python"):
        problems.append(
            f"requires-python: pyproject {rootp['project'].get('requires-python')!r}, uv.lock {lock.get('requires-python')!r}"
        )
    for path, pr in projects.items():
        name = _norm(pr["name"])
        meta = locked.get(name, {}).get("metadata", {})
        where = (path / "pyproject.toml").relative_to(root)
        want = {_from_pep508(r, None, members) for r in pr.get("dependencies", [])}
        for extra, reqs in pr.get("optional-dependencies", {}).items():
            want |= {_from_pep508(r, extra, members) for r in reqs}
        have = {_from_lock(r, members) for r in meta.get("requires-dist", [])}
        for t in sorted(want - have):
            problems.append(f"{where}: {_show(t)} is not in uv.lock")
        for t in sorted(have - want):
            problems.append(f"{where}: uv.lock has {_show(t)}, which the pyproject does not declare")
        groups = rootp.get("dependency-groups", {}) if path == root else {}
        for group in set(groups) | set(meta.get("requires-dev", {})):
            want_g = {_from_pep508(r, None, members) for r in groups.get(group, [])}
            have_g = {_from_lock(r, members) for r in meta.get("requires-dev", {}).get(group, [])}
            for t in sorted(want_g ^ have_g):
                problems.append(f"{where}: dependency group {group!r}: {_show(t)} differs")
    return problems


def _python_matches(marker: str) -> bool | None:
    """A resolution marker of python_full_version terms joined by `and`, for this interpreter;
    None for any other form (the caller pins nothing then)."""
    here = sys.version_info[:3]
    for term in marker.split(" and "):
        m = re.fullmatch(r"\s*python_full_version\s*(>=|<=|==|!=|<|>)\s*'([0-9.]+)(\.\*)?'\s*", term)
        if m is None:
            return None
        op, ver, star = m.groups()
        v = tuple(int(x) for x in ver.split("."))
        mine = here[: len(v)] if star else here
        if not star:
            v = v + (0,) * (3 - len(v))
        ok = {"<": mine < v, "<=": mine <= v, ">": mine > v, ">=": mine >= v, "==": mine == v, "!=": mine != v}[op]
        if not ok:
            return False
    return True


def constraints(root: Path) -> list[str]:
    """``name==version`` for each locked registry package, as this interpreter would get it.

    A package locked at more than one version is pinned where its resolution markers pick one
    for this Python; where they cannot (cuda-bindings 12 and 13, one per exclusive extra), the
    extra's own range decides, and a comment says so."""
    lock = tomllib.loads((root / "uv.lock").read_text(encoding="utf-8"))
    by_name: dict[str, list[dict[str, Any]]] = {}
    for p in lock["package"]:
        if "registry" in p["source"]:
            by_name.setdefault(p["name"], []).append(p)
    out = []
    for name, versions in sorted(by_name.items()):
        if len(versions) > 1:
            fits = []
            for p in versions:
                answers = [_python_matches(m) for m in p.get("resolution-markers", [])]
                if any(a is None for a in answers):
                    fits = []
                    break
                if any(answers):
                    fits.append(p)
            versions = fits if len(fits) == 1 else []
            if not versions:
                out.append(f"# {name}: locked at several versions for this Python (exclusive extras); not pinned")
                continue
        out.append(f"{name}=={versions[0]['version']}")
    return out


def main(argv: list[str]) -> int:
    root = Path(__file__).resolve().parent.parent
    if argv[:1] == ["check"]:
        problems = check(root)
        for p in problems:
            print(f"uv.lock is out of date: {p}", file=sys.stderr)
        if problems:
            print("regenerate it with `uv lock` (or .venv/bin/uv lock) and commit it", file=sys.stderr)
        return 1 if problems else 0
    if argv[:1] == ["constraints"]:
        print("\n".join(constraints(root)))
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
