"""Source analysis for the cpu backend: what a CUDA source uses, what it cannot run, which runner
each kernel gets (the plan), and its entries. The text rewrites g++ needs are in rewrites.py.
Pure text work: no compiler runs here."""

from __future__ import annotations

import dataclasses
import re

import attrs
from kernelbay.csource import default_kernel, find_kernels, strip_comments_and_strings
from kernelbay.errors import CompileError, InvalidArgumentError
from kernelbay.types import Source

from . import _loops
from .fission import split as split_at_barriers
from .fission_inline import inline_helpers
from .fission_state import template_params
from .reach import Program
from .rewrites import blank_text, rewrite_extern_shared

FILES = {"cuda": "kernel.cu", "c++": "kernel.cpp"}

# --- features: what picks the fiber runner, and what the CPU backend cannot honour --------------

_UNSUPPORTED = [
    (r"\b(?:this_grid|grid_group|this_multi_grid|multi_grid_group)\b", "grid-wide cooperative groups (this_grid)"),
    (
        r"\b(?:coalesced_threads|coalesced_group|labeled_partition|binary_partition)\b",
        "coalesced/labeled cooperative groups",
    ),
    (r"\b(?:tex[123]D\w*|texture\s*<|surf[123]D\w*|cudaTextureObject_t|cudaSurfaceObject_t)", "textures and surfaces"),
    (r"\basm\b|\b__asm__\b", "inline PTX assembly (asm)"),
    (
        r"<<<",
        "a kernel launch (<<< >>>: device-side launches do not run on cpu; host launch code does not belong"
        " in the source given to compile, as kernelbay launches the kernel)",
    ),
    (r"\bcub\s*::", "CUB (cub::), which has no cpu implementation"),
    (r"\bthrust\s*::", "Thrust (thrust::), which has no cpu implementation"),
    (
        r"\bcuda\s*::\s*(?:barrier|memcpy_async|pipeline|aligned_size_t|atomic_ref|atomic)\b|\b__pipeline_\w+",
        "libcu++ synchronisation (cuda::barrier, cuda::memcpy_async, cuda::pipeline, cuda::atomic)",
    ),
    (r"\b(?:nvcuda|wmma)\s*::", "warp matrix functions (nvcuda::wmma)"),
]
#: Headers with no cpu counterpart, refused by name (an #include line) before g++ says "not found".
_UNSUPPORTED_INCLUDES = [
    (r"cub/", "CUB (<cub/...>), which has no cpu implementation"),
    (r"thrust/", "Thrust (<thrust/...>), which has no cpu implementation"),
    (
        r"cuda/(?:std/)?(?:barrier|pipeline|atomic|annotated_ptr)\b|cuda_pipeline",
        "libcu++ synchronisation (<cuda/barrier>, <cuda/pipeline>, <cuda/atomic>)",
    ),
    (r"cooperative_groups/memcpy_async", "cooperative_groups::memcpy_async"),
    (r"mma\.h|cuda/ptx|cute/|cutlass/", "tensor-core and PTX libraries (mma.h, CUTLASS, CuTe, cuda/ptx)"),
]
_INCLUDE_RE = re.compile(r"^[ \t]*#[ \t]*include[ \t]*[<\"]([^>\"\n]+)[>\"]", re.M)
_UNSUPPORTED_RE = [(re.compile(p), what) for p, what in _UNSUPPORTED]
#: The warp functions without ``_sync`` that CUDA 9 deprecated and removed for sm_70 and newer
#: (nvcc and NVRTC no longer declare them): refused by name unless the source defines a macro of
#: that name (code that maps them onto the ``_sync`` forms itself).
_LEGACY_WARP_RE = re.compile(r"\b(__shfl(?:_up|_down|_xor)?|__any|__all|__ballot)\s*\(")
_MACRO_NAME_RE = re.compile(r"^[ \t]*#[ \t]*define[ \t]+([A-Za-z_]\w*)", re.M)

#: Anything that needs the threads of a block to run together: such kernels run as fibers.
_BLOCK_FEATURES_RE = re.compile(
    r"\b(?:__syncthreads\w*|__shared__|__syncwarp|__shfl\w*|__ballot\w*|__any_sync|__all_sync|__uni_sync"
    r"|__activemask|__match_\w+|__reduce_\w+_sync|cooperative_groups)\b"
)


def _texts(source: Source) -> list[tuple[str, str]]:
    return [(FILES["cuda"], source.text), *sorted(source.headers.items())]


def check_features(source: Source) -> None:
    """Refuse CUDA features the CPU backend cannot run correctly, naming each and its line."""
    found: list[tuple[str, str, int]] = []
    lines: set[int] = set()
    macros = {m.group(1) for _, text in _texts(source) for m in _MACRO_NAME_RE.finditer(text)}
    for fname, text in _texts(source):
        clean = strip_comments_and_strings(text)
        for use in _LEGACY_WARP_RE.finditer(clean):
            if use.group(1) not in macros:
                ln = clean.count("\n", 0, use.start()) + 1
                name = use.group(1)
                found.append(
                    (f"{name}(), the warp function without _sync that CUDA 9 removed (use {name}_sync)", fname, ln)
                )
                if fname == FILES["cuda"]:
                    lines.add(ln)
                break
        for inc in _INCLUDE_RE.finditer(text):
            ln = text.count("\n", 0, inc.start()) + 1
            if not clean.splitlines()[ln - 1].lstrip().startswith("#"):
                continue  # the line is in a comment
            for pat, what in _UNSUPPORTED_INCLUDES:
                if re.match(pat, inc.group(1).strip()):
                    found.append((what, fname, ln))
                    if fname == FILES["cuda"]:
                        lines.add(ln)
                    break
        for rx, what in _UNSUPPORTED_RE:
            m = rx.search(clean)
            if m:
                ln = clean.count("\n", 0, m.start()) + 1
                found.append((what, fname, ln))
                if fname == FILES["cuda"]:
                    lines.add(ln)
    if found:
        where = "; ".join(f"{what} at {fname}:{ln}" for what, fname, ln in found)
        raise CompileError(
            f"the cpu backend cannot run this kernel: it uses {where}. Write a variant without it for cpu "
            "(or a 'c++' Source), or pick a CUDA device",
            source=source.text,
            lines=lines,
        )


#: C++ exceptions in a source: it is compiled with them (flags.py), as before.
_EXCEPTIONS_RE = re.compile(r"\b(?:throw|try|catch)\b")


def uses_exceptions(source: Source) -> bool:
    """Whether the source or one of its headers throws or catches a C++ exception (``throw``,
    ``try``, ``catch`` outside comments and literals). Files it includes from elsewhere are not
    read: a build that fails for want of exceptions is built again with them (build.py)."""
    return any(
        _EXCEPTIONS_RE.search(t) and _EXCEPTIONS_RE.search(strip_comments_and_strings(t)) for _, t in _texts(source)
    )


def needs_fibers(source: Source) -> bool:
    """Whether a cuda source uses barriers, shared memory, warp operations or cooperative groups."""
    return any(_BLOCK_FEATURES_RE.search(strip_comments_and_strings(t)) for _, t in _texts(source))


@dataclasses.dataclass(frozen=True)
class Plan:
    """How each entry of a cuda source runs, and the text g++ compiles."""

    text: str
    #: entry -> "run_fibers" (threads as fibers), "run_blocks" (the block's threads as a loop in
    #: the kernel body) or "run_threads" (the kernel called once per thread)
    runners: dict[str, str]
    #: entry -> why it runs as fibers (the block operation it reaches and where)
    why: dict[str, str]


def plan_cuda(source: Source, names: list[str]) -> Plan:
    r"""Pick each entry's runner from what its kernel reaches (reach.py), and rewrite the text:
    fiber kernels' loops tick (\_loops.py), loop-path kernels' bodies are wrapped in
    KB_THREADS_BEGIN/END. A kernel whose definition cannot be found is judged by the whole text."""
    inlined = inline_helpers(source.text, list(source.headers.values()))
    if inlined != source.text:
        source = attrs.evolve(source, code=inlined)
    prog = Program(_texts(source))
    whole = needs_fibers(source)
    kernels = find_kernels(source.text)
    fiber_at: set[int] = set()  # body offsets of kernels run as fibers
    wrap_at: set[int] = set()  # body offsets of kernels run on the loop path
    split_at: set[int] = set()  # body offsets of kernels run on the loop path, split at barriers
    values_at: dict[int, frozenset[str]] = {}  # their template's type parameters made arithmetic
    runners: dict[str, str] = {}
    why: dict[str, str] = {}
    for n in names:
        found = prog.kernel(n)
        if found is None:
            runners[n] = "run_fibers" if whole else "run_threads"
            why[n] = "its definition was not found in the source: judged by the whole text" if whole else ""
            continue
        fname, fn = found
        r = prog.reach(fname, fn)
        at = fn.body[0] if fn.body is not None and fname == FILES["cuda"] else -1
        refusal = ""
        if r.block:
            if at < 0:
                refusal = "the kernel is defined in a header"
            elif r.block_outside:
                refusal = "a block operation outside the kernel's body (a function it calls, a macro, file scope)"
            elif r.builtins_outside:
                refusal = "a function it calls reads threadIdx"
            elif values_at.setdefault(at, arithmetic_types(prog.code[fname][fn.start : fn.parens[0]], n)) != (
                arithmetic_types(prog.code[fname][fn.start : fn.parens[0]], n)
            ):
                refusal = "entries of one template whose type arguments differ in being arithmetic"
            else:
                refusal = split_at_barriers(
                    source.text, strip_comments_and_strings(source.text), fn, source.options, source.headers,
                    values_at[at],
                )[1]  # fmt: skip
        if r.block and not refusal:
            runners[n], why[n] = "run_blocks", f"barriers and warp operations as loop boundaries: {r.why}"
            split_at.add(at)
        elif r.block:
            runners[n], why[n] = "run_fibers", f"{r.why}; not as loops: {refusal}"
            fiber_at.add(at)
        elif r.builtins_outside or at < 0:
            runners[n], why[n] = "run_threads", ""
        else:
            runners[n], why[n] = "run_blocks", ""
            wrap_at.add(at)
    # A kernel body reached from no entry is compiled as it stands; one both ways (two entries of
    # one template) runs the fiber way.
    wrap_at -= fiber_at
    split_at -= fiber_at | wrap_at
    order = [k.body[0] for k in kernels if k.body is not None]
    text = source.text
    if fiber_at or split_at:  # (a helper's extern __shared__, cuda-samples' SharedMemory<T>, on loops too)
        text = rewrite_extern_shared(text)
    if fiber_at:
        clean = strip_comments_and_strings(text)
        # No ticks in the loops of kernels on the other runners: nothing to yield to there.
        bodies = [k.body for k in find_kernels(text) if k.body is not None]
        for (a, z), orig in zip(bodies, order, strict=False):
            if orig not in fiber_at:
                clean = clean[: a + 1] + blank_text(clean[a + 1 : z]) + clean[z:]
        text = _loops.add_loop_yields(text, clean)
    for i, orig in enumerate(order):
        if orig in split_at:
            k = [k for k in find_kernels(text) if k.body is not None][i]
            code = strip_comments_and_strings(text)
            split = split_at_barriers(text, code, k, source.options, source.headers, values_at.get(orig, frozenset()))[
                0
            ]
            if split is None:  # cannot happen: the same shape was accepted above
                raise CompileError(f"internal error: barrier loop fission of {k.name} failed on the rewritten text")
            text = split
    if wrap_at:
        bodies = [k.body for k in find_kernels(text) if k.body is not None]
        out, pos = [], 0
        for (a, z), orig in zip(bodies, order, strict=False):
            if orig in wrap_at:
                out.append(text[pos : a + 1] + " KB_THREADS_BEGIN " + text[a + 1 : z] + " KB_THREADS_END ")
                pos = z
        out.append(text[pos:])
        text = "".join(out)
    return Plan(text, runners, why)


_ARITHMETIC = re.compile(
    r"(?:(?:unsigned|signed|long|short)\s+)*(?:int|float|double|long|char|short|unsigned|bool|size_t"
    r"|u?int(?:8|16|32|64)_t)"
)


def arithmetic_types(head: str, entry: str) -> frozenset[str]:
    """The type parameters of the template a kernel's ``head`` (its code before the parameter
    list) begins with that the entry (``reduce3<int>``) makes arithmetic types."""
    m = re.search(r"<(.*)>\s*$", entry)
    if m is None or "<" in m.group(1):
        return frozenset()
    args = [" ".join(a.split()) for a in m.group(1).split(",")]
    return frozenset(
        name for (name, is_type), arg in zip(template_params(head), args) if is_type and _ARITHMETIC.fullmatch(arg)
    )


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
