"""CUDA backend benchmarks: launch host cost, graph replay, cached allocation, compile cache (copies:
bench_cuda_copies).

Peers run interleaved in one process (see _timing). A peer that is not installed is recorded
with ``skipped`` and a reason instead of a figure.
"""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
import tempfile
import time
from typing import Any

from . import _timing as T

SUITE = "gpu"

SAXPY = r"""
extern "C" __global__ void saxpy(const float* x, float* y, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}
"""
EMPTY = 'extern "C" __global__ void nop(int* p) {}'

# The floor: cuLaunchKernel called from C, in a loop, with a prepacked parameter block (built
# like the backend's own helpers, through kernelbay.native; no CUDA headers needed).
_C_LOOP = r"""
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
typedef int (*cu_launch_t)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void *,
                           void **, void **);
static cu_launch_t cu_launch;
static void *fn, **params;
static PyObject *setup(PyObject *self, PyObject *args) {
    unsigned long long l, f, p;
    if (!PyArg_ParseTuple(args, "KKK", &l, &f, &p)) return NULL;
    cu_launch = (cu_launch_t)(uintptr_t)l, fn = (void *)(uintptr_t)f, params = (void **)(uintptr_t)p;
    Py_RETURN_NONE;
}
static PyObject *loop(PyObject *self, PyObject *arg) {
    long n = PyLong_AsLong(arg);
    int rc = 0;
    for (long i = 0; i < n && !rc; i++) rc = cu_launch(fn, 1, 1, 1, 32, 1, 1, 0, NULL, params, NULL);
    return PyLong_FromLong(rc);
}
static PyMethodDef methods[] = {{"setup", setup, METH_VARARGS, NULL}, {"loop", loop, METH_O, NULL}, {NULL, NULL, 0, NULL}};
static struct PyModuleDef def = {PyModuleDef_HEAD_INIT, "_kb_bench_cloop", NULL, -1, methods};
PyMODINIT_FUNC PyInit__kb_bench_cloop(void) { return PyModule_Create(&def); }
"""
C_LOOP_BATCH = 4  # launches per Python call of the C loop; its figure is divided by this


class _ForeignStream:
    """A stream of another library, seen only through the __cuda_stream__ protocol."""

    def __init__(self, handle: int) -> None:
        self.handle = handle

    def __cuda_stream__(self) -> tuple[int, int]:
        return (0, self.handle)


def _triton_add():
    import triton
    import triton.language as tl

    @triton.jit
    def add(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
        pid = tl.program_id(0)
        offs = pid * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)

    return add


def _core_fronts() -> str:
    """Whether the core's C fronts (kernelbay._fronts) serve this run: "native", or why not."""
    from kernelbay import _fronts

    return _fronts.status()


def _skip(group: str, name: str, why: str) -> dict:
    return {"group": group, "name": name, "unit": "us", "median": None, "skipped": why}


def _launch(quick: bool, dev, out: list[dict]) -> None:
    import kernelbay as kb
    import numpy as np
    from cuda.bindings import driver as d
    from kernelbay_cuda import _driver

    n = 32
    k = kb.compile(kb.Source(SAXPY, "cuda"), dev)
    x = kb.asarray(np.ones(n, np.float32), device=dev)
    y = kb.zeros(n, "float32", device=dev)
    a, nn = np.float32(2), np.int32(n)
    args = (x, y, a, nn)
    k.launch(1, 32, args)
    h = k.handle
    fn = d.CUfunction(h.function)
    # The raw driver binding with its own prepacked parameter block.
    vals = (ctypes.c_uint64(x.handle), ctypes.c_uint64(y.handle), ctypes.c_float(2), ctypes.c_int(n))
    ptrs = (ctypes.c_void_p * 4)(*[ctypes.addressof(v) for v in vals])
    addr = ctypes.addressof(ptrs)
    s0 = d.CUstream(0)
    lib = _driver.libcuda()
    owner = dev.stream()
    stream = owner.handle  # the backend's stream handle (what kernelbay_cuda.Stream made until now)
    foreign = _ForeignStream(stream.handle)
    kst = dev.stream()  # the portable form: a kb.Stream holding such a handle
    s_user = d.CUstream(kst.handle.handle)
    kcfg = kb.LaunchConfig(grid=(1,), block=(32,))
    from kernelbay import _fronts

    # Kernel.launch's Python function, which the core's C front stands in for (kernelbay._fronts):
    # the README's spelling through it is the "before" of the front's rows.
    py_launch = _fronts.twins().get("launch", kb.Kernel.launch)
    cases = {
        # one row per call form (the tuple form is the README's, the headline)
        "kernelbay": lambda: k.launch(1, 32, args),
        "kernelbay-tuple": lambda: k.launch((1,), (32,), args),
        "kernelbay-3tuple": lambda: k.launch((1, 1, 1), (32, 1, 1), args),
        "kernelbay-config": lambda: k.launch(config=kcfg, args=args),
        "kernelbay-keywords": lambda: k.launch(grid=(1,), block=(32,), args=args),
        "kernelbay-call": lambda: k((1,), (32,), args),
        "kernelbay-python-path": lambda: py_launch(k, (1,), (32,), args),
        "kernelbay-stream": lambda: k.launch((1,), (32,), args, stream=stream),
        "kernelbay-kb-stream": lambda: k.launch((1,), (32,), args, stream=kst),
        "kernelbay-foreign-stream": lambda: k.launch((1,), (32,), args, stream=foreign),
        "driver-prepacked": lambda: d.cuLaunchKernel(fn, 1, 1, 1, 32, 1, 1, 0, s0, addr, 0),
        # the same on the user stream: what the driver itself costs more there than on stream 0
        "driver-prepacked-user-stream": lambda: d.cuLaunchKernel(fn, 1, 1, 1, 32, 1, 1, 0, s_user, addr, 0),
        "driver-tuple": lambda: d.cuLaunchKernel(
            fn,
            1,
            1,
            1,
            32,
            1,
            1,
            0,
            s0,
            ((x.handle, y.handle, 2.0, n), (ctypes.c_void_p, ctypes.c_void_p, ctypes.c_float, ctypes.c_int)),
            0,
        ),
        "ctypes-prepacked": lambda: lib.cuLaunchKernel(
            h.ctypes_function, 1, 1, 1, 32, 1, 1, 0, None, h.param_block.ctypes_kernel_params, None
        ),
    }
    from kernelbay_cuda import native

    nat = native.module()
    try:
        from kernelbay.native import load_extension

        cl = load_extension("_kb_bench_cloop", _C_LOOP)
        cl.setup(ctypes.cast(lib.cuLaunchKernel, ctypes.c_void_p).value, h.function, addr)
        cl.loop(1)
        cases["c-loop"] = lambda: cl.loop(C_LOOP_BATCH)
    except Exception as exc:
        out.append(_skip("launch", "c-loop", f"the C loop cannot be built: {exc!r}"))
    try:
        import torch

        ts = torch.cuda.Stream(device=dev.index)
        k.launch((1,), (32,), args, stream=ts)
        cases["kernelbay-torch-stream"] = lambda: k.launch((1,), (32,), args, stream=ts)
    except Exception as exc:
        out.append(_skip("launch", "kernelbay-torch-stream", f"torch unusable: {exc!r}"))
    _triton_cases(dev, cases, out)
    if nat is not None:
        cases["native-prepacked"] = lambda: nat.launch(h.function, 1, 1, 1, 32, 1, 1, 0, 0, addr)
        # The same kernel launched by kernelbay with the native helpers turned off (a distinct
        # source, so it gets its own fast path, built while the helpers look unavailable).
        saved = native._state[:]
        native._state[:] = [None, "turned off for the benchmark"]
        try:
            kb_ = kb.compile(kb.Source(SAXPY + "// no native helpers\n", "cuda"), dev)
            kb_.launch(1, 32, args)
            kb_.launch(1, 32, args)
        finally:
            native._state[:] = saved
        cases["kernelbay-bindings"] = lambda: kb_.launch(1, 32, args)
        cases["kernelbay-bindings-tuple"] = lambda: kb_.launch((1,), (32,), args)  # the README spelling
    else:
        out.append(_skip("launch", "native-prepacked", f"native helpers unavailable: {native.status()}"))
    try:
        import cupy as cp

        rk = cp.RawKernel(SAXPY, "saxpy")
        xc, yc = cp.ones(n, cp.float32), cp.zeros(n, cp.float32)
        rk((1,), (32,), (xc, yc, a, nn))
        cases["cupy"] = lambda: rk((1,), (32,), (xc, yc, a, nn))
    except Exception as exc:
        out.append(_skip("launch", "cupy", f"CuPy unusable: {exc!r}"))
    try:
        try:
            from cuda.core import Device, LaunchConfig, Program, ProgramOptions, launch
        except ImportError:
            from cuda.core.experimental import Device, LaunchConfig, Program, ProgramOptions, launch
        cd = Device(dev.index)
        cd.set_current()
        cc = dev.properties["compute_capability"]
        ker = (
            Program(SAXPY, code_type="c++", options=ProgramOptions(arch=f"sm_{cc[0]}{cc[1]}"))
            .compile("cubin")
            .get_kernel("saxpy")
        )
        cs = cd.default_stream
        ccfg = LaunchConfig(grid=1, block=32)
        xp, yp = np.uint64(x.handle), np.uint64(y.handle)
        launch(cs, ccfg, ker, xp, yp, a, nn)
        cases["cuda.core"] = lambda: launch(cs, ccfg, ker, xp, yp, a, nn)
    except Exception as exc:
        out.append(_skip("launch", "cuda.core", f"cuda.core unusable: {exc!r}"))
    dev.synchronize()

    def sync() -> None:
        dev.synchronize()
        stream.synchronize()

    res = T.interleaved(cases, number=100 if quick else 500, repeat=5 if quick else 30, after_batch=sync)
    for name, st in res.items():
        if name == "c-loop":
            st = {key: (v / C_LOOP_BATCH if key != "n" else v) for key, v in st.items()}
        out.append(T.record("launch", name, st))


def _triton_cases(dev, cases: dict, out: list[dict]) -> None:
    """Triton's own ``kernel[grid](...)`` and the same cubin launched by kernelbay (vector add)."""
    import kernelbay as kb
    import numpy as np

    n = 1024
    try:
        add = _triton_add()
        meta = {"signature": ["*fp32", "*fp32", "*fp32", "i32"], "constexprs": {"BLOCK": 1024}, "num_warps": 4}
        kt = kb.compile(kb.Source(add, "triton", meta=meta), dev)
    except Exception as exc:
        out.append(_skip("launch", "triton-kernelbay", f"Triton unusable: {exc!r}"))
        return
    x = kb.asarray(np.ones(n, np.float32), device=dev)
    o = kb.zeros(n, "float32", device=dev)
    targs = (x, x, o, n)
    kt.launch((1,), args=targs)
    cases["triton-kernelbay"] = lambda: kt.launch((1,), args=targs)
    try:
        import torch

        tx = torch.ones(n, device=f"cuda:{dev.index}")
        to = torch.empty_like(tx)
        add[(1,)](tx, tx, to, n, BLOCK=1024)
        cases["triton"] = lambda: add[(1,)](tx, tx, to, n, BLOCK=1024)
    except Exception as exc:
        out.append(_skip("launch", "triton", f"Triton's own launch needs torch tensors: {exc!r}"))


def _graph(quick: bool, dev, out: list[dict]) -> None:
    import warnings

    import kernelbay as kb
    import kernelbay_cuda as kc

    k = kb.compile(kb.Source(EMPTY, "cuda"), dev)
    p = kb.zeros(1, "int32", device=dev)
    nodes = 100 if quick else 1000
    with warnings.catch_warnings():  # the stream capture of 0.1, deprecated but kept: the same figure as before
        warnings.simplefilter("ignore", DeprecationWarning)
        g = kc.Graph(dev)
    with g.capture() as s:
        for _ in range(nodes):
            k.launch(1, 32, (p,), stream=s)
    g.replay()
    g.synchronize()

    def once() -> None:
        g.replay()
        g.synchronize()

    res = T.interleaved({"kernelbay": once}, number=1, repeat=5 if quick else 30)
    st = {key: (v / nodes if key != "n" else v) for key, v in res["kernelbay"].items()}
    out.append(T.record("graph-replay-per-kernel", "kernelbay", st, nodes=nodes))


def _graph_peers(quick: bool, dev, out: list[dict]) -> None:
    """Host time of one graph replay (the launch call alone; the GPU work is waited for outside
    the timing), per kernel node, for kb.Graph and CuPy's captured graph of the same kernels,
    each node with its own buffer (as real graphs have), at 100 and 1000 nodes. kb.Graph twice:
    ``dev.graph(serial=True)`` (one chain in recorded order: the graph CuPy's stream capture
    makes) and ``dev.graph()`` (independent launches run concurrently, on at most two chains);
    and the wall time of replay + synchronize per node (``graph-replay-wall-*``), where the
    concurrent graph's shape pays off. The serial graph also replayed on a ``dev.stream()``
    (``kernelbay-stream``; CuPy's on a blocking stream too, as ``dev.stream()`` is: ``cupy-blocking-stream``;
    and on the legacy default stream, where ``g.replay()`` goes: ``cupy-null-stream``).
    CuPy twice more: one stream captured (``cupy``, one chain)
    and two streams forked and joined inside the capture, launches alternating between them
    (``cupy-two-streams``: the two-chain shape ``dev.graph()`` gives these launches; also on the
    legacy default stream, ``cupy-two-streams-null-stream``), so that each kb.Graph form is
    compared with CuPy's graph of the same shape, on its own stream and on the same stream."""
    import time

    import kernelbay as kb

    try:
        import cupy as cp
    except Exception as exc:
        cp = None
        out.append(_skip("graph-replay-host", "cupy", repr(exc)))
    k = kb.compile(kb.Source(EMPTY, "cuda"), dev)
    for nodes in (100, 1000):
        ps = [kb.zeros(1, "int32", device=dev) for _ in range(nodes)]
        with dev.graph(serial=True) as g:
            for p in ps:
                k.launch(1, 32, (p,))
        with dev.graph() as gc:
            for p in ps:
                k.launch(1, 32, (p,))
        ks = dev.stream()
        cases = {
            "kernelbay": (g.replay, dev.synchronize),
            "kernelbay-concurrent": (gc.replay, dev.synchronize),
            "kernelbay-stream": (lambda g=g, ks=ks: g.replay(ks), ks.synchronize),
        }
        if cp is not None:
            ck = cp.RawKernel(EMPTY, "nop")
            cps = [cp.zeros(1, cp.int32) for _ in range(nodes)]
            cs = cp.cuda.Stream(non_blocking=True)
            with cs:
                ck((1,), (32,), (cps[0],))
            cs.synchronize()
            cs.begin_capture()
            for p in cps:
                ck((1,), (32,), (p,), stream=cs)
            cg = cs.end_capture()
            cases["cupy"] = (lambda cg=cg, cs=cs: cg.launch(cs), cs.synchronize)
            side = cp.cuda.Stream(non_blocking=True)
            fork, join = cp.cuda.Event(disable_timing=True), cp.cuda.Event(disable_timing=True)
            cs.begin_capture()
            fork.record(cs)
            side.wait_event(fork)
            for i, p in enumerate(cps):
                ck((1,), (32,), (p,), stream=cs if i % 2 == 0 else side)
            join.record(side)
            cs.wait_event(join)
            cg2 = cs.end_capture()
            cases["cupy-two-streams"] = (lambda cg2=cg2, cs=cs: cg2.launch(cs), cs.synchronize)
            cb = cp.cuda.Stream()  # a blocking stream, as dev.stream() makes
            cases["cupy-blocking-stream"] = (lambda cg=cg, cb=cb: cg.launch(cb), cb.synchronize)
            null = cp.cuda.Stream.null  # the legacy default stream, where kb's default-stream replay goes
            cases["cupy-null-stream"] = (lambda cg=cg, null=null: cg.launch(null), null.synchronize)
            # the two-chain graph on the legacy default stream too: kb's g.replay() goes there,
            # and a launch there costs the driver more than on a non-blocking stream
            cases["cupy-two-streams-null-stream"] = (lambda cg2=cg2, null=null: cg2.launch(null), null.synchronize)
        samples: dict[str, list[float]] = {n: [] for n in cases}
        walls: dict[str, list[float]] = {n: [] for n in cases}
        for _ in range(3):  # warm-up
            for replay, sync in cases.values():
                replay()
                sync()
        # a new order each round: no case always follows the same one (a replay right after
        # another library's launch and wait is slower or faster by microseconds at 1000 nodes)
        for names in T.rounds(list(cases), 20 if quick else 200, seed=nodes):
            for name in names:
                replay, sync = cases[name]
                t0 = time.perf_counter()
                replay()
                t1 = time.perf_counter()
                sync()
                t2 = time.perf_counter()
                samples[name].append((t1 - t0) * 1e6 / nodes)
                walls[name].append((t2 - t0) * 1e6 / nodes)
        for name, ss in samples.items():
            out.append(T.record(f"graph-replay-host-{nodes}", name, T.stats(ss), nodes=nodes))
            out.append(T.record(f"graph-replay-wall-{nodes}", name, T.stats(walls[name]), nodes=nodes))
        g.close()
        gc.close()
        ks.close()


def _alloc(quick: bool, dev, out: list[dict]) -> None:
    import kernelbay as kb
    from cuda.bindings import driver as d
    from kernelbay_cuda import allocator

    size = 1 << 20
    kb.buffer(size, dev).close()
    al = allocator.allocator(dev)
    from kernelbay.types import Buffer

    class _NoMemory:  # the core's floor: a Buffer made and closed around an allocator that does nothing
        __slots__ = ()

        def free(self, device, handle) -> None:
            pass

    nomem = _NoMemory()
    from kernelbay import _fronts

    twins = _fronts.twins()  # the Python functions the core's C fronts stand in for ("before")
    py_buffer, py_close = twins.get("buffer", kb.buffer), twins.get("close", Buffer.close)
    cases = {
        "kernelbay": lambda: kb.buffer(size, dev).close(),
        "kernelbay-python-path": lambda: py_close(py_buffer(size, dev)),
        "kernelbay-buffer-object-only": lambda: Buffer(dev, size, 1, nomem).close(),
        "kernelbay-allocator": lambda: al.free(al.malloc(size)),
        "driver": lambda: d.cuMemFree(d.cuMemAlloc(size)[1]),
    }
    try:
        import cupy as cp

        cp.cuda.alloc(size)
        cases["cupy"] = lambda: cp.cuda.alloc(size)
    except Exception as exc:
        out.append(_skip("alloc-free-1MiB", "cupy", repr(exc)))
    try:
        import torch

        torch.empty(size, dtype=torch.uint8, device=f"cuda:{dev.index}")
        cases["torch"] = lambda: torch.empty(size, dtype=torch.uint8, device=f"cuda:{dev.index}")
    except Exception as exc:
        out.append(_skip("alloc-free-1MiB", "torch", repr(exc)))
    res = T.interleaved(cases, number=200 if quick else 2000, repeat=5 if quick else 30)
    for name, st in res.items():
        out.append(T.record("alloc-free-1MiB", name, st))


def _alloc_streams(quick: bool, dev, out: list[dict]) -> None:
    """kb.empty + close and kb.buffer + close beside CuPy and PyTorch, in three conditions: no
    user stream, a user stream alive (the allocator then used to record an event per free), and
    inside ``with stream:`` (each library's own stream context)."""
    import kernelbay as kb
    import numpy as np

    size = 1 << 20
    try:
        import cupy as cp
    except Exception as exc:
        cp = None
        out.append(_skip("empty-close-1MiB", "cupy", repr(exc)))
    try:
        import torch
    except Exception as exc:
        torch = None
        out.append(_skip("empty-close-1MiB", "torch", repr(exc)))
    tdev = f"cuda:{dev.index}"
    from kernelbay import _fronts

    twins = _fronts.twins()
    py_buffer, py_empty, py_close = twins.get("buffer", kb.buffer), twins.get("empty", kb.empty), twins.get("close")
    if py_close is None:
        py_close = kb.Buffer.close

    def cases() -> dict:
        c = {
            "kernelbay": lambda: kb.empty(size, np.uint8, dev).close(),
            "kernelbay-buffer": lambda: kb.buffer(size, dev).close(),
            # the same through the Python functions the core's C fronts stand in for ("before")
            "kernelbay-python-path": lambda: py_close(py_empty(size, np.uint8, dev)),
            "kernelbay-buffer-python-path": lambda: py_close(py_buffer(size, dev)),
        }
        if cp is not None:
            pool = cp.get_default_memory_pool()
            c["cupy"] = lambda: cp.empty(size, cp.uint8)
            c["cupy-pool-malloc"] = lambda: pool.malloc(size)
        if torch is not None:
            c["torch"] = lambda: torch.empty(size, dtype=torch.uint8, device=tdev)
        return c

    number, repeat = (200, 5) if quick else (2000, 30)
    for name, st in T.interleaved(cases(), number=number, repeat=repeat).items():
        out.append(T.record("empty-close-1MiB", name, st))
    alive = dev.stream()
    for name, st in T.interleaved(cases(), number=number, repeat=repeat).items():
        out.append(T.record("empty-close-1MiB-stream-alive", name, st))
    # Inside each library's own stream context: kernelbay's `with s:`, CuPy's `with cp Stream`,
    # PyTorch's `with torch.cuda.stream(...)`.
    s = dev.stream()
    ctxs = [s]
    if cp is not None:
        ctxs.append(cp.cuda.Stream(non_blocking=False))
    if torch is not None:
        ctxs.append(torch.cuda.stream(torch.cuda.Stream(device=tdev)))
    import contextlib

    with contextlib.ExitStack() as es:
        for c in ctxs:
            es.enter_context(c)
        for name, st in T.interleaved(cases(), number=number, repeat=repeat).items():
            out.append(T.record("empty-close-1MiB-in-stream", name, st))
    s.close()
    alive.close()


_CHILD = r"""
import json, os, sys, time
import kernelbay as kb
src = kb.Source(sys.argv[1], "cuda")
dev = kb.device("cuda:0")
kb.zeros(1, "int32", device=dev).numpy()   # context creation, not counted
t0 = time.perf_counter()
k = kb.compile(src, dev)
t1 = time.perf_counter()
print(json.dumps({"ms": (t1 - t0) * 1e3}))
"""


def _compile(quick: bool, dev, out: list[dict]) -> None:
    import kernelbay as kb

    src = kb.Source(SAXPY, "cuda")
    kb.compile(src, dev)
    res = T.interleaved({"kernelbay": lambda: kb.compile(src, dev)}, number=1000, repeat=5 if quick else 20)
    out.append(T.record("compile-inprocess-hit", "kernelbay", res["kernelbay"]))
    fresh = SAXPY + f"\n// cold {time.time_ns()}\n"
    t0 = time.perf_counter()
    kb.compile(kb.Source(fresh, "cuda"), dev)
    cold = (time.perf_counter() - t0) * 1e3
    out.append(T.record("compile-cold", "kernelbay", {"median": cold, "p10": cold, "p90": cold, "n": 1}, unit="ms"))
    times = []
    for _ in range(3 if quick else 7):
        cp = subprocess.run([sys.executable, "-c", _CHILD, fresh], capture_output=True, text=True, env=os.environ)
        if cp.returncode:
            out.append(_skip("compile-disk-hit-fresh-process", "kernelbay", cp.stderr[-500:]))
            return
        times.append(json.loads(cp.stdout.strip().splitlines()[-1])["ms"])
    out.append(T.record("compile-disk-hit-fresh-process", "kernelbay", T.stats(times), unit="ms"))


def cuda_device() -> tuple[Any, list[dict]]:
    """The CUDA device to time (a fresh compile cache unless KERNELBAY_CACHE_DIR names one), or
    ``None`` and the skipped record saying why there is none here. The gpu modules' start."""
    import kernelbay as kb

    os.environ.setdefault("KERNELBAY_CACHE_DIR", tempfile.mkdtemp(prefix="kbcache-"))
    try:
        return kb.device("cuda"), []
    except kb.BackendError as exc:
        return None, [_skip("all", "kernelbay", f"no CUDA device: {exc}")]


def run(quick: bool) -> list[dict]:
    dev, skipped = cuda_device()
    if dev is None:
        return skipped
    out: list[dict] = [
        {
            "group": "device",
            "name": dev.name,
            "unit": "",
            "median": None,
            "properties": {k: v for k, v in dev.properties.items() if isinstance(v, (int, str))},
            "core_fronts": _core_fronts(),
        }
    ]
    return T.run_parts((_launch, _graph, _graph_peers, _alloc, _alloc_streams, _compile), quick, dev, out=out)


def goals(records: list[dict]) -> list[dict]:
    out: list[dict] = []

    def med(group: str, name: str) -> float | None:
        return T.median_of(records, group, name)

    forms = (
        "kernelbay-tuple",
        "kernelbay",
        "kernelbay-3tuple",
        "kernelbay-config",
        "kernelbay-keywords",
        "kernelbay-call",
        "kernelbay-stream",
        "kernelbay-kb-stream",
        "kernelbay-foreign-stream",
        "kernelbay-torch-stream",
    )
    ratios = [  # (group, kernelbay's row, peer's row, goal text, limit, higher is better)
        *[
            (
                "launch",
                f,
                "driver-prepacked",
                f"launch host time, {f}, vs driver binding with prepacked pointer",
                1.0,
                False,
            )
            for f in forms
        ],
        *[("launch", f, "c-loop", f"launch host time, {f}, vs the C cuLaunchKernel loop", 1.3, False) for f in forms],
        *[
            (
                "launch",
                f,
                "driver-prepacked-user-stream",
                f"launch host time, {f}, vs driver binding with prepacked pointer on the same user stream",
                1.0,
                False,
            )
            for f in ("kernelbay-stream", "kernelbay-kb-stream", "kernelbay-foreign-stream")
        ],
        (
            "launch",
            "triton-kernelbay",
            "triton",
            "Triton kernel launched by kernelbay vs Triton's kernel[grid]",
            0.35,
            False,
        ),
        ("launch", "kernelbay", "cupy", "launch host time vs CuPy RawKernel", 0.85, False),
        (
            "alloc-free-1MiB",
            "kernelbay",
            "cupy",
            "cached allocate+free 1 MiB vs CuPy pool (kb.buffer + close vs cp.cuda.alloc + release)",
            0.6,
            False,
        ),
        (
            "alloc-free-1MiB",
            "kernelbay-allocator",
            "cupy",
            "(same, the backend's allocator alone, without the Buffer object)",
            0.6,
            False,
        ),
        *[
            (
                f"graph-replay-host-{n}",
                "kernelbay",
                "cupy",
                f"kb.Graph replay host time vs CuPy graph launch, {n} nodes (serial=True: the same one chain)",
                1.1,
                False,
            )
            for n in (100, 1000)
        ],
        *[
            (
                f"graph-replay-host-{n}",
                "kernelbay",
                "cupy-null-stream",
                f"kb.Graph replay host time vs CuPy graph launch, {n} nodes, both on the legacy default stream "
                "(serial=True)",
                1.1,
                False,
            )
            for n in (100, 1000)
        ],
        *[
            (
                f"graph-replay-host-{n}",
                "kernelbay-stream",
                "cupy",
                f"kb.Graph replay(stream) host time vs CuPy graph launch on its stream, {n} nodes (serial=True)",
                1.1,
                False,
            )
            for n in (100, 1000)
        ],
        *[
            (
                f"graph-replay-host-{n}",
                "kernelbay-stream",
                "cupy-blocking-stream",
                f"kb.Graph replay(stream) host time vs CuPy graph launch, {n} nodes, both on a blocking stream "
                "(dev.stream(), cp.cuda.Stream(); serial=True)",
                1.1,
                False,
            )
            for n in (100, 1000)
        ],
        *[
            (
                f"graph-replay-host-{n}",
                "kernelbay-concurrent",
                "cupy-two-streams",
                f"kb.Graph replay host time vs CuPy graph launch, {n} nodes (dev.graph(): two chains, "
                "CuPy's captured from two streams)",
                1.1,
                False,
            )
            for n in (100, 1000)
        ],
        *[
            (
                f"graph-replay-host-{n}",
                "kernelbay-concurrent",
                "cupy-two-streams-null-stream",
                f"kb.Graph replay host time vs CuPy graph launch, {n} nodes, both on the legacy default stream "
                "(dev.graph(): two chains, CuPy's captured from two streams)",
                1.1,
                False,
            )
            for n in (100, 1000)
        ],
        *[
            (g, "kernelbay", "cupy", f"kb.empty + close vs cp.empty ({what})", 0.6, False)
            for g, what in (
                ("empty-close-1MiB", "no user stream"),
                ("empty-close-1MiB-stream-alive", "a user stream alive"),
                ("empty-close-1MiB-in-stream", "inside each library's stream context"),
            )
        ],
        *[
            (g, "kernelbay-buffer", "cupy-pool-malloc", f"kb.buffer + close vs CuPy pool.malloc ({what})", 1.0, False)
            for g, what in (
                ("empty-close-1MiB", "no user stream"),
                ("empty-close-1MiB-stream-alive", "a user stream alive"),
                ("empty-close-1MiB-in-stream", "inside each library's stream context"),
            )
        ],
    ]
    absolute = [  # (group, goal text, limit) on kernelbay's own median
        ("graph-replay-per-kernel", "graph replay, us per kernel", 1.2),
        ("compile-inprocess-hit", "compile: in-process cache hit, us", 20.0),
        ("compile-disk-hit-fresh-process", "compile: disk-cache hit in a fresh process, ms (context excluded)", 5.0),
    ]
    for group, mine, peer, text, limit, higher in ratios:
        r = T.ratio(records, group, mine, peer)
        if r is not None:
            out.append(T.goal(text, r, limit, higher_is_better=higher))
    for group, text, limit in absolute:
        m = med(group, "kernelbay")
        if m is not None:
            out.append(T.goal(text, m, limit))
    return out
