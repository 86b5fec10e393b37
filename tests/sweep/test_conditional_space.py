"""Conditional search spaces (``hydra.sweeper.conditions``): a key drawn only where another took given values; the
shipped architecture search over a scale, a composite block choice and repeats."""

from __future__ import annotations

import json
from pathlib import Path

import optuna
import pytest

from modelforge.errors import ConfigError
from modelforge.sweep.search_space import (
    parse_conditions,
    parse_space,
    sample,
    sampling_order,
)
from tests.helpers.sweep_summary import read_summary

BLOCK, HIDDEN = "model.nodes.c3.block", "+model.nodes.c3.args.hidden"
SPACE = [f"{BLOCK}=choice(c2f, yolo_bottleneck)", f"{HIDDEN}=choice(32, 64)", "model.nodes.c3.repeat=range(1,4)"]


def _draws(conditions: dict, n: int = 40, fixed: tuple[str, ...] = ()) -> list[dict]:
    space, written_fixed = parse_space([*SPACE, *fixed])
    checked = parse_conditions(conditions, space, written_fixed)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    draws = []
    for _ in range(n):
        trial = study.ask()
        draws.append(sample(trial, space, checked, written_fixed))
        assert trial.params == draws[-1]  # what Optuna stores is what the job gets
        study.tell(trial, 0.0)
    return draws


def test_a_conditional_key_is_drawn_exactly_where_its_condition_holds() -> None:
    draws = _draws({HIDDEN: {BLOCK: "yolo_bottleneck"}})
    assert {d[BLOCK] for d in draws} == {"c2f", "yolo_bottleneck"}
    for draw in draws:
        assert (HIDDEN in draw) == (draw[BLOCK] == "yolo_bottleneck"), draw
        assert draw["model.nodes.c3.repeat"] in (1, 2, 3)  # unconditional keys in every trial


def test_conditions_take_a_list_of_values_and_read_integers_and_fixed_keys() -> None:
    for draw in _draws({HIDDEN: {"model.nodes.c3.repeat": [2, 3]}}):
        assert (HIDDEN in draw) == (draw["model.nodes.c3.repeat"] in (2, 3)), draw
    # The key the condition reads fixed on the command line: the condition holds in every trial, or in none.
    assert all(HIDDEN in d for d in _draws({HIDDEN: {BLOCK: "yolo_bottleneck"}}, 5, (f"{BLOCK}=yolo_bottleneck",)))
    assert all(HIDDEN not in d for d in _draws({HIDDEN: {BLOCK: "yolo_bottleneck"}}, 5, (f"{BLOCK}=c2f",)))


def test_a_key_written_after_the_key_it_reads_is_still_drawn_after_it() -> None:
    space, _ = parse_space(list(reversed(SPACE)))
    checked = parse_conditions({HIDDEN: {BLOCK: "yolo_bottleneck"}}, space, [])
    order = sampling_order(space, checked)
    assert order.index(BLOCK) < order.index(HIDDEN)


@pytest.mark.parametrize(("conditions", "message"), [
    ({"+model.nodes.c3.args.hiden": {BLOCK: "c2f"}},
     (r"hydra.sweeper.conditions.\+model.nodes.c3.args.hiden: only a searched key can be conditional.*"
      r"did you mean '\+model.nodes.c3.args.hidden'")),
    ({HIDDEN: {BLOCK: "yolo_botleneck"}},
     (r"conditions.\+model.nodes.c3.args.hidden.model.nodes.c3.block: model.nodes.c3.block never takes "
      r"'yolo_botleneck' in this search.*did you mean 'yolo_bottleneck'")),
    ({HIDDEN: {"model.nodes.c3.blok": "c2f"}},
     r"a condition reads another key of the search, searched or fixed.*did you mean 'model.nodes.c3.block'"),
    ({HIDDEN: "yolo_bottleneck"}, r"expected \{KEY: VALUE or \[VALUES\]\}, got 'yolo_bottleneck'"),
    ({HIDDEN: {BLOCK: "c2f"}, BLOCK: {"model.nodes.c3.args.hidden": 32}},
     (r"conditions read each other in a cycle: model.nodes.c3.block -> \+model.nodes.c3.args.hidden -> "
      r"model.nodes.c3.block")),
])
def test_a_wrong_condition_is_one_clear_error(conditions: dict, message: str) -> None:
    space, fixed = parse_space(SPACE)
    with pytest.raises(ConfigError, match=f"(?s){message}"):
        parse_conditions(conditions, space, fixed)


def test_a_condition_on_an_interval_is_refused() -> None:
    space, fixed = parse_space([*SPACE, "optim.lr=interval(0.001, 0.1)"])
    with pytest.raises(ConfigError, match="hydra.sweeper.params.optim.lr: a condition reads it, so it needs a finite"):
        parse_conditions({HIDDEN: {"optim.lr": 0.01}}, space, fixed)


def test_the_architecture_search_runs_each_trial_with_its_own_structure(sweep_here, tmp_path: Path) -> None:
    """The shipped search: yolov8_cls's scale, c3's composite block, repeats; hidden only for the bottleneck."""
    result = sweep_here("hparams_search=architecture", "trainer.fast_dev_run=true", "hydra.sweeper.n_trials=2")
    assert result.returncode == 0, result.stderr[-2000:]
    rows = read_summary(tmp_path / "sweep")
    assert len(rows) == 2 and {r["status"] for r in rows} == {"finished"}
    blocks = set()
    for row in rows:
        overrides = dict(o.split("=", 1) for o in json.loads(
            (Path(row["run_dir"]) / "metrics.json").read_text())["overrides"] if "=" in o)
        blocks.add(overrides[BLOCK])
        assert (HIDDEN in overrides) == (overrides[BLOCK] == "yolo_bottleneck"), overrides
        config = (Path(row["run_dir"]) / "config.yaml").read_text()
        assert f"block: {overrides[BLOCK]}" in config
    assert blocks == {"c2f", "yolo_bottleneck"}  # seed 0 draws both, so both kinds of trial ran
    study = optuna.load_study(study_name="modelforge", storage=f"sqlite:///{tmp_path}/sweep/optuna.db")
    assert all((HIDDEN in t.params) == (t.params[BLOCK] == "yolo_bottleneck") for t in study.trials)


def test_the_grid_sampler_refuses_conditions(sweep_here, tmp_path: Path) -> None:
    result = sweep_here("hparams_search=architecture", "trainer.fast_dev_run=true", "hydra.sweeper.sampler=grid")
    assert result.returncode == 2
    assert result.stderr.startswith("error: hydra.sweeper.conditions: the grid sampler draws every key in every trial")
    assert not list((tmp_path / "sweep").glob("*/metrics.json"))


def test_conditions_with_dotted_keys_on_the_command_line_are_refused_with_where_to_write_them(sweep_here,
                                                                                              tmp_path: Path) -> None:
    result = sweep_here("hparams_search=architecture", f"hydra.sweeper.conditions={{{HIDDEN}: {{{BLOCK}: c2f}}}}")
    assert result.returncode == 2
    assert result.stderr == ("error: hydra.sweeper.conditions: OmegaConf would split the dotted names of a search's "
                             "keys into nested keys as it merges the command line\n  hint: write "
                             "hydra.sweeper.conditions in a search config, as conf/hparams_search/architecture.yaml "
                             "does (yours: --config-dir DIR)\n")
    assert not (tmp_path / "sweep").exists()


def test_a_condition_on_top_level_keys_can_be_added_on_the_command_line(sweep_here, tmp_path: Path) -> None:
    """Undotted keys merge as written (the sweeper's conditions default to {}, which OmegaConf can merge into)."""
    result = sweep_here("hparams_search=optuna", "hydra.sweeper.n_trials=2", "trainer.fast_dev_run=true",
                        "+hydra.sweeper.conditions.enc_sizes.activation=gelu")  # or enc_sizes={activation: gelu}
    assert result.returncode == 0, result.stderr[-2000:]
    study = optuna.load_study(study_name="modelforge", storage=f"sqlite:///{tmp_path}/sweep/optuna.db")
    assert len(study.trials) == 2
    assert all(("enc_sizes" in t.params) == (t.params["activation"] == "gelu") for t in study.trials)
    assert "gelu" in {t.params["activation"] for t in study.trials} != {"gelu"}  # seed 0: both kinds of trial


def test_null_conditions_and_undotted_params_dicts_still_compose(run_main, tmp_path: Path) -> None:
    """null was the default conditions (older search configs write it); a {...} of undotted keys merges as written."""
    result = run_main("train", "hparams_search=optuna", "hydra.sweeper.conditions=null",
                      "hydra.sweeper.params={activation: 'choice(relu,gelu)'}", "--cfg", "hydra", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "conditions: null" in result.stdout and "activation: choice(relu,gelu)" in result.stdout
