"""predict as a batch tool, and on damaged files: a folder with unreadable files predicts the rest and names each;
a damaged model file is one line saying what is wrong with it; a labelled IDX file prints the accuracy; a huge
image is decoded small (its peak memory measured on a real process), and one past max_pixels is one line."""

from __future__ import annotations

import csv
import re
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image, ImageDraw

from modelforge.data.idx import IMAGES_MAGIC, LABELS_MAGIC
from modelforge.deploy.export import export
from modelforge.deploy.images import KEEP_SIDE, read_image
from modelforge.deploy.predict import predict
from modelforge.errors import DataError
from modelforge.train import train
from tests.conftest import REPO
from tests.helpers.mnist_idx import idx_bytes, pattern_images, write_idx, write_mnist_idx
from tests.helpers.small_runs import HAS_ONNX
from tests.helpers.run_config import compose_train


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    data, run_dir = tmp_path_factory.mktemp("tiny_mnist"), tmp_path_factory.mktemp("run")
    write_mnist_idx(data, n_train=160, n_test=32)
    train(compose_train(data, "model=cnn", "enc_sizes=[8]", "dec_sizes=[16]", "trainer.max_epochs=2", "optim.lr=3e-3"),
          run_dir=run_dir)
    return run_dir


@pytest.fixture(scope="module")
def exports(run: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("exports")
    for format in ("pt2", "torchscript", *(["onnx"] if HAS_ONNX else [])):
        export(run, format, folder, check=False)
    return folder


def _cut(source: Path, target: Path) -> Path:
    target.write_bytes(source.read_bytes()[: source.stat().st_size // 2])
    return target


def _text(name: str, text: str):
    def write(folder: Path, run: Path, exports: Path) -> Path:
        (folder / name).write_text(text)
        return folder / name
    return write


DAMAGED = {  # what ckpt_path names: (how to make it, the one line predict prints)
    "text as .onnx": (_text("notes.onnx", "hello\n"),
                      r"notes\.onnx is truncated or not an ONNX model \(onnx cannot parse its 6 bytes; it begins with "
                      r"text: 'hello'\)"),
    "a checkpoint renamed .onnx": (lambda f, r, e: _copy(r / "checkpoints" / "last.ckpt", f / "model.onnx"),
                                   r"model\.onnx is not an ONNX model \(it is a zip archive, as PyTorch checkpoints"),
    "an .onnx cut short": (lambda f, r, e: _cut(e / "last.onnx", f / "cut.onnx"),
                           r"cut\.onnx is truncated or damaged: onnx cannot parse its [\d,]+ bytes, which begin as an "
                           r"ONNX model's do"),
    "a .pt2 cut short": (lambda f, r, e: _cut(e / "last.pt2", f / "cut.pt2"),
                         r"cut\.pt2 is truncated or damaged: a zip archive without its end \([\d,]+ bytes\)"),
    "a TorchScript .pt cut short": (lambda f, r, e: _cut(e / "last.pt", f / "cut.pt"),
                                    r"cut\.pt is truncated or damaged: a zip archive without its end"),
    "text as .pt": (_text("notes.pt", "weights\n"),
                    r"notes\.pt is truncated or not a TorchScript file \(a zip archive was expected; it begins with "
                    r"text: 'weights'\)"),
    "an empty .pt2": (_text("empty.pt2", ""), r"empty\.pt2 is empty \(0 bytes\)"),
    "a checkpoint cut short": (lambda f, r, e: _cut(r / "checkpoints" / "last.ckpt", f / "cut.ckpt"),
                               r"cut\.ckpt is truncated or damaged: a zip archive without its end"),
    "text as a checkpoint": (_text("notes.ckpt", "epoch 3 was the best\n"),
                             r"notes\.ckpt is truncated or not a checkpoint \(a zip archive was expected; it begins "
                             r"with text: 'epoch 3 was the best'\)"),
}


def _copy(source: Path, target: Path) -> Path:
    target.write_bytes(source.read_bytes())
    return target


@pytest.mark.parametrize("case", DAMAGED)
def test_a_damaged_model_file_is_one_line_saying_what_is_wrong(case: str, run_main, run: Path, exports: Path,
                                                               tmp_path: Path) -> None:
    if "onnx" in case and not HAS_ONNX:
        pytest.skip("onnx not installed")
    make, pattern = DAMAGED[case]
    path = make(tmp_path, run, exports)
    Image.fromarray(np.zeros((28, 28), dtype=np.uint8)).save(tmp_path / "digit.png")
    result = run_main("predict", f"ckpt_path={path}", f"inputs={tmp_path / 'digit.png'}", f"output={tmp_path / 'p.csv'}")
    assert result.returncode == 2
    assert len(result.stderr.splitlines()) == 1 and "Traceback" not in result.stderr, result.stderr
    assert re.match(rf"error: ckpt_path: {re.escape(str(tmp_path))}/{pattern}", result.stderr), result.stderr
    assert "carries no modelforge metadata" not in result.stderr and not re.search(r"\(\d+\)|\[Errno", result.stderr)
    assert not (tmp_path / "p.csv").exists()


@pytest.fixture
def digits(tmp_path: Path) -> Path:
    """Three readable PNGs of classes 0-2 and three unreadable files, in one folder."""
    folder = tmp_path / "digits"
    folder.mkdir()
    for k, image in enumerate(pattern_images(torch.arange(3), seed=3)):
        Image.fromarray(image.numpy()).save(folder / f"{k}.png")
    (folder / "broken.png").write_text("not a PNG")
    (folder / "empty.png").write_bytes(b"")
    noise = np.random.default_rng(0).integers(0, 256, (64, 64), dtype=np.uint8)  # incompressible: cut in the pixels
    Image.fromarray(noise).save(folder / "cut.png")
    (folder / "cut.png").write_bytes((folder / "cut.png").read_bytes()[:2000])
    return folder


def test_a_folder_with_unreadable_files_predicts_the_rest_and_names_each(run_main, run: Path, digits: Path) -> None:
    out = digits.parent / "p.csv"
    result = run_main("predict", f"ckpt_path={run}", f"inputs={digits}", f"output={out}")
    assert result.returncode == 0, result.stderr
    rows = list(csv.DictReader(out.read_text().splitlines(keepends=True)))
    assert [Path(r["input"]).name for r in rows] == ["0.png", "1.png", "2.png"]
    alone = predict(run, [digits / f"{k}.png" for k in range(3)])  # as if the others were not there
    assert [r["class_1"] for r in rows] == [r["class_1"] for r in alone]
    assert [float(r["prob_1"]) for r in rows] == pytest.approx([r["prob_1"] for r in alone], abs=1e-6)
    lines = result.stdout.splitlines()
    start = lines.index("[WARNING] modelforge.deploy.images: could not read 3 of 6 files; the others are classified:")
    assert lines[start + 1] == f"  {digits / 'broken.png'} is not an image Pillow can read (cannot identify image " \
                               f"file '{digits / 'broken.png'}')"
    assert lines[start + 2].startswith(f"  {digits / 'cut.png'} cannot be read as an image (")
    assert lines[start + 3] == f"  {digits / 'empty.png'} is empty (0 bytes)"
    assert f"3 images classified by cnn from {run}/checkpoints/last.ckpt in " in result.stdout
    assert "; 3 files could not be read (listed above)" in result.stdout


def test_no_readable_file_is_exit_2_naming_each(run_main, run: Path, digits: Path) -> None:
    for k in range(3):
        (digits / f"{k}.png").unlink()
    result = run_main("predict", f"ckpt_path={run}", f"inputs={digits}", f"output={digits.parent / 'p.csv'}")
    assert result.returncode == 2
    assert result.stderr.splitlines()[0] == "error: inputs: none of the 3 files could be read:"
    assert [line.split(" ")[2] for line in result.stderr.splitlines()[1:]] == [
        str(digits / name) for name in ("broken.png", "cut.png", "empty.png")]
    assert "loaded cnn" not in result.stdout + result.stderr and not (digits.parent / "p.csv").exists()
    with pytest.raises(DataError, match=r"^inputs: .*empty\.png is empty \(0 bytes\)$"):
        predict(run, digits / "empty.png")


def test_a_labelled_idx_file_prints_the_accuracy_and_the_csv_has_the_labels(run_main, run: Path, tmp_path: Path) -> None:
    labels = torch.arange(20) % 10
    images = write_idx(tmp_path / "mine-images-idx3-ubyte.gz", idx_bytes(pattern_images(labels, seed=9), IMAGES_MAGIC))
    write_idx(tmp_path / "mine-labels-idx1-ubyte", idx_bytes(labels, LABELS_MAGIC))
    out = tmp_path / "p.csv"
    result = run_main("predict", f"ckpt_path={run}", f"inputs={images}", f"output={out}")
    assert result.returncode == 0, result.stderr
    rows = list(csv.DictReader(out.read_text().splitlines(keepends=True)))
    assert list(rows[0])[:4] == ["input", "inverted", "label", "class_1"]
    assert [r["label"] for r in rows] == [str(k) for k in labels.tolist()]
    right = sum(r["label"] == r["class_1"] for r in rows)  # the printed figure is the CSV's
    assert (f"top-1 accuracy {right / 20:.4f} ({right} of 20 images right, labels from "
            f"{tmp_path / 'mine-labels-idx1-ubyte'})") in result.stdout
    assert predict(run, [images])[0]["label"] == "0"  # from Python too


def test_labels_that_do_not_match_the_images_are_left_out_with_a_warning(run: Path, tmp_path: Path, caplog) -> None:
    images = write_idx(tmp_path / "mine-images-idx3-ubyte", idx_bytes(pattern_images(torch.arange(4)), IMAGES_MAGIC))
    write_idx(tmp_path / "mine-labels-idx1-ubyte.gz", idx_bytes(torch.arange(3), LABELS_MAGIC))
    rows = predict(run, images)
    assert len(rows) == 4 and not any("label" in row for row in rows)
    assert "the labels beside mine-images-idx3-ubyte are not used: mine-labels-idx1-ubyte.gz holds 3 labels for " \
           "4 images" in caplog.text


@pytest.mark.parametrize("suffix", [".png", ".jpg"])
def test_a_large_image_is_decoded_small_and_predicts_as_the_original(run: Path, tmp_path: Path, suffix: str) -> None:
    small = pattern_images(torch.tensor([7]), seed=4)[0].numpy()
    large = Image.fromarray(small).resize((1400, 1400), Image.Resampling.NEAREST)  # 50 x 50 per pixel
    large.convert("RGB").save(tmp_path / f"large{suffix}", quality=95)
    pixels = read_image(tmp_path / f"large{suffix}")
    assert KEEP_SIDE <= pixels.shape[0] < 2 * KEEP_SIDE and pixels.shape[0] == pixels.shape[1]
    Image.fromarray(small).save(tmp_path / "small.png")
    by_file = {Path(r["input"]).name: r for r in predict(run, [tmp_path / f"large{suffix}", tmp_path / "small.png"])}
    assert by_file[f"large{suffix}"]["class_1"] == by_file["small.png"]["class_1"] == "7"
    assert by_file[f"large{suffix}"]["prob_1"] == pytest.approx(by_file["small.png"]["prob_1"], abs=0.05)


def test_an_image_past_max_pixels_is_one_line_naming_the_limit(run_main, run: Path, tmp_path: Path) -> None:
    Image.fromarray(np.zeros((300, 400), dtype=np.uint8)).save(tmp_path / "wide.png")
    result = run_main("predict", f"ckpt_path={run}", f"inputs={tmp_path / 'wide.png'}", "max_pixels=100000",
                      f"output={tmp_path / 'p.csv'}")
    assert result.returncode == 2
    assert result.stderr == (f"error: inputs: {tmp_path / 'wide.png'} is 400x300 pixels (0.1 megapixels), more than "
                             "max_pixels=100,000: shrink it, or raise max_pixels (decoding takes up to 4 bytes a "
                             "pixel)\n")


# The command in a process of its own, under a parent that reports the child's peak resident memory (KB).
PEAK_OF_CHILD = ("import resource, subprocess, sys; done = subprocess.run(sys.argv[1:]); "
                 "print('peak_kb', resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); sys.exit(done.returncode)")


@pytest.mark.e2e
def test_a_10000x10000_png_is_predicted_under_400_mb_without_pillows_warning(run: Path, tmp_path: Path) -> None:
    image = Image.new("L", (10_000, 10_000), 0)  # 100 megapixels: past Pillow's bomb warning (89 megapixels)
    ImageDraw.Draw(image).rectangle([4_000, 2_000, 6_000, 8_000], fill=255)
    image.save(tmp_path / "huge.png", compress_level=1)
    del image
    done = subprocess.run([sys.executable, "-c", PEAK_OF_CHILD, sys.executable, "-m", "modelforge", "predict",
                           f"ckpt_path={run}", f"inputs={tmp_path / 'huge.png'}", f"output={tmp_path / 'p.csv'}"],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stderr == "" and "Warning" not in done.stdout  # no DecompressionBombWarning, no site-packages path
    peak_mb = int(done.stdout.split("peak_kb ")[1]) / 1024
    assert peak_mb < 400, f"peak {peak_mb:.0f} MB"
    assert f"1 image classified by cnn from {run}" in done.stdout


def test_pillows_own_bound_gives_way_to_max_pixels_and_is_restored(tmp_path: Path, monkeypatch) -> None:
    Image.fromarray(np.zeros((40, 30), dtype=np.uint8)).save(tmp_path / "a.png")
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 100)  # Pillow would warn past 100 pixels and refuse past 200
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert read_image(tmp_path / "a.png").shape == (40, 30)
    assert Image.MAX_IMAGE_PIXELS == 100
