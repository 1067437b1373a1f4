"""The search space of a sweep: parameters, restrictions, and the strategies that pick from it."""

from __future__ import annotations

import itertools
import json
import random
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import attrs

from ..errors import InvalidArgumentError
from ..source import Source

Config = dict[str, Any]

__all__ = ["STRATEGIES", "Config", "Space", "apply", "as_space", "config_text", "pick"]


def _params(value: Mapping[str, Iterable[Any]]) -> Mapping[str, tuple[Any, ...]]:
    if not isinstance(value, Mapping) or not value:
        raise InvalidArgumentError(
            f"a tuning space maps parameter names to their values, e.g. {{'BLOCK': [64, 128]}}; got {value!r}"
        )
    out: dict[str, tuple[Any, ...]] = {}
    for name, values in value.items():
        if not isinstance(name, str) or not name.isidentifier():
            raise InvalidArgumentError(f"tuning parameter names are identifiers (BLOCK, num_warps), not {name!r}")
        vals = (values,) if isinstance(values, (str, bytes)) else tuple(values)
        if not vals:
            raise InvalidArgumentError(f"tuning parameter {name!r} has no values; give at least one")
        out[name] = vals
    return out


def _restrictions(value: Callable[[Config], bool] | Sequence[Callable[[Config], bool]]) -> tuple[Any, ...]:
    items = (value,) if callable(value) else tuple(value)
    for r in items:
        if not callable(r):
            raise InvalidArgumentError(f"a restriction is a function config -> bool, not {r!r}")
    return items


@attrs.frozen
class Space:
    """Every combination of ``params`` that passes each of ``restrict`` (functions ``config ->
    bool``), in the parameters' order. The first such combination is the *default* config: the
    correctness reference when no other is given.

    A parameter is anything the source builder or the launch function reads: a ``-D`` define
    (what a :class:`~kernelbay.Source` tuned as is gets), a template argument, a compile option,
    a block size for the launch, a Triton meta-parameter, a Pallas block shape.
    """

    params: Mapping[str, tuple[Any, ...]] = attrs.field(converter=_params)
    restrict: tuple[Callable[[Config], bool], ...] = attrs.field(default=(), converter=_restrictions)

    def configs(self) -> list[Config]:
        names = list(self.params)
        out = []
        for values in itertools.product(*self.params.values()):
            c = dict(zip(names, values))
            if all(r(c) for r in self.restrict):
                out.append(c)
        if not out:
            raise InvalidArgumentError(
                f"the tuning space {dict(self.params)} has no config that passes its restrictions; loosen them"
            )
        return out


def as_space(space: Space | Mapping[str, Iterable[Any]], restrict: Any = ()) -> Space:
    if isinstance(space, Space):
        return space if not restrict else Space(space.params, space.restrict + _restrictions(restrict))
    return Space(space, restrict)


def config_text(config: Config) -> str:
    """A config as canonical JSON (the results file's key for it)."""
    return json.dumps(config, sort_keys=True, default=repr, separators=(",", ":"))


STRATEGIES = ("exhaustive", "random", "optuna")


def pick(configs: list[Config], strategy: str, max_configs: int | None, seed: int) -> list[Config]:
    """The configs a strategy tries: ``exhaustive`` every one (up to ``max_configs``, in order),
    ``random`` ``max_configs`` of them drawn with ``seed``; the default config is always kept."""
    if max_configs is not None and max_configs < 1:
        raise InvalidArgumentError(f"max_configs must be at least 1, got {max_configs}")
    if strategy == "exhaustive":
        return configs[:max_configs] if max_configs else list(configs)
    if strategy == "random":
        n = min(max_configs or len(configs), len(configs))
        rest = random.Random(seed).sample(range(1, len(configs)), max(0, n - 1))
        return [configs[0]] + [configs[i] for i in sorted(rest)]
    raise InvalidArgumentError(f"unknown tuning strategy {strategy!r}; use one of {', '.join(STRATEGIES)}")


def apply(source: Source | Callable[[Config], Source], config: Config) -> Source:
    """The Source of one config: a builder's result, or ``source`` with each parameter added as
    ``-DNAME=VALUE`` (booleans as 1/0)."""
    if isinstance(source, Source):
        defines = tuple(f"-D{k}={int(v) if isinstance(v, bool) else v}" for k, v in config.items())
        return attrs.evolve(source, options=source.options + defines)
    made = source(dict(config))
    if not isinstance(made, Source):
        raise InvalidArgumentError(
            f"the tuner's source builder must return a kb.Source for each config; for {config} it returned "
            f"{type(made).__name__}"
        )
    return made
