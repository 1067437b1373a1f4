"""Argument planning and packing: which bytes each kernel argument becomes, and where.

:func:`pack_plan` validates a launch's arguments against the kernel's parameters (size,
alignment, PTX type where known) and says how to write them; :func:`make_packer` turns the plan
into a function specialised to the argument types; :func:`c_kinds` says whether the native
fast path can write them itself (see ``_launch.c``). A :class:`ParamBlock` is where they are
written: the memory ``cuLaunchKernel`` reads the arguments from.
"""

from __future__ import annotations

import ctypes
import struct
from collections.abc import Sequence
from typing import Any

from kernelbay.argrules import DTYPES, check_scalar, describe
from kernelbay.errors import ArgumentTypeError, InvalidArgumentError, UseAfterFreeError
from kernelbay.types import Buffer

__all__ = ["ParamSpec", "ParamBlock", "layout", "pack_plan", "make_packer", "c_kinds", "Replan", "never"]

#: (size, align, ptx type or "") per parameter, and the byte offset of each.
ParamSpec = tuple[int, int, str, int]


class ParamBlock:
    """One reusable parameter block: the argument values in one byte buffer, and the ``void*``
    array aimed into it that ``cuLaunchKernel`` takes as its ``kernelParams``.

    :ivar buf: the values, each at its parameter's offset.
    :ivar pointers: one ``void*`` per parameter, aimed at its value in ``buf``.
    :ivar kernel_params: the address of ``pointers`` (an int: the native helpers, graph nodes).
    :ivar ctypes_kernel_params: the same address as a ``ctypes.c_void_p``, for calls through ctypes.
    """

    __slots__ = ("buf", "pointers", "kernel_params", "ctypes_kernel_params")

    def __init__(self, params: Sequence[ParamSpec]) -> None:
        total = max(8, max((off + size for size, _, _, off in params), default=8))
        self.buf = (ctypes.c_char * total)()
        base = ctypes.addressof(self.buf)
        self.pointers = (ctypes.c_void_p * max(1, len(params)))(*[base + off for *_, off in params] or [0])
        self.kernel_params = ctypes.addressof(self.pointers)
        self.ctypes_kernel_params = ctypes.c_void_p(self.kernel_params)


class Replan(Exception):
    """Raised by a generated packer when the arguments no longer match its signature."""


def never(args: Any, dev: Any, buf: Any) -> None:
    """The packer of a kernel not yet launched: always asks for a plan."""
    raise Replan


# A parameter's type as kept in its ParamSpec: the C type where the compile probe found it
# ("int", "unsigned int", "pointer", "other"; see compiler.SIG_PROBE), else the PTX type
# ("u32": sign unknown), else "" (sizes only, from cuFuncGetParamInfo).
_C_KIND = {d.c: d.kind for d in DTYPES if d.c}
_C_KIND.update({d.name: d.kind for d in DTYPES if d.param})  # "float16": a Triton fp16
_C_KIND.update(pointer="p", other="o")
_PTX_KIND = {"f": "f", "s": "i", "u": "n", "b": ""}
# C codes for an integer of either sign (kind "n", or "" with a Python int): FastLaunch checks
# the union of both ranges, as argrules.int_range("n", size) says.
_EITHER = {1: "1", 2: "2", 4: "4", 8: "8"}


def layout(params: Sequence[tuple[int, int, str]]) -> list[ParamSpec]:
    """Offsets for parameters given as (size, align, type), as the C ABI lays them out."""
    out: list[ParamSpec] = []
    pos = 0
    for size, align, t in params:
        align = max(1, align)
        pos = (pos + align - 1) // align * align
        out.append((size, align, t, pos))
        pos += size
    return out


def param_kind(ptype: str) -> str:
    """The argrules kind of a parameter type (see the comment above)."""
    k = _C_KIND.get(ptype)
    if k is not None:
        return k
    return _PTX_KIND.get(ptype[:1], "")


def _describe(params: Sequence[ParamSpec]) -> str:
    return ", ".join(f"{s} bytes" + (f" ({t})" if t else "") for s, _, t, _ in params)


def pack_plan(
    name: str, params: Sequence[ParamSpec], args: Sequence[Any], device: Any, names: Sequence[str] | None = None
) -> tuple[str, list[str], list[str], list[str | None]]:
    """Validate ``args`` against ``params``; return (struct format, value expressions, handle
    names, C kind per argument or None) for a packer. Raises the kernelbay error for the first
    bad argument. Scalars follow the core's one table (:func:`kernelbay.argrules.check_scalar`)."""
    if len(args) != len(params):
        raise InvalidArgumentError(
            f"kernel {name!r} takes {len(params)} argument(s) ({_describe(params)}), got {len(args)}"
        )
    fmt = "<"
    pos = 0
    values: list[str] = []
    handles: list[str] = []
    ckinds: list[str | None] = []
    for i, (a, (size, _align, ptype, off)) in enumerate(zip(args, params)):
        if off > pos:
            fmt += f"{off - pos}x"
        pos = off + size
        where = f"argument {i}{f' ({names[i]})' if names else ''} of kernel {name!r}"
        kind = param_kind(ptype)
        if isinstance(a, Buffer):
            h = a.handle
            if h is None:
                raise UseAfterFreeError(f"{where} is a {type(a).__name__} that was closed")
            if a.device != device:
                raise InvalidArgumentError(
                    f"{where} lives on {a.device}, but the kernel was compiled for {device}; copy it with "
                    f"kb.asarray(x, device={str(device)!r}) first"
                )
            if size != 8 or kind in ("i", "u", "f", "b"):
                raise ArgumentTypeError(
                    f"{where} is a device array (an 8-byte pointer), but the parameter is {describe(kind, size)}"
                    + (f" ({ptype})" if ptype else "")
                    + "; a buffer goes only to a pointer parameter"
                )
            fmt += "Q"
            handles.append(f"a{i}")
            values.append(f"h{i}")
            ckinds.append("P")
        elif hasattr(a, "__cuda_array_interface__"):
            if size != 8 or kind in ("i", "u", "f", "b"):
                raise ArgumentTypeError(
                    f"{where} is a device array (an 8-byte pointer), but the parameter is {describe(kind, size)}"
                )
            fmt += "Q"
            # torch's data_ptr() is much quicker than building its __cuda_array_interface__
            values.append(f"a{i}.data_ptr()" if hasattr(a, "data_ptr") else f"a{i}.__cuda_array_interface__['data'][0]")
            ckinds.append(None)
        elif isinstance(a, (bytes, bytearray)):
            if len(a) != size:
                raise ArgumentTypeError(f"{where} is {len(a)} bytes, but the parameter is {size} bytes")
            fmt += f"{size}s"
            values.append(f"bytes(a{i})")
            ckinds.append(None)
        elif kind == "o":
            # A struct (or __half...) parameter: only a numpy scalar of exactly its size is unambiguous.
            if getattr(getattr(a, "dtype", None), "itemsize", None) != size or not hasattr(a, "tobytes"):
                raise ArgumentTypeError(
                    f"{where} expects a {size}-byte value of a C type with no numpy scalar kind; got "
                    f"{type(a).__name__} {a!r}: pass a numpy scalar of exactly {size} bytes (np.float16, a structured np.void)"
                )
            fmt += f"{size}s"
            values.append(f"a{i}.tobytes()")
            ckinds.append(None)
        else:
            code = check_scalar(a, "u" if kind == "p" else kind, size, where)
            if not code:
                fmt += f"{size}s"
                values.append(f"a{i}.tobytes()")
                ckinds.append(None)
                continue
            fmt += code
            values.append(f"a{i}")
            if kind in ("n", "") and code in "bBhHiIqQ" and type(a) is not bool:
                ckinds.append(_EITHER[size])  # the sign depends on the value, not the type
            else:
                ckinds.append(code)
    return fmt, values, handles, ckinds


def make_packer(
    name: str, params: Sequence[ParamSpec], args: Sequence[Any], device: Any, names: Sequence[str] | None = None
) -> Any:
    """A function ``pack(args, device, buf)`` specialised to the types of ``args``."""
    fmt, values, handles, _ = pack_plan(name, params, args, device, names)
    n = len(args)
    lines = ["def pack(args, dev, buf):"]
    if n:
        lines.append(f"    {', '.join(f'a{i}' for i in range(n))}, = args")
        lines.append("    if " + " or ".join(f"type(a{i}) is not T{i}" for i in range(n)) + ": raise Replan")
    else:
        lines.append("    if args: raise Replan")
    for h in handles:
        k = h[1:]
        lines.append(f"    h{k} = a{k}.handle")
    if handles:
        lines.append("    if " + " or ".join(f"h{h[1:]} is None" for h in handles) + ": raise Replan")
        lines.append(
            "    if "
            + " or ".join(f"(a{h[1:]}.device is not dev and a{h[1:]}.device != dev)" for h in handles)
            + ": raise Replan"
        )
    if values:
        lines.append(f"    pack_into(buf, 0, {', '.join(values)})")
    ns: dict[str, Any] = {"Replan": Replan, "pack_into": struct.Struct(fmt).pack_into}
    for i, a in enumerate(args):
        ns[f"T{i}"] = type(a)
    exec("\n".join(lines), ns)
    return ns["pack"]


def c_kinds(ckinds: Sequence[str | None]) -> str | None:
    """The kinds string FastLaunch takes, or None where an argument needs Python (raw bytes,
    foreign arrays) or there are more arguments than it holds."""
    kinds = [c for c in ckinds if c is not None]
    if len(ckinds) > 256 or len(kinds) != len(ckinds):
        return None
    return "".join(kinds)
