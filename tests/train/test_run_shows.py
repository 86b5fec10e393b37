"""What a run shows of what it did: optimizer groups and weight averaging in its log and metrics.json, one epoch
numbering (lines, bar, checkpoint names), SWA's extra pass, progress lines of short epochs, one early-stop reason,
rank 0's lines under DDP. Real Trainer runs on tiny IDX data."""

from __future__ import annotations

import csv
import json
import logging
from pathlib import Path
from types import SimpleNamespace

import pytest

from modelforge.errors import ConfigError
from modelforge.report.console import quiet_third_party
from modelforge.report.progress import LineProgress
from modelforge.train import train
from modelforge.train.launch import global_rank
from modelforge.train.run_config import validate_run_config
from tests.helpers.run_config import compose_train

SMALL = ("model=cnn", "enc_sizes=[8,16]", "dec_sizes=[32]")


def _header(run_dir: Path) -> list[str]:
    return next(csv.reader((run_dir / "logs" / "metrics.csv").read_text().splitlines()))


def test_param_groups_and_ema_are_logged_named_by_glob_and_recorded(tiny_mnist: Path, tmp_path: Path,
                                                                     caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    train(compose_train(tiny_mnist, *SMALL, "optim.param_groups={encoder.*:{lr_mult:0.1}}", "optim.lr=1e-2",
                        "callbacks=[ema]", "callbacks.ema.decay=0.9", "trainer.max_epochs=1"), run_dir=tmp_path)
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    groups = {g["name"]: g for g in metrics["param_groups"]}
    assert list(groups) == ["encoder.*", "other"]
    assert groups["encoder.*"]["lr"] == pytest.approx(1e-3) and groups["encoder.*"]["lr_mult"] == 0.1
    assert groups["encoder.*"]["params"] == 8 * 9 + 8 + 8 + 8 + 16 * 8 * 9 + 16 + 16 + 16  # convs and their norms
    assert groups["encoder.*"]["params"] + groups["other"]["params"] == metrics["params"]
    assert metrics["averaging"] == {"ema": {"kind": "EMA", "decay": 0.9, "update_starting_at_step": None,
                                            "update_starting_at_epoch": None}}
    assert "optimizer groups: encoder.* lr 0.001 (lr_mult 0.1) weight_decay 0: 8 tensors" in caplog.text
    assert "callbacks.ema: the weights' exponential moving average (decay 0.9: about the last 10 steps)" in caplog.text
    header = _header(tmp_path)
    assert {"lr-Adam/encoder.*", "lr-Adam/other"} <= set(header) and not [h for h in header if "/pg" in h]


def test_one_group_keeps_lightnings_plain_lr_column(tiny_mnist: Path, tmp_path: Path) -> None:
    train(compose_train(tiny_mnist, "model=mlp", "model.hidden_sizes=[16]", "trainer.max_epochs=1"), run_dir=tmp_path)
    assert "lr-Adam" in _header(tmp_path) and "param_groups" not in json.loads((tmp_path / "metrics.json").read_text())


def test_a_param_group_of_frozen_parameters_says_they_are_frozen(tiny_mnist: Path) -> None:
    cfg = compose_train(tiny_mnist, *SMALL, "freeze=[encoder.*]", "optim.param_groups={encoder.*:{lr_mult:0.1}}")
    with pytest.raises(ConfigError, match=r"^optim.param_groups.encoder.\*: matches only frozen parameters \(8 tensors: "
                                          r"encoder.0.conv.weight, .*\): freeze keeps them as they are.*\n"
                                          r"  hint: leave encoder.\* out of optim.param_groups, or out of freeze"):
        validate_run_config(cfg)


def test_swa_on_a_fresh_run_counts_the_epochs_it_trains(tiny_mnist: Path, tmp_path: Path, recwarn,
                                                         caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    train(compose_train(tiny_mnist, *SMALL, "callbacks=[swa]", "callbacks.swa.swa_lrs=1e-3", "trainer.max_epochs=2",
                        "trainer.enable_progress_bar=true"), run_dir=tmp_path)
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert metrics["epochs"] == 2 and metrics["epochs_this_run"] == 2  # not the batch-norm pass SWA adds
    assert metrics["averaging"]["swa"]["swa_epoch_start"] == 1 and metrics["averaging"]["swa"]["batch_norm_pass"]
    assert "resuming at step" not in caplog.text  # SWA's pass takes no step: the schedule's plan holds
    done = [r.getMessage().split(" done")[0] for r in caplog.records if " done in " in r.getMessage()]
    assert done == ["epoch 1/2", "epoch 2/2", "swa batch-norm pass"]
    assert "callbacks.swa: the weights averaged from epoch 1 of 2, the lr going to 0.001 (swa_lrs)" in caplog.text
    assert not [w for w in recwarn if "SWA is currently only supported every epoch" in str(w.message)]
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir())[-1] == "last.ckpt"
    assert {p.name for p in (tmp_path / "checkpoints").glob("best-*")} <= {"best-epoch01.ckpt", "best-epoch02.ckpt"}


def test_checkpoint_names_count_epochs_as_the_lines_do(tiny_mnist: Path, tmp_path: Path) -> None:
    # monitor val/loss on a model that learns: the second epoch is the best one, "epoch 2/2".
    train(compose_train(tiny_mnist, "model=mlp", "model.hidden_sizes=[16]", "monitor=val/loss", "sched=none",
                        "optim.lr=1e-3", "trainer.max_epochs=2"), run_dir=tmp_path)
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert Path(metrics["best_ckpt"]).name == "best-epoch02.ckpt"


def test_the_terminal_bar_counts_epochs_from_1() -> None:
    pytest.importorskip("rich")
    from modelforge.report.progress import RichBar

    bar = RichBar()
    bar._trainer = SimpleNamespace(current_epoch=0, max_epochs=3, callbacks=[])
    assert bar._get_train_description(0).strip() == "Epoch 1/3"  # Lightning's own: "Epoch 0/2"


@pytest.mark.filterwarnings("ignore:You defined a `validation_step`")  # LitTiny, fitted without validation data
def test_a_short_epoch_is_not_a_line_per_step(caplog: pytest.LogCaptureFixture) -> None:
    import pytorch_lightning as pl
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    from tests.helpers.lit_tiny import LitTiny

    data = TensorDataset(torch.randn(20, 1, 8, 8), torch.randint(0, 10, (20,)))
    trainer = pl.Trainer(callbacks=[LineProgress()], max_epochs=1, accelerator="cpu", logger=False,
                         enable_checkpointing=False, enable_model_summary=False)
    with caplog.at_level("INFO", logger="modelforge.report.progress"):
        trainer.fit(LitTiny(), DataLoader(data, batch_size=1))  # 20 steps: 1/20 of it would be every step
    steps = [r.getMessage().split("  ")[1] for r in caplog.records if "  step " in r.getMessage()]
    assert steps == ["step 5/20", "step 10/20", "step 15/20"]


def test_the_early_stopping_reason_is_said_once(tiny_mnist: Path, tmp_path: Path,
                                                caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    train(compose_train(tiny_mnist, "callbacks=[early_stopping]", "callbacks.early_stopping.patience=1",
                        "trainer.max_epochs=20", "trainer.limit_train_batches=2", "model=mlp", "model.hidden_sizes=[16]",
                        "optim.lr=1e-9", "sched=none"), run_dir=tmp_path)
    assert caplog.text.count("did not improve") == 1
    assert "early stopping: stopped after epoch 2 of at most 20: Monitored metric val/acc did not improve in the last " \
           "1 records. Best score: " in caplog.text
    assert "Signaling Trainer" not in json.loads((tmp_path / "metrics.json").read_text())["stopped_early_reason"]
    assert "Metric val/acc improved" in caplog.text  # Lightning's other verbose lines stay


def test_on_a_ddp_rank_other_than_0_the_console_shows_warnings_only(monkeypatch: pytest.MonkeyPatch,
                                                                   tmp_path: Path) -> None:
    root = logging.getLogger()
    console, own_file = logging.StreamHandler(), logging.FileHandler(tmp_path / "rank1.log")
    seen: list[str] = []
    console.emit = lambda record: seen.append(record.getMessage())  # type: ignore[method-assign]
    monkeypatch.setattr(root, "handlers", [console, own_file])
    monkeypatch.setenv("LOCAL_RANK", "1")  # a rank Lightning's launcher started
    quiet_third_party(global_rank())
    log = logging.getLogger("modelforge.train.run")
    monkeypatch.setattr(log, "level", logging.INFO)
    log.info("model cnn (CNN): ...")
    log.warning("a rank's own warning")
    own_file.close()
    assert seen == ["a rank's own warning"]
    assert "model cnn" in (tmp_path / "rank1.log").read_text()  # the rank's own log file keeps everything


def test_lightnings_initializing_distributed_stays_in_the_log_file(monkeypatch: pytest.MonkeyPatch,
                                                                    tmp_path: Path) -> None:
    root = logging.getLogger()
    console, own_file = logging.StreamHandler(), logging.FileHandler(tmp_path / "train.log")
    seen: list[str] = []
    console.emit = lambda record: seen.append(record.getMessage())  # type: ignore[method-assign]
    monkeypatch.setattr(root, "handlers", [console, own_file])
    monkeypatch.delenv("LOCAL_RANK", raising=False)  # rank 0
    quiet_third_party(global_rank())
    log = logging.getLogger("lightning_fabric.utilities.distributed")
    monkeypatch.setattr(log, "level", logging.INFO)
    log.info("Initializing distributed: GLOBAL_RANK: 0, MEMBER: 1/2")
    logging.getLogger("modelforge.train.run").warning("rank 0's own line")
    own_file.close()
    assert seen == ["rank 0's own line"]
    assert "GLOBAL_RANK: 0, MEMBER: 1/2" in (tmp_path / "train.log").read_text()
