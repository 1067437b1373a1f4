"""The native layer: finding the C++ compiler, probing it once, the settings a launch reads, and
the one ``check`` that turns native failures into kernelbay errors (loading shared objects:
:mod:`._loader`).

A probe (compiler version, OpenMP support, CPU identity) costs a few compiler runs; its result is
kept in the core disk cache under the compiler binary's identity (path, size, mtime), so a fresh
process that hits the compile cache runs no subprocess at all.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import json
import os
import platform
import re
import shlex
import threading
from collections.abc import Sequence
from typing import Any

import attrs
from kernelbay.cache import lookup, make_key, store
from kernelbay.errors import BackendUnavailableError, InvalidArgumentError, LaunchError
from kernelbay.native import in_load_dir

from . import _threads
from .guards import describe_address

ENV_CXX = "CXX"
ENV_THREADS = _threads.ENV_THREADS
#: Seconds a launch may run before its blocks are stopped and it fails with a LaunchError (issue #26).
ENV_TIMEOUT = "KERNELBAY_CPU_TIMEOUT"
ENV_FIBER_STACK = "KERNELBAY_CPU_FIBER_STACK"
ENV_ISOLATE = "KERNELBAY_CPU_ISOLATE"
ENV_CHECK = "KERNELBAY_CPU_CHECK"
#: compiler options of checked mode (the kernel's own options come first; -O1 keeps lines exact)
CHECK_FLAGS = ["-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-g", "-fno-omit-frame-pointer", "-O1"]
#: Usable stack of each fiber (one per CUDA thread of a block that uses barriers or warps).
DEFAULT_FIBER_STACK = 128 * 1024
_UNITS = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3}
_CANDIDATES = ("c++", "g++", "clang++")
NO_COMPILER = "no C++ compiler: install g++ or set CXX"
PROBE_SCHEMA = "3"  # 2: libmvec; 3: gathers


@attrs.frozen
class Toolchain:
    """What defines the code the compiler produces on this machine.

    :ivar argv: the compiler command (``$CXX`` may carry arguments, e.g. ``ccache g++``).
    :ivar path: the resolved compiler binary.
    :ivar version: the first line of ``--version``.
    :ivar openmp: whether ``-fopenmp`` works.
    :ivar cpu_name: the CPU model, for the device name.
    :ivar cpu_id: model and feature flags: ``-march=native`` output depends on them.
    :ivar libmvec: whether the C library's vector math has what kb_cpu_cuda.h declares
        (:func:`has_libmvec`; kept with the probe, so a warm process loads no library to ask).
    :ivar gathers: whether ``-march=native`` builds want ``-mtune-ctrl=use_gather``
        (:func:`wants_gathers`).
    """

    argv: tuple[str, ...]
    path: str
    version: str
    openmp: bool
    cpu_name: str
    cpu_id: str
    libmvec: bool = False
    gathers: bool = False

    def arch(self, flags: Sequence[str]) -> str:
        """What a build with ``flags`` targets, for cache keys: the CPU's identity under
        ``-march=native`` (its output depends on the model and features), else the machine name."""
        return self.cpu_id if any(f.endswith("=native") for f in flags) else os.uname().machine


def find_compiler() -> tuple[str, ...]:
    """The compiler command: ``$CXX``, else the first of c++, g++, clang++ on PATH.

    :raises BackendUnavailableError: when there is none.
    """
    import shutil  # only where a compiler runs: importing the plugin stays light

    raw = os.environ.get(ENV_CXX, "").strip()
    if raw:
        argv = shlex.split(raw)
        exe = shutil.which(argv[0])
        if exe is None:
            raise BackendUnavailableError(f"{NO_COMPILER} (CXX={raw!r} was not found)")
        return (exe, *argv[1:])
    for name in _CANDIDATES:
        exe = shutil.which(name)
        if exe is not None:
            return (exe,)
    raise BackendUnavailableError(f"{NO_COMPILER} (none of {', '.join(_CANDIDATES)} is on PATH)")


def has_libmvec(version: str) -> bool:
    """Whether CUDA kernels may call glibc's vector math (libmvec): GCC (``version``, the first
    line of its ``--version``) on x86-64 with a glibc whose libmvec has the AVX2 single-precision
    functions kb_cpu_cuda.h declares (2.35 and later: tanhf arrived then)."""
    if platform.machine() not in ("x86_64", "AMD64") or "clang" in version.lower():
        return False
    try:
        lib = ctypes.CDLL("libmvec.so.1")
    except OSError:
        return False
    return all(hasattr(lib, f"_ZGVdN8v_{f}") for f in ("tanhf", "sinf", "cosf", "erff"))


def wants_gathers(argv: tuple[str, ...], version: str, cpu_id: str) -> bool:
    """Whether g++'s ``-march=native`` left the tuning ``generic`` on an AVX-512 x86-64 CPU (a
    model g++ does not know, e.g. under a hypervisor that hides it): generic tuning turns the
    vectoriser's gathers off (slow on some AMD parts), which every AVX-512 model g++ knows keeps
    on. Without them a loop over a block's threads that reads ``x[min(C - 1, j)]`` (llm.c's
    softmax kernel7) stays scalar. Such builds add ``-mtune-ctrl=use_gather`` (flags.py)."""
    import subprocess  # only where a compiler runs: importing the plugin stays light

    if platform.machine() not in ("x86_64", "AMD64") or "clang" in version.lower():
        return False
    if " avx512f " not in " " + cpu_id.replace("|", " ") + " ":
        return False
    try:
        out = subprocess.run(
            [*argv, "-march=native", "-Q", "--help=target"], capture_output=True, text=True, timeout=60
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return False
    tune = re.search(r"^\s*-mtune=\s+(\S+)\s*$", out, re.M)
    return tune is not None and tune.group(1) == "generic"


def _libc() -> str:
    """The C library and its version ("glibc 2.36"; "" where unknown): libmvec comes with it."""
    try:
        return os.confstr("CS_GNU_LIBC_VERSION") or ""
    except (AttributeError, ValueError, OSError):
        return ""


def cpu_identity() -> tuple[str, str]:
    """``(model name, identity)`` of the CPU: the model, vendor and feature flags of core 0."""
    fields: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if not line.strip():
                    break  # the first processor is enough
                k, _, v = line.partition(":")
                fields[k.strip()] = v.strip()
    except OSError:
        pass
    name = fields.get("model name") or fields.get("Model") or platform.processor() or platform.machine()
    ident = "|".join(
        [platform.machine(), name]
        + [fields.get(k, "") for k in ("vendor_id", "cpu family", "model", "flags", "Features", "CPU part")]
    )
    return name, ident


_lock = threading.Lock()
_toolchain: Toolchain | None = None
_toolchain_error: BackendUnavailableError | None = None


def toolchain() -> Toolchain:
    """The process's toolchain, probed once.

    :raises BackendUnavailableError: no compiler, or one that cannot build a shared object.
    """
    global _toolchain, _toolchain_error
    if _toolchain is None and _toolchain_error is None:
        with _lock:
            if _toolchain is None and _toolchain_error is None:
                try:
                    _toolchain = _probe()
                except BackendUnavailableError as exc:
                    _toolchain_error = exc
    if _toolchain_error is not None:
        raise _toolchain_error
    assert _toolchain is not None
    return _toolchain


def _probe() -> Toolchain:
    argv = find_compiler()
    cpu_name, cpu_id = cpu_identity()
    st = os.stat(argv[0])
    key = make_key(
        backend="cpu-toolchain",
        compiler=" ".join(argv),
        compiler_version=f"{os.path.realpath(argv[0])}:{st.st_size}:{st.st_mtime_ns}",
        arch=cpu_id,
        extra={"schema": PROBE_SCHEMA, "libc": _libc()},
    )
    cache, hit = lookup(key)
    if hit is not None:
        try:
            d = json.loads(hit.payload)
            return Toolchain(
                tuple(argv),
                argv[0],
                d["version"],
                bool(d["openmp"]),
                cpu_name,
                cpu_id,
                bool(d["libmvec"]),
                bool(d["gathers"]),
            )
        except (ValueError, KeyError, TypeError):
            pass
    version = _version(argv)
    # The probe loads what it built into this process: without the sanitizer options of a
    # CXX='g++ -fsanitize=address', whose runtime would end the interpreter (it must be the
    # first library of a process). Such a CXX turns on checked mode (check_mode).
    plain = tuple(a for a in argv if not a.startswith(("-fsanitize", "-fno-sanitize")))
    try:
        openmp = _works(plain, ["-fopenmp"])
        works = openmp or _works(plain, [])
    except OSError as exc:  # no directory to build the probe in: say why, not "no compiler"
        raise BackendUnavailableError(
            f"the cpu backend cannot build its probe: {exc}; free space or set KERNELBAY_CACHE_DIR or TMPDIR"
        ) from exc
    if not works:
        raise BackendUnavailableError(
            f"{NO_COMPILER} ({' '.join(argv)} cannot build a shared library: {_last_probe_log.strip()[:400]})"
        )
    mvec = has_libmvec(version)
    gathers = wants_gathers(plain, version, cpu_id)
    payload = {"version": version, "openmp": openmp, "libmvec": mvec, "gathers": gathers}
    store(cache, key, json.dumps(payload).encode(), {"kind": "toolchain"})
    return Toolchain(tuple(argv), argv[0], version, openmp, cpu_name, cpu_id, mvec, gathers)


def _version(argv: tuple[str, ...]) -> str:
    import subprocess  # only where a compiler runs: importing the plugin stays light

    try:
        out = subprocess.run([*argv, "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as exc:
        raise BackendUnavailableError(f"{NO_COMPILER} ({' '.join(argv)} --version failed: {exc})") from exc
    lines = (out.stdout or out.stderr).strip().splitlines()
    return lines[0] if lines else "unknown"


_last_probe_log = ""
_PROBE_SRC = '#include <cstdio>\nextern "C" int kb_probe(int x) {\n#pragma omp parallel for\nfor (int i = 0; i < x; ++i) {}\nreturn x; }\n'


#: What a compiler prints when it could not write its output: the directory, not the compiler.
_WRITE_FAILED = {
    "No space left on device": errno.ENOSPC,
    "Disk quota exceeded": getattr(errno, "EDQUOT", errno.ENOSPC),
    "Permission denied": errno.EACCES,
    "Read-only file system": errno.EROFS,
}


def _works(argv: tuple[str, ...], flags: list[str]) -> bool:
    """Whether ``argv`` builds (and this process loads) a shared object with ``flags``.

    :raises OSError: no directory to build it in (the cache's and the fallback both failed).
    """
    # Built and loaded in the cache's private directory: a noexec TMPDIR must not read as "no compiler".
    return in_load_dir(functools.partial(_works_in, argv, flags))


def _works_in(argv: tuple[str, ...], flags: list[str], where: str) -> bool:
    global _last_probe_log
    import subprocess  # only where a compiler runs: importing the plugin stays light
    import tempfile

    with tempfile.TemporaryDirectory(prefix="kernelbay-cpu-probe-", dir=where) as d:
        src, out = os.path.join(d, "probe.cpp"), os.path.join(d, "probe.so")
        with open(src, "w") as f:
            f.write(_PROBE_SRC)
        try:
            r = subprocess.run(
                [*argv, "-shared", "-fPIC", *flags, src, "-o", out], capture_output=True, text=True, timeout=120
            )
        except (OSError, subprocess.SubprocessError) as exc:
            _last_probe_log = str(exc)
            return False
        _last_probe_log = r.stdout + r.stderr
        if r.returncode != 0:
            for text, code in _WRITE_FAILED.items():
                if text in _last_probe_log and out in _last_probe_log:
                    raise OSError(code, f"the compiler could not write {out}: {text}")
            return False
        try:
            ctypes.CDLL(out)
        except OSError as exc:
            _last_probe_log = str(exc)
            return False
    return True


def threads() -> int:
    """The threads a launch uses (see _threads.py): what this process may use, or what
    ``KERNELBAY_CPU_THREADS`` / ``OMP_NUM_THREADS`` ask for; the device's figure while those and
    the affinity mask are unchanged (:func:`_threads.for_launch`)."""
    return _threads.for_launch()


def max_threads() -> int:
    """The most threads a launch may ask for (see _threads.max_threads)."""
    return _threads.max_threads()


def fiber_stack() -> int:
    """``KERNELBAY_CPU_FIBER_STACK`` in bytes (a number, optionally with k/m/g), else 128 KiB."""
    raw = os.environ.get(ENV_FIBER_STACK, "").strip()
    if not raw:
        return DEFAULT_FIBER_STACK
    num, unit = raw.rstrip("kKmMgGbB"), raw[len(raw.rstrip("kKmMgGbB")) :].lower().rstrip("b")
    try:
        n = int(num) * _UNITS[unit]
    except (ValueError, KeyError):
        n = -1
    if n < 16384:
        raise InvalidArgumentError(
            f"{ENV_FIBER_STACK}={raw!r} must be a stack size of at least 16384 bytes (e.g. 262144, 256k or 1M)"
        )
    return n


def timeout_ms() -> int:
    """``KERNELBAY_CPU_TIMEOUT`` in milliseconds (seconds in the setting; unset or 0: no deadline)."""
    raw = os.environ.get(ENV_TIMEOUT, "").strip()
    if not raw:
        return 0
    try:
        s = float(raw)
    except ValueError:
        s = -1.0
    if not (0 <= s <= 86400 * 365):
        raise InvalidArgumentError(
            f"{ENV_TIMEOUT}={raw!r} must be the seconds a cpu launch may run before it is stopped (e.g. 30 or 0.5; "
            "0 or unset: no deadline)"
        )
    return int(s * 1000) if s else 0


def check_mode() -> str:
    """``""`` or ``"address"`` (``KERNELBAY_CPU_CHECK``); a sanitizer in ``CXX`` means ``"address"``."""
    raw = os.environ.get(ENV_CHECK, "").strip().lower()
    if raw in ("", "0", "off", "no", "false"):
        raw = ""
    elif raw not in ("address", "1", "on", "yes", "true"):
        raise InvalidArgumentError(f"{ENV_CHECK}={raw!r} must be 'address' (or unset)")
    if not raw and any(a.startswith("-fsanitize=") for a in os.environ.get(ENV_CXX, "").split()):
        raw = "address"
    return "address" if raw else ""


_isolated: bool | None = None


def isolated() -> bool:
    """Whether launches run in the worker process (``KERNELBAY_CPU_ISOLATE=1``, or checked mode):
    see :mod:`kernelbay_cpu._worker_client`. Read once, by the device probe (where a bad value
    makes the backend unavailable with the reason), so buffers and kernels agree on it.
    """
    global _isolated
    if _isolated is None:
        raw = os.environ.get(ENV_ISOLATE, "").strip().lower()
        if raw not in ("", "0", "1", "off", "on", "no", "yes", "false", "true"):
            raise InvalidArgumentError(f"{ENV_ISOLATE}={raw!r} must be 1 or 0 (or unset)")
        _isolated = raw in ("1", "on", "yes", "true") or bool(check_mode())
    return _isolated


#: A launch whose blocks not yet started were cancelled by Ctrl-C (kb_cpu::CANCELLED).
CANCELLED = 2
#: A launch stopped by a fault in its kernel code (kb_cpu::FAULT): a LaunchError, the process goes on.
FAULT = 3
#: A launch stopped at its deadline (KERNELBAY_CPU_TIMEOUT; kb_cpu::TIMEOUT): a LaunchError.
TIMEOUT = 4


def plain_argv(tc: Toolchain) -> tuple[str, ...]:
    """The compiler command without sanitizer options (``CXX='g++ -fsanitize=address'``): for
    code that must load into this process, whose first library is not the sanitizer runtime."""
    return tuple(a for a in tc.argv if not a.startswith(("-fsanitize", "-fno-sanitize")))


def check(status: int, lib: Any, what: str) -> None:
    """Turn a launcher's status into an exception: 0 is success, CANCELLED a KeyboardInterrupt,
    anything else a LaunchError."""
    if status == 0:
        return
    if status == CANCELLED:
        raise KeyboardInterrupt(
            f"launch of kernel {what!r} on cpu interrupted (Ctrl-C): the blocks not yet started were cancelled, "
            "so its outputs are incomplete"
        )
    if status == TIMEOUT:
        raise LaunchError(
            f"kernel {what!r} ran past its deadline on cpu ({ENV_TIMEOUT}={os.environ.get(ENV_TIMEOUT, '').strip()} s) "
            "and was stopped: its running blocks were left where they were and the rest skipped, so its outputs are "
            f"incomplete. Raise {ENV_TIMEOUT} if the kernel is only slow, or look for a loop that never ends"
        )
    msg = lib.kb_error_message() if lib is not None else None  # restype c_char_p, set at load
    detail = msg.decode(errors="replace") if msg else f"status {status}"
    if status == FAULT:
        # restype c_void_p: None stands for address 0
        addr = (lib.kb_fault_address() or 0) if lib is not None and hasattr(lib, "kb_fault_address") else None
        if "(SIGSEGV" not in detail or "stack overflow" in detail or "no process can map" in detail:
            addr = None  # an instruction's address, or the stack's: not a buffer's
        raise LaunchError(
            f"kernel {what!r} faulted on cpu: {detail}{describe_address(addr)}. The process goes on, and later "
            "launches run normally; what the kernel wrote before the fault is undefined (docs/reliability.md). "
            "KERNELBAY_CPU_CHECK=address names the source line"
        )
    raise LaunchError(f"kernel {what!r} failed on cpu: {detail}")
