"""A ``data=image_folder`` run deployed: ``export`` checks the file on the run's own images (its held-out split, read
with its resize, crop and normalization), and ``predict`` prepares every kind of input as the run's validation
read its files: image files in colour, IDX images and tensors as files holding their pixels would be."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from hydra import compose, initialize_config_dir
from PIL import Image

from modelforge.config import conf_dir
from modelforge.data.build import build_datamodule
from modelforge.deploy import export as exporting
from modelforge.deploy.export import check_export, export
from modelforge.deploy.images import read_idx_images
from modelforge.deploy.load import load_model
from modelforge.deploy.predict import as_input_images, classify, predict
from modelforge.deploy.runtime import open_model
from modelforge.errors import DataError
from modelforge.train import train
from tests.helpers.image_folder import write_image_folder
from tests.helpers.mnist_idx import write_mnist_idx

QUICK = ["data.image_size=32", "data.resize_size=36", "data.num_workers=0", "data.batch_size=16",
         "trainer.accelerator=cpu", "trainer.enable_progress_bar=false", "trainer.enable_model_summary=false",
         "curves=false", "model=cnn", "model.enc_sizes=[8]", "model.dec_sizes=[16]", "trainer.max_epochs=2"]


def train_on_folder(root: Path, run_dir: Path, *overrides: str) -> Path:
    with initialize_config_dir(config_dir=str(conf_dir()), version_base="1.3"):
        cfg = compose("train", overrides=["data=image_folder", f"data.root={root}", *QUICK, *overrides])
    train(cfg, run_dir=run_dir)
    return run_dir


@pytest.fixture(scope="module")
def folder_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A cnn trained on 3 classes of 8 colour PNGs (40x32; 6 train, 2 held out for validation and test each)."""
    root = tmp_path_factory.mktemp("pictures")
    write_image_folder(root, n_classes=3, per_class=8)
    return root, train_on_folder(root, tmp_path_factory.mktemp("folder_run") / "run", "data.val_size=0.25")


def test_export_checks_the_file_on_the_run_s_own_held_out_images(folder_run, tmp_path: Path) -> None:
    root, run = folder_run
    path = export(run, "pt2", tmp_path / "m.pt2")
    report = json.loads((tmp_path / "m.pt2.check.json").read_text())
    assert report["passed"] and report["images"] == f"6 val images of {root}" and report["n_images"] == 6
    # The very images and preprocessing the run tested on: the eager model's accuracy there is the run's test/acc.
    metrics = json.loads((run / "metrics.json").read_text())
    assert report["eager_top1_acc"] == pytest.approx(metrics["test/acc"], abs=1e-6)
    assert report["exported_top1_acc"] == report["eager_top1_acc"]
    assert open_model(path).meta["preprocess"]["image_size"] == 32


def test_a_moved_image_folder_is_named_and_data_dir_points_the_check_at_it(folder_run, tmp_path: Path) -> None:
    root, run = folder_run
    moved_run = shutil.copytree(run, tmp_path / "run")
    ckpt = moved_run / "checkpoints" / "last.ckpt"
    model = load_model(ckpt)
    model.data_config = {**model.data_config, "root": str(tmp_path / "gone")}  # as a run whose folder was moved
    path = export(model, "pt2", tmp_path / "m.pt2", check=False)
    with pytest.raises(DataError, match=r"^the check runs the exported model on the run's own images: data\.root: no "
                                        r"folder .*gone; give the image folder with data_dir=DIR, or skip the check "
                                        r"with check=false$"):
        check_export(model, path, "pt2")
    report = check_export(model, path, "pt2", data_dir=shutil.copytree(root, tmp_path / "copy"))
    assert report["passed"] and report["images"] == f"6 val images of {tmp_path / 'copy'}"


def test_a_test_folder_is_what_the_check_runs_on_spread_over_its_classes(tmp_path: Path) -> None:
    root = tmp_path / "split"
    for split, per_class in (("train", 4), ("val", 2), ("test", 5)):
        write_image_folder(root / split, n_classes=3, per_class=per_class, seed=len(split))
    run = train_on_folder(root, tmp_path / "run", "trainer.max_epochs=1")
    export(run, "pt2", tmp_path / "m.pt2", n_images=6)
    report = json.loads((tmp_path / "m.pt2.check.json").read_text())
    assert report["passed"] and report["images"] == f"6 test images of {root}"
    images, labels, _ = exporting.check_images(load_model(run).modelforge_meta, None, 6,
                                               data_config=load_model(run).data_config)
    assert labels.tolist() == [0, 0, 1, 1, 2, 2] and images.shape == (6, 3, 32, 32)  # every class, not the first


def test_a_check_tolerates_rounding_that_grows_with_the_logits(folder_run, monkeypatch, tmp_path: Path) -> None:
    """Logits of 10^4 (a model trained for a few steps from scratch) differ between batch sizes by 10^-3 in float32:
    the file computes what the model computes. ``rtol`` is torch.allclose's: the tolerance grows with the logit."""
    _, run = folder_run
    model = load_model(run)
    with torch.no_grad():
        for parameter in model.decoder[-1].parameters():
            parameter.mul_(1e4)
    path = export(model, "pt2", tmp_path / "m.pt2", check=False)
    runner = open_model(path)
    monkeypatch.setattr(exporting, "open_model", lambda p: (lambda x, chunk: runner(x, chunk) * (1 + 3e-7)))
    report = check_export(model, path, "pt2")
    assert report["passed"] and report["max_abs_diff"] > 1e-4 and report["rtol"] == 1e-5
    with pytest.raises(Exception, match="does not compute what the model computes"):
        check_export(model, path, "pt2", rtol=0.0)


def _as_run_read(pixels: np.ndarray, path: Path, model_path: Path) -> torch.Tensor:
    """The batch predict makes of the image file ``path`` holding ``pixels``."""
    Image.fromarray(pixels).save(path)
    return _batch(model_path, [path])


def _batch(model_path: Path, inputs) -> torch.Tensor:
    seen = []
    runner = open_model(model_path)
    forward = runner.forward

    def recording(batch: torch.Tensor) -> torch.Tensor:
        seen.append(batch.clone())
        return forward(batch)

    runner.forward = recording
    classify(runner, as_input_images(inputs))
    return torch.cat(seen)


def test_idx_images_and_gray_tensors_go_as_gray_files_would(folder_run, tmp_path: Path) -> None:
    """An image-folder model in colour: gray pixels (an IDX file, a tensor) become the batch a gray PNG of those
    pixels becomes (its channel repeated), never MNIST's path (Lanczos, padding, inversion, one mean and std)."""
    _, run = folder_run
    write_mnist_idx(tmp_path, n_train=1, n_test=3, gz=False)
    idx = tmp_path / "t10k-images-idx3-ubyte"
    digits = [image.pixels.numpy() for image in read_idx_images(idx)]
    light = np.full((28, 28), 250, np.uint8)  # MNIST's path would invert it (invert=auto)
    from_files = torch.cat([_as_run_read(pixels, tmp_path / f"{i}.png", run) for i, pixels in enumerate([*digits, light])])
    from_idx = _batch(run, [idx])
    from_tensor = _batch(run, torch.from_numpy(light))
    assert from_idx.shape == (3, 3, 32, 32)
    assert torch.equal(from_idx, from_files[:3]) and torch.equal(from_tensor, from_files[3:])
    rows = predict(run, torch.from_numpy(light))
    assert rows[0]["inverted"] is False and rows[0]["class_1"] in ("class_a", "class_b", "class_c")


def test_a_colour_tensor_is_read_as_a_colour_file(folder_run, tmp_path: Path) -> None:
    _, run = folder_run
    rgb = np.random.default_rng(0).integers(0, 256, (2, 30, 44, 3), dtype=np.uint8)
    from_files = torch.cat([_as_run_read(image, tmp_path / f"{i}.png", run) for i, image in enumerate(rgb)])
    from_tensor = _batch(run, torch.from_numpy(rgb).permute(0, 3, 1, 2))
    assert torch.equal(from_tensor, from_files)
    inverted = _batch_with(run, torch.from_numpy(rgb).permute(0, 3, 1, 2), invert=True)
    assert torch.equal(inverted, _batch(run, torch.from_numpy(255 - rgb).permute(0, 3, 1, 2)))


def _batch_with(model_path: Path, inputs, invert) -> torch.Tensor:
    runner = open_model(model_path)
    seen = []
    forward = runner.forward
    runner.forward = lambda batch: (seen.append(batch.clone()), forward(batch))[1]
    rows = classify(runner, as_input_images(inputs), invert=invert)
    assert all(row["inverted"] is bool(invert is True) for row in rows)
    return torch.cat(seen)


def test_idx_labels_are_compared_only_where_a_class_folder_bears_the_number(folder_run, tmp_path: Path,
                                                                             caplog) -> None:
    _, run = folder_run
    write_mnist_idx(tmp_path, n_train=1, n_test=3, gz=False)
    rows = predict(run, tmp_path / "t10k-images-idx3-ubyte")
    assert all("label" not in row for row in rows)  # the digits' numbers are not class_a, class_b, class_c
    assert "the labels of the IDX inputs are class numbers, and this model's classes are its class folders " \
           "(class_a, class_b, class_c): the labels are not compared" in caplog.text


def test_a_tensor_whose_channels_cannot_be_images_is_refused(folder_run) -> None:
    _, run = folder_run
    with pytest.raises(DataError, match=r"^inputs: a tensor of images must be uint8 \[H, W\] or \[N, H, W\] \(gray\), "
                                        r"or \[N, C, H, W\] with C 1 \(gray\) or 3 \(RGB\), got torch\.uint8 "
                                        r"\[2, 4, 28, 28\]$"):
        predict(run, torch.zeros(2, 4, 28, 28, dtype=torch.uint8))


def test_a_gray_model_reads_a_colour_tensor_as_a_colour_file(tmp_path: Path) -> None:
    """An MNIST model: a colour tensor goes gray as a colour PNG does (Pillow's convert to L)."""
    write_mnist_idx(tmp_path / "data", n_train=64, n_test=16)
    from tests.helpers.small_runs import train_small_cnn

    run = train_small_cnn(tmp_path / "data", tmp_path / "run")
    rgb = np.random.default_rng(1).integers(0, 256, (2, 28, 28, 3), dtype=np.uint8)
    for i, image in enumerate(rgb):
        Image.fromarray(image).save(tmp_path / f"{i}.png")
    files = predict(run, [tmp_path / "0.png", tmp_path / "1.png"])
    tensor = predict(run, torch.from_numpy(rgb).permute(0, 3, 1, 2))
    assert [(r["class_1"], r["prob_1"], r["inverted"]) for r in tensor] == \
        [(r["class_1"], r["prob_1"], r["inverted"]) for r in files]


def test_an_image_folder_datamodule_and_the_metadata_agree_on_the_batch(folder_run) -> None:
    """What predict makes of the run's own validation files is what its validation loader gave."""
    root, run = folder_run
    model = load_model(run)
    datamodule = build_datamodule(model.data_config)
    datamodule.setup("validate")
    images, _ = next(iter(datamodule.val_dataloader()))
    paths = [path for path, _ in datamodule.val_set.items]
    assert torch.equal(_batch(run, paths), images)
