"""Graphs for the cpu backend: a replay is one native call over an array of packed steps.

At build time every step becomes a ``kb_step`` -- the kernel's native launcher with its own
argument slots and geometry, or a memmove/memset with its pointers -- and a replay hands the
whole array to ``kb_graph_run``, a dozen lines of C compiled once per machine (and cached like a
kernel), which runs the steps in recorded order (a valid order of their dependencies; each
launch already spreads over the cores) without the GIL and without Python per step.
"""

from __future__ import annotations

import ctypes
import functools
import os
import threading
from collections.abc import Sequence
from typing import Any

from kernelbay.cache import lookup, make_key, store
from kernelbay.errors import LaunchError, UnsupportedError
from kernelbay.graphs import Step, pointer_access
from kernelbay.types import Device, Kernel

from . import _driver, _loader, launcher, streams

RUNNER_SRC = r"""
#include <stdint.h>
#include <string.h>
typedef int (*kb_launch_t)(void**, const int*, int);
typedef struct { int64_t kind; void* fn; void* a; void* b; int64_t n; } kb_step;
/* kind 0: fn(a = argv, b = geometry, n = dynamic shared memory); 1: memmove(a, b, n);
   2: memset(a, (int)b, n).
   Returns 0, or 1 + the index of the launch that failed plus its status times 2^40. */
extern "C" __attribute__((visibility("default"))) int64_t kb_graph_run(const kb_step* s, int64_t count) {
    for (int64_t i = 0; i < count; ++i) {
        const kb_step* t = s + i;
        if (t->kind == 0) {
            const int st = ((kb_launch_t)t->fn)((void**)t->a, (const int*)t->b, (int)t->n);
            if (st) return (i + 1) + ((int64_t)st << 40);
        } else if (t->kind == 1) {
            memmove(t->a, t->b, (size_t)t->n);
        } else {
            memset(t->a, (int)(intptr_t)t->b, (size_t)t->n);
        }
    }
    return 0;
}
"""


class _KbStep(ctypes.Structure):
    _fields_ = [
        ("kind", ctypes.c_int64),
        ("fn", ctypes.c_void_p),
        ("a", ctypes.c_void_p),
        ("b", ctypes.c_void_p),
        ("n", ctypes.c_int64),
    ]


_runner: Any = None
_runner_lock = threading.Lock()


def runner() -> Any:
    """``kb_graph_run`` from the shared object built once per toolchain (disk-cached)."""
    global _runner
    if _runner is None:
        with _runner_lock:
            if _runner is None:
                _runner = _build_runner()
    return _runner


def _build_runner() -> Any:
    tc = _driver.toolchain()
    key = make_key(
        backend="cpu-graph-runner",
        compiler=" ".join(tc.argv),
        compiler_version=tc.version,
        arch=os.uname().machine,
        source=RUNNER_SRC,
    )
    cache, hit = lookup(key)
    image = hit.payload if hit is not None else None
    if image is None:
        import subprocess  # only where a compiler runs: importing the plugin stays light
        import tempfile

        with tempfile.TemporaryDirectory(prefix="kernelbay-cpu-graph-") as d:
            src, out = os.path.join(d, "runner.cpp"), os.path.join(d, "runner.so")
            with open(src, "w") as f:
                f.write(RUNNER_SRC)
            r = subprocess.run([*tc.argv, "-O2", "-shared", "-fPIC", src, "-o", out], capture_output=True, text=True)
            if r.returncode:
                raise UnsupportedError(f"the cpu graph runner did not compile: {(r.stdout + r.stderr)[-400:]}")
            with open(out, "rb") as f:
                image = f.read()
        store(cache, key, image, {"kind": "graph-runner"})
    lib = _loader.load_library(image, kernel=False)  # built without OpenMP
    fn: Any = lib.kb_graph_run  # a ctypes function, given an attribute below
    fn.restype = ctypes.c_int64
    fn.argtypes = [ctypes.c_void_p, ctypes.c_int64]
    fn._kb_lib = lib  # keep the library loaded as long as the function
    return fn


class CpuGraph:
    """A built graph: the packed step array and what keeps its slots and memory alive."""

    def __init__(self, steps: Sequence[Step]) -> None:
        self.steps = list(steps)
        self.array = (_KbStep * max(len(steps), 1))()
        self.keep: list[Any] = [None] * len(steps)
        self.names: list[tuple[Any, str]] = [(None, "")] * len(steps)
        for s in steps:
            self.pack(s)
        self.addr = ctypes.addressof(self.array)
        self.count = len(steps)

    def pack(self, s: Step) -> None:
        t = self.array[s.index]
        if s.kind == "launch":
            assert s.kernel is not None
            fn, argv, geom, shm, keep = launcher.pack(s.kernel, s.grid, s.block, s.args, s.shared_mem)
            t.kind, t.fn, t.a, t.b, t.n = (
                0,
                ctypes.cast(fn, ctypes.c_void_p).value,
                ctypes.addressof(argv),
                ctypes.addressof(geom),
                shm,
            )
            self.keep[s.index] = (argv, keep)
            self.names[s.index] = (s.kernel.handle.lib, s.kernel.handle.name)
        elif s.kind == "copy":
            t.kind, t.fn, t.a, t.b, t.n = 1, None, streams.address_of(s.dst), streams.address_of(s.src), s.nbytes
            self.keep[s.index] = (s.dst, s.src)
        else:
            t.kind, t.fn, t.a, t.b, t.n = 2, None, streams.address_of(s.dst), s.value, s.nbytes
            self.keep[s.index] = (s.dst,)

    def run(self) -> None:
        r = runner()(self.addr, self.count)
        if r:
            failed, status = r & ((1 << 40) - 1), r >> 40
            lib, name = self.names[failed - 1]
            _driver.check(status or 1, lib, name)  # a fault, a deadline, Ctrl-C: as the launch itself says
            raise LaunchError(f"graph step {failed - 1} ({name!r}) failed on cpu")


def _run_keeping(graph: CpuGraph, keep: object) -> None:
    """Run ``graph``; ``keep`` (its steps' argument slots) lives as long as the queued job."""
    graph.run()


def graph_build(device: Device, steps: Sequence[Step]) -> CpuGraph:
    return CpuGraph(steps)


def graph_replay(device: Device, graph: CpuGraph, stream: Any) -> None:
    q = streams.queue_of(stream)
    if q is None:
        if streams.pending:
            streams.drain_all()
        graph.run()
        return
    # Hold the memory the steps use until the replay has run (a buffer closed meanwhile), and keep
    # the steps' argument slots (a graph closed or dropped meanwhile: graph_destroy drops them).
    used = {id(x): x for s in graph.steps for x in s.reads + s.writes}
    q.put(functools.partial(_run_keeping, graph, graph.keep), streams.hold(list(used.values())))


def graph_update(device: Device, graph: CpuGraph, step: Step) -> bool:
    if streams.pending:  # a queued replay runs with the arguments it was queued with
        streams.drain_all()
    graph.pack(step)
    return True


def graph_destroy(device: Device, graph: CpuGraph) -> None:
    graph.keep = []


def kernel_access(kernel: Kernel) -> tuple[str | None, ...] | None:
    h = kernel.handle
    if h is None:
        return None
    modes = pointer_access(kernel.source.text, h.name)
    return modes if modes is not None and len(modes) == h.nparams else None
