"""What a disk cache entry is: its key, its file layout and the check of it on every read.

An entry file is ``magic, metadata length, payload length`` (:data:`HEADER`), the JSON metadata
(schema, key and the caller's ``meta``), the payload, and a SHA-256 of metadata and payload.
"""

from __future__ import annotations

import hashlib
import json
import struct
from collections.abc import Iterable, Mapping
from typing import Any

import attrs

__all__ = ["LOCK", "SCHEMA", "SIZE", "SUFFIX", "CacheEntry", "decode", "encode", "make_key"]

#: Bump to invalidate every entry written by older code.
SCHEMA = 1
MAGIC = b"KBC\x01"
HEADER = struct.Struct("<4sIQ")  # magic, metadata length, payload length
DIGEST = 32
SUFFIX = ".kbc"  #: an entry's file name is its key and this
LOCK = ".lock"  #: a key's compile lock is the file ``<key>.lock`` (older versions: ``.lock``, one per subdirectory)
SIZE = ".size"  #: the running total, in the cache directory


def make_key(
    *,
    backend: str,
    compiler: str,
    compiler_version: str,
    arch: str,
    options: Iterable[str] = (),
    source: str | bytes = "",
    entries: Iterable[str] = (),
    extra: Mapping[str, str] | None = None,
) -> str:
    """A hex key over everything that defines a compiled result."""
    h = hashlib.sha256()

    def put(tag: str, value: str | bytes) -> None:
        data = value.encode() if isinstance(value, str) else value
        h.update(tag.encode() + b"\0" + len(data).to_bytes(8, "little") + data)

    put("schema", str(SCHEMA))
    put("backend", backend)
    put("compiler", compiler)
    put("compiler_version", compiler_version)
    put("arch", arch)
    for o in options:
        put("option", o)
    put("source", source)
    for e in entries:
        put("entry", e)
    for k, v in sorted((extra or {}).items()):
        put("extra:" + k, v)
    return h.hexdigest()


@attrs.frozen
class CacheEntry:
    """A verified entry: the compiled payload and its JSON metadata."""

    key: str
    payload: bytes
    meta: Mapping[str, Any]
    path: str


def encode(key: str, payload: bytes, meta: Mapping[str, Any] | None = None) -> bytes:
    """The file content of the entry ``key``."""
    head = json.dumps({"schema": SCHEMA, "key": key, "meta": dict(meta or {})}, sort_keys=True).encode()
    body = head + payload
    return HEADER.pack(MAGIC, len(head), len(payload)) + body + hashlib.sha256(body).digest()


def decode(key: str, path: str, data: bytes) -> CacheEntry | None:
    """The entry ``data`` holds, or None where it is truncated, corrupt or another key's."""
    if len(data) < HEADER.size + DIGEST:
        return None
    magic, mlen, plen = HEADER.unpack_from(data)
    if magic != MAGIC or HEADER.size + mlen + plen + DIGEST != len(data):
        return None
    body = memoryview(data)[HEADER.size : -DIGEST]  # views: the payload is copied once, at the end
    if hashlib.sha256(body).digest() != data[-DIGEST:]:
        return None
    try:
        meta = json.loads(bytes(body[:mlen]).decode())
    except (UnicodeDecodeError, json.JSONDecodeError):
        return None
    if not isinstance(meta, dict) or meta.get("key") != key or meta.get("schema") != SCHEMA:
        return None
    return CacheEntry(key=key, payload=bytes(body[mlen:]), meta=meta.get("meta", {}), path=path)
