"""The cuda allocator's pool on the CPU: a user stream's blocks against the default stream's
(issue #27; cpu suite: the pool is C code over Python integers, no GPU needed).

* ``malloc(1 MiB)`` + ``free`` of a block whose home is the legacy default stream, against
  ``malloc_on(1 MiB, home)`` + ``free`` of a block whose home is a user stream, on one native
  ``Pool`` made here (no driver: the pool keeps integers), interleaved batch by batch. Goal:
  the user stream's pair <= 1.05x the default stream's, as the median over batches of each
  batch against the default stream's batch just before it (robust to the load drifting).
  Reference rows: two sizes in turn (1 MiB and 64 KiB, two pairs per call), and both forms on
  a pool with another user stream's blocks live and cached beside them.
* For scale, the pure-Python pool (``native.PyPool``) of the same pairs.
"""

from __future__ import annotations

import statistics

from ._timing import find, goal, interleaved_samples, record, skipped, stats

SUITE = "cpu"

GROUP = "cuda pool: 1 MiB cached block, malloc + free (no GPU)"
MiB = 1 << 20
HOME, OTHER = 0x5A5A0000, 0x7B7B0000  # two CUstream handles (any non-zero ints)


def _pairs(pool: object, prefix: str) -> dict:
    malloc, malloc_on, free = pool.malloc, pool.malloc_on, pool.free  # type: ignore[attr-defined]
    base = 0x10000000
    pool.adopt(base, MiB)  # type: ignore[attr-defined]
    pool.adopt(base + MiB, MiB, HOME)  # type: ignore[attr-defined]
    free(base)
    free(base + MiB)

    pool.adopt(base + 2 * MiB, 64 << 10)  # type: ignore[attr-defined]
    pool.adopt(base + 3 * MiB, 64 << 10, HOME)  # type: ignore[attr-defined]
    free(base + 2 * MiB)
    free(base + 3 * MiB)

    def default() -> None:
        free(malloc(MiB))

    def user() -> None:
        free(malloc_on(MiB, HOME))

    def default2() -> None:  # two sizes in turn: the pool's last bin never serves
        free(malloc(MiB))
        free(malloc(64 << 10))

    def user2() -> None:
        free(malloc_on(MiB, HOME))
        free(malloc_on(64 << 10, HOME))

    return {
        f"{prefix}default-stream": default,
        f"{prefix}user-stream": user,
        f"{prefix}default-stream-two-sizes": default2,
        f"{prefix}user-stream-two-sizes": user2,
    }


def _crowd(pool: object) -> None:
    """Another user stream's blocks, live and cached, and a few of the default stream's live."""
    for i in range(64):
        pool.adopt(0x40000000 + i * MiB, MiB, OTHER)  # type: ignore[attr-defined]
    for i in range(0, 64, 2):
        pool.free(0x40000000 + i * MiB)  # type: ignore[attr-defined]
    for i in range(16):
        pool.adopt(0x60000000 + i * 4 * MiB, 4 * MiB)  # type: ignore[attr-defined]


def run(quick: bool) -> list[dict]:
    from kernelbay_cuda import native

    number, repeat = (200, 3) if quick else (5000, 60)
    recs: list[dict] = []
    mod = native.module()
    if mod is None:
        recs.append(skipped(GROUP, "native", f"the native helpers are unavailable here: {native.status()}"))
        cases = {}
    else:
        cases = _pairs(mod.Pool(-1), "native-")
        crowded = mod.Pool(-1)
        _crowd(crowded)
        cases.update(_pairs(crowded, "native-crowded-"))
    cases.update(_pairs(native.PyPool(-1), "python-"))
    samples = interleaved_samples(cases, number=number, repeat=repeat)
    for name, xs in samples.items():
        extra = {}
        if "user-stream" in name:  # each batch over the default stream's batch just before it
            base = samples[name.replace("user-stream", "default-stream")]
            extra["paired_ratio"] = statistics.median(x / y for x, y in zip(xs, base))
        recs.append(record(GROUP, name, stats(xs), **extra))
    return recs


def goals(records: list[dict]) -> list[dict]:
    out = []
    a = find(records, GROUP, "native-user-stream")
    if a and a.get("paired_ratio"):
        text = "cuda pool: a user stream's malloc_on + free / the default stream's malloc + free (median of paired batches)"
        out.append(goal(text, a["paired_ratio"], 1.05))
    return out


if __name__ == "__main__":
    import sys

    recs = run("--quick" in sys.argv)
    for r in recs:
        if "skipped" in r:
            print(f"{r['name']:40s} skipped: {r['skipped']}")
        else:
            pr = f"  paired ratio {r['paired_ratio']:.3f}" if "paired_ratio" in r else ""
            print(f"{r['name']:40s} {r['median']:.4f} us  (p10 {r['p10']:.4f}, p90 {r['p90']:.4f}){pr}")
    for g in goals(recs):
        print(f"{g['goal']}: {g['value']:.3f} (<= {g['limit']}: {'met' if g['met'] else 'not met'})")
