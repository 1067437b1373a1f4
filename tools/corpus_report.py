"""Run the kernel corpus (tests/corpus) on each backend and print the pass table (issue #24).

Each case runs in its own subprocess with a timeout, so a crash or hang in one kernel does not
stop the report. Outcomes: pass, mismatch, compile error (with its first error line), error,
crash, timeout. ``--write-docs`` replaces the generated table in docs/corpus.md; a backend not run
this time (no GPU here) keeps its column as measured before, "not run yet" for cases new since.

    python tools/corpus_report.py [--backend cpu --backend cuda] [--timeout 120] [--write-docs]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "corpus.md"
BEGIN, END = "<!-- corpus-table:begin -->", "<!-- corpus-table:end -->"
NOT_RUN = "not run yet"

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


def cell(r: dict[str, str]) -> str:
    return r["status"] if not r["detail"] else f"{r['status']}: `{r['detail'].replace('|', '/').replace('`', '')}`"


def previous_cells(doc: str) -> dict[str, dict[str, str]]:
    """The cells of the table now in ``doc``, by backend and case id (for backends not run now)."""
    if BEGIN not in doc or END not in doc:
        return {}
    rows = [ln for ln in doc.split(BEGIN, 1)[1].split(END, 1)[0].splitlines() if ln.startswith("|")]
    if not rows:
        return {}
    backends = [c.strip() for c in rows[0].strip("|").split("|")[1:]]
    out: dict[str, dict[str, str]] = {b: {} for b in backends}
    for ln in rows[2:]:
        cells = [c.strip() for c in ln.strip().strip("|").split(" | ")]
        for b, c in zip(backends, cells[1:], strict=False):
            out[b][cells[0].strip("`")] = c
    return out


def table(cells: dict[str, dict[str, str]], case_ids: list[str]) -> str:
    """The markdown table and pass-rate lines; ``cells[backend][case]`` is a cell's text."""
    backends = list(cells)
    lines = ["| kernel | " + " | ".join(backends) + " |", "|---|" + "---|" * len(backends)]
    for cid in case_ids:
        lines.append(f"| `{cid}` | " + " | ".join(cells[b].get(cid, NOT_RUN) for b in backends) + " |")
    lines.append("")
    for b in backends:
        n = len(case_ids)
        if n == 0:
            lines.append(f"- **{b}**: no cases selected.")
            continue
        ok = sum(cells[b].get(c) == "pass" for c in case_ids)
        missing = sum(cells[b].get(c, NOT_RUN) == NOT_RUN for c in case_ids)
        if missing == n:
            lines.append(f"- **{b}**: not run yet.")
        elif missing:
            run = n - missing
            lines.append(
                f"- **{b}**: {ok} / {run} of the cases run pass verbatim ({100.0 * ok / run:.0f} %); {missing} not run yet."
            )
        else:
            lines.append(f"- **{b}**: {ok} / {n} pass verbatim ({100.0 * ok / n:.0f} %).")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--backend", action="append", help="backend to run (default: cpu, and cuda when present)")
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds per case (default 120)")
    ap.add_argument("-k", dest="filter", default="", help="only cases whose id contains this text")
    ap.add_argument("--write-docs", action="store_true", help="replace the table in docs/corpus.md")
    ap.add_argument("-j", "--jobs", type=int, default=1, help="cases run at once, each in its own process (default 1)")
    ns = ap.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    from tests.corpus.all_cases import CASES

    backends = ns.backend or [b for b in ("cpu", "cuda") if b == "cpu" or backend_present(b)]
    ids = [c.id for c in CASES if ns.filter in c.id]
    results: dict[str, dict[str, dict[str, str]]] = {}
    for b in backends:
        results[b] = {}
        with ThreadPoolExecutor(max(1, ns.jobs)) as pool:
            for cid, r in zip(ids, pool.map(lambda cid, b=b: run_one(cid, b, ns.timeout), ids)):
                results[b][cid] = r
                print(f"{b:5} {r['status']:14} {cid}  {r['detail'][:150]}", flush=True)
    cells = {b: {cid: cell(r) for cid, r in res.items()} for b, res in results.items()}
    doc = DOC.read_text()
    if ns.write_docs:
        # a backend not run here keeps its column as measured before; its new cases: "not run yet"
        for b, prev in previous_cells(doc).items():
            if b in ("cpu", "cuda") and b not in cells:
                cells[b] = {cid: prev[cid] for cid in ids if cid in prev}
        order = ("cpu", "cuda")
        cells = {b: cells[b] for b in sorted(cells, key=lambda b: order.index(b) if b in order else len(order))}
    text = table(cells, ids)
    print(text)
    if ns.write_docs:
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
