"""``kb.tune``: one sweep, from the space to the chosen config and its ready kernel."""

from __future__ import annotations

import logging
import pickle
import sys
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import attrs

from .. import _api
from ..device import Device
from ..errors import InvalidArgumentError, TuneError
from ..kernel import Kernel
from ..memory import Array
from ..source import Source
from .phases import compile_all, started, time_all
from .rayexec import RayExecutor
from .results import Store
from .runner import WorkerHandle
from .space import Config, Space, apply, as_space, config_text, pick
from .worker import Job

log = logging.getLogger("kernelbay.tune")

__all__ = ["Result", "TuneError", "tune"]


@attrs.frozen
class Result:
    """What a sweep chose.

    :ivar config: the winner's parameters.
    :ivar kernel: the winner compiled for the first device, ready to launch (with
        ``executor="ray"``: for this process's device of the backend tuned, ``None`` where it
        has none, e.g. a driver without a GPU).
    :ivar source: the winner's Source.
    :ivar records: every config tried: ``(config, record)`` with ``record["status"]`` one of
        ``ok`` (and ``median``, ``spread`` -- the interquartile range -- in seconds,
        ``samples``), ``wrong``, ``compile_error``, ``launch_error``, ``resources``,
        ``crashed`` or ``timeout`` (and ``detail``).
    :ivar reused: how many records came from the results file, with no compile and no timing.
    :ivar timed: how many configs this call timed.
    """

    config: Config
    kernel: Kernel | None
    source: Source
    records: list[tuple[Config, dict[str, Any]]]
    launch_fn: Callable[..., Any] = attrs.field(repr=False)
    reused: int = 0
    timed: int = 0

    def launch(self, args: Sequence[Any]) -> Any:
        """Launch the winner the way the sweep did: ``launch(kernel, config, args)``."""
        if self.kernel is None:
            raise TuneError(
                f"the winner {config_text(self.config)} was tuned on the Ray cluster, and this process has no device "
                "of that backend to compile it for: compile result.source where that device is"
            )
        return self.launch_fn(self.kernel, dict(self.config), list(args))

    def table(self) -> str:
        """The records as text, fastest first, faults after."""
        ok = sorted((r["median"], i) for i, (_, r) in enumerate(self.records) if r["status"] == "ok")
        lines = []
        for _, i in ok:
            c, r = self.records[i]
            mark = "*" if c == self.config else " "
            lines.append(f"{mark} {r['median'] * 1e3:10.4f} ms  +-{r['spread'] * 1e3:.4f}  {config_text(c)}")
        for c, r in self.records:
            if r["status"] != "ok":
                first = (r.get("detail") or "").strip().splitlines()
                lines.append(f"  {r['status']:>13}  {config_text(c)}  {first[0][:100] if first else ''}")
        return "\n".join(lines)


def _devices(devices: Any) -> list[Device]:
    if devices is None:
        return [_api.device()]
    if isinstance(devices, (str, Device)):
        devices = [devices]
    out: list[Device] = []
    for d in devices:
        if isinstance(d, str) and d.endswith(":*"):
            found = [x for x in _api.devices() if x.backend == d[:-2]]
            if not found:
                raise InvalidArgumentError(f"devices={d!r}: no {d[:-2]} device is available here")
            out.extend(found)
        else:
            out.append(_api.device(d))
    if not out:
        raise InvalidArgumentError("devices= names no device; give a selector such as 'cpu' or 'cuda:*'")
    return out


def _executor(executor: Any) -> RayExecutor | None:
    if executor is None or isinstance(executor, RayExecutor):
        return executor
    if executor == "ray":
        return RayExecutor()
    raise InvalidArgumentError(f"executor={executor!r}: give None (this machine), 'ray' or a kb.tune.RayExecutor")


def _backend(devices: Any) -> str:
    """The backend a Ray sweep tunes: named by ``devices`` (its devices are the cluster's)."""
    if devices is None:
        return _api.device().backend
    names = [devices] if isinstance(devices, (str, Device)) else list(devices)
    backends = {d.backend if isinstance(d, Device) else str(d).split(":")[0] for d in names}
    if len(backends) != 1:
        raise InvalidArgumentError(
            f"devices={devices!r}: with executor='ray', name one backend (such as 'cpu' or 'cuda'); the cluster's "
            "nodes give the devices"
        )
    return backends.pop()


def _problem_key(args: Any) -> str:
    if callable(args):
        return f"args:{getattr(args, '__module__', '')}.{getattr(args, '__qualname__', '')}"
    parts = []
    for a in args:
        shape, dtype = getattr(a, "shape", None), getattr(a, "dtype", None)
        parts.append(f"{tuple(shape)}:{dtype}" if shape is not None else repr(a))
    return ";".join(parts)


def _version(dist: str, module: str) -> str:
    """A distribution's version (a results file is only reused by the same versions)."""
    from importlib import metadata

    mod = sys.modules.get(module)
    if getattr(mod, "__version__", None):
        return str(mod.__version__)  # type: ignore[union-attr]
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "unknown"


def _launch_ref(launch: Callable[..., Any]) -> Any:
    """What the worker gets for the launch function: itself, or for one a ``kb.tune.autotune``
    wrapper replaced at module level, a reference it imports."""
    mod, qual = getattr(launch, "__module__", None), getattr(launch, "__qualname__", "")
    owner = sys.modules.get(mod or "")
    if owner is not None and "<locals>" not in qual:
        obj: Any = owner
        for part in qual.split("."):
            obj = getattr(obj, part, None)
        if getattr(obj, "_kernelbay_tuned_fn", None) is launch:
            return (mod, qual)
    return launch


def _host_args(args: Any) -> Any:
    if callable(args):
        return args
    return [a.numpy().copy() if isinstance(a, Array) else a for a in args]


def tune(
    source: Source | Callable[[Config], Source],
    space: Space | Mapping[str, Sequence[Any]],
    launch: Callable[[Kernel, Config, list[Any]], Any],
    *,
    args: Any,
    check: Any = None,
    key: Any = None,
    devices: Any = None,
    strategy: str = "exhaustive",
    max_configs: int | None = None,
    seed: int = 0,
    restrict: Any = (),
    timeout: float = 30.0,
    compile_timeout: float = 600.0,
    repeats: int = 10,
    warmup: int = 2,
    rtol: float = 1e-5,
    atol: float = 1e-6,
    jobs: int | None = None,
    progress: bool | None = None,
    force: bool = False,
    flush_l2: bool = True,
    executor: Any = None,
) -> Result:
    """Sweep ``space`` and return the fastest config whose output is right, with its kernel.

    :param source: a :class:`~kernelbay.Source` (each parameter becomes ``-DNAME=VALUE``), or a
        module-level function ``config -> Source`` (templates, options, Triton or Pallas).
    :param space: ``{"NAME": [values...]}`` or a :class:`Space` (with restrictions).
    :param launch: a module-level function ``launch(kernel, config, args)`` that launches once.
    :param args: the launch arguments: numpy arrays (copied to each worker's device) and
        scalars, or a module-level function ``device -> list`` that makes them there.
    :param check: ``None``: each config's array arguments after a launch must match the default
        config's (the space's first); a module-level function ``(*host_args) -> outputs`` (the
        expected array arguments, ``None`` for those not checked); ``False``: no check.
    :param key: the problem key of the results file (default: the arguments' shapes and dtypes).
    :param devices: a selector, a list, or ``"cuda:*"`` (every device of a backend): one timing
        worker per entry, each timing its share of the configs.
    :param strategy: ``exhaustive``, ``random`` (``max_configs`` of them, ``seed``), or
        ``optuna`` (Optuna's TPE sampler, batch by batch, ``max_configs`` trials; needs the
        ``kernelbay[optuna]`` extra).
    :param timeout: seconds one launch of one config may take before its worker is killed and
        the config recorded as ``timeout``.
    :param compile_timeout: seconds one config's compile may take (in the compile pool, or in
        a Ray compile task's worker) before its worker (and the compiler it runs) is stopped
        and the config recorded as ``timeout``: it stops a hang, so leave it well above a slow
        compile.
    :param repeats: timed launches per config, interleaved across configs; ``warmup`` before.
    :param force: time everything again, ignoring the results file.
    :param executor: ``None`` (this machine), or ``"ray"`` / a :class:`RayExecutor`: the Ray
        cluster this process is connected to (``ray.init(address=...)`` first; needs the
        ``kernelbay[ray]`` extra). ``devices`` then names the backend (``"cpu"``, ``"cuda"``);
        every node with it times a share of the configs (docs/tuning.md, "Across hosts on Ray").
    :raises TuneError: when no config compiled, ran and matched the reference.
    :raises InvalidArgumentError: for a bad space, strategy or device, or functions that cannot
        reach a worker process (lambdas, nested functions).
    """
    if repeats < 1 or warmup < 0 or not timeout > 0 or not compile_timeout > 0:
        raise InvalidArgumentError(
            f"repeats >= 1, warmup >= 0, timeout > 0 and compile_timeout > 0 are needed; got {repeats}, {warmup}, "
            f"{timeout}, {compile_timeout}"
        )
    sp = as_space(space, restrict)
    runner = _executor(executor)
    if runner is None:
        devs = _devices(devices)
        backend = devs[0].backend
        props = {k: v for k, v in devs[0].properties.items() if isinstance(v, (int, float, str, bool))}
        where: dict[str, Any] = {"backend": backend, "name": devs[0].name, "properties": props}
    else:
        backend = _backend(devices)
        devs = [d for d in _api.devices() if d.backend == backend][:1]  # the winner's kernel, here
        where = runner.identity(backend)
    host_args = _host_args(args)
    store = Store(
        {
            "device": where,
            "key": repr(key) if key is not None else _problem_key(host_args),
            "kernelbay": _version("kernelbay", "kernelbay"),
            "backend_version": _version(f"kernelbay-{backend}", f"kernelbay_{backend}"),
            "launch": Source(launch, "python").digest(),
            "check": Source(check, "python").digest() if callable(check) else repr(check),
        }
    )
    sweep = Sweep(
        source,
        launch,
        host_args,
        check,
        devs,
        store,
        dict(
            repeats=repeats,
            warmup=warmup,
            timeout=timeout,
            compile_timeout=compile_timeout,
            rtol=rtol,
            atol=atol,
            jobs=jobs,
            flush_l2=flush_l2,
        ),
        force,
        sys.stderr.isatty() if progress is None else progress,
        runner,
        backend,
    )
    all_configs = sp.configs()
    if strategy == "optuna":
        from .optuna_strategy import run as run_optuna  # the optional extra, imported only when asked for

        run_optuna(sweep, sp, all_configs, max_configs, seed)
    else:
        sweep.evaluate(pick(all_configs, strategy, max_configs, seed))
    return sweep.choose()


class Sweep:
    """The configs tried so far and their records; :meth:`evaluate` runs more of them (a
    strategy that learns, such as Optuna's, calls it batch by batch)."""

    def __init__(
        self,
        source: Any,
        launch: Callable[..., Any],
        host_args: Any,
        check: Any,
        devs: list[Device],
        store: Store,
        options: dict[str, Any],
        force: bool,
        show: bool,
        executor: RayExecutor | None = None,
        backend: str = "",
    ) -> None:
        self.source, self.launch, self.host_args, self.check = source, launch, host_args, check
        self.devs, self.store, self.options, self.force, self.show = devs, store, options, force, show
        self.executor, self.backend = executor, backend
        #: with an executor: index -> its object ref of the variant's compiled cache entries
        self.shipped: dict[int, Any] = {}
        self.configs: list[Config] = []
        self.sources: list[Source] = []
        self.records: dict[int, dict[str, Any]] = {}
        self.index: dict[str, int] = {}
        self.reused = self.timed = 0

    def _add(self, c: Config) -> int:
        text = config_text(c)
        i = self.index.get(text)
        if i is None:
            i = self.index[text] = len(self.configs)
            self.configs.append(dict(c))
            self.sources.append(apply(self.source, c))
        return i

    def rkey(self, i: int) -> str:
        return f"{self.sources[i].digest()}:{config_text(self.configs[i])}"

    def evaluate(self, configs: list[Config]) -> list[dict[str, Any]]:
        """Records for ``configs`` (the first call's first config is the default, the
        reference): from the results file where there, else compiled, checked and timed."""
        idx = [self._add(c) for c in configs]
        todo = []
        for i in dict.fromkeys(idx):
            if i in self.records:
                continue
            k = self.rkey(i)
            if not self.force and k in self.store.records:
                self.records[i] = self.store.records[k]
                self.reused += 1
            else:
                todo.append(i)
        if todo:
            self._run(todo)
        return [self.records[i] for i in idx]

    def _run(self, todo: list[int]) -> None:
        o = self.options
        on = f"the Ray cluster's {self.backend} devices" if self.executor else ", ".join(map(str, self.devs))
        log.info("tuning %d configs on %s", len(todo), on)
        default = 0
        job = Job(
            sources={i: self.sources[i] for i in set(todo) | {default}},
            configs={i: self.configs[i] for i in set(todo) | {default}},
            launch=_launch_ref(self.launch),
            args=self.host_args,
            check=self.check,
            default=default,
            rtol=o["rtol"],
            atol=o["atol"],
            flush_l2=o["flush_l2"],
        )
        main = sys.modules.get("__main__")
        if main is not None and not getattr(main, "__file__", None):
            inline = [
                getattr(f, "__qualname__", "?")
                for f in (self.launch, self.check, self.host_args)
                if callable(f) and getattr(f, "__module__", None) == "__main__"
            ]
            if inline:
                raise InvalidArgumentError(
                    f"the tuner's worker processes cannot import {', '.join(inline)}: they are defined in a "
                    "program with no file (python -c, standard input or an interactive session); put them in a "
                    "script file or a module"
                )
        try:
            pickle.dumps(job)
        except Exception as exc:
            raise InvalidArgumentError(
                f"the tuner sends the sources, launch, args and check to worker processes, and one of them cannot "
                f"be pickled ({type(exc).__name__}: {exc}); define those functions at module level (not lambdas "
                "or nested functions)"
            ) from None
        if self.executor is not None:
            self.executor.run(self.backend, job, todo, self.sources, self.records, self.shipped, o)
            self._keep(todo)
            return
        # The timing workers start (a process, imports, the device) while the configs compile.
        handles = [WorkerHandle(str(d), job) for d in self.devs[: len(todo)]]
        starter = ThreadPoolExecutor(len(handles))
        starting = [starter.submit(h.start) for h in handles]
        try:
            compile_all(self.sources, todo, self.devs, self.records, o["jobs"], self.show, o["compile_timeout"])
            up = started(handles, starting)
            runnable = [i for i in todo if i not in self.records]
            time_all(up, runnable, self.records, o["repeats"], o["warmup"], o["timeout"], self.show)
        finally:
            starter.shutdown(wait=True)
            for h in handles:
                h.stop()
        self._keep(todo)

    def _keep(self, todo: list[int]) -> None:
        self.timed += len(todo)
        for i in todo:
            if not self.records[i].get("transient"):
                self.store.records[self.rkey(i)] = self.records[i]
        self.store.save()

    def choose(self) -> Result:
        def here(win: int) -> None:
            # the winner's compiled entries, shipped from the cluster: this process loads them
            if self.executor is not None and win in self.shipped:
                self.executor.fetch(self.shipped[win])

        dev = self.devs[0] if self.devs else None
        return _choose(self.configs, self.sources, self.records, dev, self.launch, self.reused, self.timed, here)


def _choose(
    configs: list[Config],
    sources: list[Source],
    records: dict[int, dict[str, Any]],
    dev: Device | None,
    launch: Callable[..., Any],
    reused: int,
    timed: int,
    before: Callable[[int], None] | None = None,
) -> Result:
    ok = [i for i in range(len(configs)) if records[i]["status"] == "ok"]
    table = [(configs[i], records[i]) for i in range(len(configs))]
    if not ok:
        counts: dict[str, int] = {}
        for r in records.values():
            counts[r["status"]] = counts.get(r["status"], 0) + 1
        first = next((r for r in records.values() if r.get("detail")), None)
        why = f"; the first failure ({first['status']}): {first['detail']}" if first else ""
        raise TuneError(
            f"no config of {len(configs)} compiled, ran and matched the reference "
            f"({', '.join(f'{v} {k}' for k, v in sorted(counts.items()))}){why}; see the log (KERNELBAY_LOG=info) "
            "or rerun with force=True after fixing the kernel"
        )
    fastest = min(ok, key=lambda i: records[i]["median"])
    best = records[fastest]
    # A stable choice: configs whose lead is within the measured spread are a tie, and a tie goes
    # to the first in the space's order, so that a rerun picks the same one.
    tied = [i for i in ok if records[i]["median"] <= best["median"] + max(best["spread"], records[i]["spread"])]
    win = min(tied)
    kernel = None
    if dev is not None:
        if before is not None:
            before(win)
        kernel = _api.compile(sources[win], dev)
    return Result(dict(configs[win]), kernel, sources[win], table, launch, reused, timed)
