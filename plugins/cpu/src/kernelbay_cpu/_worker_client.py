"""The caller's side of the isolated and checked modes: launches run in a worker process
(:mod:`kernelbay_cpu._worker`) over shared memory.

``KERNELBAY_CPU_ISOLATE=1``: a fault in a kernel (out-of-bounds write, null dereference, integer
division by zero, assert, stack overflow) ends the worker, not the program: the launch raises
``LaunchError`` naming the signal and the kernel, and the next launch starts a new worker.

``KERNELBAY_CPU_CHECK=address``: kernels are also compiled with ``-fsanitize=address,undefined``
and the worker runs with the sanitizer runtime preloaded (it must be the first library of a
process: it cannot be loaded into a running Python). An out-of-bounds access, or undefined
behaviour such as an integer division by zero, raises ``LaunchError`` with the sanitizer's
report, which names the kernel's source line.

Buffers live in shared memory (one ``memfd`` each) mapped at the same address in both
processes, so the pointers a kernel receives mean the same thing in the worker. Only buffers
passed as arguments are mapped there (a pointer to another buffer stored inside a struct is
not). DLPack imports are copied (foreign memory is not shared).

The modes' settings are read by :func:`kernelbay_cpu._driver.isolated`; this module is imported
only in those modes (by the allocator and the compiler), so a default-mode process does not
load its sockets, pickling and shared memory.
"""

from __future__ import annotations

import atexit
import ctypes
import mmap
import os
import pickle
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from typing import Any

from kernelbay.errors import InvalidArgumentError, LaunchError

from . import _driver, _runtime

_PAGE = mmap.PAGESIZE


# --- shared memory ---------------------------------------------------------------------------


class Region:
    """One buffer's shared memory: a memfd mapped here, and at the same address in the worker."""

    __slots__ = ("id", "fd", "mm", "addr", "size", "nbytes", "__weakref__")
    _next = 0

    def __init__(self, nbytes: int) -> None:
        Region._next += 1
        self.id = Region._next
        self.nbytes = nbytes
        # One spare page after the data: checked mode poisons it, so an access just past the
        # end is reported, not silently made to the next buffer.
        self.size = (nbytes + _PAGE - 1) // _PAGE * _PAGE + _PAGE
        self.fd = os.memfd_create("kernelbay-cpu", os.MFD_CLOEXEC)
        os.ftruncate(self.fd, self.size)
        self.mm = mmap.mmap(self.fd, self.size)
        self.addr = ctypes.addressof(ctypes.c_char.from_buffer(self.mm))

    def release(self) -> None:
        """The buffer was freed: its memory goes when the last host view of it goes."""
        with _lock:
            _regions.pop(self.addr, None)
            _freed.append(self.id)
        os.close(self.fd)
        self.fd = -1


_regions: dict[int, Region] = {}  # address -> region
_freed: list[int] = []  # region ids the worker should unmap
_lock = threading.Lock()


def allocate(nbytes: int) -> tuple[int, Any, Region]:
    """``(address, uint8 array of nbytes, region)`` in fresh shared memory."""
    import numpy as np  # heavy: loaded by the first allocation, not by importing the backend

    r = Region(nbytes)
    arr = np.frombuffer(r.mm, np.uint8, count=nbytes)
    with _lock:
        _regions[r.addr] = r
    return r.addr, arr, r


def _region_of(ptr: int) -> Region | None:
    r = _regions.get(ptr)
    if r is not None:
        return r
    for r in list(_regions.values()):
        if r.addr <= ptr < r.addr + r.nbytes:
            return r
    return None


# --- the worker ------------------------------------------------------------------------------


class Worker:
    """The process that runs launches; started on first use and again after it died."""

    def __init__(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="kernelbay-cpu-worker-")
        self.proc: subprocess.Popen[bytes] | None = None
        self.sock: socket.socket | None = None
        self.mapped: set[int] = set()
        self.modules: set[int] = set()
        self.lock = threading.Lock()
        self.log = os.path.join(self.dir, "worker.log")
        self.seq = 0

    def _start(self) -> None:
        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        env = dict(os.environ)
        if _driver.check_mode():
            env["LD_PRELOAD"] = " ".join(p for p in (_sanitizer_runtime(), env.get("LD_PRELOAD", "")) if p)
            env.setdefault("ASAN_OPTIONS", "detect_leaks=0:abort_on_error=1")
            env.setdefault("UBSAN_OPTIONS", "print_stacktrace=1:halt_on_error=1")
        rt = os.path.join(self.dir, "rt.so")
        if not os.path.exists(rt):
            with open(rt, "wb") as f:
                f.write(_runtime.image())
        log = open(self.log, "ab")
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "kernelbay_cpu._worker", str(child.fileno()), rt],
                pass_fds=[child.fileno()],
                env=env,
                stderr=log,
                stdin=subprocess.DEVNULL,
            )
        finally:
            log.close()
            child.close()
        self.sock = parent
        self.mapped = set()
        self.modules = set()

    def close(self) -> None:
        """Stop the worker and remove its files (at exit)."""
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        if self.sock is not None:
            self.sock.close()
        self.proc = self.sock = None

    def call(
        self, mod: RemoteModule, index: int, name: str, args: list[bytes], ptrs: list[int], geom: Any, shmem: int
    ) -> int:
        with self.lock:
            if self.proc is None or self.proc.poll() is not None:
                self.stop()
                self._start()
            assert self.sock is not None
            maps, fds = [], []
            with _lock:
                freed, _freed[:] = list(_freed), []
            for p in ptrs:
                r = _region_of(p)
                if r is None:
                    raise InvalidArgumentError(
                        f"kernel {name!r}: a pointer argument is not in kernelbay's shared memory (isolated mode "
                        "maps only kernelbay buffers into the worker)"
                    )
                if r.id not in self.mapped:
                    maps.append((r.id, r.addr, r.size, r.nbytes))
                    fds.append(r.fd)
                    self.mapped.add(r.id)
            load = None
            if mod.id not in self.modules:
                load = os.path.join(self.dir, f"m{mod.id}.so")
                if not os.path.exists(load):
                    with open(load, "wb") as f:
                        f.write(mod.image)
                self.modules.add(mod.id)
            msg = pickle.dumps((mod.id, load, index, args, tuple(geom), shmem, maps, freed))
            start = os.path.getsize(self.log) if os.path.exists(self.log) else 0
            try:
                socket.send_fds(self.sock, [msg], fds)
                reply = self.sock.recv(65536)
            except KeyboardInterrupt:
                self.stop()  # the block running there cannot be stopped any other way
                raise
            except OSError:
                reply = b""
            if not reply:
                raise self._died(name, geom, start)
            status, detail = pickle.loads(reply)
            if status == _driver.CANCELLED:
                raise KeyboardInterrupt(f"launch of kernel {name!r} interrupted (Ctrl-C)")
            if status == _driver.TIMEOUT:
                _driver.check(status, None, name)
            if status == _driver.FAULT:  # the worker's runtime stopped the faulting block; it lives on
                raise LaunchError(
                    f"kernel {name!r} faulted on cpu (isolated worker): {detail}. The worker goes on; what the kernel "
                    "wrote before the fault is undefined"
                )
            if status:
                raise LaunchError(f"kernel {name!r} failed on cpu: {detail}")
            return 0

    def _died(self, name: str, geom: Any, start: int) -> LaunchError:
        assert self.proc is not None
        try:
            rc = self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = self.proc.wait()
        self.stop()
        try:
            with open(self.log, "rb") as f:
                f.seek(start)
                report = f.read().decode(errors="replace").strip()
        except OSError:
            report = ""
        try:
            sig = signal.Signals(-rc).name if rc < 0 else f"exit status {rc}"
        except ValueError:
            sig = f"signal {-rc}"
        g = tuple(geom)
        where = f"grid {g[:3]}, block {g[3:]}"
        report = _BUILD_DIR_RE.sub("", report)
        lines = report.splitlines()
        found = [ln.strip() for ln in lines if "SUMMARY:" in ln or "runtime error:" in ln]
        head = f"kernel {name!r} crashed the isolated cpu worker with {sig} ({where})"
        if found:
            head += ": " + found[0].removeprefix("SUMMARY: ")
            if "use-after-poison" in found[0]:
                head += " (an access just past the end of a kernelbay buffer)"
        body = "\n".join(lines[:40])
        return LaunchError(
            head
            + "; the next launch starts a new worker, and this launch's outputs are undefined"
            + (f". The worker's report:\n{body}" if body else "")
        )


_BUILD_DIR_RE = re.compile(r"\S*/kernelbay-cpu-build-[^/\s]+/")
_worker: Worker | None = None


def worker() -> Worker:
    global _worker
    if _worker is None:
        _worker = Worker()
        atexit.register(_worker.close)
    return _worker


def _after_fork_in_child() -> None:
    # The parent's worker is the parent's: a child starts its own. (Buffers stay shared memory,
    # so parent and child see each other's writes, unlike the default mode's private memory.)
    global _worker
    if _worker is not None:
        if _worker.sock is not None:
            _worker.sock.close()
        _worker.proc = _worker.sock = None
        _worker = None


os.register_at_fork(after_in_child=_after_fork_in_child)


def _sanitizer_runtime() -> str:
    tc = _driver.toolchain()
    r = subprocess.run([*tc.argv[:1], "-print-file-name=libasan.so"], capture_output=True, text=True, timeout=60)
    path = r.stdout.strip()
    if r.returncode != 0 or not os.path.isabs(path) or not os.path.exists(path):
        raise LaunchError(
            f"{_driver.ENV_CHECK}=address needs the address sanitizer runtime (libasan), which {tc.argv[0]} does "
            f"not know ({path!r}); install it (e.g. the libasan package of your compiler) or unset {_driver.ENV_CHECK}"
        )
    return os.path.realpath(path)


class RemoteModule:
    """A compiled module for the worker: its image, written to the worker's directory when a
    worker first needs it."""

    _next = 0

    def __init__(self, image: bytes) -> None:
        RemoteModule._next += 1
        self.id = RemoteModule._next
        self.image = image

    def launch_function(self, index: int, name: str, kinds: tuple[str, ...], sizes: tuple[int, ...]) -> RemoteLaunch:
        """What stands in for the module's ``kb_launch_<index>``."""
        return RemoteLaunch(self, index, name, kinds, sizes)


class RemoteLaunch:
    """Stands in for a kernel's native ``kb_launch_<i>``: same call, run by the worker."""

    def __init__(self, mod: RemoteModule, index: int, name: str, kinds: tuple[str, ...], sizes: tuple[int, ...]):
        self.mod, self.index, self.name, self.kinds, self.sizes = mod, index, name, kinds, sizes

    def __call__(self, argv: Any, geom: Any, shmem: int) -> int:
        args, ptrs = [], []
        for i, (k, s) in enumerate(zip(self.kinds, self.sizes)):
            b = ctypes.string_at(argv[i], s)
            args.append(b)
            if k == "p":
                p = int.from_bytes(b, sys.byteorder)
                if p:
                    ptrs.append(p)
        return worker().call(self.mod, self.index, self.name, args, ptrs, list(geom), int(shmem))
