"""A backend that keeps the ``kernelbay_compile_to_cache`` promise for function sources, and
breaks it where a source asks, for the conformance check of that promise (tocache.py).

pyref's memory and launcher; its compile stores a Python kernel's bytecode (``marshal``) in
kernelbay's disk cache, keyed by the function's content (``Source.digest``), and builds the
kernel from the bytecode found there, so a compile in one process is found by another. A
source's ``meta["compile_to_cache"]`` breaks the hook on purpose: ``"process"`` looks on disk
but keeps the bytecode in the compiling process, ``"nowhere"`` compiles nothing.
"""

from __future__ import annotations

import marshal
import sys
import types
from typing import Any

import attrs
import kernelbay as kb
from kernelbay import hookimpl
from kernelbay.cache import lookup, make_key, store
from kernelbay_pyref import allocator, launcher

kernelbay_allocate = hookimpl(allocator.allocate)
kernelbay_free = hookimpl(allocator.free)
kernelbay_copy = hookimpl(allocator.copy)
kernelbay_host_view = hookimpl(allocator.host_view)
kernelbay_launch = hookimpl(launcher.launch)

#: Bytecode a "process" compile_to_cache kept here instead of on disk, by cache key.
_kept: dict[str, bytes] = {}


def _key(source: kb.Source) -> str:
    return make_key(
        backend="bytecode",
        compiler="marshal",
        compiler_version=sys.version,
        arch="python",
        source=source.digest(),
        entries=[source.code.__qualname__],
    )


def _bytecode(source: kb.Source) -> bytes:
    key = _key(source)
    cache, hit = lookup(key)
    if hit is not None:
        return hit.payload
    data = _kept.get(key) or marshal.dumps(source.code.__code__)
    store(cache, key, data)
    return data


@hookimpl
def kernelbay_compile(device: kb.Device, source: kb.Source) -> Any:
    fn = source.code
    if not isinstance(fn, types.FunctionType):
        return launcher.compile(device, source)  # pyref's refusal, with its message
    loaded = types.FunctionType(marshal.loads(_bytecode(source)), fn.__globals__, fn.__name__, fn.__defaults__)
    loaded.__annotations__ = dict(fn.__annotations__)
    return launcher.compile(device, attrs.evolve(source, code=loaded))


@hookimpl
def kernelbay_compile_to_cache(device: kb.Device, source: kb.Source) -> None:
    how = source.meta.get("compile_to_cache")
    if how == "nowhere":
        return
    if how == "process":  # looks on disk, as a compile does, but keeps what it made in this process
        key = _key(source)
        lookup(key)
        _kept[key] = marshal.dumps(source.code.__code__)
        return
    _bytecode(source)


@hookimpl
def kernelbay_backend() -> kb.BackendSpec:
    return kb.BackendSpec(
        name="bytecode",
        priority=0,
        languages=("python",),
        api_version=1,
        description="pyref with its kernels' bytecode in the disk cache (tests compile_to_cache)",
    )


@hookimpl
def kernelbay_devices() -> list[kb.Device]:
    return [kb.Device("bytecode", 0, "Python interpreter, bytecode from the disk cache")]


@hookimpl
def kernelbay_synchronize(device: kb.Device, stream: object) -> None:
    return None
