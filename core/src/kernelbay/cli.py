"""The ``kernelbay`` command: ``info``, ``demo``, ``cache``, ``profile``, ``precompile`` and ``tune``.

User errors print one line (``kernelbay: error: ...``) and exit 1; ``--debug`` shows the
traceback instead. Exit codes: 0 success, 1 error, 2 bad command line, 3 ``demo`` result
mismatch, 130 interrupted (``EXIT_CODES``, shown by ``kernelbay --help``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from typing import Any

from . import __version__, _api, _demo, _envinfo, _log, _precompile, native
from ._plugins import runtime
from .cache import DiskCache
from .errors import KernelbayError
from .tracing import profile as _profile

# 2 (a bad command line) is argparse's own exit status.
EXIT_ERROR = 1
EXIT_MISMATCH = 3
EXIT_INTERRUPTED = 130
EXIT_CODES = (
    "Exit codes: 0 success; 1 error (one line on stderr, --debug for the traceback); "
    "2 bad command line; 3 `demo` computed a wrong result; 130 interrupted."
)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="kernelbay",
        description="kernelbay: run kernels on CUDA GPUs, TPUs and CPUs through pluggable backends.",
        epilog="Environment: KERNELBAY_DEVICE picks the device (e.g. 'cuda:1,cpu', '!tpu'); "
        "KERNELBAY_BACKENDS limits which installed backends load; KERNELBAY_CACHE_DIR moves the "
        "compile cache; KERNELBAY_LOG=info logs to stderr. See docs/configuration.md. " + EXIT_CODES,
    )
    p.add_argument("--version", action="version", version=f"kernelbay {__version__}")
    p.add_argument("--debug", action="store_true", help="show full tracebacks on errors")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")

    info = sub.add_parser(
        "info", help="the environment: OS, Python, versions, backends and devices, driver, cache, native helpers"
    )
    info.add_argument("--json", action="store_true", help="machine-readable output")

    demo = sub.add_parser("demo", help="run saxpy on the selected device and check it against numpy")
    demo.add_argument("--device", default=None, help="device selector (default: $KERNELBAY_DEVICE or the best)")

    cache = sub.add_parser("cache", help="the disk compile cache")
    csub = cache.add_subparsers(dest="cache_command", metavar="ACTION")
    ci = csub.add_parser("info", help="where the cache is, whether it is usable, what it holds")
    ci.add_argument("--json", action="store_true", help="machine-readable output")
    csub.add_parser("clear", help="delete every cached compile result")

    _profile.add_parser(sub)
    _precompile.add_parser(sub)
    _tune_parser(sub)
    return p


def _jsonable(v: Any) -> Any:
    if isinstance(v, (str, int, float, bool)) or v is None:
        return v
    if isinstance(v, dict) or hasattr(v, "items"):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    return str(v)


def _info_data() -> dict[str, Any]:
    import platform

    out: dict[str, Any] = {
        "schema_version": _envinfo.SCHEMA_VERSION,
        "kernelbay": __version__,
        "python": platform.python_version(),
        "system": _envinfo.system(),
        "backends": [],
    }
    records = runtime.records()
    for name in runtime.installed_names():
        if name not in records:
            out["backends"].append({"name": name, "status": "disabled", "reason": "left out by KERNELBAY_BACKENDS"})
    for rec in _api.backends():
        status = rec.status
        entry: dict[str, Any] = {
            "name": rec.name,
            "distribution": rec.distribution,
            "version": rec.version,
            "status": status,
            "reason": rec.reason,
        }
        spec = rec.spec
        if spec is not None:
            entry.update(priority=spec.priority, languages=list(spec.languages), description=spec.description)
        entry["devices"] = [
            {"device": str(d), "name": d.name, "properties": _jsonable(dict(d.properties))} for d in rec.devices
        ]
        out["backends"].append(entry)
    out["backends"].sort(key=lambda e: (-(e.get("priority") or 0), e["name"]))
    try:
        out["default_device"] = str(_api.device())
    except KernelbayError as exc:
        out["default_device"] = None
        out["default_device_error"] = str(exc)
    out["packages"] = _envinfo.packages([b["distribution"] for b in out["backends"] if b.get("distribution")])
    out["nvidia_driver"] = _envinfo.nvidia_driver()
    out["cache"] = _envinfo.cache()
    out["native_helpers"] = native.statuses()
    out["fix"] = _envinfo.fix_command(out["backends"], out["nvidia_driver"], _envinfo.checkout_root())
    return out


def _print_env(data: dict[str, Any]) -> None:
    sy = data["system"]
    print(f"os:       {sy['os']} ({sy['machine']}, {sy['cpu_count']} CPUs{', ' + sy['libc'] if sy['libc'] else ''})")
    print(f"python:   {sy['python']} ({sy['python_implementation']}, {sy['python_executable']})")
    print("packages: " + ", ".join(f"{n} {v or 'not installed'}" for n, v in data["packages"].items()))
    drv = data["nvidia_driver"]
    if drv["release"] or drv["cuda"]:
        print(f"nvidia driver: {drv['release'] or 'unknown release'} (supports CUDA {drv['cuda'] or '?'})")
    else:
        print(f"nvidia driver: none ({drv['error']})")
    c = data["cache"]
    state = "usable" if c.get("usable") else f"NOT USABLE: {c.get('problem')}"
    print(f"cache:    {c.get('directory', '?')}: {state}")
    if c.get("usable"):
        print(f"          {c['entries']} entries, {c['bytes']} bytes (limit {c['max_bytes']})")
    for name, st in data["native_helpers"].items():
        print(f"native helpers: {name}: {st}")


def cmd_info(args: argparse.Namespace) -> int:
    if args.json:
        # Whatever backends write while they load and probe (a C library's printf included) goes
        # to stderr: stdout carries the JSON document and nothing else.
        sys.stdout.flush()
        saved = os.dup(1)
        os.dup2(2, 1)
        try:
            data = _info_data()
        finally:
            sys.stdout.flush()
            os.dup2(saved, 1)
            os.close(saved)
        print(json.dumps(data, indent=2))
        return 0
    data = _info_data()
    print(f"kernelbay {data['kernelbay']} (Python {data['python']})")
    if not data["backends"]:
        print(f"no backend installed: install one with {data['fix']}")
    for b in data["backends"]:
        head = f"  {b['name']:<6} {b['status']:<11}"
        if b.get("distribution"):
            head += f" {b['distribution']} {b.get('version') or ''}".rstrip()
        if b.get("languages"):
            head += f"  languages: {', '.join(b['languages'])}"
        print(head)
        if b.get("reason"):
            for line in str(b["reason"]).splitlines():  # all of it: a SyntaxError's last line says what
                print(f"           {line}")
        for d in b.get("devices", []):
            props = ", ".join(f"{k}={v}" for k, v in d["properties"].items())
            print(f"           {d['device']}: {d['name']}" + (f" ({props})" if props else ""))
    dd = data.get("default_device")
    if dd:
        print(f"default device: {dd}")
    else:
        first, *rest = str(data.get("default_device_error")).splitlines() or [""]
        print(f"default device: none ({first})")
        for line in rest:
            print(f"  {line}")
    if data["fix"]:
        print(f"to install what is missing: {data['fix']}")
    _print_env(data)
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    import numpy as np

    dev = _api.device(args.device)
    print(f"device: {dev} ({dev.name})")
    t0 = time.perf_counter()
    kernel = _api.compile(_demo.sources(), device=dev)
    t_compile = time.perf_counter() - t0
    lang = kernel.source.lang
    n = _demo.size_for(lang)
    rng = np.random.default_rng(0)
    xs = rng.standard_normal(n).astype(np.float32)
    ys = rng.standard_normal(n).astype(np.float32)
    a = np.float32(2.0)
    x = _api.asarray(xs, device=dev)
    y = _api.asarray(ys, device=dev)
    geo = _demo.geometry(lang, n)
    kernel.launch(**geo, args=(x, y, a, np.int32(n)))  # warm-up (and the result checked below)
    dev.synchronize()
    got = y.numpy()
    want = a * xs + ys
    ok = bool(np.allclose(got, want, rtol=1e-5, atol=1e-5))
    y2 = _api.asarray(ys, device=dev)
    t0 = time.perf_counter()
    kernel.launch(**geo, args=(x, y2, a, np.int32(n)))
    dev.synchronize()
    t_run = time.perf_counter() - t0
    print(f"kernel: saxpy ({lang}), n={n}: compile {t_compile * 1e3:.1f} ms, launch+sync {t_run * 1e6:.0f} us")
    if not ok:
        bad = int(np.sum(~np.isclose(got, want, rtol=1e-5, atol=1e-5)))
        print(f"MISMATCH: {bad} of {n} elements differ from numpy (first: got {got[0]}, expected {want[0]})")
        return EXIT_MISMATCH
    print("result matches numpy: OK")
    return 0


def cmd_cache(args: argparse.Namespace) -> int:

    c = DiskCache()
    if args.cache_command == "clear":
        n = c.clear()
        print(f"removed {n} entries from {c.directory}")
        return 0
    info = c.info()
    if getattr(args, "json", False):
        print(json.dumps(info, indent=2))
    else:
        print(f"directory: {info['directory']}")
        print("usable:    yes" if info["usable"] else f"usable:    NO: {info['problem']}")
        print(f"writable:  {'yes' if info['writable'] else 'no'}")
        owner = {True: "yes (yours, not writable by others)", False: "NO (refused)", None: "not created yet"}
        print(f"owner ok:  {owner[info['owner_ok']]}")
        print(f"entries:   {info['entries']}")
        print(f"size:      {info['bytes']} bytes (limit {info['max_bytes']})")
    return 0


def _tune_parser(sub: Any) -> None:
    # Deferred: `kernelbay tune` is the only command that needs the tuner, and `import kernelbay`
    # must not load it; the import is of its parser module only when the CLI builds its parser.
    from .tune import command

    command.add_parser(sub)


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    if args.command == "cache" and args.cache_command is None:
        args.cache_command = "info"
    handler = getattr(args, "handler", None) or {"info": cmd_info, "demo": cmd_demo, "cache": cmd_cache}[args.command]
    try:
        _log.check()
        return handler(args)
    except KeyboardInterrupt:
        print("kernelbay: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # `kernelbay info | head`: the reader left; nothing to report
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except Exception as exc:  # one clear line; the traceback only on request
        if args.debug:
            traceback.print_exc()
        else:
            msg = str(exc) if isinstance(exc, KernelbayError) else f"{type(exc).__name__}: {exc}"
            first, *rest = msg.splitlines() or [type(exc).__name__]
            print(f"kernelbay: error: {first}", file=sys.stderr)
            for line in rest:
                print(f"  {line}", file=sys.stderr)
            if not isinstance(exc, KernelbayError):
                print("  (this looks like a bug; run with --debug for the traceback and report it)", file=sys.stderr)
        return EXIT_ERROR


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
