"""Argument planning and packing: which bytes each kernel argument becomes, and where.

:func:`pack_plan` validates a launch's arguments against the kernel's parameters (size,
alignment, PTX type where known) and says how to write them; :func:`make_packer` turns the plan
into a function specialised to the argument types; :func:`c_kinds` says whether the native
fast path can write them itself (see ``_launch.c``).
"""

from __future__ import annotations

import re
import struct
from collections.abc import Sequence
from typing import Any

from kernelbay.errors import ArgumentTypeError, InvalidArgumentError, UseAfterFreeError
from kernelbay.types import Buffer

__all__ = ["ParamSpec", "layout", "pack_plan", "make_packer", "c_kinds", "Replan", "never"]

#: (size, align, ptx type or "") per parameter, and the byte offset of each.
ParamSpec = tuple[int, int, str, int]


class Replan(Exception):
    """Raised by a generated packer when the arguments no longer match its signature."""


def never(args: Any, dev: Any, buf: Any) -> None:
    """The packer of a kernel not yet launched: always asks for a plan."""
    raise Replan


_INT_CODES = {1: "b", 2: "h", 4: "i", 8: "q"}
_UINT_CODES = {1: "B", 2: "H", 4: "I", 8: "Q"}
_FLOAT_CODES = {2: "e", 4: "f", 8: "d"}


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


def _describe(params: Sequence[ParamSpec]) -> str:
    return ", ".join(f"{s} bytes" + (f" ({t})" if t else "") for s, _, t, _ in params)


def pack_plan(
    name: str, params: Sequence[ParamSpec], args: Sequence[Any], device: Any
) -> tuple[str, list[str], list[str], list[str]]:
    """Validate ``args`` against ``params``; return (struct format, value expressions, handle
    names, pre-checks) for a packer. Raises the kernelbay error for the first bad argument."""
    import numpy as np  # deferred for speed: importing the plugin stays cheap

    if len(args) != len(params):
        raise InvalidArgumentError(
            f"kernel {name!r} takes {len(params)} argument(s) ({_describe(params)}), got {len(args)}"
        )
    fmt = "<"
    pos = 0
    values: list[str] = []
    handles: list[str] = []
    for i, (a, (size, _align, ptype, off)) in enumerate(zip(args, params)):
        if off > pos:
            fmt += f"{off - pos}x"
        pos = off + size
        where = f"argument {i} of kernel {name!r}"
        kind = ptype[:1]
        if isinstance(a, Buffer):
            h = a.handle
            if h is None:
                raise UseAfterFreeError(f"{where} is a {type(a).__name__} that was closed")
            if a.device != device:
                raise InvalidArgumentError(
                    f"{where} lives on {a.device}, but the kernel was compiled for {device}; copy it with "
                    f"kb.asarray(x, device={str(device)!r}) first"
                )
            if size != 8:
                raise ArgumentTypeError(f"{where} is a device array (an 8-byte pointer), but the parameter is {size} bytes")
            fmt += "Q"
            handles.append(f"a{i}")
            values.append(f"h{i}")
        elif isinstance(a, np.generic):
            dt = a.dtype
            if dt.itemsize != size:
                raise ArgumentTypeError(
                    f"{where} is {dt.name} ({dt.itemsize} bytes), but the parameter is {size} bytes"
                    + (f" ({ptype})" if ptype else "")
                )
            if kind == "f" and dt.kind != "f" or kind in ("s", "u") and dt.kind == "f":
                raise ArgumentTypeError(f"{where} is {dt.name}, but the parameter is {ptype}")
            if dt.kind == "f" and size in _FLOAT_CODES:
                fmt += _FLOAT_CODES[size]
            elif dt.kind in "ib" and size in _INT_CODES:
                fmt += _INT_CODES[size] if dt.kind == "i" else "?"
            elif dt.kind == "u" and size in _UINT_CODES:
                fmt += _UINT_CODES[size]
            else:
                fmt += f"{size}s"
                values.append(f"a{i}.tobytes()")
                continue
            values.append(f"a{i}")
        elif type(a) is float or (type(a) in (int, bool) and kind == "f"):
            if kind in ("s", "u", "b") and type(a) is float:
                raise ArgumentTypeError(f"{where} is a Python float, but the parameter is {ptype}; pass np.{ptype}-typed value")
            if size not in (4, 8):
                raise ArgumentTypeError(
                    f"{where} is a Python number, but the parameter is {size} bytes: pass a numpy scalar "
                    "(np.float16(...)) so the size is explicit"
                )
            fmt += _FLOAT_CODES[size]
            values.append(f"a{i}")
        elif type(a) in (int, bool):
            if size not in (4, 8):
                raise ArgumentTypeError(
                    f"{where} is a Python int, but the parameter is {size} bytes: pass a numpy scalar "
                    "(np.int16(...), np.uint8(...)) so the size is explicit"
                )
            lo, hi = -(1 << (8 * size - 1)), (1 << (8 * size)) - 1
            if not lo <= a <= hi:
                raise InvalidArgumentError(f"{where} = {a} does not fit the {size}-byte parameter")
            if a > (1 << (8 * size - 1)) - 1:
                fmt += _UINT_CODES[size]
            else:
                fmt += _INT_CODES[size]
            values.append(f"a{i}")
        elif hasattr(a, "__cuda_array_interface__"):
            if size != 8:
                raise ArgumentTypeError(f"{where} is a device array (an 8-byte pointer), but the parameter is {size} bytes")
            fmt += "Q"
            values.append(f"a{i}.__cuda_array_interface__['data'][0]")
        elif isinstance(a, (bytes, bytearray)):
            if len(a) != size:
                raise ArgumentTypeError(f"{where} is {len(a)} bytes, but the parameter is {size} bytes")
            fmt += f"{size}s"
            values.append(f"bytes(a{i})")
        else:
            raise ArgumentTypeError(
                f"{where} has type {type(a).__name__}; pass a kernelbay Array/Buffer, a numpy scalar "
                f"(np.float32(2.0)) or a Python number, for a {size}-byte parameter"
            )
    return fmt, values, handles, []


def make_packer(name: str, params: Sequence[ParamSpec], args: Sequence[Any], device: Any) -> Any:
    """A function ``pack(args, device, buf)`` specialised to the types of ``args``."""
    fmt, values, handles, _ = pack_plan(name, params, args, device)
    n = len(args)
    lines = ["def pack(args, dev, buf):"]
    if n:
        lines.append(f"    {', '.join(f'a{i}' for i in range(n))}, = args")
        lines.append("    if " + " or ".join(f"type(a{i}) is not T{i}" for i in range(n)) + ": raise Replan")
    else:
        lines.append("    if args: raise Replan")
    for h in handles:
        i = h[1:]
        lines.append(f"    h{i} = a{i}.handle")
    if handles:
        lines.append("    if " + " or ".join(f"h{h[1:]} is None" for h in handles) + ": raise Replan")
        lines.append(
            "    if " + " or ".join(f"(a{h[1:]}.device is not dev and a{h[1:]}.device != dev)" for h in handles)
            + ": raise Replan"
        )
    if values:
        lines.append(f"    pack_into(buf, 0, {', '.join(values)})")
    ns: dict[str, Any] = {"Replan": Replan, "pack_into": struct.Struct(fmt).pack_into}
    for i, a in enumerate(args):
        ns[f"T{i}"] = type(a)
    exec("\n".join(lines), ns)
    return ns["pack"]


_C_CODES = frozenset("fdbBhHiIqQ?")


def c_kinds(fmt: str, values: list[str]) -> str | None:
    """Per argument, what FastLaunch writes: 'P' an array's handle, else the struct code of a
    plain value; None where an argument needs Python (half floats, raw bytes, foreign arrays)."""
    codes = [(cnt, c) for cnt, c in re.findall(r"(\d*)([a-zA-Z?])", fmt.lstrip("<")) if c != "x"]
    if len(codes) != len(values) or len(values) > 256:
        return None
    out = []
    for i, ((cnt, c), v) in enumerate(zip(codes, values)):
        if v == f"h{i}" and c == "Q" and not cnt:
            out.append("P")
        elif v == f"a{i}" and c in _C_CODES and not cnt:
            out.append(c)
        else:
            return None
    return "".join(out)


