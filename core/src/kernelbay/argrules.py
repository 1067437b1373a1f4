"""The scalar argument rules: one table that every backend checks kernel scalars against.

A scalar kernel parameter has a *kind* and a size in bytes. The kinds:

* ``i`` signed integer, ``u`` unsigned integer, ``f`` floating point, ``b`` bool: the table's;
* ``n`` an integer whose signedness the backend cannot tell (a PTX ``.u32`` is C ``int`` as
  well as ``unsigned``): either sign's range;
* ``""`` nothing known but the size (a driver that reports sizes only): a numpy scalar of that
  size, or a Python int (4 or 8 bytes) or float (4 or 8 bytes);
* ``p`` pointer and ``o`` other (structs, ``__half``...) are the backends' own.

:data:`DTYPES` holds, per dtype, everything a backend needs: the numpy dtype name, kind and
size, the ``struct`` code, the DLPack type code, the C spelling, and whether it is the dtype a
scalar parameter of its (kind, size) takes. :func:`check_scalar` is the one validation: it says
what a value may be for a parameter and which ``struct`` code packs it; the backends' fast paths
apply the same ranges (see :func:`int_range`). Adding a dtype is one row here.

Rules, for a parameter of kind k and size n:

* a Python ``int`` (``bool`` included) for ``i``, ``u``, ``n``, ``f``, within the range of
  (k, n); a Python ``float`` only for ``f`` (and ``""`` of 4 or 8 bytes), within the dtype's
  finite range (inf and nan pass); an int too large for any float (``10**400``) is out of range;
* a numpy scalar of exactly n bytes: integer or bool dtypes for ``i``/``u``/``n``, with the
  *value* in range (``np.uint32(4e9)`` does not fit a C ``int``); floating dtypes for ``f``;
  ``np.bool_`` for ``b``;
* ``bool`` parameters take ``True``/``False`` or ``np.bool_`` only (an int could be anything);
* ``None`` is never a scalar;
* a 0-d array (``np.array(2.0, np.float32)``, a 0-d jax or torch array) is never a scalar, of
  any kind: the backends' fast paths key on a value's type, and an array's type does not say its
  dtype. Pass ``arr.item()`` (a Python number) or ``arr[()]`` (a numpy scalar).

Out-of-range values raise :class:`~kernelbay.errors.InvalidArgumentError`; a value of the wrong
type, kind or size raises :class:`~kernelbay.errors.ArgumentTypeError`.
"""

from __future__ import annotations

import math
import sys
from typing import Any, NamedTuple

from .errors import ArgumentTypeError, InvalidArgumentError

__all__ = [
    "DType",
    "DTYPES",
    "BY_NAME",
    "BY_DLPACK",
    "PARAM",
    "annotated",
    "check_scalar",
    "describe",
    "int_range",
    "float_max",
]


class DType(NamedTuple):
    """One row of the table."""

    name: str  #: numpy dtype name
    kind: str  #: ``i`` ``u`` ``f`` ``b`` ``c``
    size: int  #: bytes
    struct: str  #: ``struct`` format code of one value ("" where struct has none)
    #: DLPack ``DLDataTypeCode`` (kDLInt 0, kDLUInt 1, kDLFloat 2, kDLBfloat 4, kDLComplex 5, kDLBool 6,
    #: kDLFloat8_e4m3fn 10, kDLFloat8_e5m2 12)
    dlpack: int
    c: str  #: the C/C++ spelling ("" where C has no standard one)
    param: bool  #: whether a scalar parameter of (kind, size) takes this dtype


DTYPES: tuple[DType, ...] = (
    DType("bool", "b", 1, "?", 6, "bool", True),
    DType("int8", "i", 1, "b", 0, "signed char", True),
    DType("int16", "i", 2, "h", 0, "short", True),
    DType("int32", "i", 4, "i", 0, "int", True),
    DType("int64", "i", 8, "q", 0, "long long", True),
    DType("uint8", "u", 1, "B", 1, "unsigned char", True),
    DType("uint16", "u", 2, "H", 1, "unsigned short", True),
    DType("uint32", "u", 4, "I", 1, "unsigned int", True),
    DType("uint64", "u", 8, "Q", 1, "unsigned long long", True),
    DType("float16", "f", 2, "e", 2, "", True),
    DType("float32", "f", 4, "f", 2, "float", True),
    DType("float64", "f", 8, "d", 2, "double", True),
    DType("bfloat16", "f", 2, "", 4, "", False),
    DType("float8_e4m3fn", "f", 1, "", 10, "", False),
    DType("float8_e5m2", "f", 1, "", 12, "", False),
    DType("complex64", "c", 8, "", 5, "", False),
    DType("complex128", "c", 16, "", 5, "", False),
)

BY_NAME: dict[str, DType] = {d.name: d for d in DTYPES}
#: (DLPack code, bits) -> dtype.
BY_DLPACK: dict[tuple[int, int], DType] = {(d.dlpack, 8 * d.size): d for d in DTYPES}
#: (kind, size) -> the dtype a scalar parameter of that kind and size takes.
PARAM: dict[tuple[str, int], DType] = {(d.kind, d.size): d for d in DTYPES if d.param}

_FLOAT_MAX = {2: 65504.0, 4: 3.4028234663852886e38, 8: float("inf")}
_KIND_NAME = {
    "i": "signed integer",
    "u": "unsigned integer",
    "n": "integer",
    "f": "floating-point",
    "b": "bool",
    "p": "pointer",
    "o": "value",
    "": "value",
}
# numpy dtype kinds a parameter kind takes (sizes must match too).
_NUMPY_KINDS = {"i": "iub", "u": "iub", "n": "iub", "f": "f", "b": "b"}


#: Python's own number types: an annotation naming one declares no dtype (a Python value).
_PYTHON_TYPES = frozenset({"bool", "int", "float", "complex"})


def annotated(annotation: Any) -> DType | None:
    """The scalar parameter dtype a type annotation names, for languages written in Python
    (pyref's kernels, Pallas kernels): a numpy or JAX scalar type (``np.int32``,
    ``jnp.float32``, ``np.bool_``), a numpy dtype, or its name as a string (``"int32"``,
    ``"jnp.float32"``, what ``from __future__ import annotations`` leaves). ``None`` for
    anything else, Python's ``bool``, ``int`` and ``float`` included: those declare a Python
    value, not a machine type. A name of the table with no scalar parameter of its own
    (``bfloat16``, complex) is ``None`` too.
    """
    if annotation is None or annotation in (bool, int, float, complex):
        return None
    if isinstance(annotation, str):
        head, _, name = annotation.strip().rpartition(".")
        if not head and name in _PYTHON_TYPES:
            return None
        name = "bool" if name == "bool_" else name
    else:
        np = sys.modules.get("numpy")  # numpy and JAX types exist only once numpy is imported
        if np is None:
            return None
        if isinstance(annotation, np.dtype):
            dt = annotation
        elif isinstance(annotation, type) and issubclass(annotation, np.generic):
            dt = np.dtype(annotation)
        elif isinstance(getattr(annotation, "dtype", None), np.dtype):  # jnp.int32 carries its dtype
            dt = annotation.dtype
        else:
            return None
        name = dt.name
    row = BY_NAME.get(name)
    return row if row is not None and row.param else None


def describe(kind: str, size: int) -> str:
    """``"a 4-byte signed integer"``: a parameter, for messages."""
    return f"a {size}-byte {_KIND_NAME.get(kind, 'value')}"


def int_range(kind: str, size: int) -> tuple[int, int]:
    """The values an integer (or bool) parameter of ``kind`` and ``size`` holds, inclusive."""
    bits = 8 * size
    if kind == "i":
        return -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    if kind == "u":
        return 0, (1 << bits) - 1
    if kind == "b":
        return 0, 1
    return -(1 << (bits - 1)), (1 << bits) - 1  # "n": either sign


def float_max(size: int) -> float:
    """The largest finite value of a ``size``-byte float parameter."""
    return _FLOAT_MAX.get(size, float("inf"))


def _fail(cls: type[Exception], where: str, kind: str, size: int, value: Any, why: str) -> Exception:
    shown = repr(value)
    if type(value) is int and len(shown) > 24:  # 1 << 2000 has 603 digits
        shown = f"{shown[:8]}...{shown[-4:]} ({len(shown.lstrip('-'))} digits)"
    return cls(f"{where} expects {describe(kind, size)}, got {type(value).__name__} {shown}{why}")


def check_scalar(value: Any, kind: str, size: int, where: str) -> str:
    """Validate ``value`` for a scalar parameter; return the ``struct`` code that packs it
    (``""``: pack ``value.tobytes()``, a numpy scalar of the right size with no code).

    :param kind: ``i`` ``u`` ``n`` ``f`` ``b`` or ``""`` (see the module docstring).
    :param where: the argument, for messages (``"argument 3 of kernel 'saxpy'"``).
    :raises ArgumentTypeError: a value of the wrong type, kind or size.
    :raises InvalidArgumentError: a value out of the parameter's range.
    """
    t = type(value)
    if t is int or t is bool:
        return _python_int(value, kind, size, where)
    if t is float:
        return _python_float(value, kind, size, where)
    dt = getattr(value, "dtype", None)
    if dt is not None and getattr(value, "shape", None) == ():
        np = sys.modules.get("numpy")  # a numpy scalar exists only once numpy is imported
        if np is not None and isinstance(value, np.generic):
            return _numpy(value, dt, kind, size, where)
        raise _fail(
            ArgumentTypeError,
            where,
            kind,
            size,
            value,
            "; a 0-d array is not a scalar: pass arr.item() (a Python number) or arr[()] (a numpy scalar)",
        )
    if value is None:
        raise _fail(ArgumentTypeError, where, kind, size, value, "; None is not a value: pass a number")
    raise _fail(
        ArgumentTypeError,
        where,
        kind,
        size,
        value,
        "; pass a numpy scalar (np.float32(2.0)) or a Python number of a matching kind",
    )


def _python_int(value: int, kind: str, size: int, where: str) -> str:
    if kind == "b":
        if type(value) is bool:
            return "?"
        raise _fail(ArgumentTypeError, where, kind, size, value, "; pass True or False (or np.bool_)")
    if kind == "f":
        try:
            as_float = float(value)
        except OverflowError:  # beyond any float (1 << 2000, 10**400)
            m = min(_FLOAT_MAX.get(size, math.inf), sys.float_info.max)
            raise _fail(
                InvalidArgumentError, where, kind, size, value, f"; it is out of range (at most {m:g} in magnitude)"
            ) from None
        return _python_float(as_float, kind, size, where)
    if kind == "" and size not in (4, 8):
        raise _fail(
            ArgumentTypeError,
            where,
            kind,
            size,
            value,
            "; a Python int is ambiguous for a parameter of this size: pass a numpy scalar (np.int16(...), np.uint8(...))",
        )
    if kind not in ("i", "u", "n", ""):
        raise _fail(ArgumentTypeError, where, kind, size, value, "")
    lo, hi = int_range(kind or "n", size)
    if not lo <= value <= hi:
        raise _fail(
            InvalidArgumentError, where, kind, size, value, f"; it is out of range [{lo}, {hi}] (it does not fit)"
        )
    if kind == "u" or (kind in ("n", "") and value > (1 << (8 * size - 1)) - 1):
        return PARAM["u", size].struct
    return PARAM["i", size].struct


def _python_float(value: float, kind: str, size: int, where: str) -> str:
    if kind not in ("f", ""):
        raise _fail(
            ArgumentTypeError,
            where,
            kind,
            size,
            value,
            "; a Python float converts only to a floating-point parameter (pass an int or a numpy scalar)",
        )
    row = PARAM.get(("f", size))
    if row is None or (kind == "" and size == 2):
        raise _fail(
            ArgumentTypeError,
            where,
            kind,
            size,
            value,
            "; a Python float is ambiguous for a parameter of this size: pass a numpy scalar (np.float16(...))",
        )
    m = _FLOAT_MAX[size]
    if (value > m or value < -m) and math.isfinite(value):  # inf and nan pass
        raise _fail(
            InvalidArgumentError, where, kind, size, value, f"; it is out of range (at most {m:g} in magnitude)"
        )
    return row.struct


def _numpy(value: Any, dt: Any, kind: str, size: int, where: str) -> str:
    if dt.itemsize != size:
        raise _fail(
            ArgumentTypeError,
            where,
            kind,
            size,
            value,
            f" ({dt.itemsize} bytes); pass a numpy scalar of {size} bytes",
        )
    row = BY_NAME.get(dt.name)
    if kind == "":  # size is all that is known: the value's own bytes
        return row.struct if row is not None else ""
    if dt.kind not in _NUMPY_KINDS.get(kind, ""):
        raise _fail(ArgumentTypeError, where, kind, size, value, "; pass a numpy scalar of a matching kind")
    if kind in ("i", "u", "n") and dt.kind != "b":
        lo, hi = int_range(kind, size)
        v = int(value)
        if not lo <= v <= hi:
            raise _fail(
                InvalidArgumentError, where, kind, size, value, f"; it is out of range [{lo}, {hi}] (it does not fit)"
            )
        if kind == "n":
            return row.struct if row is not None else PARAM["i", size].struct
    return PARAM[kind if kind != "n" else "i", size].struct
