"""Tasks beyond classification: each trains for real on tiny MNIST-derived data and records its main metric;
a model or data that cannot serve a task is refused by the checker, naming the node, the shapes or the file; and
the deploy surfaces (eval, export, predict, load_model) serve each task's run."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from hydra import compose, initialize_config_dir

from modelforge import load_model
from modelforge.config import conf_dir
from modelforge.errors import ConfigError, DataError
from modelforge.train import train
from modelforge.train.run_config import validate_run_config
from modelforge.tasks import Task, build_task
from tests.train.conftest import compose_train

# Derived sets small enough for a test: 80 samples made from the training images (16 held out), 32 for test.
SMALL = ["data.n_train=80", "data.n_test=32", "data.val_size=16", "data.batch_size=16", "trainer.max_epochs=1"]
# Each task's model, as small as it trains (one run per task, shared by the module's tests), and its main metric.
MAIN = {"segment": (("model=unet", "enc_sizes=[4,8]"), "test/iou"),
        "reconstruct": (("model=autoencoder",), "test/psnr"),
        "multilabel": (("model=cnn", "enc_sizes=[4]", "dec_sizes=[8]"), "test/f1"),
        "regress": (("model=cnn", "enc_sizes=[4]", "dec_sizes=[8]"), "test/mae")}
OUTPUT = {"segment": (11, 56, 56), "reconstruct": (1, 28, 28), "multilabel": (10,), "regress": (1,)}


def test_classify_yaml_is_the_task_default(tiny_mnist: Path) -> None:
    cfg = compose_train(tiny_mnist)
    assert build_task(cfg.task) == Task() and cfg.monitor == "val/acc"


@pytest.fixture(scope="module")
def task_runs(tiny_mnist: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    runs = {}
    for task, (model, _) in MAIN.items():
        runs[task] = tmp_path_factory.mktemp(task)
        train(compose_train(tiny_mnist, f"task={task}", *model, *SMALL),
              run_dir=runs[task])
    return runs


@pytest.mark.parametrize("task", list(MAIN))
def test_each_task_records_its_main_metric(task_runs: dict[str, Path], task: str) -> None:
    metrics = json.loads((task_runs[task] / "metrics.json").read_text())
    main = MAIN[task][1]
    assert metrics["status"] == "finished" and metrics["monitor"] == main.replace("test/", "val/")
    value = metrics[main]
    bounds = {"test/iou": (0.0, 1.0), "test/psnr": (0.0, 60.0), "test/f1": (0.0, 1.0), "test/mae": (0.0, 36.0)}[main]
    assert bounds[0] <= value <= bounds[1] and f"best_{main.replace('test/', 'val/')}" in metrics
    # in place of a classifier's confusion matrix, the run draws a grid of inputs, targets and outputs
    assert metrics["samples"] == str(task_runs[task] / "samples.png") and Path(metrics["samples"]).stat().st_size > 0


def test_predict_writes_a_mask_per_image_at_its_size(task_runs: dict[str, Path], tmp_path: Path, run_main) -> None:
    inputs = tmp_path / "in"
    inputs.mkdir()
    sizes = {"a.png": (56, 56), "b.png": (100, 70)}  # (width, height): b is resized in and its mask back out
    for name, size in sizes.items():
        pixels = (np.arange(size[0] * size[1]) % 256).astype(np.uint8).reshape(size[1], size[0])
        Image.fromarray(pixels).save(inputs / name)
    result = run_main("predict", f"ckpt_path={task_runs['segment']}", f"inputs={inputs}", f"output={tmp_path / 'out'}/")
    assert result.returncode == 0, result.stderr
    for name, size in sizes.items():
        mask = Image.open(tmp_path / "out" / "masks" / name)
        assert mask.mode == "P" and mask.size == size and int(np.array(mask).max()) <= 10
        assert Image.open(tmp_path / "out" / "overlays" / name).size == size
    assert "mask" in (tmp_path / "out" / "predictions.csv").read_text().splitlines()[0]


def test_a_classifier_head_is_refused_for_segmentation(tiny_mnist: Path) -> None:
    with pytest.raises(ConfigError, match=r"gives \[B, 11\], but task 'segment' .* needs \[B, 11, 56, 56\]"):
        validate_run_config(compose_train(tiny_mnist, "task=segment", "model=cnn", *SMALL))


def test_a_unet_mirrors_any_encoder_list(tiny_mnist: Path) -> None:
    run = validate_run_config(compose_train(tiny_mnist, "task=segment", "model=unet", "enc_sizes=[8,16,32]", *SMALL))
    out = run.network(torch.zeros(2, 1, 56, 56))
    assert out.shape == (2, 11, 56, 56)
    convs = [m.out_channels for m in run.network.modules() if isinstance(m, torch.nn.ConvTranspose2d)]
    assert convs == [16, 8]  # the decoder's upsampling, deepest last in module order: 32 -> 16, 16 -> 8


def test_data_of_another_task_is_refused(tiny_mnist: Path) -> None:
    with pytest.raises(ConfigError, match="task 'segment' learns a class index per pixel, but data 'mnist' gives"):
        validate_run_config(compose_train(tiny_mnist, "task=segment", "model=unet", "data=mnist"))


def _compose_own(*overrides: str):
    """A train config on a user's folder (no IDX data options)."""
    with initialize_config_dir(config_dir=str(conf_dir()), version_base="1.3"):
        return compose("train", overrides=["trainer.accelerator=cpu", "curves=false", *overrides])


def _segment_folder(root: Path, n: int = 12) -> Path:
    (root / "images").mkdir(parents=True)
    (root / "masks").mkdir()
    rng = np.random.default_rng(0)
    for i in range(n):
        image = (rng.random((16, 16)) * 255).astype(np.uint8)
        Image.fromarray(image).save(root / "images" / f"{i:02d}.png")
        mask = Image.fromarray((image > 127).astype(np.uint8), "P")
        mask.putpalette([0, 0, 0, 255, 0, 0] * 128)
        mask.save(root / "masks" / f"{i:02d}.png")
    return root


def _check_folder(root: Path, *overrides: str) -> None:
    validate_run_config(_compose_own("task=segment", "model=unet", "data=segment_folder", f"data.root={root}",
                                     "enc_sizes=[4,8]", *overrides))


def test_a_segmentation_folder_reads_palette_masks(tmp_path: Path) -> None:
    root = _segment_folder(tmp_path / "seg")
    run = validate_run_config(_compose_own("task=segment", "model=unet", "data=segment_folder", f"data.root={root}",
                                           "enc_sizes=[4,8]"))
    assert run.datamodule.n_classes == 2 and run.network.output_shape == (2, 16, 16)


@pytest.mark.parametrize("damage, message", [
    ("size", r"masks/03.png: the mask is 15x16 pixels, but its image is 16x16"),
    ("missing", r"images/03.png: no mask .*masks/03.png"),
    ("range", r"masks/03.png: class index 7 is out of range: data.n_classes is 3"),
])
def test_bad_masks_are_refused_naming_the_file(tmp_path: Path, damage: str, message: str) -> None:
    root = _segment_folder(tmp_path / "seg")
    mask = root / "masks" / "03.png"
    if damage == "size":
        Image.new("P", (15, 16)).save(mask)
    elif damage == "missing":
        mask.unlink()
    else:
        Image.fromarray(np.full((16, 16), 7, dtype=np.uint8), "L").save(mask)
        Image.fromarray(np.full((16, 16), 2, dtype=np.uint8), "L").save(root / "masks" / "00.png")
    with pytest.raises(DataError, match=message):
        _check_folder(root, *(["data.n_classes=3"] if damage == "range" else []))


@pytest.mark.parametrize("row, message", [("b.png,x", r"targets.csv:3: 'x' is not a number"),
                                          ("gone.png,1", r"targets.csv:3: no file .*gone.png")])
def test_bad_table_rows_are_refused_naming_the_file(tmp_path: Path, row: str, message: str) -> None:
    for name in ("a.png", "b.png"):
        Image.new("L", (28, 28)).save(tmp_path / name)
    (tmp_path / "targets.csv").write_text(f"file,sum\na.png,3\n{row}\n")
    with pytest.raises(DataError, match=message):
        validate_run_config(_compose_own("task=regress", "data=image_table", f"data.root={tmp_path}"))


def test_a_segmentation_resumed_mid_epoch_equals_never_stopping(tiny_mnist: Path, tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.helpers.resume import last_checkpoint as _last, stopped_by_sigterm_at as _stopped_by_sigterm_at

    args = ("task=segment", "model=unet", "enc_sizes=[4,8]", *SMALL, "trainer.max_epochs=2", "seed=3",
            "trainer.deterministic=true")  # 64 training samples, 16 a batch: 4 steps an epoch
    train(compose_train(tiny_mnist, *args), run_dir=tmp_path / "one_go")
    ckpt = _stopped_by_sigterm_at(6, compose_train(tiny_mnist, *args), tmp_path / "first", monkeypatch)
    train(compose_train(tiny_mnist, *args, f"ckpt_path={ckpt}"), run_dir=tmp_path / "resumed")
    one_go, resumed = _last(tmp_path / "one_go")["state_dict"], _last(tmp_path / "resumed")["state_dict"]
    assert [k for k in one_go if not torch.equal(one_go[k], resumed[k])] == []
    ma, mb = (json.loads((tmp_path / run / "metrics.json").read_text()) for run in ("one_go", "resumed"))
    compared = ("val/iou", "val/loss", "test/iou", "test/dice", "global_step")
    assert {k: ma[k] for k in compared} == {k: mb[k] for k in compared}


@pytest.fixture(scope="module")
def images(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("images")
    for name, side in (("a.png", 56), ("b.png", 28)):
        Image.fromarray((np.arange(side * side) * 7 % 256).astype(np.uint8).reshape(side, side)).save(folder / name)
    return folder


@pytest.mark.parametrize("task", list(MAIN))
def test_eval_export_predict_and_load_serve_the_task(task_runs: dict[str, Path], images: Path, tmp_path: Path,
                                                     run_main, task: str) -> None:
    run = task_runs[task]
    evaluated = run_main("eval", f"ckpt_path={run}", f"hydra.run.dir={tmp_path / 'eval'}")
    assert evaluated.returncode == 0, evaluated.stderr
    recorded = json.loads((run / "metrics.json").read_text())
    assert json.loads((tmp_path / "eval" / "eval_metrics.json").read_text())[MAIN[task][1]] == pytest.approx(
        recorded[MAIN[task][1]], abs=1e-6)  # the same checkpoint on the same test data

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
