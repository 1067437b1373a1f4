"""Compiled module images and what PTX says about their kernels' parameters.

Shared by the compilers (NVRTC in :mod:`.compiler`, Triton in :mod:`.triton_kernels`).
"""

from __future__ import annotations

import re

import attrs

__all__ = ["Image", "parse_ptx_params"]


@attrs.frozen
class Image:
    """A compiled (or given) module image.

    :ivar data: cubin, PTX (NUL-terminated) or fatbin bytes.
    :ivar kind: ``cubin``, ``ptx`` or ``fatbin``.
    :ivar arch: the ``--gpu-architecture`` value used (``sm_90``), or ``""`` for a given binary.
    :ivar lowered: name expression -> lowered (mangled) symbol.
    :ivar params: lowered symbol -> ``[(size, align, ptx_type), ...]`` where known.
    :ivar log: the compiler's log (warnings).
    :ivar from_cache: ``"disk"`` when read from the disk cache, else ``""``.
    :ivar kinds: lowered symbol -> one letter per parameter from the signature probe
        (:data:`SIG_PROBE`): ``p`` pointer, ``i``/``u`` signed/unsigned integer, ``f`` float,
        ``b`` bool, ``o`` other; absent where the probe could not run.
    """

    data: bytes
    kind: str
    arch: str = ""
    lowered: dict[str, str] = attrs.field(factory=dict)
    params: dict[str, list[tuple[int, int, str]]] = attrs.field(factory=dict)
    log: str = ""
    from_cache: str = ""
    kinds: dict[str, str] = attrs.field(factory=dict)


_ENTRY_RE = re.compile(r"\.entry\s+([\w$.]+)\s*\(([^)]*)\)", re.S)
_TYPE_BYTES = {"8": 1, "16": 2, "32": 4, "64": 8, "pred": 1}


def parse_ptx_params(ptx: str) -> dict[str, list[tuple[int, int, str]]]:
    """Per ``.entry``: each parameter's ``(size, align, ptx_type)`` from a PTX text."""
    out: dict[str, list[tuple[int, int, str]]] = {}
    for name, body in _ENTRY_RE.findall(ptx):
        params: list[tuple[int, int, str]] = []
        for decl in body.split(","):
            decl = " ".join(decl.split())
            if not decl:
                continue
            # ".param .align N .b8 name[..]"; a pointer's ".ptr .global .align N" is its pointee's
            m = re.search(r"\.param\s+\.align\s+(\d+)", decl)
            align = int(m.group(1)) if m else 0
            t = re.search(r"\.(b|s|u|f)(8|16|32|64)\b", decl)
            if not t:
                params = []
                break
            elem = _TYPE_BYTES[t.group(2)]
            arr = re.search(r"\[(\d+)\]\s*$", decl)
            size = elem * int(arr.group(1)) if arr else elem
            params.append((size, align or elem, t.group(1) + t.group(2)))
        out[name] = params
    return out
