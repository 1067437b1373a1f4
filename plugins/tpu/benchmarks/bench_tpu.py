"""Dispatch cost of a cached kernelbay-tpu launch vs the cached jitted pallas_call (interpret mode).

Follows the ``benchmarks/bench_<name>.py`` protocol (SUITE, run, goals); kept with the plugin
because benchmarks/ is not this package's. Run: ``python plugins/tpu/benchmarks/bench_tpu.py``.
"""

from __future__ import annotations

import os

SUITE = "cpu"


def run(quick: bool) -> list[dict]:
    os.environ.setdefault("KERNELBAY_TPU_INTERPRET", "1")
    import jax
    import numpy as np

    import kernelbay as kb
    from benchmarks._timing import interleaved, record

    dev = kb.device("tpu")

    def add(x_ref, y_ref, o_ref):  # noqa: ANN001
        o_ref[...] = x_ref[...] + y_ref[...]

    k = kb.compile(kb.Source(add, lang="pallas", meta={"outputs": ("o_ref",)}), device=dev)
    x, y = kb.asarray(np.ones(1024, np.float32), device=dev), kb.asarray(np.ones(1024, np.float32), device=dev)
    o = kb.empty(1024, "float32", device=dev)
    args = (x, y, o)
    k.launch(grid=1, args=args)
    fn = next(iter(k.handle.cache.values())).fn
    xh, yh = x.handle, y.handle
    st = interleaved(
        {"kernelbay": lambda: k.launch(grid=1, args=args), "jitted pallas_call": lambda: fn(xh, yh)},
        number=200 if quick else 2000,
        repeat=5 if quick else 30,
        after_batch=lambda: jax.block_until_ready(o.handle),
    )
    return [record("tpu launch (interpret)", name, s) for name, s in st.items()]


def goals(records: list[dict]) -> list[dict]:
    from benchmarks._timing import goal, ratio

    r = ratio(records, "tpu launch (interpret)", "kernelbay", "jitted pallas_call")
    return [] if r is None else [goal("tpu cached launch / direct jitted pallas_call", r, 1.2)]


if __name__ == "__main__":
    import sys

    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", ".."))
    recs = run(quick=False)
    for rec in recs:
        print(f"{rec['name']:>20}: {rec['median']:.2f} us (p10 {rec['p10']:.2f}, p90 {rec['p90']:.2f})")
    print(goals(recs))
