"""Run the kernel corpus (tests/corpus) on each backend and print the pass table (issue #24).

Each case runs in its own subprocess with a timeout, so a crash or hang in one kernel does not
stop the report. Outcomes: pass, mismatch, compile error (with its first error line), error,
crash, timeout. ``--write-docs`` replaces the generated table in docs/corpus.md.

    python tools/corpus_report.py [--backend cpu --backend cuda] [--timeout 120] [--write-docs]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "corpus.md"
BEGIN, END = "<!-- corpus-table:begin -->", "<!-- corpus-table:end -->"

_CHILD = r"""
import json, sys
from tests.corpus.all_cases import CASES
from tests.corpus.cases import run_case
case = next(c for c in CASES if c.id == sys.argv[1])
try:
    run_case(case, sys.argv[2])
    out = {"status": "pass", "detail": ""}
except AssertionError as exc:
    lines = [l for l in str(exc).splitlines() if l.strip()]
    out = {"status": "mismatch", "detail": next((l for l in lines if "Mismatch" in l), lines[0] if lines else "")}
except Exception as exc:
    from kernelbay.errors import CompileError
    text = str(exc).splitlines()
    if isinstance(exc, CompileError):
        first = next((l for l in text if "error" in l and l.lstrip().startswith(("kernel.cu", "common.h")) or ": error" in l), text[0] if text else "")
        out = {"status": "compile error", "detail": first.strip()}
    else:
        out = {"status": "error", "detail": f"{type(exc).__name__}: {text[0] if text else ''}"}
print("CORPUS-RESULT " + json.dumps(out))
"""


def run_one(case_id: str, backend: str, timeout: float) -> dict[str, str]:
    """Run one case in a subprocess; classify the outcome."""
    try:
        proc = subprocess.run(
            [sys.executable, "-c", _CHILD, case_id, backend], cwd=ROOT, capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        return {"status": "timeout", "detail": f"no result after {timeout:g} s"}
    for line in proc.stdout.splitlines():
        if line.startswith("CORPUS-RESULT "):
            return dict(json.loads(line[len("CORPUS-RESULT ") :]))
    tail = (proc.stderr.strip().splitlines() or [""])[-1]
    return {"status": "crash", "detail": f"exit status {proc.returncode}: {tail}"}


def backend_present(backend: str) -> bool:
    code = f"import kernelbay as kb; kb.device({backend!r})"
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True).returncode == 0


def table(results: dict[str, dict[str, dict[str, str]]], case_ids: list[str]) -> str:
    backends = list(results)
    lines = ["| kernel | " + " | ".join(backends) + " |", "|---|" + "---|" * len(backends)]
    for cid in case_ids:
        cells = []
        for b in backends:
            r = results[b][cid]
            cell = (
                r["status"] if not r["detail"] else f"{r['status']}: `{r['detail'].replace('|', '/').replace('`', '')}`"
            )
            cells.append(cell)
        lines.append(f"| `{cid}` | " + " | ".join(cells) + " |")
    lines.append("")
    for b in backends:
        n = len(case_ids)
        if n == 0:
            lines.append(f"- **{b}**: no cases selected.")
            continue
        ok = sum(results[b][c]["status"] == "pass" for c in case_ids)
        lines.append(f"- **{b}**: {ok} / {n} pass verbatim ({100.0 * ok / n:.0f} %).")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--backend", action="append", help="backend to run (default: cpu, and cuda when present)")
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds per case (default 120)")
    ap.add_argument("-k", dest="filter", default="", help="only cases whose id contains this text")
    ap.add_argument("--write-docs", action="store_true", help="replace the table in docs/corpus.md")
    ns = ap.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    from tests.corpus.all_cases import CASES

    backends = ns.backend or [b for b in ("cpu", "cuda") if b == "cpu" or backend_present(b)]
    ids = [c.id for c in CASES if ns.filter in c.id]
    results: dict[str, dict[str, dict[str, str]]] = {}
    for b in backends:
        results[b] = {}
        for cid in ids:
            r = run_one(cid, b, ns.timeout)
            results[b][cid] = r
            print(f"{b:5} {r['status']:14} {cid}  {r['detail'][:150]}", flush=True)
    text = table(results, ids)
    print(text)
    if ns.write_docs:
        doc = DOC.read_text()
        if BEGIN not in doc or END not in doc:
            print(f"{DOC} has no {BEGIN} ... {END} markers", file=sys.stderr)
            return 2
        head, rest = doc.split(BEGIN, 1)
        _, tail = rest.split(END, 1)
        DOC.write_text(head + BEGIN + "\n" + text + END + tail)
        print(f"wrote the table to {DOC}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
