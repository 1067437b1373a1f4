"""kb.Graph on CUDA: a CUDA graph built node by node with explicit dependencies.

Each recorded step becomes a kernel, memset or memcpy node (``cuGraphAdd*Node``) whose
dependencies are the step's ``deps`` (from the buffers it reads and writes), so steps with no
path between them run concurrently on the GPU. Kernel arguments are packed once, at build, into
a parameter block per node; :func:`graph_update` repacks one and sets it on the instantiated
graph (``cuGraphExecKernelNodeSetParams``) without a rebuild. A replay is one ``cuGraphLaunch``.

Copies to or from pageable host memory are not made nodes: a graph with one is replayed step by
step by the core (build returns ``None``). Pinned host memory (``kernelbay_cuda.pinned_empty``) is.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Sequence
from typing import Any

from kernelbay.graphs import Step, pointer_access
from kernelbay.streams import Stream as KbStream
from kernelbay.types import Buffer, Device

from . import _driver, allocator, native
from .copies import PinnedMemory, pinned_owner
from .streams import ctypes_stream


class KernelNodeParams(ctypes.Structure):  # CUDA_KERNEL_NODE_PARAMS (v1)
    _fields_ = [
        ("func", ctypes.c_void_p),
        ("gridDimX", ctypes.c_uint),
        ("gridDimY", ctypes.c_uint),
        ("gridDimZ", ctypes.c_uint),
        ("blockDimX", ctypes.c_uint),
        ("blockDimY", ctypes.c_uint),
        ("blockDimZ", ctypes.c_uint),
        ("sharedMemBytes", ctypes.c_uint),
        ("kernelParams", ctypes.c_void_p),
        ("extra", ctypes.c_void_p),
    ]


class MemsetNodeParams(ctypes.Structure):  # CUDA_MEMSET_NODE_PARAMS
    _fields_ = [
        ("dst", ctypes.c_uint64),
        ("pitch", ctypes.c_size_t),
        ("value", ctypes.c_uint),
        ("elementSize", ctypes.c_uint),
        ("width", ctypes.c_size_t),
        ("height", ctypes.c_size_t),
    ]


class Memcpy3D(ctypes.Structure):  # CUDA_MEMCPY3D
    _fields_ = [
        ("srcXInBytes", ctypes.c_size_t),
        ("srcY", ctypes.c_size_t),
        ("srcZ", ctypes.c_size_t),
        ("srcLOD", ctypes.c_size_t),
        ("srcMemoryType", ctypes.c_int),
        ("srcHost", ctypes.c_void_p),
        ("srcDevice", ctypes.c_uint64),
        ("srcArray", ctypes.c_void_p),
        ("reserved0", ctypes.c_void_p),
        ("srcPitch", ctypes.c_size_t),
        ("srcHeight", ctypes.c_size_t),
        ("dstXInBytes", ctypes.c_size_t),
        ("dstY", ctypes.c_size_t),
        ("dstZ", ctypes.c_size_t),
        ("dstLOD", ctypes.c_size_t),
        ("dstMemoryType", ctypes.c_int),
        ("dstHost", ctypes.c_void_p),
        ("dstDevice", ctypes.c_uint64),
        ("dstArray", ctypes.c_void_p),
        ("reserved1", ctypes.c_void_p),
        ("dstPitch", ctypes.c_size_t),
        ("dstHeight", ctypes.c_size_t),
        ("WidthInBytes", ctypes.c_size_t),
        ("Height", ctypes.c_size_t),
        ("Depth", ctypes.c_size_t),
    ]


_HOST, _DEVICE = 1, 2  # CU_MEMORYTYPE_*

#: The most recorded steps a built graph lets run at once. The core makes independent steps
#: independent nodes; a CUDA graph with a thousand root nodes costs the host about a
#: microsecond per node at every cuGraphLaunch (measured on an H100), where a graph of a few
#: chains costs what a stream capture does. So step i also waits for step i - MAX_WIDTH: at most
#: this many chains, each in recorded order (an added edge only orders work, never reorders it).
#: Two, not four: each chain costs cuGraphLaunch host time (H100, 100 one-node kernels per
#: replay: 0.108 us per node with four chains, 0.061 with two, 0.038 with one, CuPy's captured
#: chain 0.022-0.040 in the same runs), and two still run two independent chains at once
#: (benchmarks/bench_streams_cuda.py: 0.50x serialised with two or four, 1.0x with one).
MAX_WIDTH = 2


def _side(x: Any) -> tuple[int, int] | None:
    """``(memory type, address)`` of a copy side, or ``None`` for pageable host memory."""
    if isinstance(x, Buffer):
        return _DEVICE, int(x.handle)
    # Only the user's own pinned arrays: a pooled result array (hostpool.py) can go back to its
    # pool while a replay still reads it, so the core replays such a graph step by step.
    return (_HOST, x.ctypes.data) if type(pinned_owner(x)) is PinnedMemory else None


class CudaGraph:
    """A built and instantiated CUDA graph, its nodes and their parameter blocks."""

    def __init__(self, device: Device, steps: Sequence[Step]) -> None:
        self.index = device.index
        self.graph = ctypes.c_void_p()
        self.exec = ctypes.c_void_p()
        self.nodes: list[ctypes.c_void_p] = []
        self.keep: dict[int, Any] = {}  # step index -> (params struct, parameter block)
        self.device = device
        # The kernelbay buffers the nodes use, for stream-ordered memory: a replay on a stream
        # notes their use there once per stream (allocator.note_uses), not once per replay.
        seen: dict[int, Buffer] = {}
        for s in steps:
            for x in (*s.args, s.src, s.dst):
                if isinstance(x, Buffer):
                    seen[id(x)] = x
        self.buffers = tuple(seen.values())
        self.noted: set[int] = set()
        self.noted_at = -1  # allocator.closed_streams when ``noted`` was last valid
        #: the native GraphEntry (a default-stream replay in C once graph_replay armed it), or None
        self.entry: Any = None
        lib = _driver.libcuda()
        _driver.ensure_current(self.index)
        self.ctx = ctypes.c_void_p(int(_driver.context(self.index)))
        _driver.check(lib.cuGraphCreate(ctypes.byref(self.graph), 0), "cuGraphCreate", self.index)
        try:
            for s in steps:
                self._add(lib, s)
            rc = lib.cuGraphInstantiateWithFlags(ctypes.byref(self.exec), self.graph, ctypes.c_ulonglong(0))
            _driver.check(rc, "cuGraphInstantiate", self.index)
        except BaseException:
            self.destroy()
            raise
        fn, addr = _graph_launch if _graph_launch else _native_graph_launch()
        entry_type = getattr(native.module(), "GraphEntry", None) if fn is not None else None
        if entry_type is not None:
            self.entry = entry_type(addr, self.exec.value, vars(allocator), self._failed)

    def _failed(self, rc: int) -> None:
        _driver.check(rc, "cuGraphLaunch", self.index)

    def _add(self, lib: ctypes.CDLL, s: Step) -> None:
        node = ctypes.c_void_p()
        on = list(s.deps)
        i = len(self.nodes)
        if MAX_WIDTH > 0 and i >= MAX_WIDTH and not any(d >= i - MAX_WIDTH for d in on):
            on.append(i - MAX_WIDTH)  # (a step that waits for a recent one is on a chain already)
        deps = (ctypes.c_void_p * max(1, len(on)))(*[self.nodes[d] for d in on])
        nd = ctypes.c_size_t(len(on))
        if s.kind == "launch":
            params = self._kernel_params(s)
            rc = lib.cuGraphAddKernelNode(ctypes.byref(node), self.graph, deps, nd, ctypes.byref(params))
        elif s.kind == "memset":
            p = MemsetNodeParams(int(s.dst.handle), s.nbytes, s.value & 0xFF, 1, s.nbytes, 1)
            self.keep[s.index] = p
            rc = lib.cuGraphAddMemsetNode(ctypes.byref(node), self.graph, deps, nd, ctypes.byref(p), self.ctx)
        else:
            cp = self._memcpy(s)
            self.keep[s.index] = cp
            rc = lib.cuGraphAddMemcpyNode(ctypes.byref(node), self.graph, deps, nd, ctypes.byref(cp), self.ctx)
        _driver.check(rc, f"adding {s.describe()} to a CUDA graph", self.index)
        self.nodes.append(node)

    def _kernel_params(self, s: Step) -> KernelNodeParams:
        """A kernel node's parameters: the kernel's plan for the launch, as the launcher's slow
        path makes it (a Triton kernel's fixed block, added shared memory and scratch pointers too)."""
        assert s.kernel is not None  # a launch step always has its kernel
        k = s.kernel.handle
        g, b, shm = k.geometry(s.grid, s.block, s.shared_mem)
        blk, scratch = k.packed_block(s.args, g)
        p = KernelNodeParams(k.function, *g, *b, shm, blk.kernel_params, None)
        # the arguments and scratch buffers stay alive with the node that points at them
        self.keep[s.index] = (p, blk, s.args, scratch)
        return p

    def _memcpy(self, s: Step) -> Memcpy3D:
        src, dst = _side(s.src), _side(s.dst)
        if src is None or dst is None:
            raise _Pageable
        p = Memcpy3D()
        p.srcMemoryType, p.dstMemoryType = src[0], dst[0]
        if src[0] == _HOST:
            p.srcHost = src[1]
        else:
            p.srcDevice = src[1]
        if dst[0] == _HOST:
            p.dstHost = dst[1]
        else:
            p.dstDevice = dst[1]
        p.WidthInBytes, p.Height, p.Depth = s.nbytes, 1, 1
        p.srcPitch = p.dstPitch = s.nbytes
        p.srcHeight = p.dstHeight = 1
        return p

    def update(self, s: Step) -> None:
        new = [x for x in s.args if isinstance(x, Buffer) and all(x is not b for b in self.buffers)]
        if new:
            self.buffers += tuple(new)
            self.noted.clear()
            if self.entry is not None:
                self.entry.disarm()  # the new buffers' use is noted by the next replay
        lib = _driver.libcuda()
        _driver.ensure_current(self.index)
        params = self._kernel_params(s)
        rc = lib.cuGraphExecKernelNodeSetParams(self.exec, self.nodes[s.index], ctypes.byref(params))
        _driver.check(rc, f"updating {s.describe()} of a CUDA graph", self.index)

    def destroy(self) -> None:
        if self.entry is not None:
            self.entry.disarm()
        if _driver.dead_reason(self.index) is not None:
            return
        lib = _driver.libcuda()
        if self.exec.value:
            lib.cuGraphExecDestroy(self.exec)
            self.exec = ctypes.c_void_p()
        if self.graph.value:
            lib.cuGraphDestroy(self.graph)
            self.graph = ctypes.c_void_p()


class _Pageable(Exception):
    """A copy of pageable host memory: this graph is replayed by the core instead."""


def graph_build(device: Device, steps: Sequence[Step]) -> CudaGraph | None:
    if not steps:
        return None
    try:
        return CudaGraph(device, steps)
    except _Pageable:
        return None


_graph_launch: list[Any] = []  # [native graph_launch or None, address of cuGraphLaunch], once


def _native_graph_launch() -> tuple[Any, int]:
    if not _graph_launch:
        mod = native.module()
        fn = getattr(mod, "graph_launch", None) if mod is not None else None
        addr = ctypes.cast(_driver.libcuda().cuGraphLaunch, ctypes.c_void_p).value or 0
        after_fork = getattr(mod, "after_fork", None)
        if after_fork is not None and hasattr(os, "register_at_fork"):
            os.register_at_fork(after_in_child=after_fork)  # a forked child's replays take the hook
        _graph_launch[:] = [fn, addr]
    return _graph_launch[0], _graph_launch[1]


def _note(graph: CudaGraph, s: Any, sv: int) -> None:
    if graph.noted_at != allocator.closed_streams:
        graph.noted.clear()
        graph.noted_at = allocator.closed_streams
    allocator.note_uses(graph.device, graph.buffers, s)
    graph.noted.add(sv)  # the buffers and their homes stay (a closed stream or an update re-notes)


def graph_replay(device: Device, graph: CudaGraph, stream: Any) -> None:
    s = None if stream is None else ctypes_stream(stream, device, "a graph replay")
    _driver.ensure_current(graph.index)
    sv = 0 if s is None else (s.value or 0)
    if sv not in graph.noted or graph.noted_at != allocator.closed_streams:
        _note(graph, s, sv)
    fn, addr = _graph_launch if _graph_launch else _native_graph_launch()
    if fn is not None:  # the native helper: no ctypes conversions per replay
        rc = fn(addr, graph.exec.value, None if s is None else s.value)
    else:
        rc = _driver.libcuda().cuGraphLaunch(graph.exec, s)
    if rc:
        _driver.check(rc, "cuGraphLaunch", graph.index)
    if graph.entry is not None:
        # this thread has the graph's context current and the stream's uses are noted (until a
        # stream closes): the next replays from here on the default stream, or on this very
        # kb.Stream, run in C (Direct)
        if s is None:
            graph.entry.arm(allocator.closed_streams)
        elif sv and stream.__class__ is KbStream:
            graph.entry.arm_stream(allocator.closed_streams, stream, sv)


def _direct_replay() -> Any:
    mod = native.module()
    if mod is None or not hasattr(mod, "GraphEntry"):
        return None
    return mod.Direct(3, {}, graph_replay, {})


graph_replay.kernelbay_direct = _direct_replay  # type: ignore[attr-defined]


def graph_update(device: Device, graph: CudaGraph, step: Step) -> bool:
    graph.update(step)
    return True


def graph_destroy(device: Device, graph: CudaGraph) -> None:
    graph.destroy()


def kernel_access(kernel: Any) -> tuple[str | None, ...] | None:
    k = kernel.handle
    if k is None or not kernel.source.text:
        return None
    modes = pointer_access(kernel.source.text, k.name.split("<")[0].strip())
    if modes is None or len(modes) != len(k.caller_params):
        return None
    return modes
