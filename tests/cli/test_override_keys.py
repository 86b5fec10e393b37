"""A `key=value` override whose key the config lacks: one error with the closest key, before Hydra."""

from __future__ import annotations

import pytest

from modelforge.cli.override_keys import check_override_keys, is_swept, split_overrides
from modelforge.errors import ConfigError


@pytest.mark.parametrize(("value", "swept"), [
    ("cnn", False), ("[verbose,grad_clip]", False), ("[]", False), ("null", False),
    ("cnn,mlp", True), ("[verbose],[grad_clip]", True), ("glob(*)", True), ("choice(a,b)", True),
])
def test_is_swept(value: str, swept: bool) -> None:
    assert is_swept(value) is swept


def test_split_overrides_sorts_choices_keys_and_skips_the_rest() -> None:
    argv = ["-m", "model=mlp", "hooks=[verbose]", "model.hidden_sizes=[8]", "+model.extra=1", "~seed",
            "hydra.run.dir=x", "hydra/launcher=joblib", "--cfg", "job"]
    assert split_overrides(argv) == (["model=mlp", "hooks=[verbose]"], ["model.hidden_sizes"], False)


@pytest.mark.parametrize(("config", "argv", "match"), [
    ("train", ["trainer.max_epoch=2"], r"(?s)trainer.max_epoch: no key 'max_epoch' at 'trainer'.*did you mean 'max_epochs'"),
    ("train", ["enc_size=[8]"], r"(?s)enc_size: no key 'enc_size' at the top level.*did you mean 'enc_sizes'"),
    ("train", ["model=mlp", "model.enc_sizes=[8]"], r"(?s)model.enc_sizes: no key.*allowed: activation, dropout, hidden_sizes"),
    ("train", ["hooks.grad_clip.value=0.1"], r"hint: hooks is a config group: select the option first, e\.g\. hooks=\[grad_clip\]"),
    ("train", ["hooks=[verbose]", "hooks.grad_clip.value=0.1"], r"'grad_clip' is an option of the hooks group"),
    ("summary", ["model.foo=1"], r"hint: to add a key that is not in the config, write \+model\.foo=\.\.\."),
])
def test_unknown_key_is_named_with_the_closest(config: str, argv: list[str], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        check_override_keys(config, argv)


@pytest.mark.parametrize(("config", "argv"), [
    ("train", ["model=mlp", "model.hidden_sizes=[8]", "trainer.max_epochs=1", "enc_sizes=[8]"]),
    ("train", ["hooks=[verbose,grad_clip]", "hooks.grad_clip.value=0.1"]),
    ("train", ["experiment=fast", "optim.weight_decay=0.1"]),
    ("train", ["-m", "model=cnn,mlp", "model.whatever=1"]),  # which model a job gets is per job
    ("train", ["+model.extra=1", "hydra.sweeper.n_trials=3"]),
    ("eval", ["ckpt_path=x.ckpt"]),
])
def test_valid_or_undecidable_overrides_pass(config: str, argv: list[str]) -> None:
    check_override_keys(config, argv)


def test_cli_prints_it_without_hydra_traceback(cli) -> None:
    result = cli("summary", "model=cnn", "model.enc_size=[8]")
    assert result.returncode == 2
    assert result.stderr.startswith("error: model.enc_size: no key 'enc_size' at 'model'\n  did you mean 'enc_sizes'?")
    assert "not in struct" not in result.stderr and "Traceback" not in result.stderr
