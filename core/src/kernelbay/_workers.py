"""Spawned worker processes for compiles, each call with a deadline (``kernelbay precompile`` and
the tuner's compile phase).

:func:`run` calls ``fn(*call)`` for every call in a few worker processes and gives the results
in the calls' order. Unlike :class:`concurrent.futures.ProcessPoolExecutor`, a worker whose call
runs past the deadline, or that dies (a compiler that crashed the process), is stopped and
replaced, and only its own call is reported (``("timeout", why)`` or ``("failed", why)``); the
other calls go on. Each worker leads a process group of its own, so stopping it stops the
compiler processes it started too (a ``g++`` waiting forever, say). The workers are spawned,
so no driver state is inherited.
"""

from __future__ import annotations

import logging
import os
import signal
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

log = logging.getLogger("kernelbay.workers")

__all__ = ["run"]

#: Seconds a worker may take to start a call (spawn, imports) before it counts as hung.
START_TIMEOUT = 600.0


def _serve(conn: Any) -> None:
    """A worker's loop: ``(i, fn, args)`` in, ``(i, result)`` out, until ``None``."""
    if hasattr(os, "setpgid"):
        try:
            os.setpgid(0, 0)  # its compilers are stopped with it (killpg)
        except OSError:
            pass
    if hasattr(signal, "SIGINT"):
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            return
        if msg is None:
            return
        i, fn, args = msg  # unpickling fn imported its module: the call itself starts now
        conn.send((i, None))
        try:
            res = ("ok", fn(*args))
        except BaseException as exc:  # reported as the call's failure; the worker goes on
            res = ("error", f"{type(exc).__name__}: {exc}")
        conn.send((i, res))


class _Worker:
    def __init__(self, ctx: Any) -> None:
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_serve, args=(child,), daemon=True, name="kernelbay-compile")
        self.proc.start()
        child.close()
        self.call: int | None = None
        self.deadline: float | None = None

    def give(self, i: int, fn: Callable[..., Any], args: tuple[Any, ...], timeout: float | None) -> None:
        self.conn.send((i, fn, args))
        self.call = i
        # Until the worker says the call started, its start-up (spawn, imports: seconds on a busy
        # machine) is not the call's: only a start-up that hangs is stopped.
        self.deadline = None if timeout is None else time.monotonic() + max(timeout, START_TIMEOUT)

    def begun(self, timeout: float | None) -> None:
        self.deadline = None if timeout is None else time.monotonic() + timeout

    def ask_to_stop(self, kill: bool) -> None:
        """Tell an idle worker to end (``None``), or kill a busy one with its process group."""
        pid = self.proc.pid
        if not kill:
            try:
                self.conn.send(None)
                return
            except OSError:
                pass
        if pid is not None:
            try:
                if hasattr(os, "killpg"):
                    os.killpg(pid, signal.SIGKILL)  # the worker and the compilers it started
                else:  # pragma: no cover - Windows
                    self.proc.kill()
            except OSError:
                self.proc.kill()

    def reap(self) -> None:
        self.proc.join(30)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join()
        self.conn.close()

    def stop(self, kill: bool) -> None:
        self.ask_to_stop(kill)
        self.reap()


def run(
    fn: Callable[..., Any],
    calls: Sequence[tuple[Any, ...]],
    workers: int,
    timeout: float | None,
    done: Callable[[int], None] | None = None,
) -> list[tuple[str, Any]]:
    """``fn(*call)`` for every call in up to ``workers`` spawned processes: per call ``("ok",
    result)``, ``("error", why)`` (it raised), ``("failed", why)`` (its worker died) or
    ``("timeout", why)`` (it ran more than ``timeout`` seconds; ``None``: no deadline).
    ``done(i)`` is called as each call ends. ``fn`` must be importable by name (module level)."""
    import multiprocessing
    from multiprocessing.connection import wait

    ctx = multiprocessing.get_context("spawn")
    out: list[tuple[str, Any]] = [("failed", "not run")] * len(calls)
    todo = deque(range(len(calls)))
    pool: list[_Worker] = []
    busy: dict[int, _Worker] = {}  # call -> its worker

    def finish(i: int, res: tuple[str, Any]) -> None:
        out[i] = res
        if done is not None:
            done(i)

    try:
        while todo or busy:
            while todo and (len(busy) < len(pool) or len(pool) < workers):
                w = next((w for w in pool if w.call is None), None)
                if w is None:
                    w = _Worker(ctx)
                    pool.append(w)
                i = todo.popleft()
                w.give(i, fn, calls[i], timeout)
                busy[i] = w
            wait_s = None
            if timeout is not None:
                wait_s = max(0.0, min(w.deadline or 0.0 for w in busy.values()) - time.monotonic())
            ready = wait([x for w in busy.values() for x in (w.conn, w.proc.sentinel)], wait_s)
            for i, w in list(busy.items()):
                got = None
                while w.conn.poll():
                    try:
                        got = w.conn.recv()
                    except (EOFError, OSError):
                        got = None
                        break
                    if got[1] is None:  # the call started
                        w.begun(timeout)
                        got = None
                    else:
                        break
                if got is not None:
                    w.call = None
                    del busy[i]
                    finish(got[0], got[1])
                    continue
                if w.proc.sentinel in ready or not w.proc.is_alive():
                    w.proc.join(5)  # its exit status
                    code = w.proc.exitcode
                    why = f"the compile worker failed: it exited with status {code}"
                    if code is not None and code < 0:
                        why = f"the compile worker failed: it was killed by signal {-code}"
                    log.warning("%s (call %d)", why, i)
                    del busy[i]
                    pool.remove(w)
                    w.stop(kill=True)
                    finish(i, ("failed", why))
                elif w.deadline is not None and time.monotonic() >= w.deadline:
                    why = (
                        f"the compile took longer than {timeout:g} s and was stopped (its worker process and the "
                        "compilers it started); raise the compile timeout if it is only slow"
                    )
                    log.warning("%s (call %d)", why, i)
                    del busy[i]
                    pool.remove(w)
                    w.stop(kill=True)
                    finish(i, ("timeout", why))
    finally:
        for w in pool:  # all at once: an interpreter's exit (a driver's teardown) takes a while
            w.ask_to_stop(kill=w.call is not None)
        for w in pool:
            w.reap()
    return out
