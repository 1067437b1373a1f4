"""The driver of tests/tune/test_ray.py, run as its own process (``python -m
tests.tune.ray_cluster OUT``): a Ray cluster of two nodes on this machine, bound to the loopback
address, each node with its own kernelbay cache directory and a compiler that logs its command
lines there; one sweep of ``kb.tune(..., executor="ray")`` over it; what happened, as JSON in OUT.
``python -m tests.tune.ray_cluster OUT hang`` sweeps instead two configs of which one never
finishes compiling (its source includes a named pipe nobody writes).

Its own process, so that Ray's global state (a connected driver, signal handlers, threads) never
enters pytest's, and so that the test can end it, cluster and all, whatever happens.
"""

from __future__ import annotations

import errno
import json
import os
import stat
import sys
from typing import Any

# Before Ray is imported: every address of this cluster is the loopback one (Ray's switch for a
# machine that must not serve its network; by default Ray binds the machine's network address).
os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"

import kernelbay as kb
import ray
from ray.cluster_utils import Cluster

from tests.tune import kernels

#: The space: MODE 0 is right, 2 writes through a null pointer (a segfault), 5 calls abort()
#: (the worker process dies); every node gets one of each.
SPACE = {"BLOCK": [64], "MODE": [0, 2, 5], "UNROLL": [1, 4]}

#: The compile_timeout of the ``hang`` sweep: long enough for the other config's cold compile
#: on a loaded machine.
HANG_TIMEOUT = 30


def _someone_reads(fifo: str) -> bool:
    """Whether a process has ``fifo`` open for reading, or waits in ``open`` to read it (a
    non-blocking open for writing succeeds only then; it also lets such a reader go on)."""
    try:
        fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
    except OSError as exc:
        if exc.errno == errno.ENXIO:
            return False
        raise
    os.close(fd)
    return True


def compiler(base: str) -> str:
    """A compiler that appends its command line to ``$KB_CXX_LOG``, then runs the real one."""
    import shutil

    real = shutil.which("c++") or shutil.which("g++") or shutil.which("clang++")
    if real is None:
        raise SystemExit("no C++ compiler")
    path = os.path.join(base, "cxx")
    with open(path, "w", encoding="utf-8") as f:
        f.write(f'#!/bin/sh\nprintf "%s\\n" "$*" >> "$KB_CXX_LOG"\nexec {real} "$@"\n')
    os.chmod(path, stat.S_IRWXU)
    return path


def main(out: str, what: str = "") -> None:
    base = os.path.dirname(os.path.abspath(out))
    cxx = compiler(base)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

    def env(name: str) -> dict[str, str]:
        return {
            "KERNELBAY_CACHE_DIR": os.path.join(base, name, "cache"),
            "KB_CXX_LOG": os.path.join(base, name, "cxx.log"),
            "CXX": cxx,
            "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")]),
        }

    for name in ("driver", "a", "b"):
        os.makedirs(os.path.join(base, name), mode=0o700, exist_ok=True)
    os.environ.update(env("driver"))
    report = None
    node = {"num_cpus": 1, "node_ip_address": "127.0.0.1", "include_dashboard": False}
    cluster = Cluster(initialize_head=True, head_node_args={**node, "env_vars": env("a")})
    try:
        b = cluster.add_node(**node, env_vars=env("b"))
        ray.init(address=cluster.address)
        # the default config's output is the reference (check=None): every node runs it
        common: dict[str, Any] = dict(
            args=kernels.host_args(), check=None, rtol=1e-4, atol=1e-3, devices="cpu", executor="ray"
        )
        if what == "hang":
            fifo = os.path.join(base, "never-written")
            os.mkfifo(fifo)
            kernels.HANG_PATH = fifo
            space = {"BLOCK": [64], "HANG": [0, 1]}
            result = kb.tune(
                kernels.hang_source,
                space,
                kernels.launch,
                **common,
                repeats=2,
                compile_timeout=HANG_TIMEOUT,
                progress=False,
            )
            extra = {"reader_left": _someone_reads(fifo)}
        else:
            result = kb.tune(kernels.source(), SPACE, kernels.launch, **common, repeats=3, progress=False)
            extra = {"addresses": sorted({n["NodeManagerAddress"] for n in ray.nodes()})}
        report = {
            "nodes": {cluster.head_node.node_id: "a", b.node_id: "b"},
            "winner": result.config,
            "records": [[c, r] for c, r in result.records],
            **extra,
        }
    finally:
        ray.shutdown()
        cluster.shutdown()
        if report is not None:
            with open(out, "w", encoding="utf-8") as f:
                json.dump(report, f)


if __name__ == "__main__":
    main(*sys.argv[1:3])
