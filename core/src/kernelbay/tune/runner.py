"""The sweep: compile every config in parallel, check each against the reference, time them in
killable worker processes (one per device), and keep every outcome in the results file."""

from __future__ import annotations

import logging
import multiprocessing
import os
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from typing import Any

from .. import _isolate
from ..errors import TuneError
from .worker import WAITING, Job, serve

log = logging.getLogger("kernelbay.tune")

__all__ = ["WorkerHandle", "summarise", "sweep_device"]

#: Seconds a fresh worker may take to import kernelbay and open its device on an idle machine;
#: longer in proportion to the load, as the backend probe's deadline (kernelbay._isolate).
START_TIMEOUT = 120.0


def start_timeout() -> float:
    return START_TIMEOUT * _isolate.default_deadline() / _isolate.DEFAULT_TIMEOUT


class WorkerHandle:
    """The tuner's side of one timing worker: requests with deadlines; a worker that hangs past
    one is killed, one that dies is noted, and either is started again for the next request."""

    def __init__(self, device: str, job: Job, payload: bytes | None = None) -> None:
        """``payload``: the job already pickled, sent instead of ``job`` (a Ray actor sends it
        pickled by value where its functions live in a ``__main__`` the worker cannot import)."""
        self.device, self.job, self.payload = device, job, payload
        self.proc: Any = None
        self.conn: Any = None
        self.properties: dict[str, Any] = {}
        self.current: Any = None
        self.restarts = -1
        self.errlog = ""

    def start(self) -> None:
        """Start the worker and wait, under a deadline that grows with load, until it is ready.

        :raises TuneError: when it exits, is killed or does not answer while starting; the error
            says which, with the tail of what the worker wrote to stderr.
        """
        self._pass_on_stderr()  # a previous run's (a restart after a crash or a hang)
        ctx = multiprocessing.get_context("spawn")
        parent, child = ctx.Pipe()
        # The config the worker is running, in shared memory: the worker sets it before each
        # launch at no syscall's cost, and the tuner reads it to charge a hang or a crash.
        self.current = ctx.RawValue("i", -1)
        fd, self.errlog = tempfile.mkstemp(prefix="kernelbay-tune-worker-", suffix=".stderr")
        os.close(fd)
        self.proc = ctx.Process(target=serve, args=(child, self.device, self.current, self.errlog), daemon=True)
        self.proc.start()
        child.close()
        self.conn = parent
        self.restarts += 1
        limit = start_timeout()
        msg = self._recv(limit)
        if msg is not None and msg[0] == "hello":
            msg = self._send_job(limit)
        if msg is None or msg[0] != "ready":
            if msg is None:
                why = f"it did not answer within {limit:g} s (a hang while importing, or a very slow machine)"
                self.kill()
            elif msg[0] == "failed":
                why = msg[1]
                self.kill()
            else:
                why = self._death() + " at start"
                self.kill()
            tail = self._stderr_tail()
            self._pass_on_stderr()  # the whole of it (a traceback) for the user to read
            raise TuneError(
                f"the tuning worker for {self.device} could not start: {why}"
                + (f"; its stderr ends: {tail}" if tail else "")
                + ". Functions given to kb.tune must import cleanly in a fresh process (try "
                "`python -c 'import <their module>'`); KERNELBAY_PLUGIN_TIMEOUT sets the start deadline"
            )
        self.properties = msg[2]

    def _send_job(self, limit: float) -> Any:
        """Send the job (it may be large) and wait for the worker's answer, both under ``limit``:
        the send runs in a thread, so a worker that stops reading cannot block the tuner; killing
        that worker ends the send."""
        failed: list[BaseException] = []

        def send() -> None:
            try:
                self.conn.send(self.job if self.payload is None else self.payload)
            except (OSError, ValueError) as exc:  # EPIPE: the worker died; ValueError: pipe closed
                failed.append(exc)

        t0 = time.monotonic()
        sender = threading.Thread(target=send, name="kernelbay-tune-send", daemon=True)
        sender.start()
        sender.join(limit)
        if sender.is_alive():
            return None
        if failed:
            return ("dead",)
        return self._recv(max(0.0, limit - (time.monotonic() - t0)))

    def _stderr_tail(self, lines: int = 8, chars: int = 2000) -> str:
        """The last lines the worker wrote to stderr, on one line ('' when none)."""
        try:
            with open(self.errlog, encoding="utf-8", errors="replace") as f:
                f.seek(0, os.SEEK_END)
                f.seek(max(0, f.tell() - 4 * chars))
                text = f.read()
        except (OSError, AttributeError):
            return ""
        kept = [ln.rstrip() for ln in text.splitlines() if ln.strip()][-lines:]
        return " | ".join(kept)[-chars:]

    def _pass_on_stderr(self) -> None:
        """What the worker wrote to stderr (warnings, a backend's messages), onto the tuner's own
        stderr once the worker has ended; then the file is removed."""
        name = getattr(self, "errlog", "")
        if not name:
            return
        try:
            with open(name, encoding="utf-8", errors="replace") as f:
                text = f.read()
            os.unlink(name)
        except OSError:
            return
        self.errlog = ""
        if text:
            sys.stderr.write(text if text.endswith("\n") else text + "\n")

    def _live(self) -> Any:
        """The pipe to a running worker, started (again) where there is none."""
        if self.conn is None:
            self.start()
        return self.conn

    def _recv(self, timeout: float) -> Any:
        try:
            if not self.conn.poll(timeout):
                return None
            return self.conn.recv()
        except (EOFError, OSError):
            return ("dead",)

    def _death(self) -> str:
        self.proc.join(5)
        code = self.proc.exitcode
        if code is None:
            return "it stopped answering"
        if code < 0:
            import signal

            try:
                return f"it was killed by {signal.Signals(-code).name}"
            except ValueError:
                return f"it was killed by signal {-code}"
        return f"it exited with status {code}"

    def kill(self) -> None:
        if self.proc is not None and self.proc.is_alive():
            self.proc.kill()
        if self.proc is not None:
            self.proc.join(10)
        if self.conn is not None:
            self.conn.close()
        self.proc = self.conn = None

    def close(self) -> None:
        """Kill the worker if it runs and pass on what it wrote to stderr."""
        self.kill()
        self._pass_on_stderr()

    def stop(self) -> None:
        if self.conn is not None:
            try:
                self.conn.send(("stop",))
            except OSError:
                pass
            self.proc.join(10)
        self.close()

    def _fault(self, timeout: float, msg: Any) -> tuple[str, str]:
        if msg is None:
            self.kill()
            return "timeout", f"no result within {timeout:g} s; its worker was killed"
        why = self._death()
        self.kill()
        tail = self._stderr_tail(lines=3, chars=600)
        return "crashed", f"the worker running it died: {why}" + (f"; its stderr ends: {tail}" if tail else "")

    def _post(self, msg: Any) -> bool:
        """Send a small request (it fits the pipe's buffer, so it never blocks); False when the
        worker is gone (EPIPE)."""
        try:
            self._live().send(msg)
            return True
        except (OSError, ValueError):
            return False

    def check(self, i: int, timeout: float) -> tuple[str, str]:
        if not self._post(("check", i)):
            return self._fault(timeout, ("dead",))
        msg = self._recv(timeout)
        if msg is None or msg[0] == "dead":
            return self._fault(timeout, msg)
        return msg[2], msg[3]

    def lookups(self, timeout: float) -> dict[int, list[tuple[str, bool]]]:
        """The disk cache's answers while each config compiled in the running worker (``{}``
        when none runs: what a worker that died had seen is gone with it)."""
        if self.conn is None or not self._post(("lookups",)):
            return {}
        msg = self._recv(timeout)
        return msg[1] if msg is not None and msg[0] == "lookups" else {}

    def time_round(
        self, order: Sequence[int], warmup: int, timeout: float
    ) -> tuple[dict[int, int], dict[int, tuple[str, str]]]:
        """Time each config of ``order`` once: samples, and the faults of those that failed.
        A hang (no progress past ``timeout`` per launch) or a crash ends the round there (the
        configs after it wait for the next round)."""
        conn = self._live()
        self.current.value = -1
        if not self._post(("time", list(order), warmup)):
            return {}, {order[0]: self._fault(timeout, ("dead",))}
        limit = timeout * (1 + warmup)
        seen, since = -1, time.monotonic()
        while True:
            try:
                if conn.poll(0.05):
                    msg = conn.recv()
                    return msg[1], {i: (st, detail) for i, (st, detail) in msg[2].items()}
            except (EOFError, OSError):
                i = self.current.value
                return {}, {i if i >= 0 else order[0]: self._fault(timeout, ("dead",))}
            now = time.monotonic()
            if self.current.value != seen or seen == WAITING:  # progress, or waiting for the device
                seen, since = self.current.value, now
            elif now - since > limit:
                return {}, {seen if seen >= 0 else order[0]: self._fault(timeout, None)}


def sweep_device(
    handle: WorkerHandle,
    todo: list[int],
    records: dict[int, dict[str, Any]],
    repeats: int,
    warmup: int,
    timeout: float,
    lock: threading.Lock,
    bar: Any,
) -> None:
    """Check then time ``todo`` on one worker, filling ``records`` (index -> record).

    :raises TuneError: when the reference cannot be computed (the default config fails), as
        a check against it would charge that failure to another config.
    """
    status, detail = handle.check(-1, timeout)
    if status != "ok":
        job = handle.job
        what = (
            "the reference function (check=)"
            if callable(job.check)
            else f"the default config {job.configs[job.default]}, the reference when check= is not given,"
        )
        raise TuneError(
            f"{what} failed on {handle.device} ({status}): {detail.strip().splitlines()[0] if detail else ''}. "
            "Put a working config first in the space, or pass check= a reference function"
        )
    passed = []
    for i in todo:
        status, detail = handle.check(i, timeout)
        if status == "ok":
            passed.append(i)
        else:
            with lock:
                records[i] = {"status": status, "detail": detail}
            log.info("config %d: %s: %s", i, status, detail.splitlines()[0] if detail else "")
    samples: dict[int, list[int]] = {i: [] for i in passed}
    warmed: set[int] = set()
    alive = list(passed)
    for r in range(repeats):
        # Interleaved: each round times every config once, starting one further along, so that
        # drift (clocks, heat, other load) is spread over all configs rather than landing on some.
        order = alive[r % len(alive) :] + alive[: r % len(alive)] if alive else []
        pending = list(order)
        while pending:
            first = [i for i in pending if i not in warmed]
            got, faults = handle.time_round(pending, warmup if first else 0, timeout)
            warmed.update(pending)
            for i, ns in got.items():
                samples[i].append(ns)
            for i, (status, detail) in faults.items():
                with lock:
                    records[i] = {"status": status, "detail": detail}
                alive.remove(i)
            done = set(got) | set(faults)
            pending = [i for i in pending if i not in done]
        if bar is not None:
            bar.update(0)
    for i in alive:
        with lock:
            records[i] = summarise(samples[i])
            records[i]["device"] = handle.device
            # what the worker's device said of itself there (a cpu's threads under the quota a
            # scheduler set), which can differ from what the tuner's own process sees
            records[i]["worker_properties"] = {
                k: v
                for k, v in handle.properties.items()
                if k in ("threads", "threads_from", "cores", "name", "compute_capability")
            }
    if bar is not None:
        bar.update(len(todo))


def summarise(ns: list[int]) -> dict[str, Any]:
    """An ``ok`` record: the median and spread (interquartile range) of the samples, in seconds."""
    s = sorted(ns)
    if len(s) >= 4:
        q = statistics.quantiles(s, n=4)
        spread = q[2] - q[0]
    else:
        spread = float(s[-1] - s[0])
    return {
        "status": "ok",
        "median": statistics.median(s) / 1e9,
        "spread": spread / 1e9,
        "samples": len(s),
        "min": s[0] / 1e9,
    }
