"""An image folder as a careless or hostile user leaves it: one class, a val/ class train/ lacks, links that loop or
lead to a device, an image past predict's pixel cap. Each is said (refused, or skipped with its reason), never
dropped or trained on without a word; the refusal of a run leaves no run directory (a real process)."""

from __future__ import annotations

import os
import struct
import warnings
import zlib
from pathlib import Path

import pytest
from PIL import Image

from modelforge import DataError
from modelforge.data.image_files import index_image_folder
from tests.conftest import run_cli
from tests.data.image_folder_helpers import write_image_folder


def test_one_class_is_refused_before_a_run_directory_exists(tmp_path: Path) -> None:
    root = tmp_path / "one"
    write_image_folder(root, n_classes=1)
    with pytest.raises(DataError, match=rf"^data.root: {root} holds one class folder \(class_a\): a classifier needs "
                       "two classes at least$"):
        index_image_folder(root, None, 0.2, 0.0, seed=0)
    run_dir = tmp_path / "run"
    result = run_cli("train", "data=image_folder", f"data.root={root}", "trainer.max_epochs=1",
                     f"hydra.run.dir={run_dir}")
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.startswith(f"error: data.root: {root} holds one class folder") and "Traceback" not in result.stderr
    assert not run_dir.exists()


def test_a_val_class_that_train_lacks_is_refused(tmp_path: Path) -> None:
    write_image_folder(tmp_path / "train", n_classes=2)
    write_image_folder(tmp_path / "val", n_classes=3)
    with pytest.raises(DataError, match=rf"^data.root: {tmp_path / 'val'} has class folder that train/ lacks "
                       r"\(class_c\): a model learns only train/'s classes"):
        index_image_folder(tmp_path, None, 0.2, 0.0, seed=0)


def png_header(path: Path, width: int, height: int) -> None:
    """A PNG of a header and no pixel data: Pillow reads its size, and no pixel exists."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", b"") + chunk(b"IEND", b""))


def test_links_devices_and_huge_images_are_skipped_with_their_reasons(tmp_path: Path) -> None:
    write_image_folder(tmp_path, n_classes=2)
    folder = tmp_path / "class_a"
    (folder / "loop").symlink_to(".", target_is_directory=True)
    (folder / "zero.png").symlink_to("/dev/zero")
    (folder / "gone.png").symlink_to(tmp_path / "nowhere.png")
    os.mkfifo(folder / "fifo.png")
    png_header(folder / "huge.png", 13_000, 13_000)
    with warnings.catch_warnings():
        warnings.simplefilter("error", Image.DecompressionBombWarning)  # Pillow's raw warning fails the index
        index = index_image_folder(tmp_path, None, 0.2, 0.0, seed=0)
    reasons = {Path(line.split(": ", 1)[0]).name: line.split(": ", 1)[1] for line in index.skipped}
    assert reasons == {
        "fifo.png": "not a regular file (a device, a FIFO, a socket)",
        "gone.png": "a link that leads nowhere (No such file or directory)",
        "huge.png": "13,000x13,000 pixels (169.0 megapixels), more than predict's max_pixels=120,000,000: shrink it",
        "loop": "a link to a folder, not followed (put the images themselves in the class folder)",
        "zero.png": "not a regular file (a device, a FIFO, a socket)",
    }
    assert sum(n for n in index.sizes().values()) == 12  # the 6 images of each class
