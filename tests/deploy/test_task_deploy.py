"""Every task beyond classification through the deploy surfaces, as a user runs them on a tiny trained run:
``eval`` reports the task's main metric, ``export`` writes a file its numeric check passes, ``predict`` gives the
same answers from the file as from the checkpoint, and ``load_model`` gives the task's output shape."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from modelforge import load_model
from modelforge.train import train
from tests.train.conftest import compose_train

SMALL = ["data.n_train=80", "data.n_test=32", "data.val_size=16", "data.batch_size=16", "trainer.max_epochs=1"]
TASKS = {"segment": ("model=unet", "enc_sizes=[4,8]"), "reconstruct": ("model=autoencoder",),
         "multilabel": ("model=cnn", "enc_sizes=[4]", "dec_sizes=[8]"),
         "regress": ("model=cnn", "enc_sizes=[4]", "dec_sizes=[8]")}
MAIN = {"segment": "test/iou", "reconstruct": "test/psnr", "multilabel": "test/f1", "regress": "test/mae"}
OUTPUT = {"segment": (11, 56, 56), "reconstruct": (1, 28, 28), "multilabel": (10,), "regress": (1,)}


@pytest.fixture(scope="module")
def runs(tiny_mnist: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    made = {}
    for task, args in TASKS.items():
        made[task] = tmp_path_factory.mktemp(task)
        train(compose_train(tiny_mnist, f"task={task}", *args, *SMALL), run_dir=made[task])
    return made


@pytest.fixture(scope="module")
def images(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("images")
    for name, side in (("a.png", 56), ("b.png", 28)):
        Image.fromarray((np.arange(side * side) * 7 % 256).astype(np.uint8).reshape(side, side)).save(folder / name)
    return folder


@pytest.mark.parametrize("task", list(TASKS))
def test_eval_export_predict_and_load_serve_the_task(runs: dict[str, Path], images: Path, tmp_path: Path,
                                                     run_main, task: str) -> None:
    run = runs[task]
    evaluated = run_main("eval", f"ckpt_path={run}", f"hydra.run.dir={tmp_path / 'eval'}")
    assert evaluated.returncode == 0, evaluated.stderr
    recorded = json.loads((run / "metrics.json").read_text())
    assert json.loads((tmp_path / "eval" / "eval_metrics.json").read_text())[MAIN[task]] == pytest.approx(
        recorded[MAIN[task]], abs=1e-6)  # the same checkpoint on the same test data

    exported = run_main("export", f"ckpt_path={run}", "format=torchscript", f"output={tmp_path}/")
    assert exported.returncode == 0, exported.stderr
    check = json.loads(next(tmp_path.glob("*.check.json")).read_text())
    assert check["passed"] and check["max_abs_diff"] <= 1e-4
    assert (check["top1_agreement"] == 1.0) if task == "segment" else check["top1_agreement"] is None

    rows, pictures = [], []
    for source in (run, next(tmp_path.glob("*.pt"))):
        out = tmp_path / f"pred_{Path(source).suffix or 'run'}"
        result = run_main("predict", f"ckpt_path={source}", f"inputs={images}", f"output={out}/")
        assert result.returncode == 0, result.stderr
        with open(out / "predictions.csv", newline="") as f:  # the files it wrote named relative to its output
            rows.append([{k: v.replace(str(out), "OUT") for k, v in row.items()} for row in csv.DictReader(f)])
        pictures.append({str(f.relative_to(out)): np.array(Image.open(f)) for f in sorted(out.rglob("*.png"))})
    assert len(rows[0]) == 2 and rows[0] == rows[1]
    assert pictures[0].keys() == pictures[1].keys() and all(  # masks, overlays, images: within a rounding
        np.abs(a.astype(int) - pictures[1][name].astype(int)).max() <= 1 for name, a in pictures[0].items())

    model = load_model(run)
    assert tuple(model(torch.zeros(2, *model.input_shape)).shape) == (2, *OUTPUT[task])
