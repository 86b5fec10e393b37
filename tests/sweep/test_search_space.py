"""Hydra's sweep grammar as Optuna distributions, and the grid sampler's values."""

from __future__ import annotations

import pytest
import yaml
from optuna.distributions import (
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)

from modelforge.errors import ConfigError
from modelforge.sweep.search_space import grid, job_overrides, parse_space


def test_each_sweep_kind_becomes_its_distribution() -> None:
    space, fixed = parse_space(["a=choice(relu, gelu)", "b=range(1,5)", "c=range(0,1,0.25)", "d=interval(0.0, 0.5)",
                                "e=tag(log, interval(1e-3, 1e-1))", "f=shuffle(range(1,4))", "g=1,2,3"])
    assert space == {
        "a": CategoricalDistribution(["relu", "gelu"]),
        "b": IntDistribution(1, 4),  # stop excluded, as Hydra's basic sweeper runs range(1,5): 1, 2, 3, 4
        "c": FloatDistribution(0.0, 0.75, step=0.25),
        "d": FloatDistribution(0.0, 0.5),
        "e": FloatDistribution(1e-3, 1e-1, log=True),
        "f": CategoricalDistribution([1, 2, 3]),
        "g": CategoricalDistribution([1, 2, 3]),
    }
    assert fixed == []


def test_list_choices_reach_optuna_as_strings_that_parse_back() -> None:
    space, _ = parse_space(["enc_sizes=choice([16], [32,64])"])
    assert [yaml.safe_load(c) for c in space["enc_sizes"].choices] == [[16], [32, 64]]
    assert job_overrides({"enc_sizes": "[32,64]"}, ["model=cnn"]) == ["enc_sizes=[32,64]", "model=cnn"]


def test_a_later_fixed_value_takes_the_key_out_of_the_space() -> None:
    # The config's search space first, then the command line: optim.lr=0.05 fixes what the config searches.
    space, fixed = parse_space(["optim.lr=tag(log, interval(1e-3, 1e-1))", "activation=choice(relu, gelu)",
                                "optim.lr=0.05", "+trainer.max_time=null", "~callbacks"])
    assert set(space) == {"activation"}
    assert fixed == ["optim.lr=0.05", "+trainer.max_time=null", "~callbacks"]


def test_an_empty_range_is_an_error() -> None:
    with pytest.raises(ConfigError, match=r"hydra.sweeper.params.b: range\(3, 3, 1\) holds no value"):
        parse_space(["b=range(3,3)"])


def test_grid_lists_every_value_and_refuses_an_interval() -> None:
    space, _ = parse_space(["a=choice(x, y)", "b=range(1,7,2)", "c=range(0,1,0.5)"])
    assert grid(space) == {"a": ["x", "y"], "b": [1, 3, 5], "c": [0.0, 0.5]}
    space, _ = parse_space(["d=interval(0.0, 1.0)"])
    with pytest.raises(ConfigError, match="hydra.sweeper.params.d: the grid sampler needs a finite set of values"):
        grid(space)


def test_workers_seeded_apart_never_reseed_alike_and_one_seed_repeats() -> None:
    from modelforge.sweep.search import trial_seed

    # Under seed + stored, a worker seeded 0 with one trial stored reseeds as one seeded 1 with none: same points.
    lockstep = [(trial_seed(0, n + 1), trial_seed(1, n)) for n in range(200)]
    assert all(a != b for a, b in lockstep)
    assert len({trial_seed(seed, n) for seed in (0, 1, 2) for n in range(200)}) == 600
    # A study regrows alike in any process: NumPy's SeedSequence is stable across runs and versions.
    assert [trial_seed(0, n) for n in range(3)] == [2968811710, 3964924996, 3141116543]
