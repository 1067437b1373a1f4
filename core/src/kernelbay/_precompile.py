"""``kernelbay precompile FILE_OR_DIR... [--device SEL]...``: fill the disk compile cache.

For CI images and containers: compile every kernel source found into the cache in parallel
(worker processes, each calling the backend's ``kernelbay_compile_to_cache``), with a progress
bar (tqdm), then a summary of hits, misses and failures, each failure with its
compiler log. Exit status 1 when any failed.

Sources are found by suffix (``.cu``, ``.cpp``/``.cc``/``.cxx``, ``.ptx``, ``.cubin``,
``.fatbin``; headers are not compiled on their own). Options come from ``--option`` flags
and from a manifest, ``kernelbay.toml`` in a directory given (or ``--manifest FILE``)::

    [defaults]
    options = ["-O3"]          # every source (or one string split as a shell would: "-O3 -DN=4")

    [sources."saxpy.cu"]       # a path relative to the manifest's directory
    name = "saxpy"             # the entry point, as Source(name=...)
    options = ["-DN=4"]        # added after the defaults
    headers = ["common.cuh"]   # files passed as Source(headers=...), by their base names
    skip = false               # true leaves the file out

Any other table or key is an error naming it (a misspelt key would otherwise be ignored).

A kernel compiled here hits the cache at run time only when the program builds the same
Source: same text, language, name, options and headers.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import attrs

from . import _api, _workers, cache, settings
from .cpus import usable_cpus
from .errors import InvalidArgumentError, KernelbayError
from .source import SUFFIX_LANG, Source

MANIFEST = "kernelbay.toml"
#: Seconds a compile may run in a worker before it is stopped (a hang, not a slow compile).
COMPILE_TIMEOUT = 600.0
_HEADERS = {".cuh", ".h", ".hpp", ".hh", ".inl"}


@attrs.define
class Job:
    path: str
    lang: str
    name: str | None = None
    options: tuple[str, ...] = ()
    headers: tuple[str, ...] = ()
    device: Any = None
    outcome: str = ""  # memory, disk, compiled, failed, skipped
    detail: str = ""


def add_parser(sub: Any) -> None:
    p = sub.add_parser("precompile", help="compile kernel sources into the disk cache, in parallel")
    p.add_argument("paths", nargs="+", metavar="FILE_OR_DIR", help="kernel sources, or directories searched for them")
    p.add_argument(
        "--device",
        action="append",
        default=None,
        help="device selector to compile for (repeatable; default: $KERNELBAY_DEVICE or the best)",
    )
    p.add_argument(
        "--option",
        action="append",
        default=[],
        metavar="OPT",
        help="compiler option for every source (repeatable; write --option=-DN=4 for options that start with -)",
    )
    p.add_argument("--manifest", default=None, help=f"options per source (default: {MANIFEST} in each directory given)")
    p.add_argument("--jobs", "-j", type=int, default=None, help="worker processes (default: CPU count)")
    p.add_argument(
        "--timeout",
        type=float,
        default=COMPILE_TIMEOUT,
        metavar="SECONDS",
        help=f"stop a compile that runs longer and report it as failed (default: {COMPILE_TIMEOUT:g})",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(handler=cmd_precompile)


def _manifest(path: str) -> dict[str, Any]:
    data = settings.read_manifest(path)
    data["_dir"] = os.path.dirname(os.path.abspath(path))
    return data


def _settings(path: str, manifests: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {"options": [], "headers": [], "name": None, "skip": False}
    for m in manifests:
        rel = os.path.relpath(os.path.abspath(path), m["_dir"])
        if rel.startswith(".."):
            continue
        out["options"] += list(m.get("defaults", {}).get("options", []))
        entry = m.get("sources", {}).get(rel.replace(os.sep, "/"), {})
        out["options"] += list(entry.get("options", []))
        out["headers"] += [os.path.join(os.path.dirname(path), h) for h in entry.get("headers", [])]
        out["name"] = entry.get("name", out["name"])
        out["skip"] = bool(entry.get("skip", out["skip"]))
    return out


def find_sources(paths: list[str]) -> Iterator[str]:
    for p in paths:
        if os.path.isdir(p):
            for root, dirs, files in os.walk(p):
                dirs[:] = sorted(d for d in dirs if not d.startswith("."))
                for f in sorted(files):
                    suffix = os.path.splitext(f)[1].lower()
                    if suffix in SUFFIX_LANG and suffix not in _HEADERS:
                        yield os.path.join(root, f)
        elif os.path.isfile(p):
            yield p
        else:
            raise InvalidArgumentError(f"{p!r} is neither a file nor a directory")


def plan(args: argparse.Namespace) -> list[Job]:
    manifests = (
        [_manifest(args.manifest)]
        if args.manifest
        else [_manifest(os.path.join(p, MANIFEST)) for p in args.paths if os.path.isfile(os.path.join(p, MANIFEST))]
    )
    devices = [_api.device(d) for d in (args.device or [None])]
    jobs = []
    for path in find_sources(args.paths):
        lang = SUFFIX_LANG.get(os.path.splitext(path)[1].lower())
        if lang is None:
            raise InvalidArgumentError(f"cannot tell the language of {path!r} from its suffix")
        s = _settings(path, manifests)
        if s["skip"]:
            continue
        for dev in devices:
            jobs.append(Job(path, lang, s["name"], tuple(s["options"] + list(args.option)), tuple(s["headers"]), dev))
    return jobs


_local = threading.local()  # .found: the disk cache's answers during this thread's compile
_observing = 0  # threads compiling now; the first installs _observe, the last removes it
_observing_lock = threading.Lock()
_previous: Callable[[str, bool], None] | None = None  # the observer found installed (the tracer's)


def _observe(key: str, hit: bool) -> None:
    found = getattr(_local, "found", None)
    if found is not None:
        found.append(hit)
    if _previous is not None:
        _previous(key, hit)


@contextlib.contextmanager
def _observed() -> Iterator[list[bool]]:
    """The disk cache's answers to this thread's lookups while inside."""
    global _observing, _previous
    with _observing_lock:
        if _observing == 0:
            _previous, cache.observer = cache.observer, _observe
        _observing += 1
    found: list[bool] = []
    _local.found = found
    try:
        yield found
    finally:
        _local.found = None
        with _observing_lock:
            _observing -= 1
            if _observing == 0:
                cache.observer, _previous = _previous, None


def compile_one(
    path: str, lang: str, name: str | None, options: tuple[str, ...], headers: tuple[str, ...], device: str
) -> tuple[str, str]:
    """Compile one source file for one device here: ``(outcome, detail)``, outcome one of memory,
    disk, compiled, failed, skipped. Runs in a worker process (:func:`run_pool`)."""
    texts = {}
    for h in headers:
        with open(h, encoding="utf-8") as f:
            texts[os.path.basename(h)] = f.read()
    try:
        src = Source.from_file(path, lang, name=name, options=options, headers=texts)
    except KernelbayError as exc:
        return "failed", str(exc)
    return compile_source(src, device)


def compile_source(src: Source, device: str) -> tuple[str, str]:
    """Compile one :class:`Source` for one device into the disk cache here (the backend's
    ``kernelbay_compile_to_cache``; see :func:`compile_one`); the tuner compiles its variants
    with it."""
    dev, b = _api._resolve(device)
    langs = b.spec.languages if b.spec is not None else ()
    if src.lang not in langs:
        return "skipped", f"{dev.backend} does not take {src.lang} (it takes {', '.join(langs)})"
    with _observed() as found:
        try:
            b.compile_to_cache(dev, src)
        except KernelbayError as exc:
            return "failed", str(exc)
    return ("disk" if all(found) else "compiled") if found else "memory", ""


def run_pool(
    fn: Callable[..., tuple[str, str]],
    calls: Sequence[tuple[Any, ...]],
    jobs: int | None,
    desc: str,
    progress: bool,
    labels: Sequence[str] | None = None,
    timeout: float | None = None,
) -> list[tuple[str, str]]:
    """``fn(*call)`` for every call, in spawned worker processes, with a progress bar: the
    results in the calls' order. A call that raises, or whose worker dies, gives ``("failed",
    why)``; one that runs more than ``timeout`` seconds gives ``("timeout", why)``: its worker
    and the compilers it started are stopped, and the other calls go on (:mod:`._workers`).

    Shared by ``kernelbay precompile`` and the tuner's compile phase.
    """
    out: list[tuple[str, str]] = [("", "")] * len(calls)
    if not calls:
        return out
    workers = max(1, min(jobs or usable_cpus(), len(calls)))
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=len(calls), unit="kernel", desc=desc, file=sys.stderr, dynamic_ncols=True)

    def done(i: int) -> None:
        if bar is not None:
            if labels is not None:
                bar.set_postfix_str(labels[i], refresh=False)
            bar.update(1)

    # Worker processes, not threads: a compiler may compile one program at a time per process
    # (NVRTC does: 64 compiles in 16 threads took as long as one after another), and a compiler
    # crash takes down a worker, not this command. Without KERNELBAY_TRACE, they write no trace.
    trace_env = os.environ.pop("KERNELBAY_TRACE", None)
    try:
        results = _workers.run(fn, calls, workers, timeout, done)
    finally:
        if trace_env is not None:
            os.environ["KERNELBAY_TRACE"] = trace_env
        if bar is not None:
            bar.close()
    for i, (status, value) in enumerate(results):
        if status == "ok":
            out[i] = value
        elif status == "error":  # fn raised (it reports a compile's own failure as a result)
            out[i] = ("failed", f"the compile worker failed: {value}")
        else:  # "failed" (the worker died) or "timeout"
            out[i] = (status, value)
    return out


def cmd_precompile(args: argparse.Namespace) -> int:
    jobs = plan(args)
    if not jobs:
        print("kernelbay precompile: no kernel sources found (.cu, .cpp, .cc, .cxx, .ptx, .cubin, .fatbin)")
        return 0
    if not args.timeout > 0:
        raise InvalidArgumentError(f"--timeout must be a number of seconds > 0, got {args.timeout:g}")
    results = run_pool(
        compile_one,
        [(j.path, j.lang, j.name, j.options, j.headers, str(j.device)) for j in jobs],
        args.jobs,
        "precompile",
        not args.no_progress,
        [os.path.basename(j.path) for j in jobs],
        args.timeout,
    )
    for j, (outcome, detail) in zip(jobs, results):
        j.outcome, j.detail = ("failed" if outcome == "timeout" else outcome), detail
    return report(jobs)


def report(jobs: list[Job]) -> int:
    count = {k: sum(j.outcome == k for j in jobs) for k in ("memory", "disk", "compiled", "failed", "skipped")}
    print(
        f"precompiled {len(jobs)} kernel source(s): {count['disk'] + count['memory']} already cached, "
        f"{count['compiled']} compiled, {count['failed']} failed, {count['skipped']} skipped"
    )
    for j in jobs:
        if j.outcome == "skipped":
            print(f"  skipped {j.path} for {j.device}: {j.detail}")
    for j in jobs:
        if j.outcome == "failed":
            print(f"\nFAILED {j.path} for {j.device}:")
            for line in j.detail.splitlines():
                print(f"  {line}")
    return 1 if count["failed"] else 0
