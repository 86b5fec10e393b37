"""The library never reads Hydra's global state: ``train(cfg)`` does the same while a Hydra job is in progress as
without one; the CLI reads what it needs from Hydra and hands it in (RunContext)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.hydra_config import HydraConfig
from omegaconf import OmegaConf

from modelforge.config import conf_dir
from modelforge.errors import ConfigError
from modelforge.train import train
from modelforge.train.context import RunContext
from modelforge.train.eval_config import eval_data_config, eval_trainer_options
from modelforge.train.records import claim_run_dir
from tests.train.conftest import TINY

PACKAGE = Path(__file__).resolve().parents[2] / "modelforge"
HYDRA_STATE = re.compile(r"HydraConfig|hydra\._internal")


def test_no_library_module_reads_hydra_s_state() -> None:
    """Outside cli/ a line may name Hydra's internals only with a comment that says why (the sweep's _target_s)."""
    found = [f"{path.relative_to(PACKAGE)}:{n}: {line.strip()}" for path in sorted(PACKAGE.rglob("*.py"))
             if "cli" not in path.relative_to(PACKAGE).parts
             for n, line in enumerate(path.read_text().splitlines(), 1)
             if HYDRA_STATE.search(line) and "#" not in line]
    assert found == []
    assert not [p for p in PACKAGE.rglob("*.py") if "cli" not in p.parts and "HydraConfig" in p.read_text()]


def test_train_in_a_hydra_job_behaves_as_from_python(tiny_mnist: Path, tmp_path: Path) -> None:
    """A Hydra job in progress (HydraConfig set, as run_job sets it) changes nothing: the record says python, train
    writes its own train.log, and an error names run_dir."""
    with initialize_config_dir(config_dir=str(conf_dir()), version_base="1.3"):
        full = compose("train", overrides=[f"data.data_dir={tiny_mnist}", *TINY, "curves=false", "model=mlp",
                                           "model.hidden_sizes=[8]", "trainer.fast_dev_run=true"],
                       return_hydra_config=True)
    cfg = OmegaConf.masked_copy(full, [k for k in full if k != "hydra"])
    HydraConfig.instance().set_config(full)
    try:
        assert HydraConfig.initialized()
        train(cfg, run_dir=tmp_path / "run")
        with pytest.raises(ConfigError, match=r"^run_dir: .* already holds a run"):
            train(cfg, run_dir=tmp_path / "run")
    finally:
        HydraConfig.instance().cfg = None
    record = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert (record["status"], record["launched_from"], record["overrides"]) == ("finished", "python", None)
    assert (tmp_path / "run" / "train.log").is_file()


def test_the_context_says_what_the_cli_knows(tiny_mnist: Path, tmp_path: Path) -> None:
    """What the CLI hands in is what the record and the errors say, with no Hydra job in progress."""
    with initialize_config_dir(config_dir=str(conf_dir()), version_base="1.3"):
        cfg = compose("train", overrides=[f"data.data_dir={tiny_mnist}", *TINY, "curves=false", "model=mlp",
                                          "model.hidden_sizes=[8]", "trainer.fast_dev_run=true"])
    context = RunContext(launched_from="cli", overrides=("model=mlp", "model.hidden_sizes=[8]"),
                         dir_key="hydra.run.dir", writes_log=False)
    assert not HydraConfig.initialized()
    train(cfg, run_dir=tmp_path / "run", context=context)
    record = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert (record["launched_from"], record["overrides"]) == ("cli", ["model=mlp", "model.hidden_sizes=[8]"])
    assert not (tmp_path / "run" / "train.log").exists()  # the CLI's logging writes it
    with pytest.raises(ConfigError, match=r"^hydra\.run\.dir: .* already holds a run"):
        claim_run_dir(tmp_path / "run", dir_key=context.dir_key)


def test_eval_options_count_what_the_command_line_named() -> None:
    stored = {"name": "mnist", "normalize": True, "data_dir": "/data"}
    given = {"name": "mnist", "normalize": False, "data_dir": "/other"}
    assert eval_data_config(given, stored) == given  # from Python: the config says it all
    cli = RunContext(launched_from="cli", overrides=("data.data_dir=/other",))
    assert eval_data_config(given, stored, cli) == {**stored, "data_dir": "/other"}  # a default undoes nothing
    assert eval_trainer_options({"devices": 2, "max_epochs": 1}, {}, RunContext(overrides=("trainer.devices=2",))) \
        == {"devices": 2, "max_epochs": 1}
