"""A search space written in Hydra's override grammar, as Optuna distributions.

``choice(a, b)`` is categorical (a list choice reaches Optuna as its string, ``"[32,64]"``, which the job's override
parses back into a list); ``range(start, stop[, step])`` the integers (or floats) Hydra's basic sweeper would run,
``stop`` excluded; ``interval(low, high)`` uniform floats between them (Hydra reads its bounds as floats);
``tag(log, interval(...))`` log-uniform. A plain ``key=value`` fixes the key for every trial.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
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

from modelforge.errors import ConfigError

SPACE_PATH = "hydra.sweeper.params"


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
