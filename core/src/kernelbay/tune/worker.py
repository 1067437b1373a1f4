"""The timing worker: one spawned process per device, which the tuner can kill.

It checks each config's output against the reference, then times configs in the rounds the
tuner sends (so that repeats interleave across configs). Messages on its pipe, worker to tuner first: ``("hello",)``; then tuner to worker: the
:class:`Job`, ``("check", i)``, ``("time", [i, ...], warmup)``, ``("stop",)``; worker to tuner: ``("ready",
device, properties)``, then per check ``("checked", i, status, detail)`` and per round
``("round", {i: ns}, {i: (status, detail)})``; ``("lookups",)`` asks for the disk cache's answers
(``{i: [(key, hit), ...]}``) while each config compiled there (a compile in the worker misses). The config being timed is kept in shared memory
(``current``), so a hang or a crash is charged to that config, and the worker restarted.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

import attrs

from .. import _api, cache
from ..errors import CompileError, KernelbayError, OutOfMemoryError
from ..kernel import Kernel
from ..memory import Array
from ..source import Source
from ..streams import Stream

__all__ = ["WAITING", "Job", "serve"]

#: ``current`` while the worker waits for another process's round on its device to end.
WAITING = -2


@attrs.frozen
class Job:
    """What a worker needs, pickled to it: module-level functions travel by reference."""

    sources: dict[int, Source]
    configs: dict[int, dict[str, Any]]
    launch: Any  # a function, or (module, qualname) for one under a kb.tune.autotune wrapper
    args: Any  # a function device -> args, or a list of numpy arrays and scalars
    check: Any  # None (the default config), False (no check) or a function host args -> outputs
    default: int  # the default config's index
    rtol: float
    atol: float
    flush_l2: bool

    def __reduce__(self) -> tuple[Any, ...]:
        # A source whose code is a module-level function object travels by reference (its module
        # and name), as the launch function does: a Triton @jit function does not pickle (it
        # holds its module's globals and a function its module's name no longer points at).
        sources = {i: portable(src) for i, src in self.sources.items()}
        return (
            _job,
            (
                sources,
                self.configs,
                self.launch,
                self.args,
                self.check,
                self.default,
                self.rtol,
                self.atol,
                self.flush_l2,
            ),
        )


def portable(src: Source) -> Any:
    """``src``, or ``("ref", module, qualname, lang, ...)`` where its code is a function object
    that its module holds by that name (imported again in the worker)."""
    code = src.code
    if isinstance(code, (str, bytes)):
        return src
    mod, qual = getattr(code, "__module__", None), getattr(code, "__qualname__", None)
    if not (isinstance(mod, str) and isinstance(qual, str)):
        return src
    try:
        import importlib

        obj: Any = importlib.import_module(mod)
        for part in qual.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError):
        return src
    if obj is not code:
        return src
    return ("ref", mod, qual, src.lang, src.name, src.options, dict(src.headers), src.name_expressions, dict(src.meta))


def unportable(item: Any) -> Source:
    if isinstance(item, Source):
        return item
    import importlib

    _, mod, qual, lang, name, options, headers, name_expressions, meta = item
    obj: Any = importlib.import_module(mod)
    for part in qual.split("."):
        obj = getattr(obj, part)
    return Source(obj, lang, name, options, headers, name_expressions, meta)


def _job(sources: dict[int, Any], *rest: Any) -> Job:
    return Job({i: unportable(x) for i, x in sources.items()}, *rest)


def resolve(fn: Any) -> Callable[..., Any]:
    """A launch function passed by reference ``(module, qualname)``, imported here; the function
    under a ``kb.tune.autotune`` wrapper is the one meant."""
    if isinstance(fn, tuple):
        import importlib

        obj: Any = importlib.import_module(fn[0])
        for part in fn[1].split("."):
            obj = getattr(obj, part)
        fn = getattr(obj, "_kernelbay_tuned_fn", obj)
    return fn


def _fresh(job: Job, dev: Any) -> list[Any]:
    import numpy as np

    make: Any = job.args
    if callable(make):
        made: Any = make(dev)
        return list(made)
    return [_api.asarray(a, device=dev) if isinstance(a, np.ndarray) else a for a in job.args]


def _host(args: list[Any]) -> list[Any]:
    return [a.numpy().copy() if isinstance(a, Array) else None for a in args]


def _compare(got: list[Any], want: list[Any], rtol: float, atol: float) -> str:
    import numpy as np

    for pos, (g, w) in enumerate(zip(got, want)):
        if g is None or w is None:
            continue
        w = np.asarray(w)
        if g.shape != w.shape:
            return f"argument {pos}: shape {g.shape}, the reference's is {w.shape}"
        close = np.isclose(g, w, rtol=rtol, atol=atol, equal_nan=True)
        if not close.all():
            bad = int((~close).sum())
            err = float(np.nanmax(np.abs(g.astype(np.float64) - w.astype(np.float64))))
            return f"argument {pos}: {bad} of {g.size} values differ from the reference (max abs error {err:.3g})"
    return ""


class _State:
    def __init__(self, job: Job, device: str) -> None:
        self.job = job
        self.launch = resolve(job.launch)
        self.dev = _api.device(device)
        self.kernels: dict[int, Kernel] = {}
        #: the disk cache's answers while each config compiled here: (key, hit) in order
        self.lookups: dict[int, list[tuple[str, bool]]] = {}
        self.reference: list[Any] | None = None
        self.timing_args: list[Any] | None = None
        self.lock_fd = -1
        self.stream = Stream.default(self.dev)
        self.scratch: Any = None
        l2 = int(self.dev.properties.get("l2_cache_bytes", 0) or 0) if job.flush_l2 else 0
        if l2 > 0:  # a write of twice the L2 between timed launches leaves none of the kernel's data there
            self.scratch = _api.empty(2 * l2, "uint8", self.dev)

    def kernel(self, i: int) -> Kernel:
        k = self.kernels.get(i)
        if k is None:
            seen = self.lookups.setdefault(i, [])
            previous = cache.observer
            cache.observer = lambda key, hit: seen.append((key, hit))
            try:
                k = self.kernels[i] = _api.compile(self.job.sources[i], self.dev)
            finally:
                cache.observer = previous
        return k

    def run(self, i: int, args: list[Any]) -> None:
        self.launch(self.kernel(i), dict(self.job.configs[i]), args)
        self.stream.synchronize()

    def expected(self) -> list[Any]:
        if self.reference is None:
            args = _fresh(self.job, self.dev)
            ref: Any = self.job.check
            if callable(ref):
                hosts = [a.numpy().copy() if isinstance(a, Array) else a for a in args]
                expected: Any = ref(*hosts)
                self.reference = list(expected)
            else:
                self.run(self.job.default, args)
                self.reference = _host(args)
        return self.reference

    def check(self, i: int) -> tuple[str, str]:
        """Check config ``i``; ``i < 0``: compute the reference only."""
        try:
            if i < 0:
                if self.job.check is not False:
                    self.expected()
                return "ok", ""
            if self.job.check is False:
                self.run(i, _fresh(self.job, self.dev))
                return "ok", ""
            want = self.expected()
            args = _fresh(self.job, self.dev)
            self.run(i, args)
            wrong = _compare(_host(args), want, self.job.rtol, self.job.atol)
            return ("wrong", wrong) if wrong else ("ok", "")
        except CompileError as exc:
            return "compile_error", str(exc)
        except OutOfMemoryError as exc:
            return "resources", str(exc)
        except KernelbayError as exc:
            return "launch_error", f"{type(exc).__name__}: {exc}"

    def hold_device(self) -> None:
        """Take this device's tuning lock for one round: one timing process per device on the
        host at a time, so that two workers or two sweeps never time on one device at once."""
        try:
            import fcntl

            if self.lock_fd < 0:
                d = cache.default_cache().subdir("tune")
                name = os.path.join(d, f"device-{self.dev.backend}-{self.dev.index}.lock")
                self.lock_fd = os.open(name, os.O_RDWR | os.O_CREAT, 0o600)
            fcntl.flock(self.lock_fd, fcntl.LOCK_EX)
        except (ImportError, OSError, KernelbayError):
            pass  # no lock to take (no fcntl, no cache): time without it

    def release_device(self) -> None:
        if self.lock_fd >= 0:
            import fcntl

            fcntl.flock(self.lock_fd, fcntl.LOCK_UN)

    def time_one(self, i: int, warmup: int) -> int:
        if self.timing_args is None:
            self.timing_args = _fresh(self.job, self.dev)
        args = self.timing_args
        for _ in range(warmup):
            self.run(i, args)
        k = self.kernel(i)
        if self.scratch is not None:
            self.scratch._binding.memset(self.scratch, 0, self.scratch.nbytes, None)
        start = self.stream.record()
        t0 = time.perf_counter_ns()
        self.launch(k, self.job.configs[i], args)
        end = self.stream.record()
        end.synchronize()
        t1 = time.perf_counter_ns()
        try:
            return int(end.elapsed(start) * 1e6)  # the device's clock, in ns
        except KernelbayError:
            return t1 - t0


def serve(conn: Any, device: str, current: Any, errlog: str = "") -> None:
    """The worker's loop (the target of its process). The job comes over ``conn`` once the worker
    says it has started: passed as the process's argument, a large one (many sources) filled the
    spawn pipe, and a worker that died while starting left the tuner's write waiting forever
    (multiprocessing holds that pipe's other end until the write returns).

    ``errlog``: a file that takes the worker's stderr (file descriptor 2, so a C library's output
    and a dying interpreter's traceback too), whose tail the tuner quotes when the worker dies and
    whose whole text it passes on to its own stderr when the worker ends."""
    if errlog:
        fd = os.open(errlog, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        os.dup2(fd, 2)
        os.close(fd)
    os.environ.pop("KERNELBAY_TRACE", None)
    conn.send(("hello",))
    try:
        job = conn.recv()  # unpickling imports the modules of the launch, args and check functions
        if isinstance(job, bytes):  # pickled by value (a Ray actor's job: see WorkerHandle)
            import pickle

            job = pickle.loads(job)
    except EOFError:
        return
    except BaseException as exc:  # an import that fails (or exits) there is the user's to see
        import traceback

        tail = "".join(traceback.format_exception_only(type(exc), exc)).strip()
        conn.send(("failed", f"importing the functions given to kb.tune failed: {tail}"))
        return
    try:
        st = _State(job, device)
    except BaseException as exc:
        conn.send(("failed", f"{type(exc).__name__}: {exc}"))
        return
    props = {k: v for k, v in st.dev.properties.items() if isinstance(v, (int, float, str, bool))}
    conn.send(("ready", str(st.dev), props))
    while True:
        try:
            msg = conn.recv()
        except EOFError:
            return
        if msg[0] == "check":  # under the device's lock too: a check would disturb another's timing
            st.hold_device()
            try:
                result = st.check(msg[1])
            finally:
                st.release_device()
            conn.send(("checked", msg[1], *result))
        elif msg[0] == "time":
            current.value = WAITING  # the tuner does not count a wait for the device as a hang
            st.hold_device()
            samples, faults = {}, {}
            for i in msg[1]:
                current.value = i  # read by the tuner if this launch hangs or crashes
                try:
                    samples[i] = st.time_one(i, msg[2])
                except KernelbayError as exc:
                    faults[i] = ("launch_error", f"{type(exc).__name__}: {exc}")
            current.value = -1
            st.release_device()
            conn.send(("round", samples, faults))
        elif msg[0] == "lookups":
            conn.send(("lookups", st.lookups))
        else:
            return
