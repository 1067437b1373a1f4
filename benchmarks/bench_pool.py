"""The cuda allocator's pool on the CPU: a user stream's blocks against the default stream's
(issue #27; cpu suite: the pool is C code over Python integers, no GPU needed).

* ``malloc(1 MiB)`` + ``free`` of a block whose home is the legacy default stream, against
  ``malloc_on(1 MiB, home)`` + ``free`` of a block whose home is a user stream, on one native
  ``Pool`` made here (no driver: the pool keeps integers), interleaved batch by batch. Goal:
  the user stream's pair <= 1.05x the default stream's (the stream's per-block bookkeeping all
  but free). The same pair with another user stream's blocks live and cached beside it (the
  pool's bookkeeping then non-empty) is a reference row.
* For scale, the pure-Python pool (``native.PyPool``) of the same two pairs.
"""

from __future__ import annotations

from ._timing import find, goal, interleaved, record, skipped

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

    def default() -> None:
        free(malloc(MiB))

    def user() -> None:
        free(malloc_on(MiB, HOME))

    return {f"{prefix}default-stream": default, f"{prefix}user-stream": user}


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

    number, repeat = (200, 3) if quick else (20000, 30)
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
    for name, st in interleaved(cases, number=number, repeat=repeat).items():
        recs.append(record(GROUP, name, st))
    return recs


def goals(records: list[dict]) -> list[dict]:
    out = []
    a, b = find(records, GROUP, "native-user-stream"), find(records, GROUP, "native-default-stream")
    if a and b and a.get("median") and b.get("median"):
        out.append(
            goal(
                "cuda pool: a user stream's malloc_on + free / the default stream's malloc + free",
                a["median"] / b["median"],
                1.05,
            )
        )
    return out


if __name__ == "__main__":
    import sys

    recs = run("--quick" in sys.argv)
    for r in recs:
        if "skipped" in r:
            print(f"{r['name']:32s} skipped: {r['skipped']}")
        else:
            print(f"{r['name']:32s} {r['median']:.4f} us  (p10 {r['p10']:.4f}, p90 {r['p90']:.4f})")
    for g in goals(recs):
        print(f"{g['goal']}: {g['value']:.3f} (<= {g['limit']}: {'met' if g['met'] else 'not met'})")
