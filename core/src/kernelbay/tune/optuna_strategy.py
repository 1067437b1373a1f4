"""``strategy="optuna"``: Optuna's TPE sampler proposes configs batch by batch (the optional
``kernelbay[optuna]`` extra). Each batch is compiled in parallel, checked and timed like any
sweep; each trial is told its config's median time, or failed for a fault."""

from __future__ import annotations

import logging
from typing import Any

from ..errors import UnsupportedError
from .space import Config, Space, config_text

log = logging.getLogger("kernelbay.tune")

__all__ = ["run"]


def run(sweep: Any, space: Space, configs: list[Config], max_configs: int | None, seed: int) -> None:
    """Try up to ``max_configs`` configs of ``configs`` (the space's, restrictions applied)."""
    try:
        import optuna
    except ImportError:
        raise UnsupportedError(
            "strategy='optuna' needs Optuna: pip install 'kernelbay[optuna]' (or use strategy='random')"
        ) from None
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    allowed = {config_text(c) for c in configs}
    budget = min(max_configs or len(configs), len(configs))
    batch = max(2, 2 * len(sweep.devs))
    study = optuna.create_study(direction="minimize", sampler=optuna.samplers.TPESampler(seed=seed))
    names = list(space.params)
    sweep.evaluate([configs[0]])  # the default first: it is the reference
    study.add_trial(_finished(optuna, space, configs[0], sweep.records[0]))
    tried = {config_text(configs[0])}
    stale = 0
    while len(tried) < budget and stale < 20:
        trials, wanted = [], []
        for _ in range(min(batch, budget - len(tried))):
            t = study.ask()
            c = {n: space.params[n][t.suggest_categorical(n, list(range(len(space.params[n]))))] for n in names}
            if config_text(c) not in allowed:  # outside the restrictions: not a config at all
                study.tell(t, state=optuna.trial.TrialState.PRUNED)
                continue
            trials.append(t)
            wanted.append(c)
        new = [c for c in wanted if config_text(c) not in tried]
        stale = 0 if new else stale + 1  # the sampler keeps proposing what was tried: stop
        records = sweep.evaluate(wanted) if wanted else []
        for t, rec in zip(trials, records):
            if rec["status"] == "ok":
                study.tell(t, rec["median"])
            else:
                study.tell(t, state=optuna.trial.TrialState.FAIL)
        tried.update(config_text(c) for c in wanted)
    log.info("optuna tried %d of %d configs", len(tried), len(configs))


def _finished(optuna: Any, space: Space, config: Config, rec: dict[str, Any]) -> Any:
    dists = {n: optuna.distributions.CategoricalDistribution(list(range(len(v)))) for n, v in space.params.items()}
    params = {n: space.params[n].index(config[n]) for n in space.params}
    if rec["status"] == "ok":
        return optuna.trial.create_trial(params=params, distributions=dists, value=rec["median"])
    return optuna.trial.create_trial(params=params, distributions=dists, state=optuna.trial.TrialState.FAIL)
