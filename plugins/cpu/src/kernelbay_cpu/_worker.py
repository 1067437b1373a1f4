"""The isolated mode's worker process (``python -m kernelbay_cpu._worker FD RUNTIME``).

It maps the caller's shared buffers at their addresses, loads kernel modules and runs
launches, answering each with ``(status, message)``. A fault ends it; the caller sees the
socket close and raises ``LaunchError`` (see :mod:`kernelbay_cpu._worker_client`). Imports stay few:
with the sanitizer runtime preloaded, everything here runs slower.
"""

from __future__ import annotations

import ctypes
import os
import pickle
import shutil
import signal
import socket
import sys

MAP_SHARED = 0x01
MAP_FIXED_NOREPLACE = 0x100000
PROT_RW = 0x1 | 0x2


def main() -> int:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the caller's: it stops this worker
    sock = socket.socket(fileno=int(sys.argv[1]))
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    poison = getattr(libc, "__asan_poison_memory_region", None)  # with the sanitizer preloaded
    rt = ctypes.CDLL(sys.argv[2])
    rt.kb_rt_api.restype = ctypes.c_void_p
    rt.kb_rt_install_fatal()
    api = ctypes.c_void_p(rt.kb_rt_api())
    try:  # checked by the caller (kernelbay_cpu._driver.timeout_ms) before it started this worker
        timeout = int(float(os.environ.get("KERNELBAY_CPU_TIMEOUT", "").strip() or 0) * 1000)
    except ValueError:
        timeout = 0
    modules: dict[int, ctypes.CDLL] = {}
    maps: dict[int, tuple[int, int]] = {}
    while True:
        try:
            msg, fds, _, _ = socket.recv_fds(sock, 1 << 20, 64)
        except (ConnectionError, OSError):
            msg = b""
        if not msg:  # the caller is gone (it exited, or a forked child of it did): clean up
            shutil.rmtree(os.path.dirname(sys.argv[2]), ignore_errors=True)
            return 0
        mod_id, load, index, args, geom, shmem, new_maps, freed = pickle.loads(msg)
        for rid in freed:
            if rid in maps:
                addr, size = maps.pop(rid)
                libc.munmap(addr, size)
        status, detail = 0, ""
        for (rid, addr, size, nbytes), fd in zip(new_maps, fds):
            got = libc.mmap(addr, size, PROT_RW, MAP_SHARED | MAP_FIXED_NOREPLACE, fd, 0)
            os.close(fd)
            if got != addr:
                if got not in (None, ctypes.c_void_p(-1).value):
                    libc.munmap(got, size)
                status, detail = 1, f"the worker could not map a buffer at 0x{addr:x} (errno {ctypes.get_errno()})"
                break
            maps[rid] = (addr, size)
            if poison is not None:
                poison.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
                poison(addr + nbytes, size - nbytes)
        if not status:
            lib = modules.get(mod_id)
            if lib is None:
                lib = modules[mod_id] = ctypes.CDLL(load, mode=os.RTLD_NOW | os.RTLD_LOCAL)
                lib.kb_error_message.restype = ctypes.c_char_p
                lib.kb_set_runtime(api)
                lib.kb_set_timeout(ctypes.c_long(timeout))
            slots = [ctypes.create_string_buffer(a, max(len(a), 1)) for a in args]
            argv = (ctypes.c_void_p * max(len(slots), 1))(*[ctypes.addressof(s) for s in slots])
            status = getattr(lib, f"kb_launch_{index}")(argv, (ctypes.c_int * 6)(*geom), shmem)
            if status and status not in (2, 4):  # CANCELLED and TIMEOUT say it all
                m = lib.kb_error_message()
                detail = m.decode(errors="replace") if m else f"status {status}"
        sock.send(pickle.dumps((status, detail)))


if __name__ == "__main__":
    sys.exit(main())
