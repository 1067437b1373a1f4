"""Imports run one way: no cycle inside a distribution, the core follows its module map, and
backends use only the public core.

The imports are read from the source with `ast`, so nothing is imported to check them. An import
counts wherever it is written (module level or inside a function); only imports under
`if TYPE_CHECKING:` are left out, since they never run. `importlib.import_module("x")` and
`sys.modules.get("x")`/`sys.modules["x"]` with a literal name count as imports of `x` too: they
are the usual ways of hiding one. Importing a submodule (`import a.b`, `from a import b` where
`b` is a module) counts as importing that submodule, not the package's `__init__`; importing a
name from a package (`from a import Name`) counts as importing the package.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import attrs
import pytest

ROOT = Path(__file__).resolve().parents[2]
ARCHITECTURE_DOC = ROOT / "docs" / "architecture.md"
MODULE_MAP_HEADING = "## Module map"
CORE = "kernelbay"


@attrs.frozen
class Import:
    """One import of a module of the same distribution (or of the core, for a backend)."""

    source: str  # the importing module
    target: str  # the imported module
    path: Path
    line: int
    deferred: bool  # written inside a function

    def where(self) -> str:
        kind = "function-level" if self.deferred else "module-level"
        path = self.path.relative_to(ROOT) if self.path.is_relative_to(ROOT) else self.path
        return f"{path}:{self.line} ({kind})"


@attrs.frozen
class Distribution:
    """The modules of one top-level package, by dotted name."""

    name: str
    modules: dict[str, Path]


def _distributions() -> list[Distribution]:
    roots = [ROOT / "core" / "src" / CORE]
    roots += sorted(p for p in (ROOT / "plugins").glob("*/src/kernelbay_*") if p.is_dir())
    roots += sorted(p for p in (ROOT / "examples" / "plugins" / "kernelbay-pyref" / "src").glob("*") if p.is_dir())
    dists = []
    for root in roots:
        if not (root / "__init__.py").exists():
            continue
        modules: dict[str, Path] = {}
        for path in sorted(root.rglob("*.py")):
            parts = [root.name, *path.relative_to(root).with_suffix("").parts]
            if parts[-1] == "__init__":
                parts.pop()
            modules[".".join(parts)] = path
        dists.append(Distribution(root.name, modules))
    return dists


DISTRIBUTIONS = _distributions()
CORE_MODULES = next(d for d in DISTRIBUTIONS if d.name == CORE).modules


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _walk(node: ast.AST, deferred: bool = False) -> Iterator[tuple[ast.AST, bool]]:
    """Every node that runs, with whether it sits in a function; `if TYPE_CHECKING:` bodies skipped."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.If) and _is_type_checking(child.test):
            yield child.test, deferred
            for stmt in child.orelse:
                yield stmt, deferred
                yield from _walk(stmt, deferred)
            continue
        yield child, deferred
        inner = deferred or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
        yield from _walk(child, inner)


def _literal_import(node: ast.AST) -> str | None:
    """The module a dynamic import with a literal name reaches for, else None."""
    if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
        func, name = node.func, node.args[0].value
        if not isinstance(name, str):
            return None
        if isinstance(func, ast.Attribute) and func.attr == "import_module":
            return name
        if isinstance(func, ast.Name) and func.id in ("import_module", "__import__"):
            return name
        if isinstance(func, ast.Attribute) and func.attr == "get" and _is_sys_modules(func.value):
            return name
    if isinstance(node, ast.Subscript) and _is_sys_modules(node.value):
        if isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, str):
            return node.slice.value
    return None


def _is_sys_modules(node: ast.expr) -> bool:
    return isinstance(node, ast.Attribute) and node.attr == "modules" and isinstance(node.value, ast.Name)


def _package_of(module: str, path: Path) -> str:
    return module if path.name == "__init__.py" else module.rpartition(".")[0]


def imports_of(module: str, path: Path, known: dict[str, Path]) -> list[Import]:
    """The imports `module` makes of modules in `known`, resolved to the module each one loads."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found: list[Import] = []

    def add(target: str, node: ast.AST, deferred: bool) -> None:
        # `import a.b.c` where only `a.b` is ours still loads `a.b`: keep the longest known prefix.
        while target and target not in known:
            target = target.rpartition(".")[0]
        if target and target != module:
            found.append(Import(module, target, path, getattr(node, "lineno", 0), deferred))

    for node, deferred in _walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                add(alias.name, node, deferred)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = _package_of(module, path)
                for _ in range(node.level - 1):
                    base = base.rpartition(".")[0]
                base = f"{base}.{node.module}" if node.module else base
            else:
                base = node.module or ""
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                # A submodule imported by name is that submodule; any other name comes from `base`.
                add(sub if sub in known else base, node, deferred)
        else:
            target = _literal_import(node)
            if target is not None:
                add(target, node, deferred)
    return found


def _all_imports(dist: Distribution, known: dict[str, Path] | None = None) -> list[Import]:
    return [i for m, p in dist.modules.items() for i in imports_of(m, p, known or dist.modules)]


def _graph(dist: Distribution) -> dict[str, dict[str, Import]]:
    graph: dict[str, dict[str, Import]] = {m: {} for m in dist.modules}
    for imp in _all_imports(dist):
        graph[imp.source].setdefault(imp.target, imp)
    return graph


def _components(graph: dict[str, dict[str, Import]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def _shortest_path(graph: dict[str, dict[str, Import]], start: str, goal: str, within: set[str]) -> list[str]:
    prev: dict[str, str] = {start: start}
    queue = [start]
    for v in queue:
        for w in sorted(graph[v]):
            if w in within and w not in prev:
                prev[w] = v
                if w == goal:
                    path = [w]
                    while path[-1] != start:
                        path.append(prev[path[-1]])
                    return path[::-1]
                queue.append(w)
    raise AssertionError(f"no path from {start} to {goal}")  # pragma: no cover


def cycles(dist: Distribution) -> list[list[Import]]:
    """The import cycles of `dist`: every import inside a knot (a strongly connected set of
    modules), each shown in the shortest cycle through it.

    A knot of a few modules holds dozens of elementary cycles (the core's seven-module knot of
    0.2 held 45); one shortest cycle per import names every import that must go, or be turned
    around, in a list short enough to read.
    """
    graph = _graph(dist)
    found: dict[tuple[str, ...], list[Import]] = {}
    for comp in _components(graph):
        members = set(comp)
        for source in comp:
            for target in sorted(graph[source]):
                if target not in members:
                    continue
                back = _shortest_path(graph, target, source, members) if target != source else [source]
                chain = [source, *back]
                # One key per cycle whatever module it is read from: rotate to its smallest member.
                ring = chain[:-1]
                k = ring.index(min(ring))
                key = tuple(ring[k:] + ring[:k])
                if key not in found:
                    found[key] = [graph[a][b] for a, b in zip(chain, chain[1:])]
    return [found[k] for k in sorted(found, key=lambda k: (len(k), k))]


def format_cycle(chain: list[Import]) -> str:
    lines = [" -> ".join([chain[0].source, *(i.target for i in chain)])]
    lines += [f"    {i.source} -> {i.target}  at {i.where()}" for i in chain]
    return "\n".join(lines)


@pytest.mark.parametrize("dist", DISTRIBUTIONS, ids=[d.name for d in DISTRIBUTIONS])
def test_no_import_cycle(dist: Distribution) -> None:
    found = cycles(dist)
    knots = "\n".join("knot: " + ", ".join(c) for c in _components(_graph(dist)))
    report = "\n".join(format_cycle(c) for c in found)
    print(f"{dist.name}: {len(found)} import cycle(s)\n{knots}\n{report}")
    assert not found, f"{dist.name} has {len(found)} import cycle(s):\n{knots}\n{report}"


def test_imports_are_read_as_python_runs_them(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    files = {
        "__init__.py": "from .a import A\n",
        "a.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from . import b\nelse:\n    import pkg.c\nA = 1\n",
        "b.py": "import sys\ndef f():\n    from .sub import d, NAME\n    return sys.modules.get('pkg.c')\n",
        "c.py": "import importlib\nimport numpy\nx = importlib.import_module('pkg.sub.d')\n",
        "sub/__init__.py": "NAME = 1\n",
        "sub/d.py": "from .. import a, A\nfrom ..c import x\n",
    }
    for name, text in files.items():
        (pkg / name).write_text(text)
    known = {
        m: pkg / f
        for m, f in [
            ("pkg", "__init__.py"),
            ("pkg.a", "a.py"),
            ("pkg.b", "b.py"),
            ("pkg.c", "c.py"),
            ("pkg.sub", "sub/__init__.py"),
            ("pkg.sub.d", "sub/d.py"),
        ]
    }
    got = {m: sorted((i.target, i.deferred) for i in imports_of(m, p, known)) for m, p in known.items()}
    assert got == {
        "pkg": [("pkg.a", False)],
        "pkg.a": [("pkg.c", False)],  # the TYPE_CHECKING import of b runs never
        "pkg.b": [("pkg.c", True), ("pkg.sub", True), ("pkg.sub.d", True)],
        "pkg.c": [("pkg.sub.d", False)],
        "pkg.sub": [],
        "pkg.sub.d": [("pkg", False), ("pkg.a", False), ("pkg.c", False)],
    }
    dist = Distribution("pkg", known)
    # The shortest cycle through each import of the knot {pkg, a, c, sub.d}, shortest first.
    assert [[i.source for i in c] for c in cycles(dist)] == [
        ["pkg.c", "pkg.sub.d"],
        ["pkg.a", "pkg.c", "pkg.sub.d"],
        ["pkg", "pkg.a", "pkg.c", "pkg.sub.d"],
    ]


# -- the module map ---------------------------------------------------------------------------

_NAME = re.compile(r"`([A-Za-z_][\w.]*(?:\.\*)?)`")


def module_map(text: str) -> dict[str, list[str]] | None:
    """The `## Module map` table: module -> the modules (or `x.*` patterns) it may import.

    None where the heading is absent. Rows are `| `module` | role | `a`, `b.*` |`, with `—` for
    no import; the table ends at the next heading.
    """
    lines = text.splitlines()
    try:
        start = next(i for i, line in enumerate(lines) if line.strip() == MODULE_MAP_HEADING)
    except StopIteration:
        return None
    table: dict[str, list[str]] = {}
    for line in lines[start + 1 :]:
        if line.startswith("#"):
            break
        cells = [c.strip() for c in line.strip().strip("|").split("|")] if line.lstrip().startswith("|") else []
        if len(cells) < 3:
            continue
        head = _NAME.fullmatch(cells[0])
        if head is None:  # the header row and its rule
            continue
        assert head.group(1) not in table, f"{MODULE_MAP_HEADING}: two rows for {head.group(1)}"
        allowed = cells[2]
        names = _NAME.findall(allowed)
        leftover = _NAME.sub("", allowed).replace(",", "").replace("—", "").strip()
        assert not leftover, f"{MODULE_MAP_HEADING}, row {head.group(1)}: cannot read {allowed!r}"
        table[head.group(1)] = names
    return table


def _allows(patterns: list[str], target: str) -> bool:
    for p in patterns:
        if p.endswith(".*"):
            if target == p[:-2] or target.startswith(p[:-1]):
                return True
        elif target == p:
            return True
    return False


def test_module_map_reader() -> None:
    text = (
        "# A\n## Module map\n\n| module | role | may import |\n|---|---|---|\n"
        "| `kernelbay.errors` | the errors | — |\n"
        "| `kernelbay.types` | values | `kernelbay.errors`, `kernelbay.trace.*` |\n"
        "## Next\n| `kernelbay.other` | x | — |\n"
    )
    table = module_map(text)
    assert table == {"kernelbay.errors": [], "kernelbay.types": ["kernelbay.errors", "kernelbay.trace.*"]}
    assert module_map("# A\n") is None
    allowed = table["kernelbay.types"]
    assert _allows(allowed, "kernelbay.trace") and _allows(allowed, "kernelbay.trace.hot")
    assert not _allows(allowed, "kernelbay.tracer") and not _allows(allowed, "kernelbay.cache")


def test_module_map_is_complete_and_true() -> None:
    table = module_map(ARCHITECTURE_DOC.read_text(encoding="utf-8"))
    assert table is not None, f"docs/architecture.md has no {MODULE_MAP_HEADING!r} table: the core's map is kept there"
    core = next(d for d in DISTRIBUTIONS if d.name == CORE)
    problems = [f"{m}: no row in the module map" for m in sorted(core.modules) if m not in table]
    problems += [f"{m}: a row for a module that does not exist" for m in sorted(table) if m not in core.modules]
    seen: set[tuple[str, str]] = set()
    for imp in _all_imports(core):
        if imp.source in table and not _allows(table[imp.source], imp.target) and (imp.source, imp.target) not in seen:
            seen.add((imp.source, imp.target))
            problems.append(f"{imp.source} imports {imp.target}, not in its row, at {imp.where()}")
    assert not problems, "docs/architecture.md, " + MODULE_MAP_HEADING + ":\n" + "\n".join(problems)


# -- backends use the public core --------------------------------------------------------------

# Private core modules a backend imports today. This list may only shrink: a new entry needs
# the core to make what it uses public instead.
PRIVATE_IMPORT_ALLOWLIST: set[tuple[str, str]] = set()


def _private(module: str) -> bool:
    return any(part.startswith("_") for part in module.split(".")[1:])


def test_backends_import_no_private_core_module() -> None:
    found: dict[tuple[str, str], Import] = {}
    for dist in DISTRIBUTIONS:
        if dist.name == CORE:
            continue
        for imp in _all_imports(dist, {**CORE_MODULES, **dist.modules}):
            if imp.target in CORE_MODULES and _private(imp.target):
                found.setdefault((imp.source, imp.target), imp)
    new = [
        f"{s} imports {t} at {found[s, t].where()}" for s, t in sorted(found) if (s, t) not in PRIVATE_IMPORT_ALLOWLIST
    ]
    gone = sorted(PRIVATE_IMPORT_ALLOWLIST - set(found))
    assert not new, "a backend imports a private core module (make what it needs public):\n" + "\n".join(new)
    assert not gone, f"no longer imported, remove from PRIVATE_IMPORT_ALLOWLIST: {gone}"


if __name__ == "__main__":  # print the cycles of every distribution
    for _dist in DISTRIBUTIONS:
        _found = cycles(_dist)
        print(f"{_dist.name}: {len(_found)} import cycle(s)")
        for _chain in _found:
            print(format_cycle(_chain))
