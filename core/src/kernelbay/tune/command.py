"""``kernelbay tune``: run a sweep a module declares, and move results between machines.

``kernelbay tune run MODULE:NAME`` imports ``NAME`` from ``MODULE``: a launch function
decorated with ``@kb.tune.autotune(..., args=...)`` (its ``args`` are the problem swept), and
prints each config's median time and spread, or its fault, fastest first; ``*`` marks the
winner. ``export FILE`` writes this machine's results; ``import FILE`` merges such a file.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from typing import Any

from ..errors import InvalidArgumentError
from .autotune import Tuned
from .results import export, import_

__all__ = ["add_parser"]


def add_parser(sub: Any) -> None:
    p = sub.add_parser("tune", help="autotune a kernel's parameters; export/import the results")
    tsub = p.add_subparsers(dest="tune_command", metavar="ACTION", required=True)
    run = tsub.add_parser("run", help="sweep the space of an @kb.tune.autotune function: MODULE:NAME")
    run.add_argument("target", metavar="MODULE:NAME", help="e.g. mypkg.kernels:rowsum (importable from here)")
    run.add_argument(
        "--device",
        action="append",
        default=None,
        help="device to time on (repeatable, or 'cuda:*' for all; default: $KERNELBAY_DEVICE or the best)",
    )
    run.add_argument("--strategy", default=None, help="exhaustive (default) or random")
    run.add_argument("--max-configs", type=int, default=None, help="at most this many configs")
    run.add_argument("--timeout", type=float, default=None, help="seconds one launch may take (default 30)")
    run.add_argument("--jobs", "-j", type=int, default=None, help="compile worker processes (default: CPU count)")
    run.add_argument("--force", action="store_true", help="ignore stored results: compile and time again")
    run.add_argument("--no-progress", action="store_true", help="no progress bars")
    ex = tsub.add_parser("export", help="write this machine's tuning results to FILE (JSON)")
    ex.add_argument("file")
    im = tsub.add_parser("import", help="merge tuning results exported elsewhere")
    im.add_argument("file")
    p.set_defaults(handler=cmd_tune)


def _target(text: str) -> Tuned:
    mod, _, name = text.partition(":")
    if not mod or not name:
        raise InvalidArgumentError(f"{text!r} is not MODULE:NAME, e.g. mypkg.kernels:rowsum")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # as `python -m` does: modules of the current directory
    try:
        obj: Any = importlib.import_module(mod)
    except ImportError as exc:
        raise InvalidArgumentError(f"cannot import {mod!r}: {exc}") from None
    for part in name.split("."):
        if not hasattr(obj, part):
            raise InvalidArgumentError(f"{mod!r} has no {name!r}")
        obj = getattr(obj, part)
    if not isinstance(obj, Tuned):
        raise InvalidArgumentError(
            f"{text} is a {type(obj).__name__}, not a function decorated with @kb.tune.autotune(..., args=...)"
        )
    return obj


def cmd_tune(args: argparse.Namespace) -> int:
    if args.tune_command == "export":
        print(f"exported {export(args.file)} results file(s) to {args.file}")
        return 0
    if args.tune_command == "import":
        print(f"imported {import_(args.file)} record(s) from {args.file}")
        return 0
    tuned = _target(args.target)
    opts: dict[str, Any] = {"progress": not args.no_progress, "force": args.force}
    for k in ("strategy", "max_configs", "timeout", "jobs"):
        if getattr(args, k) is not None:
            opts[k] = getattr(args, k)
    if args.device:
        opts["devices"] = args.device
    res = tuned.run(**opts)
    print(f"{args.target}: {len(res.records)} config(s), {res.reused} from stored results, {res.timed} run now")
    print(res.table())
    print(f"best: {res.config}")
    return 0
