"""Compile: validate a Pallas Source, and build one jitted ``pallas_call`` per launch signature.

``kernelbay_compile`` only checks ``Source.meta`` against the kernel function and returns a
:class:`PallasKernel`. The ``pallas_call`` itself depends on the grid and on the arguments'
shapes, dtypes and static values, so it is built on the first launch of each such signature
(:meth:`PallasKernel.build`) and cached on the kernel.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping, Sequence
from typing import Any

from kernelbay.argrules import DTYPES
from kernelbay.errors import ArgumentTypeError, CompileError, InvalidArgumentError, UseAfterFreeError
from kernelbay.types import Array, Buffer, Device, Source

from . import _driver

META_KEYS = frozenset({"outputs", "inplace", "block_specs", "scratch_shapes", "compiler_params", "cost_estimate"})

#: Element types a TPU Pallas kernel can take: the core table's, without 64-bit or complex.
TPU_DTYPES = frozenset(d.name for d in DTYPES if d.size <= 4 and d.kind != "c")


class Entry:
    """One compiled launch signature: the jitted call and where its operands come from."""

    __slots__ = ("fn", "ins", "outs", "pallas")

    def __init__(self, fn: Any, ins: tuple[int, ...], outs: tuple[int, ...], pallas: Any) -> None:
        self.fn = fn  # jax.jit(pallas_call) with in-place operands donated
        self.ins = ins  # argument positions passed to fn, in order
        self.outs = outs  # argument positions that receive fn's results, in order
        self.pallas = pallas  # the bare pallas_call, for inspection


class PallasKernel:
    """A validated Pallas kernel (``Kernel.handle`` on this backend) and its launch cache."""

    def __init__(self, device: Device, source: Source) -> None:
        fn = source.code
        if not callable(fn) or isinstance(fn, (str, bytes)):
            raise CompileError(
                f"a 'pallas' Source holds the kernel function itself, not {type(fn).__name__}; "
                "pass Source(kernel_fn, lang='pallas', meta={...})"
            )
        meta = dict(source.meta)
        self._meta = meta
        self.fn = fn
        self.name = source.name or getattr(fn, "__name__", "pallas_kernel")
        unknown = sorted(set(meta) - META_KEYS)
        if unknown:
            raise self._error(
                f"unknown Source.meta key(s) for pallas: {', '.join(unknown)}; known: {', '.join(sorted(META_KEYS))}"
            )
        self.device = device
        self.scratch = tuple(meta.get("scratch_shapes") or ())
        self.compiler_params = meta.get("compiler_params")
        self.cost_estimate = meta.get("cost_estimate")
        self.params, self.nargs = self._signature(fn)
        self.outputs = self._positions(meta.get("outputs"), "outputs")
        self.inplace = self._positions(meta.get("inplace"), "inplace")
        both = self.outputs & self.inplace
        if both:
            raise self._error(
                f"argument(s) {self._labels(both)} of {self.name!r} are listed both as outputs (written only) "
                "and inplace (read and written); list each in one of them"
            )
        self.specs = self._block_specs(meta.get("block_specs"))
        self.cache: dict[Any, Entry] = {}
        self.fast: Any = None  # the generated launch fast path (launcher._specialise)

    def _error(self, message: str) -> CompileError:
        try:
            sig = str(inspect.signature(self.fn))
        except (TypeError, ValueError):
            sig = "(...)"
        log = f"pallas kernel {self.name}{sig}\nSource.meta keys: {', '.join(sorted(self._meta)) or 'none'}\nerror: {message}"
        return CompileError(message, log=log)

    # --- meta -------------------------------------------------------------------------

    def _signature(self, fn: Any) -> tuple[list[str], int | None]:
        try:
            sig = inspect.signature(fn)
        except (TypeError, ValueError):
            return [], None
        names: list[str] = []
        for p in sig.parameters.values():
            if p.kind is p.VAR_POSITIONAL:
                return names, None
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
                names.append(p.name)
        n = len(names) - len(self.scratch)
        if n < 0:
            raise self._error(
                f"kernel {self.name!r} takes {len(names)} arguments but meta has {len(self.scratch)} scratch_shapes; "
                "scratch refs come after the kernel's own arguments"
            )
        return names[:n], n

    def _position(self, item: Any, what: str) -> int:
        if isinstance(item, str):
            if item in self.params:
                return self.params.index(item)
            raise self._error(
                f"meta[{what!r}] names {item!r}, which is not an argument of {self.name!r} "
                f"(arguments: {', '.join(self.params) or 'unknown'})"
            )
        if isinstance(item, int) and not isinstance(item, bool) and item >= 0:
            if self.nargs is not None and item >= self.nargs:
                raise self._error(f"meta[{what!r}] has position {item}, but {self.name!r} takes {self.nargs} arguments")
            return item
        raise self._error(f"meta[{what!r}] entries must be argument names or positions >= 0, not {item!r}")

    def _positions(self, value: Any, what: str) -> frozenset[int]:
        if value is None:
            return frozenset()
        if isinstance(value, (str, int)):
            value = (value,)
        return frozenset(self._position(v, what) for v in value)

    def _block_specs(self, value: Any) -> dict[int, Any]:
        if value is None:
            return {}
        if isinstance(value, Mapping):
            return {self._position(k, "block_specs"): v for k, v in value.items() if v is not None}
        if isinstance(value, Sequence) and not isinstance(value, str):
            if self.nargs is not None and len(value) != self.nargs:
                raise self._error(
                    f"meta['block_specs'] has {len(value)} entries but {self.name!r} takes {self.nargs} "
                    "arguments; give one per argument (None for whole-array or static ones) or a mapping"
                )
            return {i: v for i, v in enumerate(value) if v is not None}
        raise self._error(f"meta['block_specs'] must be a mapping or a sequence, not {type(value).__name__}")

    def _label(self, i: int) -> str:
        return f"{self.params[i]!r} (position {i})" if i < len(self.params) else f"at position {i}"

    def _labels(self, positions: Any) -> str:
        return ", ".join(self._label(i) for i in sorted(positions))

    # --- building a launch signature ----------------------------------------------------

    def build(self, grid: Any, args: Sequence[Any]) -> Entry:
        """Validate one launch and build its jitted ``pallas_call`` (the slow path)."""
        import jax
        from jax.experimental import pallas as pl

        grid_t = normalise_grid(grid)
        if self.nargs is not None and len(args) != self.nargs:
            raise InvalidArgumentError(
                f"kernel {self.name!r} takes {self.nargs} arguments ({', '.join(self.params)}), got {len(args)}"
            )
        ins: list[int] = []
        outs: list[int] = []
        statics: dict[int, Any] = {}
        for i, a in enumerate(args):
            if isinstance(a, Buffer):
                if a.handle is None:
                    raise UseAfterFreeError(f"argument {self._label(i)} of {self.name!r} was used after close()")
                if a.device != self.device:
                    raise InvalidArgumentError(
                        f"argument {self._label(i)} of {self.name!r} lives on {a.device}, the kernel on "
                        f"{self.device}; copy it with kb.asarray(x, device={str(self.device)!r})"
                    )
                dt = a.dtype if isinstance(a, Array) else None
                if dt is not None and dt.name not in TPU_DTYPES:
                    raise InvalidArgumentError(
                        f"argument {self._label(i)} of {self.name!r} has dtype {dt}, which TPU Pallas kernels "
                        f"cannot take; use a 32-bit type (float32 or int32), e.g. kb.asarray(x, dtype='float32')"
                    )
                if i in self.outputs or i in self.inplace:
                    outs.append(i)
                if i not in self.outputs:
                    ins.append(i)
            else:
                if i in self.outputs or i in self.inplace:
                    raise ArgumentTypeError(
                        f"argument {self._label(i)} of {self.name!r} is an output, so it must be a kernelbay "
                        f"array, not {type(a).__name__}"
                    )
                statics[i] = a
        for i in self.specs:
            if i >= len(args) or i in statics:
                raise InvalidArgumentError(f"meta['block_specs'] gives a BlockSpec for {self._label(i)}, which is not an array")
        check_vmem(self, grid_t, args, ins, outs)

        def shape_of(a: Any) -> jax.ShapeDtypeStruct:
            from .allocator import layout

            shape, dtype = layout(a)
            return jax.ShapeDtypeStruct(shape, dtype)

        in_pos = {p: k for k, p in enumerate(ins)}
        out_shape = tuple(shape_of(args[p]) for p in outs)
        aliases = {in_pos[p]: k for k, p in enumerate(outs) if p in self.inplace}
        kw: dict[str, Any] = {}
        if self.specs:
            whole = pl.BlockSpec()
            kw["in_specs"] = [self.specs.get(p, whole) for p in ins]
            kw["out_specs"] = tuple(self.specs.get(p, whole) for p in outs)
        if self.compiler_params is not None:
            kw["compiler_params"] = self.compiler_params
        if self.cost_estimate is not None:
            kw["cost_estimate"] = self.cost_estimate
        body = self._body(len(args), ins, outs, statics)
        call = pl.pallas_call(
            body,
            out_shape=out_shape,
            grid=grid_t,
            scratch_shapes=self.scratch,
            input_output_aliases=aliases,
            interpret=_driver.state.interpret,
            name=self.name,
            **kw,
        )
        donate = tuple(sorted(aliases))
        return Entry(jax.jit(call, donate_argnums=donate), tuple(ins), tuple(outs), call)

    def _body(self, nargs: int, ins: list[int], outs: list[int], statics: dict[int, Any]) -> Any:
        """The kernel pallas_call runs: its refs (inputs, outputs, scratch) put back in the
        user kernel's own argument order, static values in their places."""
        fn = self.fn
        n_in, n_refs = len(ins), len(ins) + len(outs)
        in_slot = {p: k for k, p in enumerate(ins)}
        layout: list[tuple[str, Any]] = [("s", None)] * nargs
        for p, v in statics.items():
            layout[p] = ("s", v)
        for p in ins:
            layout[p] = ("r", in_slot[p])
        refill: list[tuple[int, int]] = []
        for k, p in enumerate(outs):
            layout[p] = ("r", n_in + k)
            if p in self.inplace and self._needs_refill(p):
                refill.append((in_slot[p], n_in + k))
        plan = tuple(layout)

        def body(*refs: Any) -> None:
            # On a TPU an output block starts uninitialised even when aliased to an input:
            # copy the input block in so the kernel's single ref reads what it writes.
            for src, dst in refill:
                refs[dst][...] = refs[src][...]
            ordered = [refs[v] if kind == "r" else v for kind, v in plan]
            fn(*ordered, *refs[n_refs:])

        return body

    def _needs_refill(self, p: int) -> bool:
        if _driver.state.interpret:  # interpret mode starts aliased outputs from the input
            return False
        spec = self.specs.get(p)
        ms = getattr(spec, "memory_space", None)
        return ms is None or str(ms).lower() == "vmem"  # refs left in HBM (pl.ANY) are one buffer

    def lower(self, grid: Any, args: Sequence[Any]) -> Any:
        """``jax.jit(...).lower(...)`` of the call a launch with these arguments runs
        (for inspecting the program: aliases, copies)."""
        import jax

        e = self.build(grid, args)
        from .allocator import layout

        avals = []
        for p in e.ins:
            shape, dtype = layout(args[p])
            avals.append(jax.ShapeDtypeStruct(shape, dtype))
        return e.fn.lower(*avals)


def normalise_grid(grid: Any) -> tuple[int, ...]:
    """A Pallas grid: an int or a tuple of ints >= 1 (any number of dimensions)."""
    dims = grid if isinstance(grid, (tuple, list)) else (grid,)
    out: list[int] = []
    for d in dims:
        if isinstance(d, bool) or not isinstance(d, int):
            try:
                import operator

                d = operator.index(d)
            except TypeError:
                raise ArgumentTypeError(f"a Pallas grid is an int or a tuple of ints, not {grid!r}") from None
        if d < 1:
            raise InvalidArgumentError(f"grid dimensions must all be >= 1, got {tuple(dims)}")
        out.append(d)
    if not out:
        raise InvalidArgumentError("grid must have at least one dimension")
    return tuple(out)


# --- VMEM ---------------------------------------------------------------------------------


def _in_vmem(memory_space: Any) -> bool:
    return memory_space is None or str(memory_space).lower() == "vmem"


def _block_dim(d: Any) -> int:
    if d is None:
        return 1  # squeezed
    if isinstance(d, int):
        return d
    size = getattr(d, "block_size", None)
    return int(size) if size is not None else 1


def _mib(n: int) -> str:
    return f"{n / (1 << 20):.1f} MiB ({n} bytes)"


def check_vmem(k: PallasKernel, grid: tuple[int, ...], args: Sequence[Any], ins: list[int], outs: list[int]) -> None:
    """Estimate the VMEM the kernel's blocks need, double-buffered, and reject what cannot fit."""
    import numpy as np

    from .allocator import layout

    parts: list[tuple[str, int]] = []
    for kind, positions in (("in", ins), ("out", outs)):
        for p in positions:
            spec = k.specs.get(p)
            if spec is not None and not _in_vmem(getattr(spec, "memory_space", None)):
                continue
            shape, dtype = layout(args[p])
            block = getattr(spec, "block_shape", None)
            dims = shape if block is None else tuple(_block_dim(d) for d in block)
            n = 2 * int(np.prod(dims, dtype=np.int64)) * np.dtype(dtype).itemsize
            parts.append((f"{k.params[p] if p < len(k.params) else p} ({kind})", n))
    for j, s in enumerate(k.scratch):
        shape, dtype = getattr(s, "shape", None), getattr(s, "dtype", None)
        if shape is None or dtype is None or not _in_vmem(getattr(s, "memory_space", None)):
            continue
        parts.append((f"scratch {j}", int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize))
    need = sum(n for _, n in parts)
    limit = getattr(k.compiler_params, "vmem_limit_bytes", None) or _driver.state.vmem_bytes
    if need > limit:
        detail = ", ".join(f"{name} {_mib(n)}" for name, n in sorted(parts, key=lambda t: -t[1])[:4])
        where = "the chip's VMEM capacity" if _driver.state.vmem_known else "the assumed VMEM capacity (chip unknown)"
        if getattr(k.compiler_params, "vmem_limit_bytes", None):
            where = "compiler_params.vmem_limit_bytes"
        raise InvalidArgumentError(
            f"kernel {k.name!r} needs about {_mib(need)} of VMEM for its blocks (double-buffered: {detail}), "
            f"more than {where} of {_mib(limit)}; use smaller block shapes in meta['block_specs'] "
            f"(grid {grid})"
        )


def compile(device: Device, source: Source) -> PallasKernel:  # noqa: A001
    return PallasKernel(device, source)
