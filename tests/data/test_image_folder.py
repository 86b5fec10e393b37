"""data=image_folder (issue 41): class folders of real PNG files, found, split, decoded and served."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from modelforge import ConfigError, DataError
from modelforge.data.build import build_datamodule
from modelforge.data.image_files import index_image_folder
from modelforge.data.image_transforms import ImageFiles, ImagePipeline, random_crop_box
from tests.helpers.image_folder import write_image_folder


def _index(root: Path, classes=None, val_size: float = 0.2, test_size: float = 0.0, seed: int = 0):
    return index_image_folder(root, classes, val_size, test_size, seed)


def test_one_folder_of_classes_is_split_seeded_and_stratified(tmp_path: Path) -> None:
    names = write_image_folder(tmp_path, n_classes=3, per_class=10)
    index = _index(tmp_path, val_size=0.2, test_size=0.1)
    assert index.classes == tuple(names) and index.given == ()
    assert index.sizes() == {"train": 21, "val": 6, "test": 3}
    for split, per_class in (("train", 7), ("val", 2), ("test", 1)):  # each class in the same proportions
        assert [label for _, label in index.splits[split]].count(2) == per_class
    every = [path for items in index.splits.values() for path, _ in items]
    assert len(every) == len(set(every)) == 30
    assert _index(tmp_path, val_size=0.2, test_size=0.1).splits == index.splits
    assert _index(tmp_path, val_size=0.2, test_size=0.1, seed=1).splits["val"] != index.splits["val"]
    assert "test" not in _index(tmp_path).splits  # test_size 0: the test runs on the validation images


def test_train_val_and_test_folders_are_taken_as_given(tmp_path: Path) -> None:
    for split, count in (("train", 4), ("val", 2), ("test", 3)):
        write_image_folder(tmp_path / split, n_classes=2, per_class=count, seed=len(split))
    index = _index(tmp_path)
    assert index.given == ("train", "val", "test") and index.sizes() == {"train": 8, "val": 4, "test": 6}
    assert all(path.startswith(str(tmp_path / "val")) for path, _ in index.splits["val"])


def test_files_that_are_no_images_are_named_and_skipped(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    write_image_folder(tmp_path, n_classes=2, per_class=5)
    (tmp_path / "class_a" / "notes.txt").write_text("not an image")
    (tmp_path / "class_a" / "empty.png").write_bytes(b"")
    (tmp_path / "class_b" / "fake.jpg").write_bytes(b"no JPEG at all")
    with caplog.at_level(logging.WARNING, logger="modelforge.data.image_files"):
        index = _index(tmp_path)
    assert index.sizes() == {"train": 8, "val": 2}
    assert sorted(s.split(": ", 1)[0] for s in index.skipped) == [
        str(tmp_path / "class_a" / "empty.png"), str(tmp_path / "class_a" / "notes.txt"),
        str(tmp_path / "class_b" / "fake.jpg")]
    assert "data.root: 3 files skipped, not an image Pillow can read:" in caplog.text
    assert f"{tmp_path / 'class_b' / 'fake.jpg'}: not an image Pillow can read (cannot identify image file" in caplog.text
    assert f"{tmp_path / 'class_a' / 'notes.txt'}: not an image file (.txt)" in caplog.text


def test_an_empty_class_folder_is_an_error_naming_it(tmp_path: Path) -> None:
    write_image_folder(tmp_path, n_classes=2, per_class=5)
    (tmp_path / "class_c").mkdir()
    (tmp_path / "class_c" / "readme.txt").write_text("-")
    with pytest.raises(DataError, match=rf"^data.root: class folder {tmp_path / 'class_c'} holds no images \(1 other "
                                        r"files: readme.txt\): remove it, or add its images"):
        _index(tmp_path)


@pytest.mark.parametrize(("classes", "match"), [
    (["class_a", "class_x"], r"no folder for \['class_x'\]; folders not among them: \['class_b'\]"),
    (["class_a"], r"folders not among them: \['class_b'\]"),
])
def test_given_classes_must_be_the_folders(classes: list[str], match: str, tmp_path: Path) -> None:
    write_image_folder(tmp_path, n_classes=2, per_class=5)
    with pytest.raises(ConfigError, match=rf"^data.classes: .* do not match the class folders of {tmp_path}: {match}"):
        _index(tmp_path, classes=classes)
    assert _index(tmp_path, classes=["class_b", "class_a"]).classes == ("class_b", "class_a")  # the label order


@pytest.mark.parametrize(("options", "match"), [
    ({}, r"^data.root: missing: the folder of class folders of images"),
    ({"root": "X", "interpolation": "lanczos"}, r"^data.interpolation: got 'lanczos'\n  allowed: bilinear or bicubic"),
    ({"root": "X", "image_size": 64, "resize_size": 32}, r"^data.resize_size: 32 is smaller than data.image_size=64"),
    ({"root": "X", "mean": [0.5, 0.5]}, r"^data.mean: \[0.5, 0.5\] has 2 values for 3 channel\(s\)"),
    ({"root": "X", "random_resized_crop": [0.5, 0.2]}, r"^data.random_resized_crop: got \[0.5, 0.2\]"),
    ({"root": "X", "val_size": 2}, r"^data.val_size: got 2\n  allowed: a fraction in \(0, 1\)"),
    ({"root": "X", "batch_sise": 2}, r"^data.batch_sise: data module 'image_folder' takes no option 'batch_sise'\n"
                                     r"  did you mean 'batch_size'\?"),
])
def test_bad_options_are_one_error_naming_the_key(options: dict, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        build_datamodule({"name": "image_folder", **options})


def test_a_missing_root_is_named(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=rf"^data.root: no folder {tmp_path / 'nowhere'}$"):
        build_datamodule({"name": "image_folder", "root": str(tmp_path / "nowhere")}).check()


def _solid(path: Path, size: tuple[int, int], colour: tuple[int, int, int]) -> str:
    Image.new("RGB", size, colour).save(path)
    return str(path)


def test_validation_resizes_the_shorter_side_crops_the_centre_and_normalizes(tmp_path: Path) -> None:
    pixels = np.zeros((60, 90, 3), dtype=np.uint8)  # 90 wide, 60 high: a white band in the middle third
    pixels[:, 30:60] = 255
    Image.fromarray(pixels).save(tmp_path / "band.png")
    pipeline = ImagePipeline(image_size=20, resize_size=20, mean=(0.5, 0.5, 0.5), std=(0.5, 0.5, 0.5))
    x = pipeline(str(tmp_path / "band.png"))  # resized to 30x20, its centre 20x20 kept: 5 black, 10 white, 5 black
    assert x.shape == (3, 20, 20) and x.dtype == torch.float32
    assert torch.equal(x[:, :, 8:12], torch.ones(3, 20, 4)) and torch.equal(x[:, :, :3], -torch.ones(3, 20, 3))
    grey = ImagePipeline(image_size=16, resize_size=16, grayscale=True, mean=(0.0,), std=(1.0,))
    y = grey(_solid(tmp_path / "red.png", (16, 16), (255, 0, 0)))
    assert y.shape == (1, 16, 16) and y.mean().item() == pytest.approx(76 / 255)  # Pillow's L: 0.299 R


def test_training_crops_and_flips_follow_torchs_seed(tmp_path: Path) -> None:
    path = _solid(tmp_path / "a.png", (50, 40), (10, 200, 30))
    train = ImagePipeline(image_size=24, resize_size=24, random_resized_crop=(0.08, 1.0), horizontal_flip=True)
    torch.manual_seed(3)
    first = [random_crop_box((50, 40), (0.08, 1.0)) for _ in range(5)]
    torch.manual_seed(3)
    assert [random_crop_box((50, 40), (0.08, 1.0)) for _ in range(5)] == first
    assert len(set(first)) == 5 and all(0 <= left < right <= 50 and 0 <= top < bottom <= 40
                                        for left, top, right, bottom in first)
    assert train(path).shape == (3, 24, 24)


def test_a_file_that_fails_to_decode_is_named_and_replaced(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    good = _solid(tmp_path / "good.png", (8, 8), (0, 0, 255))
    noise = np.random.default_rng(0).integers(0, 256, (64, 64, 3), dtype=np.uint8)
    Image.fromarray(noise).save(tmp_path / "whole.png")
    whole = (tmp_path / "whole.png").read_bytes()
    (tmp_path / "cut.png").write_bytes(whole[:len(whole) // 2])  # its header reads; its pixels do not
    files = ImageFiles([(str(tmp_path / "cut.png"), 0), (good, 1)], ImagePipeline(image_size=8, resize_size=8))
    with caplog.at_level(logging.WARNING, logger="modelforge.data.image_transforms"):
        x, label = files[0]
    assert label == 1 and x.shape == (3, 8, 8)
    assert f"data.root: {tmp_path / 'cut.png'} cannot be decoded (" in caplog.text


def test_the_data_module_serves_batches_decoded_in_workers(tmp_path: Path) -> None:
    names = write_image_folder(tmp_path, n_classes=3, per_class=6)
    data = build_datamodule({"name": "image_folder", "root": str(tmp_path), "image_size": 16, "resize_size": 18,
                             "batch_size": 4, "num_workers": 2, "val_size": 0.2})
    assert (data.input_shape, data.n_classes, data.class_names) == ((3, 16, 16), 3, tuple(names))
    assert data.resolved_options() == {"classes": names, "mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225]}
    data.setup("fit")
    loader = data.train_dataloader()
    assert loader.num_workers == 2
    x, y = next(iter(loader))
    assert x.shape == (4, 3, 16, 16) and y.dtype == torch.int64
    assert len(data.val_set) == 3 and data.describe()["splits"] == {"train": 15, "val": 3}
