"""Build the documentation site: docs/, the READMEs and the API reference, with MkDocs.

The Markdown files link to each other by their paths in the repository (``../plugins/cpu/
README.md``), which read well on a code host. MkDocs wants every page under one folder, so
this script lays the pages out in a scratch folder at the same relative paths (README.md as
the home page), writes the MkDocs configuration there and builds. ``--strict`` turns every
broken link and docstring warning into a failure; ``make check`` runs it so.

    python tools/docs_site.py [--strict] [--out DIR]
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGES = [
    "README.md",
    "CHANGELOG.md",
    "CONTRIBUTING.md",
    "core/README.md",
    "plugins/cpu/README.md",
    "plugins/cuda/README.md",
    "plugins/tpu/README.md",
    "benchmarks/README.md",
    "examples/plugins/kernelbay-pyref/README.md",
]
API = """# API reference

Generated from the docstrings.

## The public API

::: kernelbay
    options:
      show_submodules: false
      members_order: alphabetical

## The backend contract

::: kernelbay.hookspecs

## Errors

::: kernelbay.errors
"""


#: A fence's info string with words after the language (``python needs=ray``, ``python
#: fragment``: labels tests/core/test_docs_blocks.py reads). Markdown's fenced code takes only
#: the language, so the site gets the fence without the labels (else the block is not code).
_LABELLED_FENCE = re.compile(r"^([ \t]*(?:`{3,}|~{3,})[ \t]*[\w#.+-]+)[ \t]+[^\n`]*$", re.M)


def _copy_page(src: Path, out: Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    if src.suffix == ".md":
        out.write_text(_LABELLED_FENCE.sub(r"\1", src.read_text(encoding="utf-8")), encoding="utf-8")
    else:
        shutil.copy2(src, out)


def layout(dst: Path) -> list[str]:
    """Copy the pages to ``dst`` at their repository paths; the nav, in reading order."""
    nav = []
    for rel in PAGES:
        src = ROOT / rel
        if src.exists():
            out = dst / ("index.md" if rel == "README.md" else rel)
            _copy_page(src, out)
            nav.append(out.relative_to(dst).as_posix())
    for src in sorted((ROOT / "docs").rglob("*")):
        if src.is_file():
            out = dst / src.relative_to(ROOT)
            _copy_page(src, out)
            if src.suffix == ".md":
                nav.append(out.relative_to(dst).as_posix())
    (dst / "api.md").write_text(API)
    nav.append("api.md")
    # README.md links to docs/... and the docs link back with ../README.md: both resolve.
    _copy_page(ROOT / "README.md", dst / "README.md")
    return nav


def config(docs: Path, site: Path, nav: list[str]) -> str:
    lines = [
        "site_name: kernelbay",
        f"docs_dir: {docs}",
        f"site_dir: {site}",
        "use_directory_urls: false",
        "exclude_docs: |",
        "  /README.md",
        "validation:",
        "  omitted_files: warn",
        "  absolute_links: warn",
        "  unrecognized_links: warn",
        "  anchors: warn",
        "plugins:",
        "  - search",
        "  - mkdocstrings:",
        "      handlers:",
        "        python:",
        f"          paths: [{ROOT / 'core' / 'src'}]",
        "          options:",
        "            docstring_style: sphinx",
        "            show_source: false",
        "            show_root_heading: true",
        "nav:",
    ]
    lines += [f"  - {p}" for p in nav]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--strict", action="store_true", help="fail on any warning (broken links, docstrings)")
    ap.add_argument("--out", default=str(ROOT / ".venv" / "site"), help="where the site is written")
    a = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="kernelbay-docs-") as tmp:
        docs = Path(tmp) / "docs"
        nav = layout(docs)
        cfg = Path(tmp) / "mkdocs.yml"
        cfg.write_text(config(docs, Path(a.out).resolve(), nav))
        cmd = [sys.executable, "-m", "mkdocs", "build", "-f", str(cfg)] + (["--strict"] if a.strict else [])
        return subprocess.run(cmd).returncode


if __name__ == "__main__":
    sys.exit(main())
