"""The shipped recipes' learning rates: the peaks their recorded figures were measured with.

``sched=onecycle`` (the default) peaks at ``optim.lr``: the lr a user types is the peak they get.
The figures in experiments/*.md and the README were measured with these peaks; a change to the rule
(or to the YAML defaults) that moves a recipe's schedule fails here, before the figures go stale.
"""

from __future__ import annotations

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf
from torch import nn

from modelforge.config import conf_dir
from modelforge.train.optim import build_optimizer, build_scheduler


def _lrs(*overrides: str, steps: int = 100) -> list[float]:
    """The lr of every step of a schedule over ``steps``, as ``overrides`` compose it from conf/train.yaml."""
    with initialize_config_dir(config_dir=str(conf_dir()), version_base="1.3"):
        cfg = compose("train", overrides=list(overrides))
    optim, sched = OmegaConf.to_container(cfg.optim), OmegaConf.to_container(cfg.sched)
    optimizer = build_optimizer(nn.Linear(2, 2), optim)
    scheduler = build_scheduler(optimizer, sched, total_steps=steps, lr=optimizer.defaults["lr"])
    seen = []
    for _ in range(steps):
        seen.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        if scheduler is not None:
            scheduler.step()
    return seen


@pytest.mark.parametrize(("recipe", "peak"), [
    ((), 1e-2),                                      # default_cnn.md: Adam, one-cycle peaking at 1e-2
    (("experiment=activations",), 1e-2),             # activations.md: the default schedule
    (("experiment=enc_sizes",), 1e-2),               # enc_sizes.md: the default schedule
    (("experiment=fast",), 1e-2),                    # fast.md: AdamW peaking at 1e-2
    (("experiment=fast", "optim.lr=2e-2"), 2e-2),    # fast.md: the batch-128 rows
    (("optim.lr=3e-2",), 3e-2),                      # the README's sweep over optim.lr=1e-2,3e-2
    (("optim=sgd",), 0.05),                          # the README's SGD example
    (("optim=rmsprop",), 1e-2),
    (("optim=sgd", "sched.max_lr_factor=10"), 0.5),  # the old rule, on request
])
def test_a_one_cycle_recipe_peaks_at_the_lr_the_user_gives(recipe: tuple[str, ...], peak: float) -> None:
    lrs = _lrs(*recipe)
    assert max(lrs) == pytest.approx(peak, rel=1e-12)
    assert lrs[0] == pytest.approx(peak / 25)  # OneCycleLR starts at max_lr / div_factor


def test_seed_cnn_trains_at_a_constant_1e_3() -> None:
    assert _lrs("experiment=seed_cnn", steps=5) == [1e-3] * 5  # seed_cnn.md: Adam at a constant 1e-3


def test_the_optuna_search_samples_the_peaks_its_recorded_trials_had() -> None:
    with initialize_config_dir(config_dir=str(conf_dir()), version_base="1.3"):
        cfg = compose("train", overrides=["hparams_search=optuna"], return_hydra_config=True)
    # optuna.md's trials: one-cycle peaks in [1e-3, 1e-1] (then written optim.lr in [1e-4, 1e-2] x 10).
    assert cfg.hydra.sweeper.params["optim.lr"] == "tag(log, interval(1e-3, 1e-1))"
    assert cfg.sched._target_ == "modelforge.train.optim.onecycle" and cfg.sched.max_lr_factor is None
    assert max(_lrs("optim.lr=8.2e-3")) == pytest.approx(8.2e-3)  # the best trial's peak

