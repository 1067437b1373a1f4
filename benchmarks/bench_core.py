"""The core's own costs: import, and what a launch through kernelbay adds over the backend.

* Import cost: ``import kernelbay`` (and ``import kernelbay`` + picking the host device) against
  ``import pluggy`` and ``import numpy``, each in a fresh interpreter, the four interleaved; the
  child times itself, so the interpreter's own start-up is left out.
* Dispatch overhead: ``k.launch(...)`` against ``k._binding.launch(k, grid, block, args, 0, None)``
  -- the backend function the core resolved at load time -- on the cpu backend (the pure-Python
  pyref example when cpu is missing), batches interleaved; the overhead is the median of the
  paired per-batch differences.
* The core's C fronts (``kernelbay._fronts``): ``kb.buffer`` + ``close()``, ``kb.empty`` +
  ``close()`` and each launch spelling, with the fronts in place against the Python functions
  they stand for, batches interleaved (the fronts switched between batches); on an in-process
  backend whose direct callables are C functions that do nothing (``itertools.chain``), so
  what is timed is the core's own cost, as on the cuda backend, whose hooks are C.
* Cache store: one ``DiskCache.put`` into a cache of 50,000 entries (5,000 with ``--quick``),
  against the same put followed by the full directory scan every put used to make (what the
  cache did before it kept a running total), interleaved.
"""

from __future__ import annotations

import os
import sys

from . import _kernels
from ._timing import find, goal, interleaved_samples, paired_diff, record, skipped, stats, subprocess_samples

SUITE = "cpu"

IMPORT = "import (fresh process)"
DISPATCH = "dispatch: one launch, 4-arg kernel, 1 block"
OVERHEAD = "dispatch: what the core adds per launch (paired difference)"
CACHE_PUT = "cache: one store into a full cache"
FRONTS = "core fronts, no-op C hooks: "
FRONT_CASES = (
    "kb.buffer(n, dev) + close()",
    "kb.empty(n, 'uint8', dev) + close()",
    "k.launch(1, 32, args)",
    "k.launch((1,), (32,), args)",
    "k((1,), (32,), args)",
    "k.launch(grid=(1,), block=(32,), args=args)",
    "k.launch(config=cfg, args=args)",
)


def _timed(stmt: str) -> list[str]:
    code = f"import time; _t = time.perf_counter(); {stmt}; print(time.perf_counter() - _t)"
    return [sys.executable, "-c", code]


def import_cost(quick: bool, backend: str | None) -> list[dict]:
    env = _kernels.child_env()
    cases = {
        "kernelbay": (_timed("import kernelbay"), env),
        "pluggy": (_timed("import pluggy"), env),
        "numpy": (_timed("import numpy"), env),
    }
    if backend is not None:
        pick = f"import kernelbay as kb; kb.device({backend!r})"
        cases[f"kernelbay + kb.device({backend!r})"] = (_timed(pick), env)
    samples = subprocess_samples(cases, repeat=2 if quick else 20, warmup=1)
    out = []
    for name in ("kernelbay", f"kernelbay + kb.device({backend!r})", "pluggy", "numpy"):
        if name in samples:
            out.append(record(IMPORT, name, _ms(stats(samples[name])), unit="ms"))
    if backend is None:
        out.append(skipped(IMPORT, "kernelbay + kb.device(...)", "no host backend (cpu or pyref) available"))
    return out


def _ms(st: dict) -> dict:
    return {k: (v / 1000 if k != "n" else v) for k, v in st.items()}


def dispatch(quick: bool, backend: str) -> list[dict]:
    import kernelbay as kb
    import numpy as np

    dev = kb.device(backend)
    k = _kernels.saxpy_kernel(backend, dev)
    # pyref runs one Python call per thread: one thread keeps the kernel itself cheap there.
    n, block = (256, 256) if backend == "cpu" else (1, 1)
    x = kb.asarray(np.ones(n, np.float32), device=dev)
    y = kb.asarray(np.zeros(n, np.float32), device=dev)
    args = (x, y, np.float32(0.5), np.int32(n))
    fn = k._binding.launch  # the function k.launch calls: the backend's own hook (fast path)
    launch = k.launch

    def through_core() -> None:
        launch(1, block, args)

    def direct() -> None:
        fn(k, 1, block, args, 0, None)

    sync = dev.synchronize
    s = interleaved_samples(
        {"kernelbay": through_core, "backend function": direct},
        number=200 if quick else 5000,
        repeat=3 if quick else 40,
        warmup=1 if quick else 3,
        after_batch=sync,
    )
    extra = {"backend": backend, "note": f"{backend} backend" + ("" if k._binding.wrapped is False else ", wrapped")}
    return [
        record(DISPATCH, "kernelbay", stats(s["kernelbay"]), **extra),
        record(DISPATCH, "backend function", stats(s["backend function"]), **extra),
        record(OVERHEAD, "kernelbay − backend function", paired_diff(s["kernelbay"], s["backend function"]), **extra),
    ]


def cache_store(quick: bool) -> list[dict]:
    import os
    import secrets
    import tempfile

    from kernelbay.cache import DiskCache

    n = 5_000 if quick else 50_000
    with tempfile.TemporaryDirectory(prefix="kb-bench-cache-") as d:
        root = os.path.join(d, "cache")
        c = DiskCache(root, max_bytes=1 << 40)
        c.put(secrets.token_hex(32), b"x" * 100)  # makes the directory (0700) and the running total
        with open(c.path_for(next(iter(_keys(c)))), "rb") as f:
            blob = f.read()
        for _ in range(n):  # filler entries written directly: only their number and size matter here
            k = secrets.token_hex(32)
            sub = os.path.join(root, k[:2])
            if not os.path.isdir(sub):
                os.mkdir(sub, 0o700)
            with open(os.path.join(sub, k + ".kbc"), "wb") as f:
                f.write(blob)
        c._evict()  # the running total now counts the filler

        def running_total() -> None:
            c.put(secrets.token_hex(32), b"x" * 100)

        def full_scan() -> None:
            c.put(secrets.token_hex(32), b"x" * 100)
            c._evict()

        s = interleaved_samples(
            {"running total": running_total, "full scan per store (before)": full_scan},
            number=5 if quick else 10,
            repeat=3 if quick else 10,
            warmup=1,
        )
    extra = {"entries": n}
    return [
        record(CACHE_PUT, "running total", _ms(stats(s["running total"])), unit="ms", **extra),
        record(
            CACHE_PUT, "full scan per store (before)", _ms(stats(s["full scan per store (before)"])), unit="ms", **extra
        ),
    ]


def _noop_backend() -> object:
    """A backend whose allocate, free and launch are C functions that do nothing: its direct
    callables are ``itertools.chain`` (any arguments, a new object back, nothing iterated)."""
    import itertools

    import kernelbay as kb

    class Noop:
        @kb.hookimpl
        def kernelbay_backend(self):
            return kb.BackendSpec("noopbench", 0, ("python",), 1, "no-op backend of bench_core")

        @kb.hookimpl
        def kernelbay_devices(self):
            return [kb.Device("noopbench", 0, "no-op device")]

        @kb.hookimpl
        def kernelbay_allocate(self, device, nbytes):
            return (device, nbytes)

        @kb.hookimpl
        def kernelbay_free(self, device, handle):
            return None

        @kb.hookimpl
        def kernelbay_copy(self, dst, src, nbytes, stream):
            return None

        @kb.hookimpl
        def kernelbay_synchronize(self, device, stream):
            return None

        @kb.hookimpl
        def kernelbay_compile(self, device, source):
            return source.name

        @kb.hookimpl
        def kernelbay_launch(self, kernel, grid, block, args, shared_mem, stream):
            return None

    for hook in (Noop.kernelbay_allocate, Noop.kernelbay_free, Noop.kernelbay_launch):
        hook.kernelbay_direct = lambda: itertools.chain  # type: ignore[attr-defined]
    return Noop()


def _switched_samples(cases: dict, number: int, repeat: int, warmup: int) -> dict[str, dict[str, list[float]]]:
    """Per case, per-batch microseconds with the fronts in place ("front") and with the Python
    functions back ("python"), the two batches of each case back to back."""
    from kernelbay import _fronts

    from ._timing import per_call_us

    out: dict[str, dict[str, list[float]]] = {c: {"front": [], "python": []} for c in cases}
    try:
        for i in range(warmup + repeat):
            for case, fn in cases.items():
                for path in ("front", "python"):
                    _fronts.use(path == "front")
                    t = per_call_us(fn, number)
                    if i >= warmup:
                        out[case][path].append(t)
    finally:
        _fronts.use(True)
    return out


def fronts(quick: bool) -> list[dict]:
    import kernelbay as kb
    from kernelbay import _fronts
    from kernelbay._plugins import runtime

    if "noopbench" not in runtime.records():
        runtime.add_backend(_noop_backend(), "noopbench", "kernelbay-noopbench")
    dev = kb.device("noopbench")
    if not _fronts.active():
        return [skipped(FRONTS + c, "kernelbay", f"the fronts are not in use: {_fronts.status()}") for c in FRONT_CASES]
    k = kb.compile(kb.Source(lambda: None, lang="python", name="noop"), dev)
    n, args, cfg = 1 << 20, (1, 2.0, 3), kb.LaunchConfig((1,), (32,))
    fns = (
        lambda: kb.buffer(n, dev).close(),
        lambda: kb.empty(n, "uint8", dev).close(),
        lambda: k.launch(1, 32, args),
        lambda: k.launch((1,), (32,), args),
        lambda: k((1,), (32,), args),
        lambda: k.launch(grid=(1,), block=(32,), args=args),
        lambda: k.launch(config=cfg, args=args),
    )
    s = _switched_samples(
        dict(zip(FRONT_CASES, fns)),
        number=200 if quick else 2000,  # short batches: on a shared machine more of them run unpreempted
        repeat=3 if quick else 60,
        warmup=1 if quick else 2,
    )
    fn = k._binding.launch  # the backend's direct callable, as the front calls it
    d = interleaved_samples(
        {"kernelbay": lambda: k.launch(1, 32, args), "backend function": lambda: fn(k, 1, 32, args, 0, None)},
        number=200 if quick else 2000,
        repeat=3 if quick else 60,
        warmup=1 if quick else 2,
    )
    group = FRONTS + "what the core adds to k.launch(1, 32, args)"
    out = [
        record(group, "kernelbay", stats(d["kernelbay"]), note="the C front"),
        record(group, "backend function", stats(d["backend function"]), note="its direct callable, called from Python"),
        record(group, "kernelbay − backend function", paired_diff(d["kernelbay"], d["backend function"])),
    ]
    for case, by in s.items():
        out.append(record(FRONTS + case, "kernelbay", stats(by["front"]), note="the C fronts"))
        out.append(record(FRONTS + case, "python path", stats(by["python"]), note="the Python functions"))
        out.append(record(FRONTS + case, "kernelbay − python path", paired_diff(by["front"], by["python"])))
    return out


def _keys(c) -> list[str]:
    return [os.path.basename(p)[:-4] for p, _, _ in c.entries()]


def run(quick: bool) -> list[dict]:
    backend, why = _kernels.backend_for_host()
    out = import_cost(quick, backend) + cache_store(quick)
    if backend is None:
        out.append(skipped(DISPATCH, "kernelbay", why))
    else:
        out += dispatch(quick, backend)
    return out + fronts(quick)


def goals(records: list[dict]) -> list[dict]:
    out = []
    r = find(records, OVERHEAD, "kernelbay − backend function")
    if r and r.get("median") is not None:
        g = goal(
            f"core adds ≤ 0.3 µs per launch over the backend's function ({r.get('backend')} backend)", r["median"], 0.3
        )
        out.append(g | {"unit": "µs"})
    r = find(records, FRONTS + "what the core adds to k.launch(1, 32, args)", "kernelbay − backend function")
    if r and r.get("median") is not None:
        g = goal("core adds ≤ 0.1 µs per launch over a backend's direct callable (the C front)", r["median"], 0.1)
        out.append(g | {"unit": "µs"})
    return out
