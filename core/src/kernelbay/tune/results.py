"""The results file: one per kernel family, device identity, problem key and versions.

Each file (JSON, under the disk cache's ``tune/`` subdirectory) maps a config's key (its
Source's digest and the config) to what happened to it: ``ok`` with its median time and
spread, or the fault (``wrong``, ``compile_error``, ``launch_error``, ``resources``,
``crashed``, ``timeout``). A later sweep with the same identity reuses every record it finds:
no compile and no timing for those configs. :func:`export` and :func:`import_` move them
between machines and ranks.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
from collections.abc import Mapping
from typing import Any

from .. import cache
from ..errors import InvalidArgumentError

__all__ = ["SCHEMA", "Store", "export", "import_"]

SCHEMA = 1


def _dir() -> str:
    return cache.default_cache().subdir("tune")


class Store:
    """The records of one identity (a mapping from record key to record)."""

    def __init__(self, identity: Mapping[str, Any]) -> None:
        self.identity = dict(identity)
        text = json.dumps({"schema": SCHEMA, **self.identity}, sort_keys=True, default=repr)
        self.name = hashlib.sha256(text.encode()).hexdigest()[:32] + ".json"
        self.records: dict[str, dict[str, Any]] = {}
        self.path: str | None = None
        try:
            self.path = os.path.join(_dir(), self.name)
            with open(self.path, encoding="utf-8") as f:
                data = json.load(f)
            if data.get("schema") == SCHEMA and data.get("identity") == json.loads(
                json.dumps(self.identity, default=repr)
            ):
                self.records = dict(data.get("records", {}))
        except (OSError, ValueError, AttributeError, cache.CacheError):
            pass  # no file yet, or a damaged one: start empty (it is rewritten whole)

    def save(self) -> None:
        if self.path is None:
            return
        _write(self.path, {"schema": SCHEMA, "identity": self.identity, "records": self.records})


def _write(path: str, data: Any) -> None:
    tmp = f"{path}.tmp-{secrets.token_hex(6)}"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=1, sort_keys=True, default=repr)
    os.replace(tmp, path)


def export(path: str) -> int:
    """Write every results file of this machine's cache into one JSON file: the count."""
    d = _dir()
    files = {}
    for n in sorted(os.listdir(d)):
        if n.endswith(".json"):
            try:
                with open(os.path.join(d, n), encoding="utf-8") as f:
                    files[n] = json.load(f)
            except (OSError, ValueError):
                continue
    _write(path, {"kernelbay-tune-results": SCHEMA, "files": files})
    return len(files)


def import_(path: str) -> int:
    """Merge an exported file into this machine's results (a record already here is kept):
    the number of records added."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except OSError as exc:
        raise InvalidArgumentError(f"cannot read tuning results {path!r}: {exc.strerror}") from None
    except ValueError as exc:
        raise InvalidArgumentError(f"{path!r} is not a tuning results file (not JSON: {exc})") from None
    if not isinstance(data, dict) or data.get("kernelbay-tune-results") != SCHEMA:
        raise InvalidArgumentError(
            f"{path!r} is not a kernelbay tuning results export of schema {SCHEMA}; make it with "
            "`kernelbay tune export FILE` (or kb.tune.export_results) of this kernelbay version"
        )
    d = _dir()
    added = 0
    for name, content in data.get("files", {}).items():
        if not (name.endswith(".json") and len(name) == 37 and all(c in "0123456789abcdef" for c in name[:32])):
            continue
        target = os.path.join(d, name)
        here: dict[str, Any] = {}
        try:
            with open(target, encoding="utf-8") as f:
                here = json.load(f)
        except (OSError, ValueError):
            here = {"schema": content.get("schema"), "identity": content.get("identity"), "records": {}}
        for k, rec in content.get("records", {}).items():
            if k not in here["records"]:
                here["records"][k] = rec
                added += 1
        _write(target, here)
    return added
