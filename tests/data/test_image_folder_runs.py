"""Runs on data=image_folder through the CLI (issue 41): training, the class names in the run, predict naming them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import yaml

from modelforge.data.build import build_datamodule
from tests.helpers.image_folder import write_image_folder

QUICK = ["data.image_size=32", "data.resize_size=36", "data.num_workers=0", "data.batch_size=16",
         "trainer.accelerator=cpu", "trainer.enable_progress_bar=false", "trainer.enable_model_summary=false",
         "curves=false"]


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    root = tmp_path_factory.mktemp("pictures")
    return root, write_image_folder(root, n_classes=10, per_class=4, size=(36, 32))


@pytest.mark.parametrize("model", [
    pytest.param(["model=cnn", "model.enc_sizes=[8,16]", "model.dec_sizes=[16]"], id="cnn"),
    pytest.param(["model=resnet18"], id="resnet18", marks=pytest.mark.slow),  # 11M parameters: slow on 2 cores
])
def test_a_model_trains_on_an_image_folder_and_predict_names_its_classes(model: list[str], run_main, folder,
                                                                         tmp_path: Path) -> None:
    root, names = folder
    run_dir = tmp_path / "run"
    result = run_main("train", "data=image_folder", f"data.root={root}", *model, "trainer.max_epochs=1", *QUICK,
                      f"hydra.run.dir={run_dir}")
    assert result.returncode == 0, result.stderr
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["status"] == "finished" and metrics["data"]["classes"] == names
    assert metrics["data"]["splits"] == {"train": 30, "val": 10} and metrics["data"]["input_shape"] == [3, 32, 32]
    stored = yaml.safe_load((run_dir / "config.yaml").read_text())["data"]
    assert stored["classes"] == names
    ckpt = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=True)
    assert ckpt["hyper_parameters"]["config"]["data"]["classes"] == names
    assert build_datamodule(stored).class_names == tuple(names)  # what eval's confusion matrix is labelled with

    result = run_main("predict", f"ckpt_path={run_dir}", f"inputs={root / 'class_c'}", f"output={tmp_path / 'p.csv'}")
    assert result.returncode == 0, result.stderr
    rows = [line.split() for line in result.stdout.splitlines() if line.startswith(str(root))]
    assert len(rows) == 4 and all(row[2] in names for row in rows)  # input, inverted, then the top class by name
    assert (tmp_path / "p.csv").read_text().splitlines()[1].split(",")[2] in names
