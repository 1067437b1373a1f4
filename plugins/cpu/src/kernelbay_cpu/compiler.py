"""Compile kernel sources into shared objects, with an in-process and an on-disk cache.

The translation unit is ``kb_main.cpp``::

    #include "kb_cpu_cuda.h"     // or kb_cpu_cxx.h for c++ sources
    #include "kernel.cu"         // the user's source, unchanged, so diagnostics keep its lines
    <generated launcher>         // one kb_info_<i>/kb_launch_<i> pair per entry

Each launcher hands the ``void**`` argument array to ``kb_cpu::run_threads<&entry>`` (cuda) or
``kb_cpu::run_blocks<&entry>`` (c++), which deduce the parameter types from the entry's signature.
"""

from __future__ import annotations

import collections
import ctypes
import gc
import hashlib
import logging
import os
import re
import threading
import time
import weakref
from collections.abc import Sequence
from typing import TYPE_CHECKING

from kernelbay.cache import CacheEntry, locked, lookup, make_key, recheck, store
from kernelbay.csource import default_kernel, find_kernels, strip_comments_and_strings
from kernelbay.errors import CompileError, InvalidArgumentError
from kernelbay.types import Device, Kernel, Source

from . import _driver, _loops, _runtime
from .launcher import KernelHandle

if TYPE_CHECKING:
    from ._worker_client import RemoteModule

log = logging.getLogger("kernelbay.cpu")

DEFAULT_OPT = "-O3"
DEFAULT_STD = "-std=c++17"
DEFAULT_ARCH = "-march=native"
_FILE = {"cuda": "kernel.cu", "c++": "kernel.cpp"}
_PRELUDE = {"cuda": "kb_cpu_cuda.h", "c++": "kb_cpu_cxx.h"}
_HEADERS = (
    "kb_cpu_launch.h",
    "kb_cpu_rt.h",
    "kb_cpu_fiber.h",
    "kb_cpu_sync.h",
    "kb_cpu_yield.h",
    "kb_cpu_cuda.h",
    "kb_cpu_cxx.h",
    "cooperative_groups.h",
    "cooperative_groups/reduce.h",
)

# --- features: what picks the fiber runner, and what the CPU backend cannot honour --------------

_UNSUPPORTED = [
    (r"\b(?:this_grid|grid_group|this_multi_grid|multi_grid_group)\b", "grid-wide cooperative groups (this_grid)"),
    (
        r"\b(?:coalesced_threads|coalesced_group|labeled_partition|binary_partition)\b",
        "coalesced/labeled cooperative groups",
    ),
    (r"\b(?:tex[123]D\w*|texture\s*<|surf[123]D\w*|cudaTextureObject_t|cudaSurfaceObject_t)", "textures and surfaces"),
    (r"\basm\b|\b__asm__\b", "inline PTX assembly (asm)"),
    (r"<<<", "launching kernels from device code (<<< >>>)"),
]
_UNSUPPORTED_RE = [(re.compile(p), what) for p, what in _UNSUPPORTED]

#: Anything that needs the threads of a block to run together: such kernels run as fibers.
_BLOCK_FEATURES_RE = re.compile(
    r"\b(?:__syncthreads\w*|__shared__|__syncwarp|__shfl\w*|__ballot\w*|__any_sync|__all_sync|__uni_sync"
    r"|__activemask|__match_\w+|__reduce_\w+_sync|cooperative_groups)\b"
)
_EXTERN_SHARED_RE = re.compile(
    r"\bextern\s+(?:__shared__\s+((?:alignas\s*\(\s*\w+\s*\)|__align__\s*\(\s*\w+\s*\))\s+)?"
    r"|(?:alignas\s*\(\s*\w+\s*\)|__align__\s*\(\s*\w+\s*\))\s+__shared__\s+)"
    r"(?P<type>[A-Za-z_][\w:<>,\s]*?[\w>])\s+(?P<name>[A-Za-z_]\w*)\s*\[\s*\]\s*;"
)


def _texts(source: Source) -> list[tuple[str, str]]:
    return [(_FILE["cuda"], source.text), *sorted(source.headers.items())]


def check_features(source: Source) -> None:
    """Refuse CUDA features the CPU backend cannot run correctly, naming each and its line."""
    found: list[tuple[str, str, int]] = []
    lines: set[int] = set()
    for fname, text in _texts(source):
        clean = strip_comments_and_strings(text)
        for rx, what in _UNSUPPORTED_RE:
            m = rx.search(clean)
            if m:
                ln = clean.count("\n", 0, m.start()) + 1
                found.append((what, fname, ln))
                if fname == _FILE["cuda"]:
                    lines.add(ln)
    if found:
        where = "; ".join(f"{what} at {fname}:{ln}" for what, fname, ln in found)
        raise CompileError(
            f"the cpu backend cannot run this kernel: it uses {where}. Write a variant without it for cpu "
            "(or a 'c++' Source), or pick a CUDA device",
            source=source.text,
            lines=lines,
        )


def needs_fibers(source: Source) -> bool:
    """Whether a cuda source uses barriers, shared memory, warp operations or cooperative groups."""
    return any(_BLOCK_FEATURES_RE.search(strip_comments_and_strings(t)) for _, t in _texts(source))


_BUILTIN_RE = re.compile(r"\b(?:threadIdx|blockIdx|blockDim|gridDim)\b")


def _kernel_bodies(text: str) -> list[tuple[int, int]] | None:
    """``(open, close)`` brace offsets of each ``__global__`` function body, or None when one
    cannot be delimited (a declaration without a body is skipped)."""
    bodies = []
    for k in find_kernels(text):
        if k.body is not None:
            bodies.append(k.body)
        elif not k.declaration:
            return None
    return bodies


def wrap_thread_loops(source: Source, text: str) -> str | None:
    """``text`` with each kernel body wrapped in KB_THREADS_BEGIN/END (see kb_cpu_cuda.h), or None
    when that is not safe: a function other than a kernel, or a header, reads threadIdx and its
    kin (it would see the thread_locals, which the thread loop does not set)."""
    if any(_BUILTIN_RE.search(strip_comments_and_strings(t)) for _, t in sorted(source.headers.items())):
        return None
    clean = strip_comments_and_strings(text)
    bodies = _kernel_bodies(text)
    if not bodies:
        return None
    outside = clean
    for a, b in bodies:
        outside = outside[:a] + " " * (b - a) + outside[b:]
    if _BUILTIN_RE.search(outside):
        return None
    out, pos = [], 0
    for a, b in bodies:
        out.append(text[pos : a + 1] + " KB_THREADS_BEGIN " + text[a + 1 : b] + " KB_THREADS_END ")
        pos = b
    out.append(text[pos:])
    return "".join(out)


def rewrite_extern_shared(text: str) -> str:
    """``extern __shared__ T name[];`` made a pointer to the launch's dynamic shared memory.

    Inside a function it becomes a local ``T* name``; at file scope, where it stands alone on its
    line, a ``#define``. Line numbers are kept, so diagnostics still point at the user's lines.
    """
    clean = strip_comments_and_strings(text)
    out: list[str] = []
    pos = 0
    for m in _EXTERN_SHARED_RE.finditer(clean):
        t, name = " ".join(m.group("type").split()), m.group("name")
        ptr = f"reinterpret_cast<{t}*>(::kb_cpu::dyn_shared())"
        depth = clean.count("{", 0, m.start()) - clean.count("}", 0, m.start())
        line_start = clean.rfind("\n", 0, m.start()) + 1
        line_end = clean.find("\n", m.end())
        line_end = len(clean) if line_end < 0 else line_end
        alone = not clean[line_start : m.start()].strip() and not clean[m.end() : line_end].strip()
        if depth == 0 and alone:
            repl = f"#define {name} ({ptr})"
        else:
            repl = f"{t}* const {name} = {ptr};"
        out.append(text[pos : m.start()] + repl)
        pos = m.end()
    out.append(text[pos:])
    return "".join(out)


# --- flags ------------------------------------------------------------------------------


def flags(options: Sequence[str], tc: _driver.Toolchain) -> list[str]:
    """The compiler flags: defaults, each overridable by an option of the same family.

    ``-O*`` replaces ``-O3``; ``-march=``/``-mcpu=``/``-mtune=native`` families replace
    ``-march=native`` (``-mno-native`` drops it); ``-std=`` replaces ``-std=c++17``;
    ``-fno-openmp`` drops ``-fopenmp``. Other options are appended.
    """
    opt, std, arch = DEFAULT_OPT, DEFAULT_STD, DEFAULT_ARCH
    openmp = tc.openmp
    extra: list[str] = []
    for o in options:
        if o.startswith("-O"):
            opt = o
        elif o.startswith("-std="):
            std = o
        elif o.startswith(("-march=", "-mcpu=")):
            arch = o
        elif o == "-mno-native":
            arch = ""
        elif o == "-fno-openmp":
            openmp = False
        elif o == "-fopenmp":
            openmp = True
        else:
            extra.append(o)
    out = [opt, std]
    if arch:
        out.append(arch)
    if openmp:
        out.append("-fopenmp")
    # A GPU raises no floating-point traps: without them the compiler may compute a guarded
    # `if (i < n) y[i] = a * x[i]` for every lane and mask the store, i.e. vectorise it.
    if "-ftrapping-math" not in extra:
        out.append("-fno-trapping-math")
    return [*out, "-shared", "-fPIC", "-fvisibility=hidden", *extra]


# --- compile ----------------------------------------------------------------------------

_ENTRY_RE = re.compile(r"^[A-Za-z_][\w:<>,\s*&()\[\]\.\-+]*$")


def entries(source: Source) -> list[str]:
    """The names to export: ``source.name`` first, then ``source.name_expressions``."""
    names: list[str] = []
    if source.name:
        names.append(source.name.strip())
    for e in source.name_expressions:
        if e.strip() and e.strip() not in names:
            names.append(e.strip())
    if not names and source.lang == "cuda":
        names = [default_kernel(source.text)]
    if not names:
        raise InvalidArgumentError("a 'c++' Source needs name= (the function to launch)")
    for n in names:
        if not _ENTRY_RE.match(n):
            raise InvalidArgumentError(f"{n!r} is not a C++ function name or template instantiation")
    return names


def _launcher(lang: str, names: list[str], runner: str) -> str:
    parts = ["\n// --- generated by kernelbay_cpu ---"]
    for i, n in enumerate(names):
        parts.append(
            f"""
static constexpr auto kb_entry_{i} = &{n};
extern "C" __attribute__((visibility("default"))) int kb_info_{i}(long long* sizes, char* kinds, int cap) {{
    return kb_cpu::sig<decltype(kb_entry_{i})>::info(sizes, kinds, cap);
}}
extern "C" __attribute__((visibility("default"))) int kb_launch_{i}(void** a, const int* g, int shmem) {{
    return kb_cpu::launch<&kb_cpu::{runner}<kb_entry_{i}>>({_c_string(n)}, a, g, shmem);
}}"""
        )
    return "\n".join(parts) + "\n"


def _c_string(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _prelude_text() -> dict[str, str]:
    from importlib import resources  # importlib.resources loads tempfile: only when the headers are read

    base = resources.files("kernelbay_cpu") / "include"
    return {h: (base / h).read_text(encoding="utf-8") for h in _HEADERS}


_preludes: dict[str, str] | None = None


def preludes() -> dict[str, str]:
    global _preludes
    if _preludes is None:
        _preludes = _prelude_text()
    return _preludes


def _dlclose(handle: int) -> None:
    try:
        from _ctypes import dlclose

        dlclose(handle)
    except (ImportError, OSError):  # pragma: no cover - not POSIX, or already gone
        pass


class Module:
    """A loaded shared object and its kernels by entry name.

    The shared object is unloaded (``dlclose``) when the last reference to it goes: the module
    cache's and every kernel's (each :class:`KernelHandle` holds the library).
    """

    def __init__(
        self,
        lib: ctypes.CDLL,
        names: list[str],
        source: Source,
        deps: dict[str, str] | None = None,
        remote: RemoteModule | None = None,
    ) -> None:
        self.lib = lib
        #: (mtime, size) of each file outside the source the compiler read: a changed one rebuilds.
        self.stamps = {p: _stamp(p) for p in deps or ()}
        lib.kb_error_message.restype = ctypes.c_char_p
        _runtime.attach(lib)
        lib.kb_set_threads(_driver.threads())
        fibers = source.lang == "cuda" and needs_fibers(source)
        if source.lang == "cuda":
            lib.kb_set_fiber_stack(ctypes.c_longlong(_driver.fiber_stack()))
        self.kernels = {n: KernelHandle(lib, i, n, source.lang, fibers) for i, n in enumerate(names)}
        # Not at interpreter exit: OpenMP's threads and C++ thread-exit handlers may still reach
        # the module's code then, and the process is ending anyway.
        weakref.finalize(lib, _dlclose, lib._handle).atexit = False
        if remote is not None:  # isolated mode: the worker runs the launches
            for i, h in enumerate(self.kernels.values()):
                h.fn = remote.launch_function(i, h.name, h.kinds, h.sizes)


#: Modules kept loaded for ``kb.compile`` calls that repeat a source. Past this many, the least
#: recently compiled is dropped from the cache (and unloaded once no kernel of it is left), so a
#: process may compile without limit (an autotuner) without running out of memory mappings.
MAX_MODULES = 256
_COLLECT_EVERY = 32


class _ModuleCache:
    """A bounded LRU map (source, device index) -> Module; each module is built once."""

    def __init__(self, bound: int) -> None:
        self.bound = bound
        self._lock = threading.Lock()
        self._mods: collections.OrderedDict[object, Module] = collections.OrderedDict()
        self._dropped = 0

    def _note_dropped(self, n: int) -> None:
        # A ctypes library is in a reference cycle with the functions it caches, so only the
        # cyclic collector frees it (and dlcloses it): collect every so many drops, which bounds
        # the modules waiting to be unloaded without paying a collection per kernel.
        self._dropped += n
        if self._dropped >= _COLLECT_EVERY:
            self._dropped = 0
            gc.collect()

    def get_or_make(self, key: object, source: Source) -> Module:
        with self._lock:
            mod = self._mods.get(key)
            if mod is not None and mod.stamps and any(_stamp(p) != st for p, st in mod.stamps.items()):
                mod = None  # a header it was built from changed
            if mod is None:
                mod = self._mods[key] = _build(source)
                dropped = 0
                while len(self._mods) > self.bound:
                    self._mods.popitem(last=False)
                    dropped += 1
                if dropped:
                    self._note_dropped(dropped)
            else:
                self._mods.move_to_end(key)
            return mod

    def drop_lib(self, lib: object) -> None:
        with self._lock:
            keys = [k for k, m in self._mods.items() if m.lib is lib]
            for k in keys:
                del self._mods[k]
        self._note_dropped(max(len(keys), 1))

    def __len__(self) -> int:
        return len(self._mods)


_modules = _ModuleCache(MAX_MODULES)


def compile_source(device: Device, source: Source) -> KernelHandle:
    """The compiled kernel for ``source`` (from the process cache, the disk cache, or the compiler)."""
    mod = _modules.get_or_make((source, device.index), source)
    _runtime.install_interrupt()
    name = source.name.strip() if source.name else next(iter(mod.kernels))
    return mod.kernels[name]


def close_kernel(kernel: Kernel) -> None:
    """Drop the process cache's reference to the module of ``kernel`` (its handle): once no
    kernel of it is left, the shared object is unloaded."""
    _modules.drop_lib(kernel.handle.lib)


_RESERVED = {"kb_main.cpp", "kernel.so", "kernel.d", *_FILE.values(), *_HEADERS}


def _build(source: Source) -> Module:
    if not isinstance(source.code, str):
        raise InvalidArgumentError(f"a {source.lang!r} Source must be text, not {type(source.code).__name__}")
    clash = sorted(_RESERVED & set(source.headers))
    if clash:
        raise InvalidArgumentError(
            f"Source header name(s) {', '.join(clash)} are taken by the cpu backend's own build files; rename them"
        )
    names = entries(source)
    text, runner = source.text, "run_blocks"
    if source.lang == "cuda":
        check_features(source)
        if needs_fibers(source):
            text = rewrite_extern_shared(text)
            text, runner = _loops.add_loop_yields(text, strip_comments_and_strings(text)), "run_fibers"
        else:
            wrapped = wrap_thread_loops(source, text)
            text, runner = (text, "run_threads") if wrapped is None else (wrapped, "run_blocks")
    tc = _driver.toolchain()
    fl = flags(source.options, tc)
    pre = preludes()
    fname = _FILE[source.lang]
    main = f'#include "{_PRELUDE[source.lang]}"\n#include "{fname}"\n' + _launcher(source.lang, names, runner)
    # In-process images never carry a sanitizer (CXX='g++ -fsanitize=address' would end the
    # interpreter when loaded); checked mode builds a second, sanitized image for the worker.
    plain = _driver.plain_argv(tc)
    image, deps = _image(tc, plain, fl, source, text, names, fname, main, pre)
    lib = _driver.load_library(image)
    remote = None
    if _driver.isolated():
        # Isolated mode only: the worker client brings in sockets, pickling and shared memory.
        from ._worker_client import RemoteModule

        if _driver.check_mode():
            image, _ = _image(tc, tc.argv, [*fl, *_driver.CHECK_FLAGS], source, text, names, fname, main, pre)
        remote = RemoteModule(image)
    return Module(lib, names, source, deps, remote)


def _image(
    tc: _driver.Toolchain,
    argv: Sequence[str],
    fl: list[str],
    source: Source,
    text: str,
    names: list[str],
    fname: str,
    main: str,
    pre: dict[str, str],
) -> tuple[bytes, dict[str, str]]:
    key = make_key(
        backend="cpu",
        compiler=" ".join(argv),
        compiler_version=tc.version,
        arch=tc.cpu_id if any(f.endswith("=native") for f in fl) else os.uname().machine,
        options=fl,
        source=source.text,
        entries=names,
        extra={
            "lang": source.lang,
            "main": main,
            "text": text,
            **{f"prelude:{k}": v for k, v in pre.items()},
            **{f"header:{k}": v for k, v in source.headers.items()},
        },
    )
    cache, hit = lookup(key)
    got = _hit_image(hit)
    if got is not None:
        return got
    with locked(cache, key):  # N processes on a cold cache: one compiles, the others wait for it
        got = _hit_image(recheck(cache, key))
        if got is not None:
            return got
        image, deps = _run_compiler(tuple(argv), fl, source, text, fname, main, pre)
        store(cache, key, image, {"backend": "cpu", "entries": names, "compiler": tc.version, "deps": deps})
    return image, deps


def _hit_image(hit: CacheEntry | None) -> tuple[bytes, dict[str, str]] | None:
    """A cache entry's image and its dependencies, when every file the compiler read is unchanged."""
    if hit is None or not _deps_unchanged(hit.meta.get("deps")):
        return None
    return hit.payload, hit.meta["deps"]


# --- files the compiler read --------------------------------------------------------------


def _file_digest(path: str) -> str | None:
    h = hashlib.sha256()
    try:
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
    except OSError:
        return None
    return h.hexdigest()


def _stamp(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size)


def _deps_unchanged(deps: object) -> bool:
    if not isinstance(deps, dict):
        return False  # an entry without the list (older code): rebuild, to be safe
    return all(_file_digest(p) == d for p, d in deps.items())


def _parse_depfile(text: str) -> list[str]:
    """The prerequisites of a Make rule as ``-MD`` writes it (escaped spaces, continued lines)."""
    body = text.replace("\\\n", " ")
    _, _, rest = body.partition(": ")
    out: list[str] = []
    cur = ""
    i = 0
    while i < len(rest):
        c = rest[i]
        if c == "\\" and i + 1 < len(rest) and rest[i + 1] in " #":
            cur += rest[i + 1]
            i += 2
            continue
        if c == "$" and rest[i + 1 : i + 2] == "$":
            cur += "$"
            i += 2
            continue
        if c.isspace():
            if cur:
                out.append(cur)
            cur = ""
        else:
            cur += c
        i += 1
    if cur:
        out.append(cur)
    return out


def _external_deps(depfile: str, build_dir: str) -> dict[str, str]:
    """``{path: sha256}`` of every file the compiler read outside the build directory (headers
    reached by ``-I`` or an absolute ``#include``); the build directory's files are in the key."""
    try:
        with open(depfile, encoding="utf-8", errors="surrogateescape") as f:
            names = _parse_depfile(f.read())
    except OSError:
        return {}
    base = os.path.realpath(build_dir)
    out: dict[str, str] = {}
    for n in names:
        p = os.path.realpath(os.path.join(build_dir, n))
        if os.path.commonpath([p, base]) == base:
            continue
        d = _file_digest(p)
        if d is not None:
            out[p] = d
    return out


_DIAG_RE = re.compile(r"^(?P<file>[^:\n]+):(?P<line>\d+):(?:\d+:)?\s*(?:fatal )?error\b", re.M)


def _run_compiler(
    argv: tuple[str, ...], fl: list[str], source: Source, text: str, fname: str, main: str, pre: dict[str, str]
) -> tuple[bytes, dict[str, str]]:
    """The shared object's bytes, and ``{path: sha256}`` of the files it was built from outside
    the build directory (from the compiler's ``-MMD`` dependency output)."""
    import subprocess  # only where a compiler runs: importing the plugin stays light
    import tempfile

    with tempfile.TemporaryDirectory(prefix="kernelbay-cpu-build-") as d:
        files = {**pre, **dict(source.headers), fname: text, "kb_main.cpp": main}
        base = os.path.realpath(d)
        for n, body in files.items():
            p = os.path.realpath(os.path.join(d, n))
            if os.path.commonpath([p, base]) != base:  # Source refuses such names; never write outside
                raise InvalidArgumentError(f"Source header name {n!r} leads outside the build directory")
            os.makedirs(os.path.dirname(p), exist_ok=True)
            with open(p, "w", encoding="utf-8") as f:
                f.write(body)
        out = os.path.join(d, "kernel.so")
        depfile = os.path.join(d, "kernel.d")
        cmd = [*argv, *fl, "-I", d, "-MMD", "-MF", depfile, "kb_main.cpp", "-o", out]
        t0 = time.perf_counter()
        try:
            r = subprocess.run(cmd, cwd=d, capture_output=True, text=True, timeout=600)
        except (OSError, subprocess.SubprocessError) as exc:
            raise CompileError(f"running the C++ compiler ({' '.join(cmd)}) failed: {exc}", source=source.text) from exc
        if r.returncode != 0:
            raise _compile_error(r.stdout + r.stderr, source, fname, cmd)
        log.info("compiled %s in %.0f ms: %s", source.name or "kernel", (time.perf_counter() - t0) * 1e3, " ".join(cmd))
        with open(out, "rb") as f:
            image = f.read()
        return image, _external_deps(depfile, d)


def _compile_error(log: str, source: Source, fname: str, cmd: list[str]) -> CompileError:
    import tempfile  # only where a compiler runs: importing the plugin stays light

    lines: set[int] = set()
    in_launcher = False
    for m in _DIAG_RE.finditer(log):
        f = os.path.basename(m.group("file"))
        if f == fname:
            lines.add(int(m.group("line")))
        elif f == "kb_main.cpp":
            in_launcher = True
    msg = f"compiling {source.lang} kernel {source.name or '<unnamed>'!r} for cpu failed"
    if lines:
        msg += f" at line{'s' if len(lines) > 1 else ''} {', '.join(map(str, sorted(lines)))} of {fname}"
    if in_launcher:
        names = ", ".join(entries(source))
        msg += (
            f"; the generated launcher could not call {names}: check that the name (and template arguments) "
            "match a function in the source, that it returns void and is not overloaded"
        )
    if "No space left on device" in log or "Disk quota exceeded" in log:
        msg += f"; the disk is full: free space in {tempfile.gettempdir()} or set TMPDIR (the compiler said so)"
    return CompileError(msg + f" (command: {' '.join(cmd)})", log=log, source=source.text, lines=lines)
