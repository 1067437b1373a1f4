"""CUDA backend benchmarks: copies. Pinned, pageable and device copies against the raw driver
(256 MiB), pageable copies against pinned ones at 4-256 MiB in every form the docs show, the same
on a busy host, and what the host itself allows a staged copy (numpy's threads, the kernel making
fresh pages). Issue #27's copy goals.

Peers run interleaved in one process (see _timing). A peer that is not installed is recorded
with ``skipped`` and a reason instead of a figure.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

from . import _timing as T
from .bench_cuda import cuda_device

SUITE = "gpu"


def _copies(quick: bool, dev, out: list[dict]) -> None:
    import kernelbay as kb
    import kernelbay_cuda as kc
    import numpy as np
    from cuda.bindings import driver as d

    n = (16 << 20) if quick else (256 << 20)
    rng = np.random.default_rng(0)
    pageable = rng.integers(0, 255, n, dtype=np.uint8)
    back = np.empty_like(pageable)
    back[:] = 1
    pinned = kc.pinned_empty(n, np.uint8)
    pinned[:] = pageable
    a = kb.asarray(pageable, device=dev)
    b = kb.empty(n, np.uint8, dev)
    dev.synchronize()
    pp, bp = pinned.ctypes.data, back.ctypes.data
    groups = {
        "h2d-pinned": {
            "kernelbay": lambda: (kb.copy(b, pinned), dev.synchronize()),
            "driver": lambda: d.cuMemcpyHtoD(b.handle, pp, n),
        },
        "d2h-pinned": {
            "kernelbay": lambda: kb.copy(pinned, a),
            "driver": lambda: d.cuMemcpyDtoH(pp, a.handle, n),
        },
        "d2d": {
            "kernelbay": lambda: (kb.copy(b, a), dev.synchronize()),
            "driver": lambda: (d.cuMemcpyDtoD(b.handle, a.handle, n), d.cuCtxSynchronize()),
        },
        "h2d-pageable": {
            "kernelbay": lambda: (kb.copy(b, pageable), dev.synchronize()),
            "driver": lambda: d.cuMemcpyHtoD(b.handle, pageable.ctypes.data, n),
        },
        "d2h-pageable": {
            "kernelbay": lambda: kb.copy(back, a),
            "driver": lambda: d.cuMemcpyDtoH(bp, a.handle, n),
        },
    }
    for group, cases in groups.items():
        res = T.interleaved(cases, number=1, repeat=5 if quick else 15)
        for name, st in res.items():
            gbs = {k: (n / (v * 1e3) if k != "n" else v) for k, v in st.items()}
            # p10/p90 of a rate swap sides: keep p10 the low figure
            gbs["p10"], gbs["p90"] = min(gbs["p10"], gbs["p90"]), max(gbs["p10"], gbs["p90"])
            out.append(T.record(f"copy-{group}", name, gbs, unit="GB/s", bytes=n))
    if not (back == pageable).all():
        raise AssertionError("d2h copy produced wrong data")


def _copies_sizes(quick: bool, dev, out: list[dict]) -> None:
    """Pageable copies against pinned ones at 4 MiB to 256 MiB (issue #27's goal: >= 0.6x pinned
    from 4 MiB): H2D from a numpy array, D2H into one that exists, into a fresh ``np.empty``
    (each call a new array, its pages first touched by the copy), and into the new array
    ``a.numpy()`` / ``np.asarray(a)`` / ``np.array(a)`` return (CuPy's ``asnumpy``/``get`` beside them); the
    pinned side through ``kb.copy`` too. Each size's cases interleaved."""
    for mb in (4, 16) if quick else (4, 16, 64, 256):
        _copy_size(dev, mb, 5 if quick else (15 if mb >= 64 else 30), out)
    _host_bounds(64 if quick else 256, 3 if quick else 9, out)


def _copies_busy(quick: bool, dev, out: list[dict]) -> None:
    """The copy rows of ``_copies_sizes`` at 16 MiB (and 64) while one busy-looping process per
    CPU runs beside them (a busy host: CI runners, data loaders): a staged pageable copy needs
    host threads, a copy into page-locked memory (``a.numpy()``, a pinned array) only the DMA.
    Groups ``copy-h2d-16MiB-busy-host`` etc."""
    procs = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"], stdin=subprocess.DEVNULL)
        for _ in range(os.cpu_count() or 2)
    ]
    try:
        time.sleep(0.5)  # let them start spinning
        for mb in (16,) if quick else (16, 64):
            rows: list[dict] = []
            _copy_size(dev, mb, 5 if quick else 15, rows)
            for r in rows:
                r["group"] = f"{r['group']}-busy-host"
            out.extend(rows)
    finally:
        for p in procs:
            p.kill()
        for p in procs:
            p.wait()


def _host_bounds(mb: int, repeat: int, out: list[dict]) -> None:
    """What the host allows a staged copy, without a GPU: numpy copies between two pageable
    arrays on as many threads as the stager uses (each a span; numpy releases the GIL), into an
    existing array and into a fresh ``np.empty`` (its pages first touched by the copy). A staged
    pageable copy moves every byte through such a host copy, so it cannot beat these rows; the
    fresh-array row bounds D2H into a fresh array (the kernel zeroes each new page first). And
    the kernel's share alone: the same threads fault in a fresh array's pages without writing
    data (``madvise(MADV_POPULATE_WRITE)``, Linux 5.14), the floor of any copy into pages no one
    touched yet."""
    import ctypes
    from concurrent.futures import ThreadPoolExecutor

    import numpy as np
    from kernelbay_cuda import copies

    n = mb << 20
    threads = copies.WORKERS
    src = np.random.default_rng(0).integers(0, 255, n, dtype=np.uint8)
    dst = np.ones(n, np.uint8)
    spans = [(i * n // threads, (i + 1) * n // threads) for i in range(threads)]
    with ThreadPoolExecutor(threads) as pool:

        def spread(to: np.ndarray) -> np.ndarray:
            list(pool.map(lambda se: np.copyto(to[se[0] : se[1]], src[se[0] : se[1]]), spans))
            return to

        cases = {
            f"numpy-copy-{threads}-threads": lambda: spread(dst),
            f"numpy-copy-{threads}-threads-fresh-array": lambda: spread(np.empty(n, np.uint8)),
            "numpy-copy-1-thread": lambda: np.copyto(dst, src),
        }
        libc = ctypes.CDLL(None, use_errno=True)
        madvise = getattr(libc, "madvise", None)
        populate_write = 23  # MADV_POPULATE_WRITE

        def populate(to: np.ndarray) -> np.ndarray:
            base = to.ctypes.data

            def span(se: tuple[int, int]) -> None:
                lo, hi = (base + se[0] + 4095) & ~4095, (base + se[1]) & ~4095
                if hi > lo and madvise(ctypes.c_void_p(lo), ctypes.c_size_t(hi - lo), populate_write):
                    raise OSError(ctypes.get_errno(), "madvise(MADV_POPULATE_WRITE)")

            list(pool.map(span, spans))
            return to

        try:
            populate(np.empty(n, np.uint8))
        except (OSError, TypeError) as exc:  # before Linux 5.14: EINVAL
            out.append(
                T.skipped(f"copy-host-bound-{mb}MiB", f"page-population-{threads}-threads-fresh-array", repr(exc))
            )
        else:
            cases[f"page-population-{threads}-threads-fresh-array"] = lambda: populate(np.empty(n, np.uint8))
        res = T.interleaved(cases, number=1, repeat=repeat)
    for name, st in res.items():
        gbs = {k: (n / (v * 1e3) if k != "n" else v) for k, v in st.items()}
        gbs["p10"], gbs["p90"] = min(gbs["p10"], gbs["p90"]), max(gbs["p10"], gbs["p90"])
        out.append(T.record(f"copy-host-bound-{mb}MiB", name, gbs, unit="GB/s", bytes=n))


def _copy_size(dev, mb: int, repeat: int, out: list[dict]) -> None:
    import kernelbay as kb
    import kernelbay_cuda as kc
    import numpy as np

    n = mb << 20
    pageable = np.random.default_rng(mb).integers(0, 255, n, dtype=np.uint8)
    back = np.ones(n, np.uint8)
    pinned = kc.pinned_empty(n, np.uint8)
    pinned[:] = pageable
    a = kb.asarray(pageable, device=dev)
    b = kb.empty(n, np.uint8, dev)
    dev.synchronize()
    h2d = {
        "kernelbay-pageable": lambda: (kb.copy(b, pageable), dev.synchronize()),
        "kernelbay-pinned": lambda: (kb.copy(b, pinned), dev.synchronize()),
    }
    d2h = {
        "kernelbay-pageable": lambda: kb.copy(back, a),
        "kernelbay-fresh-array": lambda: kb.copy(np.empty(n, np.uint8), a),
        "kernelbay-numpy": a.numpy,  # a new array each call, made by kernelbay (hostpool.py)
        "kernelbay-asarray": lambda: np.asarray(a),
        "kernelbay-array": lambda: np.array(a),  # __array__(copy=True): numpy copies no further
        "kernelbay-pinned": lambda: kb.copy(pinned, a),
    }
    try:
        import cupy as cp

        with cp.cuda.Device(dev.index):
            ca = cp.asarray(pageable)
        d2h["cupy-asnumpy"] = lambda: cp.asnumpy(ca)
        d2h["cupy-get"] = ca.get
    except Exception as exc:
        out.append(T.skipped(f"copy-d2h-{mb}MiB", "cupy", repr(exc)))
    for group, cases in ((f"copy-h2d-{mb}MiB", h2d), (f"copy-d2h-{mb}MiB", d2h)):
        res = T.interleaved(cases, number=1, repeat=repeat)
        for name, st in res.items():
            gbs = {k: (n / (v * 1e3) if k != "n" else v) for k, v in st.items()}
            gbs["p10"], gbs["p90"] = min(gbs["p10"], gbs["p90"]), max(gbs["p10"], gbs["p90"])
            out.append(T.record(group, name, gbs, unit="GB/s", bytes=n))
    if not (back == pageable).all():
        raise AssertionError("d2h copy produced wrong data")
    a.close()
    b.close()


def run(quick: bool) -> list[dict]:
    dev, skipped = cuda_device()
    if dev is None:
        return skipped
    return T.run_parts((_copies, _copies_sizes, _copies_busy), quick, dev, out=[])


def goals(records: list[dict]) -> list[dict]:
    out: list[dict] = []
    ratios = [  # (group, kernelbay's row, peer's row, goal text, limit, higher is better)
        *[
            (f"copy-{g}", "kernelbay", "driver", f"{g} bandwidth vs raw driver copy", 0.95, True)
            for g in ("h2d-pinned", "d2h-pinned", "d2d")
        ],
        (
            "copy-h2d-pageable",
            "kernelbay",
            "driver",
            "pageable H2D bandwidth vs raw cuMemcpyHtoD from the same array",
            2.0,
            True,
        ),
        *[
            (f"copy-{way}-{mb}MiB", name, "kernelbay-pinned", f"{way.upper()} {what}, {mb} MiB, vs pinned", 0.6, True)
            for mb in (4, 16, 64, 256)
            for way, name, what in (
                ("h2d", "kernelbay-pageable", "from a pageable array"),
                ("d2h", "kernelbay-pageable", "into a pageable array"),
                ("d2h", "kernelbay-fresh-array", "into a fresh np.empty"),
                ("d2h", "kernelbay-numpy", "into a new array, a.numpy()"),
                ("d2h", "kernelbay-asarray", "into a new array, np.asarray(a)"),
                ("d2h", "kernelbay-array", "into a new array, np.array(a)"),
            )
        ],
    ]
    for group, mine, peer, text, limit, higher in ratios:
        r = T.ratio(records, group, mine, peer)
        if r is not None:
            out.append(T.goal(text, r, limit, higher_is_better=higher))
    # D2H into a never-touched np.empty against what the host allows into such pages: numpy on the
    # stager's threads copying into a fresh array (the host-bound rows, at the largest size run)
    for r in records:
        if r["group"].startswith("copy-host-bound-") and r["name"].endswith("-threads-fresh-array"):
            if not r["name"].startswith("numpy-copy-") or not r.get("median"):
                continue
            mb = r["group"].removeprefix("copy-host-bound-")
            mine = T.median_of(records, f"copy-d2h-{mb}", "kernelbay-fresh-array")
            if mine is not None:
                text = f"D2H into a fresh np.empty, {mb}, vs numpy's threads copying into a fresh array (host bound)"
                out.append(T.goal(text, mine / r["median"], 1.0, higher_is_better=True))
    return out
