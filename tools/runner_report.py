"""Print the cpu runner of every kernel of tests/corpus and of tests/cpu's CUDA dialect kernels,
with why each kernel on fibers is not run as loops, and the count per runner (issue #25). Reads
the cpu backend's plan only: nothing is compiled, so it takes seconds.

    python tools/runner_report.py [--fibers]     # --fibers: only the kernels on fibers
"""

from __future__ import annotations

import argparse
import collections
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fibers", action="store_true", help="list only the kernels that run on fibers")
    args = ap.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    from tests.corpus.runner_plan import all_rows

    rows = all_rows()
    for r in rows:
        if args.fibers and r.runner != "run_fibers":
            continue
        reason = f"  -- {r.giveup}" if r.runner in ("run_fibers", "refused") else ""
        print(f"{r.runner:<11} {r.id}{reason}")
    counts = collections.Counter(r.runner for r in rows)
    print(f"{len(rows)} kernels: " + ", ".join(f"{n} {k}" for k, n in sorted(counts.items())))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
