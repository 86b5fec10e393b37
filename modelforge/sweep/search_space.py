"""A search space written in Hydra's override grammar, as Optuna distributions.

``choice(a, b)`` is categorical (a list choice reaches Optuna as its string, ``"[32,64]"``, which the job's override
parses back into a list); ``range(start, stop[, step])`` the integers (or floats) Hydra's basic sweeper would run,
``stop`` excluded; ``interval(low, high)`` uniform floats between them (Hydra reads its bounds as floats);
``tag(log, interval(...))`` log-uniform. A plain ``key=value`` fixes the key for every trial.

``hydra.sweeper.conditions`` makes a searched key conditional: ``{KEY: {OTHER: VALUE or [VALUES], ...}}`` draws
KEY (and overrides it) only in trials where every OTHER key, searched or fixed, took one of those values; elsewhere
the config's own value stays. A trial is then sampled define-by-run, as an Optuna objective function would.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import (
    ChoiceSweep,
    IntervalSweep,
    Override,
    RangeSweep,
    Transformer,
)
from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)
from optuna.trial import Trial

from modelforge.errors import ConfigError, UnknownKeyError, closest_names

SPACE_PATH = "hydra.sweeper.params"
CONDITIONS_PATH = "hydra.sweeper.conditions"
Conditions = dict[str, dict[str, tuple[str, ...]]]  # key -> {other key: the values (as text) it is drawn for}


def parse_space(arguments: Sequence[str]) -> tuple[dict[str, BaseDistribution], list[str]]:
    """Searched keys with their distributions, and the fixed overrides every trial gets (a later one wins)."""
    space: dict[str, BaseDistribution] = {}
    fixed: dict[str, str] = {}
    for override in OverridesParser.create().parse_overrides(list(arguments)):
        key = override.get_key_element()
        if override.is_sweep_override():
            space[key] = distribution(override)
            fixed.pop(key, None)
        else:
            fixed[key] = override.input_line or f"{key}={override.get_value_element_as_str()}"
            space.pop(key, None)
    return space, list(fixed.values())


def distribution(override: Override) -> BaseDistribution:
    """The Optuna distribution of one sweep override (a shuffled sweep: its values in written order)."""
    key, value = override.get_key_element(), override.value()
    if isinstance(value, ChoiceSweep):
        return CategoricalDistribution([Transformer.encode(x) for x in value.list])
    if isinstance(value, RangeSweep):
        start, stop, step = value.start, value.stop, 1 if value.step is None else value.step
        count = math.ceil((stop - start) / step) if step else 0
        if count < 1:
            raise ConfigError(f"{SPACE_PATH}.{key}", f"range({start}, {stop}, {step}) holds no value")
        last = start + (count - 1) * step
        if value.shuffle:
            return CategoricalDistribution([start + i * step for i in range(count)])
        if all(isinstance(v, int) for v in (start, stop, step)):
            return IntDistribution(start, last, step=step)
        return FloatDistribution(float(start), float(last), step=float(step))
    if isinstance(value, IntervalSweep):
        try:
            return FloatDistribution(float(value.start), float(value.end), log="log" in value.tags)
        except ValueError as exc:  # low > high, or log of a value <= 0
            raise ConfigError(f"{SPACE_PATH}.{key}", str(exc)) from None
    raise ConfigError(f"{SPACE_PATH}.{key}", f"{override.input_line}: an Optuna search cannot sample this sweep",
                      allowed="choice(...), range(...), interval(...), tag(log, interval(...))")


def grid(space: dict[str, BaseDistribution]) -> dict[str, list[Any]]:
    """Every value of each key, for the grid sampler: choices and ranges only."""
    values: dict[str, list[Any]] = {}
    for key, dist in space.items():
        if isinstance(dist, CategoricalDistribution):
            values[key] = list(dist.choices)
        elif isinstance(dist, (IntDistribution, FloatDistribution)) and dist.step is not None and not dist.log:
            n = int(round((dist.high - dist.low) / dist.step)) + 1
            values[key] = [dist.low + i * dist.step for i in range(n)]
        else:
            raise ConfigError(f"{SPACE_PATH}.{key}", "the grid sampler needs a finite set of values, not an interval",
                              hint=f"write {key}=choice(...) or range(...), or pick another hydra.sweeper.sampler")
    return values


def job_overrides(params: dict[str, Any], fixed: Sequence[str]) -> list[str]:
    """A trial's overrides: its sampled values, then the fixed ones."""
    return [*(f"{key}={value}" for key, value in params.items()), *fixed]


def _text(value: Any) -> str:
    """A value as a condition compares it: ``bottleneck``, ``2``, ``[32,64]`` (Hydra's encoding of a choice)."""
    return str(Transformer.encode(value))


def _finite_values(key: str, dist: BaseDistribution) -> list[str]:
    if isinstance(dist, CategoricalDistribution):
        return [_text(c) for c in dist.choices]
    try:
        return [_text(v) for v in grid({key: dist})[key]]
    except ConfigError:
        raise ConfigError(f"{SPACE_PATH}.{key}", "a condition reads it, so it needs a finite set of values",
                          allowed="choice(...) or range(...)") from None


def parse_conditions(conditions: Mapping[str, Any] | None, space: Mapping[str, BaseDistribution],
                     fixed: Sequence[str]) -> Conditions:
    """Check ``hydra.sweeper.conditions`` against the searched keys (and the fixed ones a condition may read).

    Keys are matched without Hydra's ``+`` (a key the config lacks is searched as ``+KEY``). A condition of a key
    that a later ``key=value`` fixed is dropped: the fixed value goes to every trial.
    """
    searched = {_bare(k): k for k in space}
    fixed_values = _fixed_values(fixed)
    checked: Conditions = {}
    for written, when in (conditions or {}).items():
        path = f"{CONDITIONS_PATH}.{written}"
        if _bare(written) in fixed_values:
            continue
        if (key := searched.get(_bare(written))) is None:
            raise UnknownKeyError(path, written, "only a searched key can be conditional", sorted(space))
        if not isinstance(when, Mapping) or not when:
            raise ConfigError(path, f"expected {{KEY: VALUE or [VALUES]}}, got {when!r}",
                              hint=f"e.g. {written}: {{model.nodes.c3.block: yolo_bottleneck}}")
        checked[key] = {}
        for other, values in when.items():
            other = _bare(str(other))
            if other == _bare(key) or (other not in searched and other not in fixed_values):
                known = [k for k in (*searched, *fixed_values) if k != _bare(key)]
                raise UnknownKeyError(f"{path}.{other}", other, "a condition reads another key of the search, searched or "
                                  "fixed", sorted(known))
            wanted = [_text(v) for v in (values if isinstance(values, (list, tuple)) else [values])]
            # A fixed key takes one value: its condition holds in every trial or in none.
            possible = _finite_values(searched[other], space[searched[other]]) if other in searched else wanted
            for value in wanted:
                if value not in possible:
                    raise ConfigError(f"{path}.{other}", f"{other} never takes {value!r} in this search",
                                      allowed=possible, suggestions=closest_names(value, possible))
            checked[key][other] = tuple(wanted)
    sampling_order(space, checked)  # a cycle is an error now, not at the first trial
    return checked


def _bare(key: str) -> str:
    return key.lstrip("+")


def sampling_order(space: Mapping[str, BaseDistribution], conditions: Conditions) -> list[str]:
    """The searched keys in the order written, each after the keys its condition reads."""
    order: list[str] = []
    visiting: list[str] = []
    searched = {_bare(k): k for k in space}

    def visit(key: str) -> None:
        if key in order or key not in space:
            return
        if key in visiting:
            cycle = " -> ".join([*visiting[visiting.index(key):], key])
            raise ConfigError(f"{CONDITIONS_PATH}.{key}", f"conditions read each other in a cycle: {cycle}")
        visiting.append(key)
        for other in conditions.get(key, {}):
            visit(searched.get(other, other))
        visiting.pop()
        order.append(key)

    for key in space:
        visit(key)
    return order


def sample(trial: Trial, space: Mapping[str, BaseDistribution], conditions: Conditions,
           fixed: Sequence[str] = ()) -> dict[str, Any]:
    """Draw a trial's values define-by-run: a conditional key only where its condition holds."""
    known = _fixed_values(fixed)
    drawn: dict[str, Any] = {}
    for key in sampling_order(space, conditions):
        if all(known.get(other) in values for other, values in conditions.get(key, {}).items()):
            drawn[key] = _suggest(trial, key, space[key])
            known[_bare(key)] = _text(drawn[key])
    return drawn


def _fixed_values(fixed: Sequence[str]) -> dict[str, str]:
    """The keys the fixed overrides set, with their values as text (``+key`` as ``key``; deletions left out)."""
    return {_bare(o.get_key_element()): _text(o.value())
            for o in OverridesParser.create().parse_overrides(list(fixed)) if not o.is_delete()}


def _suggest(trial: Trial, key: str, dist: BaseDistribution) -> Any:
    if isinstance(dist, CategoricalDistribution):
        return trial.suggest_categorical(key, dist.choices)
    if isinstance(dist, IntDistribution):
        return trial.suggest_int(key, dist.low, dist.high, step=dist.step, log=dist.log)
    return trial.suggest_float(key, dist.low, dist.high, step=dist.step, log=dist.log)
