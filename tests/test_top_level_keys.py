"""A top-level key that train does not read is refused before any work, with the closest key: `+lable_smoothing=0.1`
ran silently with label_smoothing 0.0. A key of the user's own that an interpolation reads is kept."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from hydra import compose, initialize_config_dir

from modelforge import ConfigError
from modelforge.config import TRAIN_GROUPS, check_top_level_keys, conf_dir, train_keys
from tests.helpers.mnist_idx import write_mnist_idx

TINY = ["data.verify=false", "data.download=false", "data.val_size=16", "data.batch_size=16",
        "trainer.enable_progress_bar=false", "trainer.max_epochs=1", "trainer.limit_train_batches=2"]


def test_the_train_groups_are_those_of_train_yaml() -> None:
    defaults = yaml.safe_load((conf_dir() / "train.yaml").read_text())["defaults"]
    groups = [next(iter(d)) for d in defaults if isinstance(d, dict) and not next(iter(d)).startswith("override ")]
    # experiment and hparams_search are `@package _global_`: they set the keys of others, and leave none of their own;
    # so is task: it sets its own key (a TrainConfig field) and monitor.
    assert sorted(set(groups) - {"experiment", "hparams_search", "task"}) == sorted(TRAIN_GROUPS)


def test_every_key_of_the_composed_train_config_is_read() -> None:
    with initialize_config_dir(config_dir=str(conf_dir()), version_base="1.3"):
        composed = compose("train", overrides=["hooks=[verbose]", "callbacks=[early_stopping]", "experiment=fast"])
    assert set(composed) <= set(train_keys())
    check_top_level_keys(composed, train_keys(), "train")


def test_a_typo_is_refused_with_the_key_it_meant() -> None:
    with pytest.raises(ConfigError) as info:
        check_top_level_keys({"seed": 0, "lable_smoothing": 0.1}, train_keys(), "train")
    assert str(info.value).splitlines() == [
        "lable_smoothing: train reads no top-level key 'lable_smoothing': it would be stored in config.yaml and "
        "change nothing",
        "  did you mean 'label_smoothing'?",
        f"  allowed: {', '.join(train_keys())}",
        "  hint: a key the config has is set without '+': label_smoothing=...",
    ]


def test_a_key_of_ones_own_is_kept_where_an_interpolation_reads_it() -> None:
    check_top_level_keys({"base_lr": 0.01, "optim": {"lr": "${base_lr}"}}, train_keys(), "train")
    check_top_level_keys({"widths": [8], "model": {"enc_sizes": "${oc.select:widths,[4]}"}}, train_keys(), "train")
    with pytest.raises(ConfigError, match=r"hint: leave it out; a key of your own stays only where an interpolation "
                                          r"reads it \(\$\{base_lr\}\)"):
        check_top_level_keys({"base_lr": 0.01, "optim": {"lr": 0.01}}, train_keys(), "train")


def test_train_from_python_refuses_it_too(tmp_path: Path) -> None:
    from modelforge.train import train

    with pytest.raises(ConfigError, match="^lable_smoothing: train reads no top-level key"):
        train({"model": {"name": "mlp"}, "lable_smoothing": 0.1}, run_dir=tmp_path / "run")
    assert not (tmp_path / "run").exists()


@pytest.fixture(scope="module")
def tiny_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("tiny_mnist_keys")
    write_mnist_idx(folder, n_train=64, n_test=32)
    return folder


@pytest.mark.parametrize("sweep", [False, True])
def test_the_cli_refuses_it_before_any_directory_is_made(run_main, tmp_path: Path, sweep: bool) -> None:
    flags = ["-m", "seed=1,2", f"hydra.sweep.dir={tmp_path / 'sweep'}"] if sweep else [
        f"hydra.run.dir={tmp_path / 'run'}"]
    result = run_main("train", *flags, "+lable_smoothing=0.1", cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith("error: lable_smoothing: train reads no top-level key 'lable_smoothing'")
    assert "did you mean 'label_smoothing'?" in result.stderr and "Traceback" not in result.stderr
    assert list(tmp_path.iterdir()) == []


def test_an_interpolated_key_of_ones_own_trains(run_main, tmp_path: Path, tiny_data: Path) -> None:
    result = run_main("train", f"data.data_dir={tiny_data}", *TINY, "model=mlp", "+base_lr=0.002",
                      "optim.lr=${base_lr}", f"hydra.run.dir={tmp_path / 'run'}", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    stored = yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())
    assert stored["optim"]["lr"] == 0.002 and stored["base_lr"] == 0.002
