"""Compile: validate a Pallas Source's ``meta`` against the kernel function.

``kernelbay_compile`` returns a :class:`PallasKernel`. The ``pallas_call`` itself depends on
the grid and on the arguments' shapes, dtypes and static values, so it is built per such
signature (:mod:`._call`) and cached on the kernel; :meth:`PallasKernel.jax` (the kernel as a
pure JAX function) and the buffer-style launch (:mod:`.launcher`) share it.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping, Sequence
from typing import Any

from kernelbay.argrules import check_scalar
from kernelbay.errors import CompileError
from kernelbay.types import Device, Source

from ._call import TPU_DTYPES
from ._jaxfn import call_jax, fast_key
from ._scalars import declared, where
from .launcher import launch_entry

#: Values a k.jax fast key holds by type only (a JAX array's dtype is in its key).
_NUMBERS = frozenset({int, float, bool})

META_KEYS = frozenset(
    {
        "outputs",
        "inplace",
        "block_specs",
        "scratch_shapes",
        "compiler_params",
        "cost_estimate",
        "grid_spec",
        "input_output_aliases",
        "scalars",
        "pad",
        "mesh",
        "interpret",
    }
)

#: Keys that describe pallas_call's grid and blocks, which a kernel over a mesh has none of.
GRID_KEYS = ("grid_spec", "block_specs", "scalars", "pad", "inplace", "input_output_aliases")


class PallasKernel:
    """A validated Pallas kernel (``Kernel.handle`` on this backend) and its call cache."""

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
        gs = meta.get("grid_spec")
        if gs is not None and not hasattr(gs, "in_specs"):
            raise self._error(f"meta['grid_spec'] must be a pl.GridSpec or pltpu.PrefetchScalarGridSpec, not {gs!r}")
        self.grid_spec = gs
        self.num_prefetch = int(getattr(gs, "num_scalar_prefetch", 0) or 0)
        self.default_grid = tuple(getattr(gs, "grid", ()) or ())
        self.mesh = meta.get("mesh")
        if self.mesh is not None:
            clash = [key for key in GRID_KEYS if meta.get(key)]
            if clash or not hasattr(self.mesh, "shape"):
                raise self._error(
                    f"meta['mesh'] runs {self.name!r} as pl.kernel does, once per core of the mesh, on refs left in "
                    f"HBM: it takes no {', '.join(clash or GRID_KEYS)} (pipeline inside the kernel with "
                    "pltpu.emit_pipeline; write results to outputs), and the mesh is a Pallas mesh such as "
                    "pltpu.create_tensorcore_mesh('core')"
                )
        scratch = meta.get("scratch_shapes") or ()
        if isinstance(scratch, Mapping):  # passed by name, as pl.kernel's scratch_types=dict(...)
            if getattr(gs, "scratch_shapes", None):
                raise self._error("meta['scratch_shapes'] by name cannot be combined with grid_spec.scratch_shapes")
            self.scratch: Any = dict(scratch)
        else:
            self.scratch = tuple(scratch) + tuple(getattr(gs, "scratch_shapes", ()) or ())
        self.interpret = self._interpret(meta.get("interpret"))
        self.compiler_params = meta.get("compiler_params")
        self.cost_estimate = meta.get("cost_estimate")
        self.params, self.nargs, self.kwonly = self._signature(fn)
        self.outputs = self._positions(meta.get("outputs"), "outputs")
        self.inplace = self._positions(meta.get("inplace"), "inplace")
        self.scalars = self._positions(meta.get("scalars"), "scalars")
        both = self.outputs & self.inplace
        if both:
            raise self._error(
                f"argument(s) {self._labels(both)} of {self.name!r} are listed both as outputs (written only) "
                "and inplace (read and written); list each in one of them"
            )
        prefetch = frozenset(range(self.num_prefetch))
        bad = (self.outputs | self.inplace | self.scalars) & prefetch
        if bad:
            raise self._error(
                f"argument(s) {self._labels(bad)} of {self.name!r} are scalar-prefetch arguments (the first "
                f"{self.num_prefetch}, grid_spec.num_scalar_prefetch): they are read-only SMEM inputs"
            )
        self.types, self.checked = self._types(fn, prefetch)
        self.aliases = self._aliases(meta.get("input_output_aliases"))
        self.specs = self._block_specs(meta.get("block_specs"))
        self.pad = self._pad(meta.get("pad"))
        self.cache: dict[Any, Any] = {}  # launch signature -> _call.Entry
        self.jax_cache: dict[Any, Any] = {}  # k.jax signature -> _call.Entry
        self.jax_fast: dict[Any, Any] = {}  # _jaxfn.fast_key of an eager call -> (jitted fn, operand picker)
        self.fast: Any = None  # the generated launch fast path (launcher._specialise)
        self.static_seen: dict[int | str, set[Any]] = {}  # static values compiled, per argument
        self.warned: set[int | str] = set()

    def _error(self, message: str) -> CompileError:
        try:
            sig = str(inspect.signature(self.fn))
        except (TypeError, ValueError):
            sig = "(...)"
        log = f"pallas kernel {self.name}{sig}\nSource.meta keys: {', '.join(sorted(self._meta)) or 'none'}\nerror: {message}"
        return CompileError(message, log=log)

    # --- meta -------------------------------------------------------------------------

    def _signature(self, fn: Any) -> tuple[list[str], int | None, tuple[str, ...]]:
        try:
            sig = inspect.signature(fn)
        except (TypeError, ValueError):
            return [], None, ()
        names: list[str] = []
        kwonly: list[str] = []
        var = False
        named = self.scratch if isinstance(self.scratch, dict) else {}
        for p in sig.parameters.values():
            if p.name in named:
                continue  # a scratch ref passed by name
            if p.kind is p.VAR_POSITIONAL:
                var = True
            elif p.kind is p.KEYWORD_ONLY:
                kwonly.append(p.name)
            elif p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and not var:
                names.append(p.name)
        if var:
            return names, None, tuple(kwonly)
        n = len(names) - (0 if named else len(self.scratch))
        if n < 0:
            raise self._error(
                f"kernel {self.name!r} takes {len(names)} arguments but meta has {len(self.scratch)} scratch_shapes; "
                "scratch refs come after the kernel's own arguments"
            )
        return names[:n], n, tuple(kwonly)

    def _types(self, fn: Any, prefetch: frozenset[int]) -> tuple[dict[int | str, Any], tuple[Any, ...]]:
        """Typed scalar parameters (annotated with a numpy or JAX scalar type), by position
        (keyword-only ones by name), and the SMEM ones a launch checks on every call:
        ``(position, kind, size, where)``."""
        types: dict[int | str, Any] = {}
        for name, d in declared(fn).items():
            if name in self.kwonly:
                types[name] = d
            elif name in self.params:
                types[self.params.index(name)] = d
        arrays = (self.outputs | self.inplace | prefetch) & frozenset(types)
        if arrays:
            raise self._error(
                f"argument(s) {self._labels(arrays)} of {self.name!r} are annotated with a scalar type but are "
                "array arguments (outputs, inplace or scalar prefetch); annotate scalar parameters only"
            )
        wide = [p for p in self.scalars if p in types and types[p].name not in TPU_DTYPES]
        if wide:
            raise self._error(
                f"argument(s) {self._labels(wide)} of {self.name!r} are SMEM scalars (meta['scalars']) of type "
                f"{', '.join(types[p].name for p in wide)}, which a TPU cannot hold; declare a 32-bit type "
                "(jnp.int32, jnp.float32), or pass the value as a static argument"
            )
        checked = tuple((p, types[p].kind, types[p].size, where(self, p)) for p in sorted(self.scalars) if p in types)
        return types, checked

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

    def _aliases(self, value: Any) -> dict[int, int]:
        if value is None:
            return {}
        if not isinstance(value, Mapping):
            raise self._error(
                "meta['input_output_aliases'] maps an input argument to the output argument it shares memory with"
            )
        out: dict[int, int] = {}
        for src, dst in value.items():
            i, o = self._position(src, "input_output_aliases"), self._position(dst, "input_output_aliases")
            if o not in self.outputs or i in self.outputs or i in self.inplace or i < self.num_prefetch:
                raise self._error(
                    f"meta['input_output_aliases'] maps {self._label(i)} to {self._label(o)}: the key must be an "
                    "input (not in outputs or inplace, not scalar prefetch) and the value an argument in meta['outputs']"
                )
            if o in out.values():
                raise self._error(f"meta['input_output_aliases'] aliases {self._label(o)} to more than one input")
            out[i] = o
        return out

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

    def _pad(self, value: Any) -> dict[int, dict[int, tuple[int, int]]]:
        """``meta['pad']``: argument -> {dim: multiple or (multiple, extra)} (Helion's pl.ds padding)."""
        if value is None:
            return {}
        if not isinstance(value, Mapping):
            raise self._error("meta['pad'] maps an argument to {dim: multiple} (or {dim: (multiple, extra)})")
        out: dict[int, dict[int, tuple[int, int]]] = {}
        for arg, dims in value.items():
            p = self._position(arg, "pad")
            if not isinstance(dims, Mapping):
                raise self._error(f"meta['pad'][{arg!r}] must be a mapping {{dim: multiple}}, not {dims!r}")
            entry: dict[int, tuple[int, int]] = {}
            for d, m in dims.items():
                mult, extra = m if isinstance(m, tuple) else (m, 0)
                if not (
                    isinstance(d, int) and isinstance(mult, int) and mult >= 1 and isinstance(extra, int) and extra >= 0
                ):
                    raise self._error(
                        f"meta['pad'][{arg!r}] entry {d!r}: {m!r} must be dim: multiple >= 1 (or (multiple, extra >= 0))"
                    )
                entry[d] = (mult, extra)
            out[p] = entry
        return out

    def _interpret(self, value: Any) -> Any:
        """``meta['interpret']``: this kernel's own interpret mode (None: the device's)."""
        if value is None or value is True:
            return value
        from jax.experimental.pallas import tpu as pltpu  # jax: imported only when a kernel asks for this

        if isinstance(value, Mapping):
            try:
                return pltpu.InterpretParams(**value)
            except TypeError as exc:
                raise self._error(f"meta['interpret'] has a field pltpu.InterpretParams does not: {exc}") from None
        if isinstance(value, pltpu.InterpretParams):
            return value
        raise self._error(
            f"meta['interpret'] is True (Pallas interpret mode), a pltpu.InterpretParams(...) or a mapping of its "
            f"fields (JAX's TPU interpreter, e.g. {{'detect_races': True}}), not {value!r}"
        )

    def _label(self, i: int | str) -> str:
        if isinstance(i, str):
            return repr(i)
        return f"{self.params[i]!r} (position {i})" if i < len(self.params) else f"at position {i}"

    def _labels(self, positions: Any) -> str:
        return ", ".join(self._label(i) for i in sorted(positions))

    # --- the kernel as a JAX function ----------------------------------------------------

    def jax(self, *args: Any, grid: Any = None, **kwargs: Any) -> Any:
        """Call the kernel as a pure JAX function: JAX arrays (or pytrees of them) in, outputs
        returned. Usable inside ``jax.jit``, ``jax.vmap``, ``jax.grad`` (through
        ``jax.custom_vjp``). An output-only argument is given as anything with ``shape`` and
        ``dtype`` (``jax.ShapeDtypeStruct``, or an array, which is not read); in-place arguments
        are returned as new values. The result is the one output, or a tuple of them in the
        kernel's argument order. Nothing is donated: wrap the call in ``jax.jit(...,
        donate_argnums=...)`` to update in place.

        :param grid: the Pallas grid (default: ``meta['grid_spec']``'s, else ``()``).
        """
        key = fast_key(self, args, kwargs, grid)
        if key is not None:
            try:
                hit = self.jax_fast.get(key)
            except TypeError:  # an unhashable grid: the slow path says what is wrong
                hit = None
            if hit is not None:  # an eager call with the same shapes, dtypes and statics as before
                fn, pick = hit
                for p, kind, size, where_ in self.checked:  # a number for a typed SMEM scalar
                    if p < len(args) and type(args[p]) in _NUMBERS:
                        check_scalar(args[p], kind, size, where_)
                return fn(*pick(args))
        return call_jax(self, args, kwargs, grid)

    def lower(self, grid: Any, args: Sequence[Any]) -> Any:
        """``jax.jit(...).lower(...)`` of the call a launch with these arguments runs
        (for inspecting the program: aliases, copies)."""
        e, avals = launch_entry(self, grid, args)
        return e.fn.lower(*avals)


def compile(device: Device, source: Source) -> PallasKernel:
    return PallasKernel(device, source)
