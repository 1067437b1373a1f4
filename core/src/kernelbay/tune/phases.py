"""The phases of a sweep on this host: compile every text source in precompile's pool, start
the timing workers, then check and time each config in them (:class:`.sweep.Sweep` runs them)."""

from __future__ import annotations

import logging
import sys
import threading
import warnings
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from .. import _precompile
from ..device import Device
from ..errors import TuneError
from ..source import Source
from .runner import WorkerHandle, sweep_device

log = logging.getLogger("kernelbay.tune")

__all__ = ["compile_all", "started", "time_all"]


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
) -> None:
    """Every text source compiled into the disk cache first, in parallel (precompile's pool):
    the timing workers then load them. Functions (Pallas, Triton) compile in the workers."""
    models = list({(d.backend, d.name): d for d in devs}.values())
    calls = [(i, d) for i in todo for d in models if isinstance(sources[i].code, (str, bytes))]
    if not calls:
        return
    out = _precompile.run_pool(
        _precompile.compile_source,
        [(sources[i], str(d)) for i, d in calls],
        jobs,
        "tune: compile",
        show,
    )
    for (i, _), (outcome, detail) in zip(calls, out):
        if outcome == "failed":
            records[i] = {"status": "compile_error", "detail": detail}
            if detail.startswith("the compile worker failed"):  # not the config's fault: not kept
                records[i]["transient"] = True


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
