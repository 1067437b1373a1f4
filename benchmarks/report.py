"""Render docs/performance.md from the published results.

    python -m benchmarks.report [--cpu RESULT.json] [--gpu RESULT.json]

``--cpu``/``--gpu`` publish a run first: its JSON is copied to ``docs/performance-<suite>.json``
and its PNG (next to the JSON) to ``docs/performance-<suite>.png``. The page is then rendered
from whatever ``docs/performance-{cpu,gpu}.json`` hold; a suite with no file there is shown as
not yet measured. Every figure on the page comes from those files.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil

from . import _report

HERE = os.path.dirname(os.path.abspath(__file__))
DOCS = os.path.join(os.path.dirname(HERE), "docs")

HEAD = """# Performance

kernelbay's speed claims, each measured side by side with what a user would pick instead, in
the same process, by one command anyone can run (see [Reproduce](#reproduce)). This page is
rendered by `python -m benchmarks.report` from `docs/performance-cpu.json` and
`docs/performance-gpu.json`; nothing on it is typed in by hand.

How to read the tables: each figure is the median over many batches after a warm-up, with the
10th–90th percentile spread of the batches. Peers are timed interleaved (A, B, A, B...) in one
process, so a noisy machine slows them alike; since 2026-11-29's GPU run gpu-20261129-171212 each
round takes the cases in a new seeded order (the cpu run below is from before: a fixed order). *kernelbay ÷ this* is kernelbay's cost as a
multiple of that row's: below 1, kernelbay is faster. The bar charts show the same ratios.
The cpu block-kernel and stream rows measured on 2 quiet cores (the shared development machine
is rarely quiet) are in [performance-cpu-quiet.md](performance-cpu-quiet.md).
The cpu backend on a busy machine, per-kernel runners and compile speed (issue #25) are in
[performance-cpu-speed.md](performance-cpu-speed.md); the cuda backend's allocation, launch,
graph and copy work against CuPy, PyTorch and the driver (issue #27), with dated figures, in
[performance-cuda.md](performance-cuda.md).
Autotuning sweeps (issue #31: parallel compile against serial, `kb.tune` against
`triton.autotune`, the tuner's overhead; `benchmarks/bench_tune.py`) are in
[tuning.md](tuning.md#figures).
"""

REPRODUCE = """## Reproduce

CPU side, on any machine with Python ≥ 3.11 and a C++ compiler:

```sh
make bench      # creates .venv, installs the workspace and matplotlib, runs the cpu suite
```

GPU side, on a machine with an NVIDIA GPU (its Python may have no network): see
[benchmarks/README.md](../benchmarks/README.md#gpu-side-a-machine-with-an-nvidia-gpu-and-no-network).

Results land in `benchmarks/results/<suite>-<date>.{json,md,png}`. To publish one here:

```sh
.venv/bin/python -m benchmarks.report --cpu benchmarks/results/cpu-<date>.json
.venv/bin/python -m benchmarks.report --gpu path/to/gpu-<date>.json
```

Benchmarks are not tests: no test asserts a time. `tests/benchmarks/test_smoke.py` runs every
benchmark once on tiny sizes so they keep working.
"""


def _load(suite: str) -> dict | None:
    path = os.path.join(DOCS, f"performance-{suite}.json")
    if not os.path.isfile(path):
        return None
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def publish(path: str, suite: str, allow_quick: bool = False) -> None:
    with open(path, encoding="utf-8") as f:
        result = json.load(f)
    if result.get("suite") != suite:
        raise SystemExit(f"{path} is a {result.get('suite')!r} suite result, not {suite!r}")
    if result.get("quick") and not allow_quick:
        raise SystemExit(f"{path} is a --quick run (tiny sizes): not figures to publish; pass --allow-quick to insist")
    os.makedirs(DOCS, exist_ok=True)
    shutil.copyfile(path, os.path.join(DOCS, f"performance-{suite}.json"))
    png = os.path.splitext(path)[0] + ".png"
    if os.path.isfile(png):
        shutil.copyfile(png, os.path.join(DOCS, f"performance-{suite}.png"))


def section(suite: str, title: str, result: dict | None) -> str:
    if result is None:
        return (
            f"## {title}\n\nNot yet measured: no `docs/performance-{suite}.json` has been published "
            f"(run `python -m benchmarks.run --suite {suite}` and publish it as shown under Reproduce).\n"
        )
    parts = [
        f"## {title}",
        "",
        _report.markdown_machine(result),
        "",
        "### Goals",
        "",
        _report.markdown_goals(result.get("goals", [])),
    ]
    if result.get("notes"):
        parts += ["", "### Notes", ""] + [f"- {n}" for n in result["notes"] if not n.startswith("plot:")]
    if os.path.isfile(os.path.join(DOCS, f"performance-{suite}.png")):
        parts += ["", f"![kernelbay {suite} suite: cost relative to each peer](performance-{suite}.png)"]
    parts += ["", _report.markdown_tables(result.get("records", []), heading="###")]
    return "\n".join(parts) + "\n"


def render() -> str:
    cpu, gpu = _load("cpu"), _load("gpu")
    return "\n".join(
        [
            HEAD,
            section("cpu", "CPU suite (`make bench`)", cpu),
            section("gpu", "GPU suite (`python3 -m benchmarks.run --suite gpu`)", gpu),
            REPRODUCE,
        ]
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.report", description=__doc__.split("\n")[0])
    p.add_argument("--cpu", help="publish this cpu suite result JSON first")
    p.add_argument("--gpu", help="publish this gpu suite result JSON first")
    p.add_argument("--allow-quick", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--out", default=os.path.join(DOCS, "performance.md"))
    a = p.parse_args(argv)
    if a.cpu:
        publish(a.cpu, "cpu", a.allow_quick)
    if a.gpu:
        publish(a.gpu, "gpu", a.allow_quick)
    text = render()
    with open(a.out, "w", encoding="utf-8") as f:
        f.write(text)
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
