"""The phases of a sweep on this host: compile every text source in precompile's pool, start
the timing workers, then check and time each config in them (:class:`.sweep.Sweep` runs them)."""

from __future__ import annotations

import logging
import sys
import threading
import warnings
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from .. import _api, _precompile
from ..device import Device
from ..errors import TuneError
from ..source import Source
from .runner import WorkerHandle, sweep_device
from .worker import portable, unportable

log = logging.getLogger("kernelbay.tune")

__all__ = ["compile_all", "compile_call", "compiles_to_disk", "started", "time_all"]


def started(handles: list[WorkerHandle], starting: list[Any]) -> list[WorkerHandle]:
    """The workers that started; a device whose worker could not start is left out of the sweep
    with a warning, and when none started, the first one's TuneError is raised."""
    up, errors = [], []
    for h, f in zip(handles, starting):
        try:
            f.result()
            up.append(h)
        except TuneError as exc:
            errors.append(exc)
            log.warning("%s", exc)
    if not up:
        raise errors[0]
    if errors:
        warnings.warn(
            f"kb.tune goes on without {len(errors)} of {len(handles)} devices, whose timing worker could not "
            f"start: {errors[0]}",
            RuntimeWarning,
            stacklevel=4,
        )
    return up


def compile_all(
    sources: list[Source],
    todo: list[int],
    devs: list[Device],
    records: dict[int, dict[str, Any]],
    jobs: int | None,
    show: bool,
    timeout: float | None = None,
) -> None:
    """Every source compiled into the disk cache first, in parallel (precompile's pool): the
    timing workers then load them. A text source always; a function source (Triton) where its
    backend implements ``kernelbay_compile_to_cache`` (whose contract is that a compile in one
    process is found on disk by any other) and the function is importable by name in a worker;
    other functions (Pallas, whose compiles live in the process) compile in the timing workers."""
    models = list({(d.backend, d.name): d for d in devs}.values())
    calls: list[tuple[int, Device, Any]] = []
    for d in models:
        to_disk = None
        for i in todo:
            src = sources[i]
            if isinstance(src.code, (str, bytes)):
                calls.append((i, d, src))
                continue
            if to_disk is None:
                to_disk = compiles_to_disk(d)
            ref = portable(src) if to_disk else src
            if not isinstance(ref, Source):
                calls.append((i, d, ref))
    if not calls:
        return
    out = _precompile.run_pool(
        compile_call,
        [(item, str(d)) for _, d, item in calls],
        jobs,
        "tune: compile",
        show,
        timeout=timeout,
    )
    for (i, _, _), (outcome, detail) in zip(calls, out):
        if outcome == "timeout":  # a compile that hung (its worker was stopped): a result, like a hung launch
            records[i] = {"status": "timeout", "detail": detail}
        elif outcome == "failed":
            records[i] = {"status": "compile_error", "detail": detail}
            if detail.startswith("the compile worker failed"):  # not the config's fault: not kept
                records[i]["transient"] = True


def compiles_to_disk(dev: Device) -> bool:
    """Whether ``dev``'s backend implements ``kernelbay_compile_to_cache`` itself (the fallback,
    ``kernelbay_compile`` with its handle dropped, keeps a function's compile in its process):
    the tuner's test, which the conformance suite's function-source check shares."""
    try:
        _, b = _api._resolve(dev)
    except Exception:  # the device is gone: its timing worker reports it
        return False
    return not getattr(b.compile_to_cache, "kernelbay_fallback", False)


def compile_call(item: Any, device: str) -> tuple[str, str]:
    """One compile in a pool worker: a :class:`Source`, or a function source passed by name
    (:func:`.worker.portable`)."""
    try:
        src = unportable(item)
    except Exception as exc:  # not importable here: the timing worker compiles it (and reports why not)
        return "skipped", f"the compile worker could not import the kernel function: {type(exc).__name__}: {exc}"
    return _precompile.compile_source(src, device)


def time_all(
    handles: list[WorkerHandle],
    todo: list[int],
    records: dict[int, dict[str, Any]],
    repeats: int,
    warmup: int,
    timeout: float,
    show: bool,
) -> None:
    if not todo:
        return
    handles = handles[: len(todo)]
    shares = [todo[w :: len(handles)] for w in range(len(handles))]
    lock = threading.Lock()
    bar = None
    if show:
        from tqdm import tqdm

        bar = tqdm(total=len(todo), unit="config", desc="tune: check+time", file=sys.stderr, dynamic_ncols=True)
    try:
        with ThreadPoolExecutor(len(handles)) as pool:
            futs = [
                pool.submit(sweep_device, h, s, records, repeats, warmup, timeout, lock, bar)
                for h, s in zip(handles, shares)
            ]
            for f in futs:
                f.result()
    finally:
        if bar is not None:
            bar.close()
