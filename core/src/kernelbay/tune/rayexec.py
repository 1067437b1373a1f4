"""``kb.tune(..., executor="ray")``: the same sweep across the hosts of a Ray cluster.

Ray is imported only here, and only when a sweep runs (``kernelbay[ray]``): the core never
imports it. The process that calls ``kb.tune`` must already be connected
(``ray.init(address=...)``). What happens:

1. **Compile, once per variant.** Each text source is a Ray task (one CPU) on the node that
   will time it. The task compiles (in a compile worker process of its own, stopped with its
   compiler past the sweep's ``compile_timeout``) into its node's own disk cache and returns, as a separate
   object, the cache entries that compile read or wrote (their keys, payloads and metadata):
   where another node needs the binary (the default config, which every worker runs as the
   reference; the winner, which this process loads) it travels in Ray's object store, never
   through a shared disk.
2. **Time, one actor per device.** cpu: one actor per node, holding the node's CPUs (or
   ``cpus=``); cuda: one actor per GPU (``num_gpus=1``). An actor puts the entries it was sent
   into its node's cache, so its worker loads them without compiling, then runs the tuner's own killable timing worker (a spawned process: a
   config that crashes or hangs kills that process, never the actor) over its share.
3. **Threads.** Ray sets ``OMP_NUM_THREADS=1`` in its workers; an actor sets
   ``KERNELBAY_CPU_THREADS`` and ``OMP_NUM_THREADS`` to the CPUs Ray granted it, and each record
   keeps what the worker's device then reported (``worker_properties["threads"]``).

Each record says where it happened: ``node`` and ``host`` (Ray's node id and the host name) of
the check and timing, ``compiled_on`` of the compile, and ``compiled_again`` where the timing
node had to compile the variant itself (its compiler, headers or CPU differ from the compiling
node's: the entries' keys did not match), which is also warned about.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import warnings
from collections.abc import Sequence
from typing import Any

import attrs

from .. import _api, _workers, cache
from ..errors import InvalidArgumentError, KernelbayError, TuneError
from ..source import Source
from .runner import WorkerHandle, sweep_device
from .worker import Job

log = logging.getLogger("kernelbay.tune")

__all__ = ["RayExecutor"]

#: The cache entries a compile on this node read or wrote, per (source digest, device): kept for
#: a later compile of the same source here whose worker reports fewer (its entries must still
#: travel).
_KEYS: dict[tuple[str, str], list[str]] = {}


def _ray() -> Any:
    """The ``ray`` module, connected.

    :raises InvalidArgumentError: when Ray is not installed or this process is not connected.
    """
    try:
        # Deferred: Ray is an optional extra (kernelbay[ray]) and heavy to import.
        import ray
    except ImportError:
        raise InvalidArgumentError(
            "kb.tune(executor='ray') needs Ray, which is not installed: pip install 'kernelbay[ray]'"
        ) from None
    if not ray.is_initialized():
        raise InvalidArgumentError(
            "kb.tune(executor='ray') uses the Ray cluster this process is connected to, and it is connected to "
            "none: call ray.init(address='auto') (a cluster started with `ray start`) or ray.init() (a local one) "
            "before kb.tune"
        )
    return ray


def _here() -> tuple[str, str]:
    import ray  # deferred: an optional extra, imported only where Ray runs this code

    return ray.get_runtime_context().get_node_id(), socket.gethostname()


def _compile_keys(src: Source, device: str) -> tuple[str, str, list[str]]:
    """Compile ``src`` for ``device`` into this process's disk cache: ``(outcome, detail, keys)``,
    outcome ``compiled`` or ``failed``, keys those of the cache entries the compile read or
    wrote. Runs in a compile worker (:mod:`kernelbay._workers`) started by the Ray task, so that
    a compile past its deadline is stopped with the compiler it started."""
    keys: list[str] = []
    previous = cache.observer
    cache.observer = lambda key, hit: keys.append(key)
    try:
        dev, b = _api._resolve(device)
        b.compile_to_cache(dev, src)  # the disk cache only: no driver context on a GPU node
    except KernelbayError as exc:
        return "failed", str(exc), []
    finally:
        cache.observer = previous
    return "compiled", "", keys


def _compile_variant(
    src: Source, device: str, timeout: float | None = None
) -> tuple[tuple[str, str, str, str], list[tuple[str, bytes, dict]]]:
    """A Ray task: compile ``src`` for ``device`` on this node; ``((outcome, detail, node, host),
    entries)``, outcome ``compiled``, ``failed`` or ``timeout``, entries ``(key, payload, meta)``.

    The compile runs in a worker process of its own with ``timeout`` (the sweep's
    ``compile_timeout``): one that runs longer is stopped, its compiler too, and reported; the
    Ray worker lives on."""
    node, host = _here()
    memo = (src.digest(), device)
    status, got = _workers.run(_compile_keys, [(src, device)], 1, timeout)[0]
    if status == "timeout":
        return ("timeout", str(got), node, host), []
    if status != "ok":  # it raised something unexpected, or its worker died
        return ("failed", str(got), node, host), []
    outcome, detail, keys = got
    if outcome != "compiled":
        return (outcome, detail, node, host), []
    if keys:
        _KEYS[memo] = keys
    entries = []
    store = cache.default_cache()
    for key in dict.fromkeys(_KEYS.get(memo, [])):
        try:
            e = store.get(key)
        except (cache.CacheError, OSError):
            e = None
        if e is not None:
            entries.append((e.key, e.payload, dict(e.meta)))
    return ("compiled", "", node, host), entries


def _put(entries: Sequence[tuple[str, bytes, dict]]) -> int:
    """Put shipped cache entries into this process's cache (those not there yet): the count."""
    store = cache.default_cache()
    added = 0
    for key, payload, meta in entries:
        try:
            if store.get(key) is None:
                store.put(key, payload, meta)
                added += 1
        except (cache.CacheError, OSError) as exc:
            log.warning("cannot put a shipped cache entry into %s: %s", store.directory, exc)
    return added


class _Timer:
    """A Ray actor: one device of one node; the tuner's timing worker inside it."""

    def __init__(self, backend: str, threads: int | None) -> None:
        import ray  # deferred: an optional extra, imported only where Ray runs this code

        self.node, self.host = _here()
        self.granted = dict(ray.get_runtime_context().get_assigned_resources())
        self.device = backend  # cuda: Ray made the granted GPU the only visible one, device 0
        if backend == "cpu" or threads:
            n = threads or max(1, int(self.granted.get("CPU", 1)))
            # Ray sets OMP_NUM_THREADS=1 in its workers; the worker process this actor spawns
            # (and its device's properties) must see the CPUs Ray granted instead.
            os.environ["KERNELBAY_CPU_THREADS"] = os.environ["OMP_NUM_THREADS"] = str(n)
        self.handle: Any = None
        self.lock = threading.Lock()

    def run(
        self, job: Job, share: list[int], options: dict[str, Any], sent: list[int], *shipped: Any
    ) -> dict[str, Any]:
        """Put the entries ``shipped`` (those of the configs ``sent``, resolved by Ray on this
        node) into this node's cache, then check and time ``share``: ``{"records", "node",
        "host", "granted", "again"}`` (``again``: the configs the worker compiled itself), or
        ``{"error": why}`` when the reference cannot be computed."""
        keys = {i: {e[0] for e in entries} for i, entries in zip(sent, shipped)}
        for entries in shipped:
            _put(entries)
        records: dict[int, dict[str, Any]] = {}
        # Ray's pickler sends functions of the driver's __main__ (a script) by value; the worker
        # process gets the job that way too, as it cannot import that script.
        from ray import cloudpickle  # deferred: an optional extra (this runs in a Ray actor)

        with self.lock:
            # ray.cloudpickle re-exports dumps without listing it in __all__
            pickled = cloudpickle.dumps(job)  # pyright: ignore[reportPrivateImportUsage]
            self.handle = WorkerHandle(self.device, job, pickled)
        try:
            self.handle.start()
            sweep_device(
                self.handle,
                share,
                records,
                options["repeats"],
                options["warmup"],
                options["timeout"],
                threading.Lock(),
                None,
            )
            seen = self.handle.lookups(options["timeout"])
            # compiled here: a lookup missed, and none of the entries shipped for it was hit
            again = [
                i
                for i, answers in seen.items()
                if any(not hit for _, hit in answers) and not any(hit and k in keys.get(i, ()) for k, hit in answers)
            ]
        except TuneError as exc:
            return {"error": str(exc)}
        finally:
            with self.lock:
                self.handle.stop()
                self.handle = None
        return {"records": records, "node": self.node, "host": self.host, "granted": self.granted, "again": again}

    def stop(self) -> None:
        """Kill the timing worker now (called concurrently, while :meth:`run` waits on it)."""
        with self.lock:
            if self.handle is not None:
                self.handle.kill()


@attrs.frozen
class RayExecutor:
    """Where ``kb.tune`` runs: the Ray cluster this process is connected to.

    :ivar cpus: CPUs each timing actor asks for (cpu: default the whole node's; cuda: default 1);
        a cpu launch then uses that many threads.
    :ivar actors_per_node: cpu timing actors per node (each with ``cpus``, or its part of the
        node's CPUs).
    :ivar threads: the threads a cpu launch uses (default: the CPUs Ray granted the actor).
    """

    cpus: float | None = None
    actors_per_node: int = attrs.field(default=1, validator=attrs.validators.ge(1))
    threads: int | None = None

    def identity(self, backend: str) -> dict[str, Any]:
        """What the results file keys on for this cluster: its nodes' CPUs and accelerators."""
        ray = _ray()
        nodes = sorted(
            ", ".join(
                f"{k}={v:g}"
                for k, v in sorted(n["Resources"].items())
                if k in ("CPU", "GPU") or k.startswith("accelerator_type:")
            )
            for n in ray.nodes()
            if n.get("Alive")
        )
        return {"backend": backend, "executor": "ray", "nodes": nodes}

    def run(
        self,
        backend: str,
        job: Job,
        todo: list[int],
        sources: list[Source],
        records: dict[int, dict[str, Any]],
        shipped: dict[int, Any],
        options: dict[str, Any],
    ) -> None:
        """Compile, check and time ``todo`` on the cluster, filling ``records``; ``shipped``
        (index -> the node that compiled it and the object ref of its cache entries) keeps the
        compiled variants for later batches and for the winner's kernel here."""
        ray = _ray()
        plan = self._plan(ray, backend)[: len(todo)]
        shares = [todo[w :: len(plan)] for w in range(len(plan))]
        default = job.default
        # 1. compile each variant once, on the node that will time it (no transfer for it);
        # the default config too where no batch did yet, when it is the reference (check=None),
        # which every worker runs.
        home = {i: node for (node, _), share in zip(plan, shares) for i in share}
        if job.check is None and default not in shipped:
            home.setdefault(default, plan[0][0])
        failed: dict[int, dict[str, Any]] = {}
        where = self._compile(
            ray, backend, [i for i in home if i not in shipped], home, sources, failed, shipped, options
        )
        # the default, when compiled only as the reference: its fault shows in the workers' check
        records.update({i: rec for i, rec in failed.items() if i in todo})
        # 2. time: one actor per device, each with its share and the entries it lacks.
        runnable = [i for i in todo if i not in records]
        work = [(spec, [i for i in share if i in runnable]) for spec, share in zip(plan, shares)]
        work = [(spec, share) for spec, share in work if share]
        if not work:
            return
        actors = [self._actor(ray, backend, node, opts) for (node, opts), _ in work]
        try:
            refs = []
            for actor, ((node, _), share) in zip(actors, work):
                need = [default, *share] if job.check is None else share
                sent = [i for i in dict.fromkeys(need) if i in shipped and shipped[i][0] != node]
                refs.append(actor.run.remote(job, share, options, sent, *[shipped[i][1] for i in sent]))
            self._collect(ray, backend, [s for _, s in work], refs, where, records)
        finally:
            for actor in actors:  # a worker that hangs is killed first, then the actor
                try:
                    actor.stop.remote()
                except Exception:
                    pass
            for actor in actors:
                ray.kill(actor)

    def _plan(self, ray: Any, backend: str) -> list[tuple[str, dict[str, Any]]]:
        """``(node id, actor options)`` of each timing actor: cpu, ``actors_per_node`` per node;
        cuda, one per GPU."""
        want = "GPU" if backend == "cuda" else "CPU"
        nodes = [n for n in ray.nodes() if n.get("Alive") and n["Resources"].get(want, 0) >= 1]
        if not nodes:
            raise TuneError(
                f"the Ray cluster has no live node with a {want} resource to tune {backend} kernels on; "
                "start one (`ray start --address=...`) or pick another backend with devices="
            )
        plan = []
        for n in nodes:
            if backend == "cuda":
                opts = {"num_gpus": 1, "num_cpus": self.cpus or 1}
                plan += [(n["NodeID"], opts)] * int(n["Resources"]["GPU"])
            else:
                opts = {"num_cpus": self.cpus or max(1, int(n["Resources"]["CPU"]) // self.actors_per_node)}
                plan += [(n["NodeID"], opts)] * self.actors_per_node
        return plan

    def _compile(
        self,
        ray: Any,
        backend: str,
        want: list[int],
        home: dict[int, str],
        sources: list[Source],
        records: dict[int, dict[str, Any]],
        shipped: dict[int, Any],
        options: dict[str, Any],
    ) -> dict[int, tuple[str, str]]:
        """Compile the text sources of ``want``, each on its home node as a one-CPU Ray task:
        ``{index: (node, host)}``; failures and compiles past ``compile_timeout`` go to
        ``records``, ``(node, entries' ref)`` to ``shipped``. Function sources (Pallas, Triton)
        compile in the timing workers."""
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy  # the optional extra

        task = ray.remote(_compile_variant)
        extra: dict[str, Any] = {}
        if backend != "cpu":
            # A compile asks for no GPU (it needs the device's model, not its time); older Ray
            # hid every GPU from such a task unless told not to.
            extra["runtime_env"] = {"env_vars": {"RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO": "0"}}
        summaries = {}
        for i in want:
            if isinstance(sources[i].code, (str, bytes)):
                place = NodeAffinitySchedulingStrategy(home[i], soft=False)
                summaries[i], entries = task.options(
                    num_cpus=1, num_returns=2, scheduling_strategy=place, **extra
                ).remote(sources[i], backend, options.get("compile_timeout"))
                shipped[i] = (home[i], entries)
        where = {}
        for i, ref in summaries.items():
            try:
                outcome, detail, node, host = ray.get(ref)
            except Exception as exc:  # the task's worker died (a compiler that crashed it) or its node left
                why = f"the Ray compile task failed: {type(exc).__name__}: {exc}"
                records[i] = {"status": "compile_error", "detail": why, "transient": True}
                del shipped[i]
                continue
            where[i] = (node, host)
            if outcome != "compiled":
                status = "timeout" if outcome == "timeout" else "compile_error"
                records[i] = {"status": status, "detail": detail, "compiled_on": node, "host": host}
                del shipped[i]
        return where

    def _actor(self, ray: Any, backend: str, node: str, opts: dict[str, Any]) -> Any:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy  # the optional extra

        place = NodeAffinitySchedulingStrategy(node, soft=False)
        # max_concurrency=2: stop() runs while run() waits on a worker that hangs.
        return (
            ray.remote(_Timer)
            .options(**opts, scheduling_strategy=place, max_concurrency=2)
            .remote(backend, self.threads)
        )

    def _collect(
        self,
        ray: Any,
        backend: str,
        shares: list[list[int]],
        refs: list[Any],
        where: dict[int, tuple[str, str]],
        records: dict[int, dict[str, Any]],
    ) -> None:
        """The actors' records into ``records``, each with where it was compiled and timed."""
        errors, again = [], []
        for share, ref in zip(shares, refs):
            try:
                out = ray.get(ref)
            except Exception as exc:  # the actor died: its node left, or it was killed
                why = f"the Ray actor timing it died: {type(exc).__name__}: {exc}"
                for i in share:
                    records[i] = {"status": "crashed", "detail": why, "transient": True}
                continue
            if "error" in out:
                errors.append(out["error"])
                continue
            for i, rec in out["records"].items():
                rec["node"], rec["host"] = out["node"], out["host"]
                if i in where:
                    rec["compiled_on"] = where[i][0]
                if i in out["again"]:
                    rec["compiled_again"] = True
                    again.append(i)
                if rec["status"] == "ok":
                    rec["device"] = f"{rec.get('device', backend)}@{out['host']}"
                    rec["ray_resources"] = out["granted"]
                records[i] = rec
        if errors:
            raise TuneError(errors[0])
        if again:
            warnings.warn(
                f"kb.tune: {len(again)} variants were compiled again on the node that timed them: the cache "
                "entries shipped from the compiling node did not match there (another compiler, other headers or "
                "another CPU); give the nodes the same software",
                RuntimeWarning,
                stacklevel=5,
            )
            log.warning("variants compiled again on their timing nodes: %s", sorted(again))

    @staticmethod
    def fetch(shipped: tuple[str, Any]) -> None:
        """Put the entries of a compiled variant (its ``shipped`` item) into this process's cache."""
        _put(_ray().get(shipped[1]))
