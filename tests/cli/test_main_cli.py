"""Top-level dispatch, `--help` and `list`."""

from __future__ import annotations

from tests.conftest import REPO, SHIPPED_MODELS


def test_help_names_commands_and_config_groups(run_main) -> None:
    result = run_main("--help")
    assert result.returncode == 0
    for word in ("train", "eval", "summary", "list", "model", SHIPPED_MODELS, "optim", "hooks"):
        assert word in result.stdout
    groups = [line.split()[0] for line in result.stdout.split("config groups")[1].splitlines()[1:] if line.strip()]
    assert "hydra" not in groups  # conf/hydra only extends Hydra's own groups
    assert "hydra/launcher" in groups


def test_unknown_command_suggests(run_main) -> None:
    result = run_main("sumary", "model=cnn")
    assert result.returncode == 2 and "did you mean 'summary'" in result.stderr


def test_list_everything(run_main) -> None:
    result = run_main("list")
    assert result.returncode == 0
    for header in ("activations:", "blocks:", "models:", "initializers:", "hooks:", "optimizers:", "schedulers:",
                   "datamodules:", "callbacks:", "loggers:"):
        assert header in result.stdout


def test_list_datamodules_names_the_built_in_data_sets(run_main) -> None:
    result = run_main("list", "datamodules")
    assert result.returncode == 0 and result.stdout.startswith("datamodules:")
    assert {"mnist", "fashion_mnist", "idx"} <= {line.split()[0] for line in result.stdout.splitlines()[1:]}


def test_list_one_registry_with_descriptions(run_main) -> None:
    result = run_main("list", "activations")
    lines = result.stdout.splitlines()
    assert lines[0].startswith("activations:")
    names = [line.split()[0] for line in lines[1:]]
    assert {"relu", "lrelu", "gelu", "silu", "tanh"} <= set(names)
    assert any(line.split()[0] == "lrelu" and "negative_slope" in line for line in lines[1:])
    assert "conv" not in names


def test_list_glob(run_main) -> None:
    result = run_main("list", "blocks", "conv*")  # the conv block, and conf/blocks' composites whose names match
    names = [line.split()[0] for line in result.stdout.splitlines()[1:] if not line.startswith("   ")]  # no wraps
    assert names == ["conv", "composite", "convnext_block(expansion=4,", "convnext_downsample(out_channels)",
                     "conv_norm_act(out_channels,"]


def test_list_unknown_registry(run_main) -> None:
    result = run_main("list", "activation")
    assert result.returncode != 0 and "did you mean 'activations'" in result.stderr
    assert "Traceback" not in result.stderr


def test_list_models_shows_every_model_file_a_user_can_pick(run_main, tmp_path) -> None:
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "my_net.yaml").write_text("# My own net: three convs\nname: cnn\n")
    result = run_main("list", "models", "--config-dir", str(tmp_path))
    assert result.returncode == 0, result.stderr
    files = result.stdout.split("model files (model=NAME; each builds one of the models above):\n")[1]
    rows = [line for line in files.splitlines() if not line.startswith(" " * 4)]  # not a row's wrapped lines
    names = [line.split()[0] for line in rows]
    assert names == sorted([*SHIPPED_MODELS.split(", "), "my_net"])  # resnet50, vit_b_16, ... all of conf/model
    words = " ".join(files.split())  # the rows with their wrapped lines joined
    assert "resnet18 ResNet-18 (torchvision.models.resnet18) [conf/model/resnet18.yaml]" in words
    assert f"My own net [{tmp_path / 'model'}/my_net.yaml]" in words
    assert "(LeCun et al. 1998) for 28x28 digits" in words  # the first sentence, not cut at "al."
    only = run_main("list", "models", "res*").stdout.split("above):\n")[1]
    assert [line.split()[0] for line in only.splitlines() if not line.startswith(" " * 4)] == [
        "resnet18", "resnet34", "resnet50"]


def test_flags_may_come_between_and_after_overrides(run_main, tmp_path) -> None:
    """`train model=x --config-dir d trainer.y=z`: argparse alone stops at the flag and calls the rest unknown."""
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "mine.yaml").write_text("name: mlp\nhidden_sizes: [5]\n")
    result = run_main("summary", "model=mine", "--config-dir", str(tmp_path), "model.hidden_sizes=[7]")
    assert result.returncode == 0, result.stderr
    assert "7" in result.stdout and f"{784 * 7 + 7 + 7 * 10 + 10:,}" in result.stdout  # the override after the flag
    shown = run_main("summary", "model=mine", "model.hidden_sizes=[3]", "--cfg", "job", "--config-dir", str(tmp_path))
    assert shown.returncode == 0 and "hidden_sizes:\n  - 3" in shown.stdout
    bad = run_main("summary", "model=mlp", "--bogus")
    assert bad.returncode == 2 and "unrecognized arguments: --bogus" in bad.stderr


def test_a_users_file_named_as_a_shipped_one_is_refused_as_never_read(run_main, tmp_path) -> None:
    """Hydra reads conf/ first: a user's model/mlp.yaml would be ignored without a word."""
    import pytest

    from modelforge import ConfigError, create_model

    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "mlp.yaml").write_text("name: mlp\nhidden_sizes: [3]\n")
    result = run_main("summary", "--config-dir", str(tmp_path), "model=mlp")
    assert result.returncode == 2
    assert result.stderr.splitlines()[0] == (
        f"error: {tmp_path / 'model' / 'mlp.yaml'}: is never read: the shipped "
        f"{REPO / 'conf' / 'model' / 'mlp.yaml'} has its name, and Hydra reads the shipped configs first "
        "(model=mlp is the shipped one)")
    assert result.stderr.splitlines()[1] == "  hint: give yours a name of its own, e.g. model/my_mlp.yaml"
    with pytest.raises(ConfigError, match="is never read"):
        create_model("mlp", config_dir=tmp_path)
    (tmp_path / "model" / "mlp.yaml").rename(tmp_path / "model" / "my_mlp.yaml")
    assert run_main("summary", "--config-dir", str(tmp_path), "model=my_mlp").returncode == 0
