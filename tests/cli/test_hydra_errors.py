"""Hydra composes once; its refusals become one message with the closest name (real Hydra, in process)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import SHIPPED_MODELS


@pytest.mark.parametrize(("args", "message"), [
    (["train", "trainer.max_epoch=2"],
     "error: trainer.max_epoch: no key 'max_epoch' at 'trainer'\n  did you mean 'max_epochs'?"),
    (["train", "enc_size=[8]"], "error: enc_size: no key 'enc_size' at the top level of the config\n"
                                "  did you mean 'enc_sizes'?"),
    (["train", "model=mlp", "model.enc_sizes=[8]"], "allowed: activation, dropout, hidden_sizes"),
    (["train", "hooks.grad_clip.value=0.1"],
     "hint: hooks is a config group: select the option first, e.g. hooks=[grad_clip]"),
    (["train", "hooks=[verbose]", "hooks.grad_clip.value=0.1"],
     "hint: 'grad_clip' is an option of the hooks group: select it first, e.g. hooks=[grad_clip]"),
    (["summary", "model.foo=1"], "hint: to add a key that is not in the config, write +model.foo=..."),
    (["summary", "model=cnnn"], "error: model: unknown model option 'cnnn'\n  did you mean 'cnn'?\n"
                                f"  allowed: {SHIPPED_MODELS}"),
    (["summary", "hooks=[verbose,grad_clipp]"], "error: hooks: unknown hooks option 'grad_clipp'\n"
                                                "  did you mean 'grad_clip'?"),
    (["summary", "optim=adamm"], "error: optim: unknown optim option 'adamm'\n  did you mean 'adam'?"),
    (["summary", "optim=adam"], "error: optim: the summary config has no optim group in its defaults\n"
                                "  hint: +optim=adam adds it"),
    (["summary", "+model=mlp"], "error: model: the summary config already picks a model option"),
    (["summary", "seed=[1"], "error: seed=[1: no viable alternative at input '[1'"),
    (["summary", "model=no/such/file.yaml"], "error: model: no model file 'no/such/file.yaml'"),
    (["train", "experiment=fastt"], "error: experiment: unknown experiment option 'fastt'\n  did you mean 'fast'?"),
    (["summary", "~optim"], "'optim'"),  # a deletion the defaults list refuses: Hydra's words
    (["summary", "--config-dir", "/nonexistent/folder", "model=cnn"], "error: --config-dir: "),
    (["summary", "--experimental-rerun", "config.pickle"], "error: --experimental-rerun: not supported"),
])
def test_bad_override_is_one_message_with_exit_2(run_main, args: list[str], message: str) -> None:
    result = run_main(*args)
    assert result.returncode == 2, result.stderr
    assert message in result.stderr, result.stderr
    assert result.stderr.startswith("error: ") and "Traceback" not in result.stderr
    assert "not in struct" not in result.stderr and "Config search path" not in result.stderr


@pytest.mark.parametrize(("override", "shown"), [
    ("hydra.run.dir=/tmp/ünïcødé", "'ü' (U+00FC) in '/tmp/ünïcødé'"),
    ("+hydra.run.dir=/tmp/ü'x", "'ü' (U+00FC) in \"/tmp/ü'x\""),
])
def test_an_unquoted_non_ascii_value_names_the_character_and_the_quoting(run_main, tmp_path: Path, override: str,
                                                                        shown: str) -> None:
    import shlex

    result = run_main("train", override, cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    head, hint = result.stderr.splitlines()
    assert head == f"error: hydra.run.dir: {shown}: Hydra's override grammar takes characters other than ASCII only " \
                   "in a quoted value"
    assert "LexerNoViableAltException" not in result.stderr and "bracket" not in result.stderr
    quoting = hint.removeprefix("  hint: quote the value (and the whole override, for the shell): ")
    key, _, value = shlex.split(quoting)[0].partition("=")  # as the shell hands it to Hydra: the value quoted
    assert key == override.partition("=")[0] and value[1:-1] == override.partition("=")[2] and value[0] == value[-1]
    assert list(tmp_path.iterdir()) == []


def test_a_quoted_non_ascii_run_dir_is_used_as_written(run_main, tmp_path: Path) -> None:
    result = run_main("train", f"hydra.run.dir='{tmp_path}/ünïcødé'", "--cfg", "hydra", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert f"dir: {tmp_path}/ünïcødé" in result.stdout


def test_options_of_a_user_config_dir_are_suggested(run_main, tmp_path: Path) -> None:
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "my_model.yaml").write_text("name: mlp\nhidden_sizes: [8]\n")
    for flags in (["--config-dir", str(tmp_path)], [f"hydra.searchpath=[file://{tmp_path}]"]):
        result = run_main("summary", *flags, "model=my_modle")
        assert result.returncode == 2
        assert "error: model: unknown model option 'my_modle'\n  did you mean 'my_model'?" in result.stderr
        assert "allowed: " + ", ".join(sorted([*SHIPPED_MODELS.split(", "), "my_model"])) in result.stderr


def test_an_addition_is_hydras_to_make(run_main) -> None:
    result = run_main("summary", "+model.extra=1", "--cfg", "job")
    assert result.returncode == 0 and "extra: 1" in result.stdout


@pytest.mark.e2e
def test_cli_prints_it_without_hydra_traceback(cli) -> None:
    result = cli("summary", "model=cnn", "model.enc_size=[8]")
    assert result.returncode == 2
    assert result.stderr.startswith("error: model.enc_size: no key 'enc_size' at 'model'\n  did you mean 'enc_sizes'?")
    assert "not in struct" not in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize(("override", "message"), [
    # Hydra refuses a sweep of hydra.*: the entry is written as a sweep of the key itself.
    ("hydra.sweeper.params.optim.lr=choice(0.1,0.01)",
     "error: hydra.sweeper.params.optim.lr: Hydra's own config (hydra.*) cannot be swept\n"
     "  hint: a search-space entry is a sweep of the key itself, with -m: 'optim.lr=choice(0.1,0.01)'"),
    # hydra.sweeper.params' keys hold dots: optim.lr is one key, not optim's lr.
    ("hydra.sweeper.params.optim.lr=0.1",
     "error: hydra.sweeper.params.optim: no key 'optim' at 'hydra.sweeper.params'\n  did you mean 'optim.lr'?\n"),
    ("hydra.sweeper.n_trial=5", "error: hydra.sweeper.n_trial: no key 'n_trial' at 'hydra.sweeper'\n"
                                "  did you mean 'n_trials'?\n  allowed: _target_, conditions, direction, directions"),
])
def test_a_sweeper_key_is_named_where_it_is_missing(run_main, tmp_path: Path, override: str, message: str) -> None:
    result = run_main("train", "-m", "hparams_search=optuna", override, "hydra.sweeper.n_trials=1", cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith(message), result.stderr
    assert "top level" not in result.stderr and "Traceback" not in result.stderr
    assert list(tmp_path.iterdir()) == []  # refused before the sweep directory


def test_the_hinted_search_space_entry_is_what_optuna_searches(run_main, tmp_path: Path) -> None:
    from tests.helpers.mnist_idx import write_mnist_idx
    from tests.helpers.run_config import tiny_cli_args

    write_mnist_idx(tmp_path / "mnist", n_train=64, n_test=32)
    result = run_main("train", "-m", "hparams_search=optuna", "optim.lr=choice(0.05)", "hydra.sweeper.n_trials=1",
                      "trainer.fast_dev_run=true", *tiny_cli_args(tmp_path / "mnist"), "hydra.sweep.dir=sweep",
                      cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    overrides = (tmp_path / "sweep" / "summary.csv").read_text().splitlines()[1]
    assert "optim.lr=0.05" in overrides and "enc_sizes=" in overrides  # the rest of the space is still searched


@pytest.mark.parametrize(("args", "message"), [
    (("train", "-m", "enc_sizes=[16],[32]", "--cfg", "job"),
     "error: --cfg: --multirun and --cfg cannot be given together: one at a time\n"
     "  hint: --cfg job shows the config of a single run: leave out -m\n"),
    (("train", "-m", "--info"), "error: --info: --multirun and --info cannot be given together: one at a time\n"),
    (("train", "hydra.searchpath=[s3://bucket/conf]"),
     "error: hydra.searchpath: 's3://bucket/conf': Hydra reads no config source s3://\n"
     "  allowed: file://, pkg://, structured://\n  hint: a folder: file:///abs/path\n"),
])
def test_what_hydra_answers_with_a_traceback_is_one_message(run_main, tmp_path: Path, args: tuple, message: str) -> None:
    result = run_main(*args, cwd=tmp_path)
    assert (result.returncode, result.stderr) == (2, message)
    assert list(tmp_path.iterdir()) == []
