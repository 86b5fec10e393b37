"""predict's inputs at the edges of the file system and of pixel values: a float TIFF with a NaN or infinite pixel
is named with the count and skipped (it used to scale the whole image to black, with only numpy's warning); a
dangling or looping symlink and a FIFO are named and skipped, the FIFO never opened (that blocks); a ``**`` glob
through a symlink to a parent folder reads each real file once."""

from __future__ import annotations

import os
import signal
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from modelforge.deploy.images import find_input_files, read_inputs
from modelforge.errors import DataError


@contextmanager
def _no_hang(seconds: int = 20) -> Iterator[None]:
    """Opening a FIFO blocks until a writer comes: a bug there fails the test instead of hanging it."""
    def hung(signum, frame):
        raise AssertionError(f"still reading after {seconds} s: a FIFO was opened")

    saved = signal.signal(signal.SIGALRM, hung)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, saved)


def _float_tiff(path: Path, *bad: float) -> Path:
    pixels = np.zeros((28, 28), np.float32)
    pixels[8:20, 12:16] = 200.0  # a bar: gray values well within 0..255
    for i, value in enumerate(bad):
        pixels[i, i] = value
    Image.fromarray(pixels, mode="F").save(path)
    return path


def test_a_float_tiff_with_nan_or_inf_pixels_is_named_with_their_count_and_skipped(tmp_path: Path, caplog) -> None:
    good = _float_tiff(tmp_path / "good.tif")
    _float_tiff(tmp_path / "nan.tif", np.nan)
    _float_tiff(tmp_path / "inf.tif", np.inf, -np.inf, np.nan)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # numpy's "invalid value encountered in cast" was all a user saw
        found = read_inputs(tmp_path)
    assert [image.name for image in found.images] == [str(good)]
    assert int(found.images[0].pixels.max()) == 200  # the good one keeps its scale
    assert found.unreadable == [
        f"{tmp_path / 'inf.tif'} has 3 of its 784 pixels not a number (NaN or infinite): refused, as they leave no "
        "scale for the others",
        f"{tmp_path / 'nan.tif'} has 1 of its 784 pixels not a number (NaN or infinite): refused, as they leave no "
        "scale for the others"]
    with pytest.raises(DataError, match=r"^inputs: .*nan\.tif has 1 of its 784 pixels not a number"):
        read_inputs(tmp_path / "nan.tif")


def test_dangling_and_looping_symlinks_and_a_fifo_are_named_and_skipped(tmp_path: Path) -> None:
    Image.new("L", (28, 28), 0).save(tmp_path / "a.png")
    os.symlink("gone.png", tmp_path / "dangling.png")
    os.symlink("loop.png", tmp_path / "loop.png")
    os.mkfifo(tmp_path / "fifo.png")
    with _no_hang():
        found = read_inputs(tmp_path)
        assert [image.name for image in found.images] == [str(tmp_path / "a.png")]
        assert found.unreadable == [f"{tmp_path / 'dangling.png'} is a symlink to gone.png, which does not exist",
                                    f"{tmp_path / 'fifo.png'} is a FIFO, not an image file",
                                    f"{tmp_path / 'loop.png'} is a symlink loop (it leads back to itself)"]
        with pytest.raises(DataError, match=rf"^inputs: {tmp_path / 'fifo.png'} is a FIFO, not an image file$"):
            read_inputs(tmp_path / "fifo.png")  # named as the input: not "no file or folder"
        assert len(read_inputs(f"{tmp_path}/*.png").unreadable) == 3  # a glob names them too


def test_a_recursive_glob_through_a_self_link_reads_each_file_once(tmp_path: Path) -> None:
    digits = tmp_path / "digits"
    digits.mkdir()
    for k in range(10):
        Image.new("L", (28, 28), 20 * k).save(digits / f"{k}.png")
    os.symlink("..", digits / "up")  # digits/up/digits/up/... meets the same 10 files 40 times
    files = find_input_files(f"{tmp_path}/**/*.png")
    assert files == [digits / f"{k}.png" for k in range(10)]
    assert len(read_inputs(f"{tmp_path}/**/*.png").images) == 10


def test_predict_names_the_skipped_files_and_classifies_the_rest(run_main, tmp_path: Path) -> None:
    from tests.helpers.payloads import clean_pt2

    model = clean_pt2(tmp_path / "m.pt2")
    images = tmp_path / "in"
    images.mkdir()
    Image.new("L", (28, 28), 0).save(images / "a.png")
    os.mkfifo(images / "fifo.png")
    _float_tiff(images / "nan.tif", np.nan)
    with _no_hang():
        done = run_main("predict", f"ckpt_path={model}", f"inputs={images}", f"output={tmp_path / 'p.csv'}")
    assert done.returncode == 0, done.stderr
    said = done.stdout + done.stderr  # the console log's lines, then predict's
    assert f"  {images / 'fifo.png'} is a FIFO, not an image file\n" in said
    assert f"  {images / 'nan.tif'} has 1 of its 784 pixels not a number (NaN or infinite)" in said
    assert "1 image classified by " in said and "2 files could not be read (listed above)" in said
    assert "Warning" not in said.replace("[WARNING] modelforge.deploy.images", "")
