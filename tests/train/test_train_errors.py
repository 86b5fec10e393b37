"""Bad input to `train`/`eval` is one clear error before training starts; earlier runs stay untouched."""

from __future__ import annotations

import gzip
import json
import re
import shutil
from pathlib import Path

import pytest
import torch

from modelforge import CheckpointError, ConfigError, DataError
from modelforge.train import train
from modelforge.train.run_config import validate_run_config
from tests.helpers.run_config import compose_train, tiny_cli_args


def _setup_failure(run_dir: Path) -> dict:
    """The metrics.json a run that failed before training leaves: status and why, and no checkpoint."""
    assert not (run_dir / "checkpoints").exists()
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["status"] == "failed" and metrics["stage"] == "setup"
    return metrics


def _snapshot(folder: Path) -> dict[Path, bytes]:
    return {p: p.read_bytes() for p in folder.rglob("*") if p.is_file()}


@pytest.fixture(scope="module")
def earlier_run(tiny_mnist: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    run_dir = tmp_path_factory.mktemp("earlier")
    train(compose_train(tiny_mnist, "model=mlp", "model.hidden_sizes=[16]", "trainer.max_epochs=1"), run_dir=run_dir)
    return run_dir


def test_empty_data_dir_offline_names_the_file_and_data_dir(run_main, tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    result = run_main("train", "model=cnn", f"data.data_dir={empty}", "data.mirrors=[http://127.0.0.1:9/]",
                 f"hydra.run.dir={tmp_path / 'run'}")
    assert result.returncode != 0
    assert "train-images-idx3-ubyte" in result.stderr and "data_dir" in result.stderr
    assert "http://127.0.0.1:9/" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "run" / "checkpoints").exists()


def test_config_mistakes_are_found_before_the_data_is_fetched(tmp_path: Path) -> None:
    # The data folder is empty and the mirror unreachable: a hook layer pattern that matches
    # nothing is reported first, without waiting on (or blaming) the download.
    empty = tmp_path / "empty"
    empty.mkdir()
    cfg = compose_train(empty, "hooks=[feature_capture]", "hooks.feature_capture.layers=[nope.*]",
                        "data.mirrors=[http://127.0.0.1:9/]")
    with pytest.raises(ConfigError, match=r"hooks.feature_capture.layers\[0\]: 'nope.\*' matches no module"):
        train(cfg, run_dir=tmp_path / "run")
    assert list(empty.iterdir()) == []


def test_truncated_file_is_named(tiny_mnist: Path, tmp_path: Path) -> None:
    broken = tmp_path / "broken"
    shutil.copytree(tiny_mnist, broken)
    raw = gzip.decompress((broken / "t10k-images-idx3-ubyte.gz").read_bytes())
    (broken / "t10k-images-idx3-ubyte.gz").write_bytes(gzip.compress(raw[:-100]))
    with pytest.raises(DataError, match="t10k-images-idx3-ubyte"):
        train(compose_train(broken, "trainer.fast_dev_run=true"), run_dir=tmp_path / "run")
    assert _setup_failure(tmp_path / "run")["error"].startswith("DataError: ")
    assert "t10k-images-idx3-ubyte" in _setup_failure(tmp_path / "run")["error"]


def test_wrong_checksum_with_verification_on(tiny_mnist: Path, tmp_path: Path) -> None:
    with pytest.raises(DataError, match="train-images-idx3-ubyte"):
        train(compose_train(tiny_mnist, "trainer.fast_dev_run=true", "data.verify=true"), run_dir=tmp_path)


# Refused by the run's pre-flight check (validate_run_config), which train() runs before any work: the kind of
# error, the key it names and what it suggests. The wording of each message is pinned once, where it is made.
@pytest.mark.parametrize(
    ("overrides", "path", "suggestion"),
    [
        (["optim.lr=-0.1"], "optim.lr", None),
        (["optim._target_=torch.optim.Adamm"], "optim._target_", "torch.optim.Adam"),
        (["sched._target_=modelforge.train.optim.cosin"], "sched._target_", "modelforge.train.optim.cosine"),
        (["+optim.momentum=0.9"], "optim.momentum", None),
        (["+trainer.max_epoch=3"], "trainer.max_epoch", "max_epochs"),
        (["+data.batchsize=3"], "data.batchsize", "batch_size"),
        (["trainer.strategy=dpp"], "trainer.strategy", "ddp"),
        (["trainer.accelerator=cpus"], "trainer.accelerator", "cpu"),
        (["trainer.accelerator=cpu", "trainer.devices=0"], "trainer.devices", None),
        pytest.param(["trainer=ddp", "trainer.accelerator=gpu"], "trainer.accelerator", None,
                     marks=pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")),
    ],
)
def test_bad_input_is_refused_by_the_pre_flight_check(tiny_mnist: Path, overrides: list[str], path: str,
                                                       suggestion: str | None) -> None:
    with pytest.raises(ConfigError) as refused:
        validate_run_config(compose_train(tiny_mnist, *overrides))
    assert refused.value.path == path
    assert refused.value.suggestions == ([suggestion] if suggestion else [])


def test_a_missing_checkpoint_is_refused_by_the_pre_flight_check(tiny_mnist: Path) -> None:
    with pytest.raises(CheckpointError, match=r"^ckpt_path: no checkpoint file at /nonexistent/last.ckpt$"):
        validate_run_config(compose_train(tiny_mnist, "ckpt_path=/nonexistent/last.ckpt"))


def test_a_refused_train_says_why_in_metrics_json_and_trains_nothing(tiny_mnist: Path, tmp_path: Path) -> None:
    # The wording of the messages the table above refuses, as train() raises them and records them.
    for overrides, match in [
        (["optim.lr=-0.1"], r"optim.lr: must be positive, got -0.1"),
        (["optim._target_=torch.optim.Adamm"], r"(?s)optim._target_: cannot import.*did you mean 'torch.optim.Adam'"),
        (["+optim.momentum=0.9"], r"optim.momentum: optim Adam has no option 'momentum'"),
        (["+trainer.max_epoch=3"], r"(?s)trainer.max_epoch: pl.Trainer takes no argument.*did you mean 'max_epochs'"),
        (["+data.batchsize=3"], r"(?s)data.batchsize: data module 'mnist' takes no option.*did you mean 'batch_size'"),
        (["trainer.strategy=dpp"], r"(?s)trainer.strategy: unknown strategy 'dpp'.*did you mean 'ddp'"),
        (["trainer.accelerator=cpu", "trainer.devices=0"],
         r"trainer.devices: 0 refused by Lightning: `Trainer\(devices=0\)` value is not a valid input using cpu "
         r"accelerator"),
    ]:
        run_dir = tmp_path / overrides[-1].replace("/", "_")
        run_dir.mkdir()  # a folder made for the run (as Hydra makes it): metrics.json is written there
        with pytest.raises(ConfigError, match=match):
            train(compose_train(tiny_mnist, *overrides), run_dir=run_dir)
        assert re.search(match, _setup_failure(run_dir)["error"])  # metrics.json says why


def test_checkpoint_of_a_different_model(earlier_run: Path, tiny_mnist: Path, tmp_path: Path) -> None:
    before = _snapshot(earlier_run)
    ckpt = earlier_run / "checkpoints" / "last.ckpt"
    with pytest.raises(CheckpointError, match=r"different model than this config builds \(checkpoint model: mlp"):
        train(compose_train(tiny_mnist, "model=cnn", f"ckpt_path={ckpt}"), run_dir=tmp_path)
    assert _snapshot(earlier_run) == before


def test_reusing_a_run_dir_is_refused_and_leaves_it_alone(earlier_run: Path, tiny_mnist: Path) -> None:
    before = _snapshot(earlier_run)
    with pytest.raises(ConfigError, match=r"already holds a run.*left untouched"):
        train(compose_train(tiny_mnist, "model=mlp"), run_dir=earlier_run)
    assert _snapshot(earlier_run) == before


def test_cli_refuses_a_run_dir_that_holds_a_run_before_hydra_writes_there(run_main, tiny_mnist: Path,
                                                                          tmp_path: Path) -> None:
    run = tmp_path / "run"
    args = ("train", "model=mlp", "model.hidden_sizes=[8]", "trainer.fast_dev_run=true", *tiny_cli_args(tiny_mnist),
            f"hydra.run.dir={run}")
    assert run_main(*args).returncode == 0
    before = _snapshot(run)
    assert (run / ".hydra" / "overrides.yaml") in before
    again = run_main(*args[:-1], "optim.lr=0.5", f"hydra.run.dir={run}")  # other overrides: other .hydra files
    assert again.returncode == 2 and "already holds a run" in again.stderr and "Traceback" not in again.stderr
    assert _snapshot(run) == before


def test_cli_bad_lr_exits_non_zero_without_traceback(run_main, tiny_mnist: Path, tmp_path: Path) -> None:
    result = run_main("train", *tiny_cli_args(tiny_mnist), "optim.lr=-1", f"hydra.run.dir={tmp_path}")
    assert result.returncode == 2
    assert "optim.lr: must be positive, got -1" in result.stderr and "Traceback" not in result.stderr


def test_eval_of_missing_checkpoint(run_main, tmp_path: Path) -> None:
    result = run_main("eval", "ckpt_path=/nonexistent.ckpt", f"hydra.run.dir={tmp_path}")
    assert result.returncode == 2 and "no checkpoint file at /nonexistent.ckpt" in result.stderr


def test_a_malicious_checkpoint_is_refused_without_torchs_advice_to_unpickle_it(tiny_mnist: Path,
                                                                                tmp_path: Path) -> None:
    import os

    class RunsCode:
        def __reduce__(self):
            return (os.system, ("echo pwned",))

    bad = tmp_path / "evil.ckpt"
    torch.save({"state_dict": {}, "payload": RunsCode()}, bad)
    with pytest.raises(CheckpointError) as refused:
        train(compose_train(tiny_mnist, f"ckpt_path={bad}"), run_dir=tmp_path / "run")
    message = str(refused.value)
    assert message == (f"ckpt_path: {bad} is not a loadable checkpoint (weights-only load refused it: "
                       "Trying to load unsupported GLOBAL posix.system whose module posix is blocked)")
    assert "weights_only" not in message and "Re-running" not in message


def test_a_graph_that_does_not_build_is_refused_before_the_run_dir_exists(run_main, tiny_mnist: Path,
                                                                          tmp_path: Path) -> None:
    # The model is built once, while the config is checked: a shape or value problem found by
    # building a graph is bad input like any other, so no run directory is made.
    run = tmp_path / "run"
    result = run_main("train", "model=lstm", "model.params.hidden=-4", *tiny_cli_args(tiny_mnist),
                      f"hydra.run.dir={run}")
    assert result.returncode == 2
    assert result.stderr.strip() == ("error: model.nodes.lstm: node 'lstm' (nn.LSTM): "
                                     "hidden_size must be greater than zero")
    assert not run.exists()
