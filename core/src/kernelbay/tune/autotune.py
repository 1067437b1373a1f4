"""The decorator form: ``@kb.tune.autotune(space, source=...)`` on a launch function."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..kernel import Kernel
from ..memory import Array
from .space import Config, Space
from .sweep import Result, _problem_key, tune

__all__ = ["Tuned", "autotune"]


class Tuned:
    """A launch function that tunes itself: called with real arguments, it sweeps once per
    problem key (default: the arguments' shapes and dtypes; the results file makes later
    processes skip even that) and launches the winner on them."""

    def __init__(
        self,
        fn: Callable[[Kernel, Config, list[Any]], Any],
        source: Any,
        space: Any,
        key: Any,
        args: Any,
        options: dict[str, Any],
    ) -> None:
        functools.update_wrapper(self, fn)
        self._kernelbay_tuned_fn = fn
        self.source, self.space, self.key, self.args, self.options = source, space, key, args, options
        self.best: dict[Any, Result] = {}

    def run(self, args: Any = None, **overrides: Any) -> Result:
        """Sweep with ``args`` (default: the ``args=`` given to the decorator)."""
        args = self.args if args is None else args
        if args is None:
            from ..errors import InvalidArgumentError

            raise InvalidArgumentError(
                f"{getattr(self, '__qualname__', 'the tuned function')}: no arguments to tune with; pass args= to @kb.tune.autotune or to .run()"
            )
        k = self.key(*args) if callable(self.key) else self.key
        opts = {**self.options, **overrides}
        return tune(self.source, self.space, self._kernelbay_tuned_fn, args=args, key=k, **opts)

    def __call__(self, *args: Any) -> Any:
        k = self.key(*args) if callable(self.key) else (self.key, _problem_key(args))
        res = self.best.get(k)
        if res is None:
            dev = next((a.device for a in args if isinstance(a, Array)), None)
            opts = {"devices": dev} if dev is not None and "devices" not in self.options else {}
            res = self.best[k] = self.run(list(args), **opts)
        return res.launch(list(args))


def autotune(
    space: Space | Mapping[str, Sequence[Any]],
    source: Any,
    *,
    key: Any = None,
    args: Any = None,
    **options: Any,
) -> Callable[[Callable[..., Any]], Tuned]:
    """Decorate a module-level ``launch(kernel, config, args)`` function: calling the result
    with launch arguments tunes on them (once per key) and launches the winner. ``key`` is a
    value or a function of the arguments; ``args`` the arguments ``kernelbay tune run`` uses;
    other options are :func:`kernelbay.tune.tune`'s."""

    def wrap(fn: Callable[..., Any]) -> Tuned:
        return Tuned(fn, source, space, key, args, options)

    return wrap
