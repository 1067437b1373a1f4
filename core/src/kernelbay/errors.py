"""The one exception hierarchy of kernelbay.

Every error a user can cause is one of these. Each also subclasses the builtin a caller would
naturally catch (``ValueError``, ``TypeError``, ``MemoryError``, ``LookupError``...), and each
message says what happened, with the values involved, and what to do about it.
"""

from __future__ import annotations

__all__ = [
    "KernelbayError",
    "TuneError",
    "BackendError",
    "BackendNotInstalledError",
    "BackendBrokenError",
    "BackendUnavailableError",
    "NoDeviceError",
    "InvalidArgumentError",
    "ArgumentTypeError",
    "SettingError",
    "UseAfterFreeError",
    "UnsupportedError",
    "CompileError",
    "LaunchError",
    "OutOfMemoryError",
    "CacheError",
    "numbered_source",
]


class KernelbayError(Exception):
    """Base class of every error kernelbay raises on purpose."""


# --- backends and devices -----------------------------------------------------------------


class BackendError(KernelbayError):
    """A backend cannot serve a request: not installed, broken, or unavailable here."""


class BackendNotInstalledError(BackendError, LookupError):
    """A request named a backend that no installed distribution provides (or the allowlist hides)."""


class BackendBrokenError(BackendError):
    """A backend failed to import, failed its probe, or does not match the hook contract.

    The original exception is chained as ``__cause__``.
    """


class BackendUnavailableError(BackendError):
    """A backend is installed and healthy but has nothing to run on here (no driver, no chip).

    Backends raise this from ``kernelbay_devices`` with a reason that says what to do.
    """


class NoDeviceError(BackendError, LookupError):
    """No device matches the selector (``KERNELBAY_DEVICE`` or ``kb.device(...)``)."""


# --- arguments --------------------------------------------------------------------------


class InvalidArgumentError(KernelbayError, ValueError):
    """A value passed by the caller is out of range or inconsistent (sizes, shapes, grid...)."""


class ArgumentTypeError(InvalidArgumentError, TypeError):
    """A value passed by the caller has the wrong type (a float where a buffer is expected...)."""


class SettingError(InvalidArgumentError):
    """A ``KERNELBAY_*`` environment variable holds a value kernelbay cannot use.

    The message names the variable, the value, and the form it accepts.
    """


class UseAfterFreeError(InvalidArgumentError):
    """A buffer, array or kernel was used after ``close()``."""


class UnsupportedError(KernelbayError, NotImplementedError):
    """The selected backend does not implement an optional capability (memory stats, DLPack...)."""


# --- compile and run --------------------------------------------------------------------


def numbered_source(text: str, lines: set[int] | None = None, context: int = 2) -> str:
    """Return ``text`` with line numbers; with ``lines``, only those lines and their context.

    Lines the compiler pointed at are marked with ``>``.
    """
    src = text.splitlines()
    width = len(str(len(src)))
    if lines:
        keep = {n for ln in lines for n in range(ln - context, ln + context + 1) if 1 <= n <= len(src)}
    else:
        keep = set(range(1, len(src) + 1))
    out: list[str] = []
    last = 0
    for n in sorted(keep):
        if last and n != last + 1:
            out.append(" " * width + "  ...")
        mark = ">" if lines and n in lines else " "
        out.append(f"{mark}{n:>{width}} | {src[n - 1]}")
        last = n
    return "\n".join(out)


class CompileError(KernelbayError):
    """A kernel source failed to compile (or a precompiled module failed to load).

    :ivar log: the compiler's complete output.
    :ivar source: the source text that was compiled.
    :ivar lines: the line numbers the compiler's diagnostics point at.
    """

    def __init__(self, message: str, *, log: str = "", source: str = "", lines: set[int] | None = None):
        self.log = log
        self.source = source
        self.lines = set(lines or ())
        parts = [message]
        if log:
            parts.append("compiler output:\n" + log.rstrip())
        if source and self.lines:
            parts.append("source:\n" + numbered_source(source, self.lines))
        super().__init__("\n".join(parts))


class LaunchError(KernelbayError):
    """A kernel failed while running (illegal address, trap...) or could not be launched."""


class OutOfMemoryError(KernelbayError, MemoryError):
    """An allocation failed even after the backend released what it had cached."""


class CacheError(KernelbayError, OSError):
    """The compile cache directory is unusable (owned by another user, not a directory...)."""


class TuneError(KernelbayError, RuntimeError):
    """A sweep (``kb.tune``) could not choose: no config compiled, ran and matched the reference,
    or a timing worker could not start."""
