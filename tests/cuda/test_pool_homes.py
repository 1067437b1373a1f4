"""The pool's per-stream bookkeeping (issue #27): blocks whose home is a user stream, streams
closed (rehome) while their blocks are live, exact statistics with mixed homes, and the native
pool against the pure-Python one over random sequences of every operation.

No GPU needed: the pool only keeps integers.
"""

from __future__ import annotations

import random

import pytest
from kernelbay_cuda import native

MiB = 1 << 20
S1, S2, B = 0x51, 0x52, 0x5B  # two non-blocking user streams and a blocking one


def test_a_block_freed_after_its_stream_closed_goes_to_the_default_stream(make) -> None:
    p = make(-1)
    p.adopt(0x1000, MiB, S1)
    assert p.malloc_on(MiB, S1) == 0  # the pool's last bin is S1's, empty
    p.adopt(0x2000, MiB, S1)
    assert p.free(0x2000) == 0
    assert p.homed == 1 and p.has_home(S1)
    assert p.rehome(S1)  # 0x1000 live, 0x2000 cached: both the default stream's now
    assert p.homed == 0 and not p.has_home(S1) and not p.may_track(0)
    assert p.malloc_on(MiB, S1) == 0  # S1's handle reused by a new stream: nothing of the old one
    assert p.free(0x1000) == 0
    assert p.stats() == (0, 2 * MiB, 2 * MiB)
    assert sorted([p.malloc(MiB), p.malloc(MiB)]) == [0x1000, 0x2000]
    assert p.malloc(MiB) == 0
    p.note_use(0x1000, 0)  # its home is the default stream now: nothing to note
    assert p.take_uses(0x1000) == []


def test_a_reused_handle_starts_with_no_blocks(make) -> None:
    p = make(-1)
    p.adopt(0x1000, MiB, S1)
    p.free(0x1000)
    assert p.malloc_on(MiB, S1) == 0x1000  # the pool keeps S1's bin as its last
    p.free(0x1000)
    assert p.rehome(S1)
    p.adopt(0x2000, MiB, S1)  # a new stream with S1's handle
    p.free(0x2000)
    assert p.malloc_on(MiB, S1) == 0x2000
    assert p.malloc_on(MiB, S1) == 0  # 0x1000 is the default stream's, S1 is not blocking
    assert p.malloc(MiB) == 0x1000


def test_statistics_with_mixed_homes(make) -> None:
    p = make(-1)
    p.set_blocking(B, True)
    p.adopt(0x1000, MiB)
    p.adopt(0x2000, 2 * MiB, S1)
    p.adopt(0x3000, MiB, S2)
    assert p.stats() == (4 * MiB, 4 * MiB, 0) and p.homed == 2
    assert p.free(0x1000) == 0 and p.free(0x3000) == 0
    assert p.stats() == (2 * MiB, 4 * MiB, 2 * MiB) and p.homed == 1
    assert p.malloc_on(MiB, S1) == 0  # S1 has no 1 MiB block and is not ordered with the default stream
    assert p.malloc_on(MiB, B) == 0x1000  # B is: the default stream's block, B's home now
    assert p.homed == 2 and p.size_of(0x1000) == MiB and p.has_home(B)
    assert p.stats() == (3 * MiB, 4 * MiB, MiB)
    assert p.free(0x1000) == 0  # back to B's bin, not the default stream's
    assert p.malloc(MiB) == 0 and p.malloc_on(MiB, S2) == 0x3000
    assert p.malloc_on(MiB, B) == 0x1000
    assert p.stats() == (4 * MiB, 4 * MiB, 0) and p.homed == 3
    assert sorted(p.take_cached()) == []
    for q in (0x1000, 0x2000, 0x3000):
        assert p.free(q) == 0
    assert p.stats() == (0, 4 * MiB, 4 * MiB) and p.homed == 0
    assert sorted(p.take_cached()) == [0x1000, 0x2000, 0x3000]
    assert p.stats() == (0, 4 * MiB, 0)
    assert not p.has_home(S1) and not p.has_home(S2) and not p.has_home(B)


def test_a_homed_block_over_the_limit_goes_back_and_leaves_no_home(make) -> None:
    p = make(MiB + MiB // 2)
    p.adopt(0x1000, MiB, S1)
    p.adopt(0x2000, MiB, S1)
    assert p.homed == 2
    assert p.free(0x1000) == MiB  # keeping it would pass the limit: the caller frees it
    assert p.homed == 1 and not p.has_home(S2)
    assert p.free(0x2000) == 0
    assert p.homed == 0 and p.stats() == (0, 2 * MiB, MiB)
    assert p.malloc_on(MiB, S1) == 0x2000 and p.malloc_on(MiB, S1) == 0


def test_a_use_noted_before_the_stream_closed_is_forgotten(make) -> None:
    p = make(-1)
    p.adopt(0x1000, MiB, S1)
    p.note_use(0x1000, S1)  # its home: nothing noted
    p.note_use(0x1000, S2)
    assert p.free(0x1000) == -2
    assert p.rehome(S1)
    assert p.free(0x1000) == -2  # S2's use still holds it
    assert p.rehome(S2)
    assert p.free(0x1000) == 0
    assert p.malloc(MiB) == 0x1000


OPS = ("malloc", "malloc_on", "adopt", "free", "note_use", "take_uses", "rehome", "has_home", "blocking", "take_cached")


def _run(pool, seed: int) -> list:
    """A random sequence of every operation; what each returned and the pool's state after it."""
    rnd = random.Random(seed)
    homes = (0, S1, S2, B)
    sizes = (64, 4096, MiB, 2 * MiB)
    live: list[int] = []
    nxt = 0x10000
    trace: list = []
    for _ in range(400):
        op = rnd.choice(OPS)
        h = rnd.choice(homes)
        if op == "malloc":
            r = pool.malloc(rnd.choice(sizes))
            live += [r] if r else []
        elif op == "malloc_on":
            r = pool.malloc_on(rnd.choice(sizes), h or S1)
            live += [r] if r else []
        elif op == "adopt":
            nxt += 0x10000
            r = pool.adopt(nxt, native.size_class(rnd.choice(sizes)), *([h] if h else []))
            live.append(nxt)
        elif op == "free" and live:
            q = live.pop(rnd.randrange(len(live)))
            r = pool.free(q)
            if r == -2:
                live.append(q)
        elif op == "note_use" and live:
            r = pool.note_use(rnd.choice(live), h)
        elif op == "take_uses" and live:
            r = sorted(pool.take_uses(rnd.choice(live)))
        elif op == "rehome" and h:
            r = pool.rehome(h)
        elif op == "has_home" and h:
            r = pool.has_home(h)
        elif op == "blocking" and h:
            r = pool.set_blocking(h, rnd.random() < 0.5)
        elif op == "take_cached":
            r = sorted(pool.take_cached())
        else:
            r = None
        trace.append((op, r, pool.stats(), pool.homed, pool.may_track(0), [pool.size_of(q) for q in live]))
    return trace


@pytest.mark.parametrize("seed", range(12))
def test_the_native_pool_does_what_the_python_pool_does(seed) -> None:
    mod = native.module()
    if mod is None:
        pytest.skip(f"the native helpers are unavailable here: {native.status()}")
    for limit in (-1, 3 * MiB):
        a, b = _run(mod.Pool(limit), seed), _run(native.PyPool(limit), seed)
        assert len(a) == len(b)
        for i, (x, y) in enumerate(zip(a, b)):
            assert x == y, f"step {i}: native {x} != python {y}"
