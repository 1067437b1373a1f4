"""The cuda backend's modules import one way: each only modules listed above it in the README's
``## Modules`` table (imports inside functions count; ``if TYPE_CHECKING:`` ones never run)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "plugins" / "cuda" / "src" / "kernelbay_cuda"
README = PACKAGE.parents[1] / "README.md"


def documented_order() -> list[str]:
    text = README.read_text(encoding="utf-8")
    table = text.split("## Modules", 1)[1].split("\n## ", 1)[0]
    order: list[str] = []
    for line in table.splitlines():
        first = line.split("|")[1] if line.startswith("|") else ""
        order += [name.removesuffix(".py") for name in re.findall(r"`(\w+\.py)`", first)]
    return order


def sibling_imports(path: Path) -> set[str]:
    """The package's modules that ``path`` imports (``from . import x``, ``from .x import y``)."""
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if (
                isinstance(child, ast.If)
                and getattr(child.test, "id", getattr(child.test, "attr", "")) == "TYPE_CHECKING"
            ):
                continue
            if isinstance(child, ast.ImportFrom) and child.level == 1:
                found.update([child.module] if child.module else [a.name for a in child.names])
            elif isinstance(child, ast.ImportFrom) and (child.module or "").startswith("kernelbay_cuda."):
                found.add(child.module.split(".")[1])
            visit(child)

    visit(ast.parse(path.read_text(encoding="utf-8")))
    return {m.split(".")[0] for m in found}


def test_every_module_is_in_the_table_once() -> None:
    order = documented_order()
    modules = sorted(p.stem for p in PACKAGE.glob("*.py") if p.stem != "__init__")
    assert sorted(order) == modules


def test_each_module_imports_only_those_above_it() -> None:
    order = documented_order()
    wrong = []
    for i, name in enumerate(order):
        for target in sorted(sibling_imports(PACKAGE / f"{name}.py")):
            if target not in order[:i]:
                wrong.append(f"{name} imports {target}, which is not above it")
    assert not wrong, "\n".join(wrong)
